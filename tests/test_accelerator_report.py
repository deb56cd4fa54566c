"""LiteRT's real GPU accelerator in the report and the matrix (#37 "Report and matrix"):
`report --verify --engine opencl|litert-gpu|all` shows the accelerator's verification beside the
executor's, and `check --matrix --run-litert-gpu` compiles each model on it so that its column can
say "ran here". Where the accelerator cannot run (no WebGPU adapter, a compile that crashes) the page
and the matrix say why in one line; those tests need no accelerator (they take its adapter away, or
stand a crashing child in for it). The rest skip, saying why, where no WebGPU adapter exists.
Small models only (conv_model(4), RELU chains): their shaders compile in seconds on lavapipe."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import accelerator_unavailable, conv_model, opencl_device
from helpers import needs_accelerator as needs_accelerator_mark
from typer.testing import CliRunner

from gpulint import matrix as mx
from gpulint.cli import app
from gpulint.model import Model, write
from gpulint.model.build import ModelBuilder
from gpulint.report import render, verify_view

runner = CliRunner()
HERE = Path(__file__).resolve().parent
EVIL = "<script>document.title='pwned'</script>\"'&<img src=x onerror=alert(1)>"


needs_accelerator = needs_accelerator_mark()


def needs_both() -> None:
    """Skip, saying why, where either engine cannot run."""
    device, why = opencl_device()
    if device is None:
        pytest.skip(why)
    if accelerator_unavailable() is not None:
        pytest.skip(accelerator_unavailable() or "-")


@pytest.fixture
def no_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose Vulkan loader finds no driver: Dawn has no adapter (the child inherits this)."""
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "none.json"))
    monkeypatch.setenv("VK_DRIVER_FILES", str(tmp_path / "none.json"))


@pytest.fixture
def crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerator aborting the process on a graph: a child that dies of SIGSEGV."""
    from gpulint.engines import litert_gpu

    monkeypatch.setattr(litert_gpu, "CHILD", "engine_crash_child")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


def conv(tmp_path: Path, name: str = "conv") -> Path:
    path = tmp_path / f"{name}.tflite"
    write(conv_model(4), path)
    return path


def relu_chain(extra: str | None = None) -> Model:
    """x -> RELU -> RELU (-> TRANSPOSE)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    t = g.op("RELU", [g.op("RELU", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8])], [1, 4, 4, 8])
    if extra == "TRANSPOSE":
        t = g.op("TRANSPOSE", [t, g.const("perm", np.array([0, 2, 1, 3], np.int32))], [1, 4, 4, 8])
    g.output(t)
    return mb.build()


def report(tmp_path: Path, *args: str, code: int = 0) -> tuple[str, str]:
    """The page `gpulint report` writes, and what it said on stderr."""
    out = tmp_path / "report.html"
    r = runner.invoke(app, ["report", *args, "-o", str(out)])
    assert r.exit_code == code, r.output
    return out.read_text(), r.stderr


def verify_part(html: str) -> str:
    return html[html.index("<h2>Verify</h2>") : html.index("</section>", html.index("<h2>Verify</h2>"))]


# -- report --verify --engine -----------------------------------------------------------------------


def test_report_engine_all_shows_both_side_by_side(tmp_path: Path) -> None:
    needs_both()
    html, err = report(tmp_path, str(conv(tmp_path)), "--no-fix", "--verify", "--engine", "all")
    assert err == ""
    part = verify_part(html)
    # per engine: its status, device and precision
    engines = re.findall(
        r'<tr><td class="mono">([\w-]+)</td><td class="ok">(PASS)</td><td class="any">(.*?)</td>'
        r"<td>(fp32)</td>",
        part,
    )
    assert [e[0] for e in engines] == ["opencl", "litert-gpu"], part
    assert "Portable Computing Language" in engines[0][2] or "OpenCL" in engines[0][2]
    assert "WebGPU" in engines[1][2]
    # per output: each engine's max abs, worst/tolerance, cosine and SNR, in one table
    table = part[part.index('<table class="side-by-side">') : part.index("</table>", part.index("side-by-side"))]
    rows = re.findall(
        r'<tr><td class="mono any">conv_2d_0</td><td class="mono">([\w-]+)</td><td>(\w+)</td>'
        r'<td class="num">([^<]+)</td><td class="num">([^<]+)</td><td class="num">([^<]+)</td>'
        r'<td class="num">([^<]+)</td></tr>',
        table,
    )
    assert [(r[0], r[1]) for r in rows] == [("opencl", "PASS"), ("litert-gpu", "PASS")], table
    litert = rows[1]
    assert float(litert[3]) < 1 and float(litert[4]) > 0.999  # within its tolerance, cosine ~1
    assert litert[5] == "-" or float(litert[5]) > 40  # SNR in dB ("-" where the error is 0)
    # and each engine's own section, as `gpulint verify` shows it
    assert "<h3>Engine <code>opencl</code>" in part and "<h3>Engine <code>litert-gpu</code>" in part
    assert "GPU partition on LiteRT GPU accelerator: " in part


@needs_accelerator
def test_report_engine_litert_gpu_alone(tmp_path: Path) -> None:
    html, _ = report(tmp_path, str(conv(tmp_path)), "--no-fix", "--verify", "--engine", "litert-gpu")
    part = verify_part(html)
    assert "<h3>Engine <code>litert-gpu</code>: LiteRT&#39;s GPU accelerator" in part
    assert re.search(r'class="ok">PASS</b>\s+against the LiteRT CPU interpreter: 1 run\(s\), fp32', part)
    assert "WebGPU" in part and "<td>PASS</td>" in part
    assert "side-by-side" not in part and "<code>opencl</code>" not in part  # one engine: no comparison table


def test_report_without_an_adapter_says_why_in_one_line(tmp_path: Path, no_adapter: None) -> None:
    """--engine all where the accelerator has no adapter: the executor's result stands, the
    accelerator's row says why it did not run, and the report is written (exit 0)."""
    html, err = report(tmp_path, str(conv(tmp_path)), "--no-fix", "--verify", "--engine", "all")
    part = verify_part(html)
    why = "LiteRT&#39;s GPU accelerator found no WebGPU adapter"
    assert re.search(
        rf'<td class="mono">litert-gpu</td><td colspan="4" class="sev-warning not-run">not run: {why}', part
    ), part
    assert f'<p class="sev-warning">Not verified on litert-gpu: {why}' in part
    lines = err.splitlines()
    assert len([x for x in lines if "not verified on litert-gpu" in x]) == 1 and "Traceback" not in err
    if opencl_device()[0] is not None:
        assert re.search(r'<td class="mono">opencl</td><td class="ok">PASS</td>', part)


def test_report_with_a_crashing_accelerator_says_why(tmp_path: Path, crashing: None) -> None:
    html, err = report(tmp_path, str(conv(tmp_path)), "--no-fix", "--verify", "--engine", "litert-gpu")
    part = verify_part(html)
    assert "Not verified on litert-gpu: LiteRT&#39;s GPU accelerator crashed (SIGSEGV): model.cc:1] boom" in part
    assert "not verified on litert-gpu: LiteRT's GPU accelerator crashed (SIGSEGV)" in err
    assert "Traceback" not in err


def test_report_engine_needs_verify(tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", str(conv(tmp_path)), "--engine", "all", "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip() == "gpulint: error: --engine all chooses what runs --verify's GPU side: give --verify too"
    assert not (tmp_path / "r.html").exists()
    r = runner.invoke(app, ["report", str(conv(tmp_path)), "--verify", "--engine", "cuda", "-o", str(tmp_path / "r")])
    assert r.exit_code == 2 and "Traceback" not in r.output and "'cuda' is not one of" in r.output


def fake_result(engine: str, name: str, max_abs: float, warnings: list[str]) -> dict[str, Any]:
    """The parts of VerifyResult.to_json() the page reads."""
    verdict = {
        "status": "PASS",
        "atol": 1e-3,
        "max_abs_error": max_abs,
        "mean_abs_error": max_abs / 10,
        "cosine_similarity": 0.9999,
        "snr_db": 61.25,
        "worst": {"error_over_tolerance": max_abs / 1e-3},
    }
    return {
        "status": "PASS",
        "engine": engine,
        "executor_ops": 1,
        "device": {"name": f"{engine} device {EVIL}", "driver": "driver", "why": ""},
        "precision": "fp16",
        "precision_means": "F16",
        "runs": 1,
        "partitions": [{"kind": "gpu", "ran_on": f"{engine} device", "ops": [0], "summary": "1 ops (CONV_2D)"}],
        "outputs": [{"name": name, "status": "PASS", **verdict, "executor": verdict}],
        "attribution": "",
        "warnings": warnings,
    }


def test_side_by_side_layout_and_escaping() -> None:
    """The view's shape without running anything: both engines' numbers per output, hostile names
    (an output, a device) as text, an engine that did not run in one line."""
    view = verify_view(
        [
            ("opencl", fake_result("opencl", EVIL, 2e-4, []), None),
            ("litert-gpu", fake_result("litert-gpu", EVIL, 5e-4, [f"took 0 of 1 ops {EVIL}"]), None),
        ]
    )
    rows = view["side_by_side"]
    assert [(r["engine"], r["max_abs"], r["worst"], r["cosine"], r["snr"]) for r in rows] == [
        ("opencl", "0.0002", "0.2", "0.999900", "61.2"),
        ("litert-gpu", "0.0005", "0.5", "0.999900", "61.2"),
    ]
    page = render([{"error": "x", "path": "m.tflite"}])  # the template renders with no verify at all
    assert "Not reported: x" in page
    section = _section_with(view)
    page = render([section])
    assert "<script>document" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;") >= 4
    one = verify_view([("opencl", None, "no OpenCL device: none found"), ("litert-gpu", None, f"boom {EVIL}")])
    page = render([_section_with(one)])
    assert "not run: no OpenCL device: none found" in page and "not run: boom &lt;script&gt;" in page
    assert one["side_by_side"] == []


def _section_with(view: dict[str, Any]) -> dict[str, Any]:
    """A real model's section (sample_model), its verify replaced by `view`."""
    from gpulint.check import check_model
    from gpulint.report import model_section
    from gpulint.sample import sample_model
    from gpulint.settings import Settings

    model = sample_model()
    settings = Settings()
    section = model_section(model, check_model(model, "m.tflite", settings), settings, 1)
    section["verify"] = view
    return section


# -- check --matrix --run-litert-gpu ----------------------------------------------------------------


def models(tmp_path: Path) -> list[str]:
    paths = [str(conv(tmp_path))]
    p = tmp_path / "transpose.tflite"
    write(relu_chain("TRANSPOSE"), p)
    return [*paths, str(p)]


@needs_accelerator
def test_matrix_litert_column_ran_here_in_text_json_and_html(tmp_path: Path) -> None:
    paths = models(tmp_path)
    r = runner.invoke(app, ["check", "--matrix", "--run-litert-gpu", *paths])
    assert r.exit_code == 0, r.output
    table = r.output.splitlines()[:3]
    assert all("ready 100% 1p, ran here" in line for line in table[1:]), table
    assert "Android OpenCL  " in table[0] and "ran here" not in table[0]
    assert re.search(
        r"conv.tflite / LiteRT GPU accelerator: ran here on .*WebGPU.*: the accelerator took 1 of 1 "
        r"ops compiling it \(fp16\), as the column predicts",
        r.output,
    ), r.output
    assert "transpose.tflite / LiteRT GPU accelerator: ran here" in r.output and "3 of 3 ops" in r.output

    r = runner.invoke(app, ["check", "--matrix", "--run-litert-gpu", "--format", "json", *paths])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    run = doc["rows"][0]["cells"]["litert-gpu"]["run"]
    assert (run["ran"], run["gpu_ops"], run["ops"], run["agrees"], run["precision"]) == (True, 1, 1, True, "fp16")
    assert "WebGPU" in run["device"] and run["differs"] is None
    assert all("run" not in c for k, c in doc["rows"][0]["cells"].items() if k != "litert-gpu")

    html = tmp_path / "m.html"
    r = runner.invoke(app, ["check", "--matrix", "--run-litert-gpu", "--html", str(html), *paths])
    assert r.exit_code == 0, r.output
    page = html.read_text()
    assert "column was also compiled on this machine's accelerator (<code>--run-litert-gpu</code>)" in page
    # the cell: its prediction, "ran here" below it (the sentence on hover); the sentences below the table
    assert page.count('>ready 100% 1p<div class="run run-ran" title="ran here on ') == 2
    assert page.count("ran here</div></td>") == 2
    assert (
        len(
            re.findall(
                r'<li class="run-ran"><span class="mono any">[^<]*(conv|transpose)\.tflite</span> / '
                r"LiteRT GPU accelerator: ran here on [^<]*as the column predicts</li>",
                page,
            )
        )
        == 2
    )


@needs_accelerator
def test_matrix_run_counts_ops_as_the_column_does() -> None:
    """A partial model (pose_detection: DENSIFY and its DEQUANTIZEs stay on the CPU) and one whose
    fp16 weights are DEQUANTIZE ops the delegate folds (face_detection_short_range: its log counts
    them, the column does not): the run's counts are the column's, the log's kept beside them."""
    from conftest import corpus_file

    rows = mx.matrix(
        [str(corpus_file("pose_detection.tflite")), str(corpus_file("face_detection_short_range.tflite"))],
        run_litert=True,
    )
    pose, face = (r.cells["litert-gpu"] for r in rows)
    assert pose.run is not None and face.run is not None
    assert (pose.run["gpu_ops"], pose.run["ops"], pose.run["agrees"]) == (pose.gpu_ops, pose.ops, True)
    assert pose.outcome == "partial" and any(x.startswith("DENSIFY") for x in pose.run["refused"])
    assert (face.run["gpu_ops"], face.run["ops"], face.run["agrees"]) == (face.gpu_ops, face.ops, True)
    assert face.run["log_gpu_ops"] > face.run["gpu_ops"]  # the folded constant ops, in the log's count


def test_matrix_without_an_adapter_says_why_once(tmp_path: Path, no_adapter: None, monkeypatch: Any) -> None:
    """No adapter: every row's LiteRT column says why, the accelerator is tried once, and the
    predictions (and the exit code) are as without --run-litert-gpu."""
    from gpulint.engines import litert_gpu

    calls: list[str] = []
    real = litert_gpu.LiteRtGpuEngine

    def counted(*args: Any) -> Any:
        calls.append(str(args[1]))
        return real(*args)

    monkeypatch.setattr(litert_gpu, "LiteRtGpuEngine", counted)
    paths = models(tmp_path)
    r = runner.invoke(app, ["check", "--matrix", "--run-litert-gpu", *paths])
    assert r.exit_code == 0, r.output
    assert len(calls) == 1
    assert all("ready 100% 1p, not run" in line for line in r.output.splitlines()[1:3]), r.output
    said = "LiteRT GPU accelerator: did not run here: LiteRT's GPU accelerator found no WebGPU adapter"
    assert r.output.count(said) == 2 and "Traceback" not in r.output
    r = runner.invoke(app, ["check", "--matrix", "--run-litert-gpu", "--format", "json", *paths])
    run = json.loads(r.output)["rows"][1]["cells"]["litert-gpu"]["run"]
    assert run["ran"] is False and run["unavailable"] is True and "no WebGPU adapter" in run["reason"]


def test_matrix_with_a_crashing_accelerator_goes_on(tmp_path: Path, crashing: None) -> None:
    """A compile that crashes is that model's cell, not the command's end: the next model is tried."""
    paths = models(tmp_path)
    html = tmp_path / "m.html"
    r = runner.invoke(app, ["check", "--matrix", "--run-litert-gpu", "--html", str(html), *paths])
    assert r.exit_code == 0, r.output
    said = "LiteRT GPU accelerator: did not run here: LiteRT's GPU accelerator crashed (SIGSEGV): model.cc:1] boom"
    assert r.output.count(said) == 2, r.output
    page = html.read_text()
    assert page.count('<div class="run run-not-run" title="did not run here: LiteRT&#39;s GPU accelerator crashed') == 2
    assert page.count("not run here</div>") == 2 and page.count('<li class="run-not-run">') == 2


def test_run_litert_gpu_needs_the_matrix(tmp_path: Path) -> None:
    r = runner.invoke(app, ["check", "--run-litert-gpu", str(conv(tmp_path))])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip() == (
        "gpulint: error: --run-litert-gpu runs the --matrix's LiteRT GPU accelerator column: give --matrix too"
    )


def test_matrix_cells_word_a_run() -> None:
    """short() and run_text() for each thing a run can say, a disagreement included."""
    cell = mx.Cell("partial", 3, 5, 1)
    assert mx.short(cell) == "partial 60% 1p"
    ran = {"ran": True, "precision": "fp16", "gpu_ops": 3, "ops": 5, "agrees": True, "differs": None, "device": "d"}
    cell.run = ran
    assert mx.short(cell) == "partial 60% 1p, ran here" and mx.short(cell, with_run=False) == "partial 60% 1p"
    assert (
        mx.run_text(ran) == "ran here on d: the accelerator took 3 of 5 ops compiling it (fp16), as the column predicts"
    )
    differs = "the accelerator took 2 of 5 ops where `gpulint check --target litert-gpu` plans 3"
    cell.run = {**ran, "gpu_ops": 2, "agrees": False, "differs": differs}
    assert mx.short(cell) == "partial 60% 1p, ran here: 2/5"
    assert mx.run_text(cell.run) == f"ran here on d (fp16), not as the column predicts: {differs}"
    cell.run = {"ran": False, "unavailable": False, "reason": "it crashed"}
    assert mx.short(cell) == "partial 60% 1p, not run" and mx.run_text(cell.run) == "did not run here: it crashed"
    assert "run" not in cell.to_json() or cell.to_json()["run"]["ran"] is False
    assert "run" not in mx.Cell("ready", 1, 1, 1).to_json()


def test_the_engines_and_the_run_keep_words_whole_in_a_real_browser(tmp_path: Path) -> None:
    """The report's side-by-side tables and the matrix's run lines in headless Chromium at 800 and
    1400 px: no header word split across lines, no sideways scroll (test_report's measure)."""
    from test_report import CHROMIUM, NO_BROWSER, measure_words

    if CHROMIUM is None:
        pytest.skip(NO_BROWSER)
    view = verify_view(
        [
            ("opencl", fake_result("opencl", "output_0", 2e-4, []), None),
            ("litert-gpu", fake_result("litert-gpu", "output_0", 5e-4, ["x " * 200]), None),
        ]
    )
    cell = mx.Cell("partial", 3, 5, 1, "`ARG_MAX` (op 4): INT64")
    cell.run = {"ran": True, "precision": "fp16", "gpu_ops": 3, "ops": 5, "agrees": False, "device": "llvmpipe"}
    cell.run["differs"] = "the accelerator took 2 of 5 ops where `gpulint check --target litert-gpu` plans 3"
    row = mx.Row("m.tflite", {c.id: cell if c.id == "litert-gpu" else mx.Cell("ready", 5, 5, 1) for c in mx.COLUMNS})
    from gpulint.report import matrix_section

    page = render([_section_with(view)], matrix_section([row]))
    assert "side-by-side" in page and '<div class="run run-differs" title="ran here on llvmpipe (fp16), not as' in page
    assert ">ran here: 3/5 ops</div>" in page
    for width in (800, 1400):
        seen = measure_words(tmp_path, page, width)
        assert seen["words"]["header"] >= 10, seen
        assert seen["split"] == [], (width, seen["split"])
        assert seen["overflow"] <= 0, (width, seen["overflow"])

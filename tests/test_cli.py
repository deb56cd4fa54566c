"""`gpulint inspect`, `gpulint demo`, `gpulint --version`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import corpus_file
from helpers import needs_opencl
from typer.testing import CliRunner

from gpulint import __version__
from gpulint.cli import app
from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

runner = CliRunner()


def sample_path(tmp_path: Path) -> Path:
    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    return path


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"gpulint {__version__}\n"


def test_inspect_text(tmp_path: Path) -> None:
    path = sample_path(tmp_path)
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{path}: {path.stat().st_size:,} bytes, TFLite schema v3"
    assert '  subgraph 0 "main": 9 ops, 22 tensors' in lines
    assert "    input  image  FLOAT32  [1, 64, 64, 3]" in lines
    assert "    output probabilities  FLOAT32  [1, 10]" in lines
    assert any(line.split() == ["CONV_2D", "v1", "2"] for line in lines)
    assert "  metadata: min_runtime_version (16 B)" in lines
    assert "  signature serving_default: subgraph 0, inputs image; outputs probabilities" in lines


def test_inspect_json(tmp_path: Path) -> None:
    path = sample_path(tmp_path)
    result = runner.invoke(app, ["inspect", "--json", str(path)])
    assert result.exit_code == 0
    s = json.loads(result.stdout)
    assert s["subgraphs"][0]["inputs"][0] == {
        "index": 0,
        "name": "image",
        "dtype": "FLOAT32",
        "shape": [1, 64, 64, 3],
        "shape_signature": None,
        "quantization": None,
    }
    assert {"op": "CONV_2D", "version": 1, "count": 2} in s["ops"]
    assert s["weights"]["FLOAT16"] == {"tensors": 1, "bytes": 8 * 3 * 3 * 3 * 2}
    assert s["custom_ops"] == [] and s["unknown_fields"] == []


def test_inspect_quantization_dynamic_shapes_and_hostile_names(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    evil = "<script>alert(1)</script>\x1b[31m" + "n" * 10_000
    x = g.input(evil, [1, 8], "INT8", quant=(0.5, -1), shape_signature=[-1, 8])
    g.output(g.op("RELU", [x], [1, 8], dtype="INT8", quant=(0.5, -1)))
    path = tmp_path / "q.tflite"
    write(mb.build(), path)
    s = json.loads(runner.invoke(app, ["inspect", "--json", str(path)]).stdout)
    t = s["subgraphs"][0]["inputs"][0]
    assert t["quantization"] == {"scale": 0.5, "zero_point": -1}
    assert t["shape_signature"] == [-1, 8]
    assert len(t["name"]) == 200 and t["name"].endswith("…") and "\x1b" not in t["name"]
    assert s["subgraphs"][0]["dynamic_inputs"] == [t["name"]]
    text = runner.invoke(app, ["inspect", str(path)]).stdout
    assert "signature [-1, 8]  scale 0.5, zero point -1" in text
    assert "dynamic inputs (shape signature with -1)" in text
    assert "\x1b" not in text


def test_inspect_custom_ops_and_metadata_on_corpus() -> None:
    path = corpus_file("selfie_segmentation.tflite")
    s = json.loads(runner.invoke(app, ["inspect", "--json", str(path)]).stdout)
    assert s["custom_ops"] == [{"op": "Convolution2DTransposeBias", "version": 1, "count": 1}]
    assert [m["name"] for m in s["metadata"]] == ["TFLITE_METADATA"]
    assert s["weights"]["FLOAT16"]["tensors"] == 110


def test_inspect_several_subgraphs_on_corpus() -> None:
    s = json.loads(runner.invoke(app, ["inspect", "--json", str(corpus_file("lstm_seq16_f32.tflite"))]).stdout)
    assert [sg["ops"] for sg in s["subgraphs"]] == [4, 3, 26]
    assert {"op": "WHILE", "version": 1, "count": 1} in s["ops"]


def test_demo(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "round trip (read -> write -> read): equal" in result.stdout
    assert "LiteRT CPU interpreter, original vs rewritten: bit-identical" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "sample.check.json",
        "sample.fixed.tflite",
        "sample.inspect.json",
        "sample.roundtrip.tflite",
        "sample.sarif",
        "sample.tflite",
        "sample.verify.json",
    ]
    assert "verdict: not-worth-it" in result.stdout
    assert "sample.fixed.tflite: PASS against the LiteRT CPU interpreter" in result.stdout
    assert json.loads((out / "sample.verify.json").read_text())["status"] == "PASS"
    assert "check on the fixed model: verdict ready" in result.stdout
    assert json.loads((out / "sample.check.json").read_text())["files"][0]["verdict"] == "not-worth-it"
    assert json.loads((out / "sample.inspect.json").read_text())["subgraphs"][0]["ops"] == 9


def test_unknown_option_is_a_usage_error() -> None:
    result = runner.invoke(app, ["inspect", "--frobnicate", "x.tflite"])
    assert result.exit_code == 2


def test_check_counts_the_partitions_that_run(tmp_path: Path) -> None:
    """The sample's 3 supported subsets: the delegate takes one (max 1); the others run on the CPU."""
    result = runner.invoke(app, ["check", str(sample_path(tmp_path))])
    assert "GPU601 [warning] subgraph 0 runs as 1 delegated GPU partition and 1 CPU partition with 2" in result.stdout
    assert (
        "3 of 8 ops on the GPU, 3 GPU partitions (runs of supported ops; the delegate takes 1), 1 CPU partition, 2 transfers"
        in result.stdout
    )


def test_report_partition_numbers_do_not_wrap(tmp_path: Path) -> None:
    """The body wraps anywhere (long tensor names); the partitions table's numbers and labels must
    not, or a long ops list squeezes them to a letter a line (seen at 1400 px)."""
    import re

    html = tmp_path / "r.html"
    assert runner.invoke(app, ["report", str(sample_path(tmp_path)), "--no-fix", "-o", str(html)]).exit_code == 0
    page = html.read_text()
    assert '<table class="parts">' in page and '<th class="num">count</th>' in page
    rules: dict[str, str] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", page, flags=re.S)):
        for selector in selectors.split(","):
            rules[selector.strip()] = rules.get(selector.strip(), "") + body
    for selector in ("td.num", "th.num", "table.parts td:not(.mono)", "table.parts th"):
        assert "white-space: nowrap" in rules.get(selector, ""), selector


def test_verify_resolves_its_target_as_check_does(tmp_path: Path) -> None:
    """`verify --target` is resolved (and refused) as in `check`, from gpulint.toml too; the error
    reaches a JSON reader as the one object verify prints in every outcome."""
    import os

    path = sample_path(tmp_path)
    r = runner.invoke(app, ["verify", str(path), "--target", "nope"])
    known = "unknown target `nope`; known: classic, mediapipe, docs-2019, litert-gpu, metal, coreml"
    assert r.exit_code == 2 and r.stderr == f"gpulint: error: {known}\n"
    r = runner.invoke(app, ["verify", str(path), "--target", "nope", "--format", "json"])
    assert r.exit_code == 2 and json.loads(r.stdout) == {
        "model": str(path),
        "candidate": str(path),
        "status": "ERROR",
        "error": known,
    }
    (tmp_path / "vendor.yaml").write_text("target: vendor\nbase: classic\n")
    (tmp_path / "gpulint.toml").write_text('rules = ["vendor.yaml"]\ntarget = "vendor"\n')
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        r = runner.invoke(app, ["verify", str(path)])
    finally:
        os.chdir(old)
    assert r.exit_code == 2 and "target `vendor` comes from a rule pack" in r.stderr


@needs_opencl()
@pytest.mark.parametrize(
    "command",
    [
        ["verify", "--precision", "fp32-fp16"],
        ["verify", "--precision", "fp16"],
        ["bench", "--precision", "fp16", "--runs", "2", "--no-start"],
    ],
)
def test_no_compiler_warning_at_fp16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """pyopencl's CompilerWarning (PoCL's notes on float16 vectors at fp16) on a cold kernel
    cache: printed on every fp16 verify (issue 15 item 6), then by bench, which ran outside the
    filter verify had."""
    import warnings

    from helpers import conv_model

    from gpulint.executor import program

    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(program, "_PROGRAMS", {})  # build every kernel again
    path = tmp_path / "conv.tflite"
    write(conv_model(32), path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = runner.invoke(app, [command[0], str(path), *command[1:]])
    assert r.exit_code == 0, r.output
    assert not [w for w in seen if type(w.message).__name__ == "CompilerWarning"], seen[0].message


def test_precisions_are_named_as_the_delegate_names_them() -> None:
    """Issue 18: fp32, fp16 (F16: half storage and arithmetic, what phones run) and fp32-fp16
    (F32_F16: half arithmetic, float sums in convs), on every command that takes --precision."""
    for command in ("verify", "bench"):
        r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "300"})
        assert r.exit_code == 0
        assert "fp32|fp16|fp32-fp16" in r.stdout and "GpuDelegate.Options" in r.stdout, r.stdout
        bad = runner.invoke(app, [command, "x.tflite", "--precision", "f16"])
        assert bad.exit_code == 2 and "Traceback" not in bad.output


@needs_opencl()
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_verify_and_bench_say_which_precision_ran(tmp_path: Path, precision: str) -> None:
    from helpers import conv_model

    from gpulint.compare import PRECISION_WORDS

    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    r = runner.invoke(app, ["verify", str(path), "--precision", precision, "--format", "json"])
    out = json.loads(r.stdout)
    assert r.exit_code == 0 and out["precision"] == precision, out
    assert out["precision_means"] == PRECISION_WORDS[precision]
    r = runner.invoke(app, ["verify", str(path), "--precision", precision])
    assert f"{precision} ({PRECISION_WORDS[precision]})" in r.stdout.splitlines()[0]
    r = runner.invoke(app, ["bench", str(path), "--precision", precision, "--runs", "1", "--no-start"])
    assert r.exit_code == 0 and f"({precision} ({PRECISION_WORDS[precision]}))" in r.stdout.splitlines()[0]

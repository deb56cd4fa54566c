"""check's value-range rule, GPU704 (issue #39): given inputs (`check --inputs X.npz`, or `--input-range
LO,HI`), the model runs on the LiteRT CPU interpreter and the first op of each chain whose float result
passes half's 65504 is named, with the value and the pass that keeps it in range (measured on the same
inputs), or keep-in-float. And LiteRT's accelerator's prefix bisection names the value that left half's
range, as the executor's bisection does. The converter corpora run where they are built (else skip)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import needs_accelerator
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model
from gpulint.model.write import write

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def norm_model(root: bool = True, n: int = 768) -> Model:
    """An L2 norm written by hand: MUL(x, x) -> SUM over n channels -> SQRT -> DIV (root=False: the
    sum of squares is the output). On values in [0, 255] the SUM reaches about n * 255^2 / 3."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, n])
    sq = g.op("MUL", [x, x], [1, 8, n], out_name="sq")
    s = g.op("SUM", [sq, g.const("axis", np.array([-1], np.int32))], [1, 8, 1], options=dict(keep_dims=True))
    if root:
        r = g.op("SQRT", [s], [1, 8, 1], out_name="norm")
        s = g.op("DIV", [x, r], [1, 8, n], out_name="y")
    g.output(s)
    return mb.build()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("values")
    write(norm_model(), folder / "norm.tflite")
    write(norm_model(root=False), folder / "sumsq.tflite")
    return folder


def check(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["check", "--select", "GPU704", *args])
    return r.exit_code, r.stdout, r.stderr


def findings(path: Path, *args: str) -> list[dict[str, object]]:
    code, out, err = check(str(path), "--format", "json", *args)
    assert code in (0, 1), err
    return [f for f in json.loads(out)["files"][0]["findings"] if f["code"] == "GPU704"]


def test_an_image_range_fires_and_names_the_pass(models: Path) -> None:
    found = findings(models / "norm.tflite", "--input-range", "0,255")
    by_op = {f["op"]: f for f in found}
    assert set(by_op) == {"SUM", "MUL"}
    s = by_op["SUM"]
    assert (s["severity"], s["index"], s["fix"]) == ("warning", 1, "scaled-variance")
    # 768 squares of uniform [0, 255] values: about 768 * 255^2 / 3 = 1.66e7, past 65504
    value = float(str(s["message"]).split(" reach ")[1].split()[0])
    assert 1.5e7 < value < 1.8e7
    assert "65504" in str(s["message"]) and "float inputs uniform in [0, 255] (seeds 0-2)" in str(s["message"])
    assert "`gpulint fix --passes scaled-variance --inputs X.npz` keeps it in range" in str(s["message"])
    # The squares themselves reach 255^2 = 65025: within 2x of 65504, said as info.
    assert by_op["MUL"]["severity"] == "info" and "within 2x" in str(by_op["MUL"]["message"])


def test_the_same_model_in_unit_range_or_without_ranges_says_nothing(models: Path) -> None:
    assert findings(models / "norm.tflite", "--input-range", "0,1") == []
    assert findings(models / "norm.tflite", "--input-range", "-1,1") == []
    assert findings(models / "norm.tflite") == []


def test_no_pass_fixes_a_bare_sum_of_squares_so_keep_it_in_float(models: Path) -> None:
    (s,) = [f for f in findings(models / "sumsq.tflite", "--input-range", "0,255") if f["severity"] == "warning"]
    assert s["op"] == "SUM" and s["fix"] is None
    assert "no half-precision pass keeps it in range on these inputs: keep-in-float, SUM (op 1)" in str(s["message"])


def test_inputs_from_an_npz(models: Path, tmp_path: Path) -> None:
    npz = tmp_path / "calib.npz"
    np.savez(npz, x=np.full((1, 8, 768), 100.0, np.float32))  # 768 * 1e4 = 7.68e6
    (s,) = [f for f in findings(models / "norm.tflite", "--inputs", str(npz)) if f["severity"] == "warning"]
    assert "reach 7.68e+06 on the inputs of calib.npz" in str(s["message"])
    np.savez(npz, x=np.full((1, 8, 768), 1.0, np.float32))
    assert findings(models / "norm.tflite", "--inputs", str(npz)) == []
    np.savez(npz, y=np.ones(3, np.float32))
    code, _, err = check(str(models / "norm.tflite"), "--inputs", str(npz))
    assert code == 2 and "no array for input 'x'" in err and "Traceback" not in err


def test_text_sarif_github_and_several_files(models: Path, tmp_path: Path) -> None:
    write(norm_model(n=16), tmp_path / "small.tflite")  # 16 * 255^2 / 3 = 3.5e5: fires too
    paths = [str(models / "norm.tflite"), str(tmp_path / "small.tflite")]
    code, out, _ = check(*paths, "--input-range", "0,255")
    assert code == 0  # warnings only: below --fail-on error
    assert sum("GPU704 [warning]" in line for line in out.splitlines()) == 2
    code, out, _ = check(*paths, "--input-range", "0,255", "--fail-on", "warning")
    assert code == 1
    sarif = json.loads(check(*paths, "--input-range", "0,255", "--format", "sarif")[1])
    assert {r["ruleId"] for r in sarif["runs"][0]["results"]} == {"GPU704"}
    assert any(r["id"] == "GPU704" for r in sarif["runs"][0]["tool"]["driver"]["rules"])
    github = check(*paths, "--input-range", "0,255", "--format", "github")[1]
    assert "GPU704" in github


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--input-range", "0,x"], "--input-range '0,x': give two numbers, LO,HI (e.g. 0,255 or -1,1)"),
        (["--input-range", "255"], "--input-range '255': give two numbers, LO,HI (e.g. 0,255 or -1,1)"),
        (["--input-range", "1,0"], "--input-range '1,0': LO must be below HI"),
        (["--input-range", "0,inf"], "--input-range '0,inf': give two numbers, LO,HI (e.g. 0,255 or -1,1)"),
        (["--input-range", "0,1", "--inputs", "x.npz"], "give --inputs or --input-range, not both"),
        (["--input-range", "0,1", "--matrix"], "--inputs and --input-range run the CPU interpreter here"),
    ],
)
def test_bad_value_options_are_one_line(models: Path, args: list[str], said: str) -> None:
    code, out, err = check(str(models / "norm.tflite"), *args)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"gpulint: error: {said}"), line


def test_a_missing_npz_is_one_line(models: Path, tmp_path: Path) -> None:
    code, _, err = check(str(models / "norm.tflite"), "--inputs", str(tmp_path / "no.npz"))
    assert code == 2 and err.strip() == f"gpulint: error: {tmp_path / 'no.npz'}: no such file"


def test_without_the_interpreter_it_is_one_line(models: Path, tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['ai_edge_litert'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "gpulint", "check", "--select", "GPU704", str(models / "norm.tflite")]
    argv += ["--input-range", "0,255"]
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("gpulint: error: `gpulint check` needs ai-edge-litert, which this install leaves out")
    assert line.endswith(" (or leave out --inputs / --input-range)")
    r = subprocess.run(argv[:-2], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr  # check itself needs no interpreter


def test_the_result_cache_keys_on_the_values(models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPULINT_NO_CACHE", raising=False)
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path / "cache"))
    path = models / "norm.tflite"
    assert len(findings(path, "--input-range", "0,255")) == 2  # kept: the interpreter's run is slow
    assert list((tmp_path / "cache").rglob("*.pickle"))
    assert findings(path) == []  # not the kept result of the run with a range
    assert findings(path, "--input-range", "0,1") == []
    assert len(findings(path, "--input-range", "0,255")) == 2


# -- the converter corpora, on realistic ranges ----------------------------------------------------

SHARED = Path(os.environ.get("GPULINT_CORPUS", ROOT.parent / "shared" / "models"))


def corpus_model(folder: Path, name: str) -> Path:
    """A model of a converter corpus (any build of it: the models' numbers do not depend on it)."""
    found = sorted(folder.glob(f"*/{name}"))
    if not found:
        pytest.skip(f"{name} is not built in {folder} (see tests/test_half_corpus.py for how to build it)")
    return found[0]


# Measured (seeds 0-2, the CPU interpreter): the ops whose float result passes 65504, by range, and
# the pass that keeps each in half's range on the same inputs (None: keep-in-float).
TORCH = Path(os.environ.get("GPULINT_TORCH_CACHE", ROOT / ".converter-cache" / "torch"))
TORCH_HALF = Path(os.environ.get("GPULINT_TORCH_HALF_CACHE", ROOT / ".converter-cache" / "torch-half"))
YOLO = ROOT / ".converter-cache" / "yolo"
LAYERNORMS = {f"SQUARED_DIFFERENCE#{i}": "scaled-variance" for i in (8, 47, 63, 102, 118)}
MEASURED = [
    # litert-torch's ViT: each LayerNorm's squared deviations reach 8.3e4 on raw pixels.
    (TORCH, "vit_f32.tflite", LAYERNORMS),
    # litert-torch's hand-written log-softmax: exp of raw pixels (Inf in float32 too).
    (TORCH_HALF, "log_softmax.tflite", {"EXP#0": "stable-softmax"}),
    # the TF converter's transformer block: Q.K^T reaches 2.8e5 and its scaled logits 8.0e4, so
    # scale-logits is not enough (keep-in-float); the LayerNorm's squares 3.3e5 (scaled-variance).
    (
        SHARED,
        "transformer_block_32x48_f32.tflite",
        {"BATCH_MATMUL#6": None, "SQUARED_DIFFERENCE#19": "scaled-variance"},
    ),
    # MediaPipe's face detector takes [-1, 1]: fed raw pixels, its last convolutions pass 65504.
    (
        SHARED,
        "face_detection_short_range.tflite",
        {"DEPTHWISE_CONV_2D#140": None, "CONV_2D#151": None, "CONV_2D#157": None},
    ),
    # YOLO11's random-weight export (attention included) stays small even on raw pixels.
    (YOLO, "yolo11n_160_f32.tflite", {}),
    (TORCH, "resnet_f32.tflite", {}),
]


def warned(path: Path, lo_hi: str) -> dict[str, object]:
    found = findings(path, "--input-range", lo_hi)
    return {f"{f['op']}#{f['index']}": f["fix"] for f in found if f["severity"] == "warning"}


@pytest.mark.parametrize(("folder", "name", "want"), MEASURED, ids=[m[1] for m in MEASURED])
def test_converter_corpora_on_raw_pixels(folder: Path, name: str, want: dict[str, str | None]) -> None:
    assert warned(corpus_model(folder, name), "0,255") == want


@pytest.mark.parametrize("name", [m[1] for m in MEASURED] + ["selfie_segmentation.tflite", "iris_landmark.tflite"])
@pytest.mark.parametrize("lo_hi", ["0,1", "-1,1"])
def test_float_models_stay_quiet_on_normalized_inputs(name: str, lo_hi: str) -> None:
    folder = next((f for f, n, _ in MEASURED if n == name), SHARED)
    assert findings(corpus_model(folder, name), "--input-range", lo_hi) == []


# -- LiteRT's accelerator: the prefix bisection names the value ---------------------------------------


@needs_accelerator()
def test_the_accelerators_bisection_names_the_value_past_half(tmp_path: Path) -> None:
    mb = ModelBuilder()  # x * 20 -> EXP: exp(20) = 4.9e8 on the CPU; Inf in half on the accelerator
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    y = g.op("MUL", [x, g.const("k", np.full((1,), 20.0, np.float32))], [1, 4, 4, 8])
    g.output(g.op("EXP", [y], [1, 4, 4, 8]))
    write(mb.build(), tmp_path / "exp.tflite")
    argv = [sys.executable, "-m", "gpulint", "verify", str(tmp_path / "exp.tflite"), "--engine", "litert-gpu"]
    r = subprocess.run(
        [*argv, "--precision", "fp16", "--bisect", "--format", "json"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 1, r.stdout + r.stderr
    b = json.loads(r.stdout)["bisect"]
    assert (b["op"], b["op_index"]) == ("EXP", 1)
    assert b["cpu_max_abs"] > 65504 and "past half's largest 65504" in b["range"] and b["range"] in b["reason"]


def test_a_masked_mean_on_an_image_and_its_mask_names_split_reduction(tmp_path: Path) -> None:
    """--inputs where one range does not fit every input: litert-torch's masked mean, (x * mask).sum / mask.sum,
    on an image in [0, 255] and a 0/1 mask: the SUM reaches 3.0e5 and split-reduction keeps it in range."""
    path = corpus_model(TORCH_HALF, "masked_mean.tflite")
    mask = np.zeros((1, 1, 64, 64), np.float32)
    mask[..., 8:56, 8:56] = 1
    np.savez(tmp_path / "x.npz", np.random.default_rng(0).uniform(0, 255, (1, 3, 64, 64)).astype(np.float32), mask)
    found = [f for f in findings(path, "--inputs", str(tmp_path / "x.npz")) if f["severity"] == "warning"]
    assert [(f["op"], f["index"], f["fix"]) for f in found] == [("SUM", 1, "split-reduction")]

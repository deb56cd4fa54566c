"""Issue #22: Ultralytics YOLO exports (PyTorch -> ONNX -> onnx2tf -> TFLite) through every command.

The corpus is ours, built the way users build it (tests/converters/yolo_build.py, in .yolo-venv, by
`make converters`): YOLOv8n and YOLO11n from Ultralytics' YAML configs with random weights, each task (detect,
segment, pose, classify), each file the exporter writes (float32, fp16 weights, dynamic-range int8, int8 with
float I/O, full int8), metadata zip included. Every command runs on every file and its outcome is asserted:
inspect, check (classic, --backend opengl against the real delegate where the oracle is set up, --target
litert-gpu), fix, fix --verify, verify at fp32 and fp16 over 5 seeds, bench and report; a detector whose class
scores moved must FAIL verify; a fixed file must still load in Ultralytics with its class names.

Each of the issue's items has cases here that failed before its fix (items 1-6). Without the corpus every test
skips and says how to build it. README's model x command table: `.venv/bin/python bench/bench_yolo.py --table`.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from converters import yolo_build as yb
from helpers import needs_opencl
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import read, write

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("GPULINT_YOLO_CACHE", REPO / ".converter-cache" / "yolo"))
VENV = Path(os.environ.get("GPULINT_YOLO_VENV", REPO / ".yolo-venv"))
SETUP = "`make converters` (tests/converters/setup_yolo.sh .yolo-venv .converter-cache/yolo)"
NAMES = yb.corpus_names()
FLOAT = ("f32", "f16", "dr8")  # verify must PASS these (issue #22, Done means)
INT8 = ("int8io32", "int8")
SEEDS = 5
runner = CliRunner()


@cache
def corpus() -> tuple[Path | None, str]:
    """The newest build of this yolo_build.py's test corpus, or None and why there is none."""
    builds = sorted(CACHE.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for m in builds:
        manifest = json.loads(m.read_text())
        if not manifest.get("bench") and manifest.get("config") == yb.config_hash():
            return m.parent, ""
    if builds:
        return None, f"the YOLO corpus in {CACHE} was built from another config (yolo_build.py): run {SETUP}"
    return None, f"the YOLO corpus is not built ({CACHE} has none): run {SETUP}"


def yolo_file(name: str) -> Path:
    folder, why = corpus()
    if folder is None:
        pytest.skip(why)
    return folder / name


def parts(name: str) -> tuple[str, str, str]:
    """(arch, task, scheme) of a corpus file name."""
    stem, _size, scheme = name.removesuffix(".tflite").rsplit("_", 2)
    arch, _, suffix = stem.partition("-")
    task = {"": "detect", "seg": "segment", "pose": "pose", "cls": "classify"}[suffix]
    return arch, task, scheme


def unfolded(name: str) -> bool:
    """Float YOLO11: onnx2tf's BATCH_MATMUL unfold (Ultralytics' float exports) makes every attention matmul
    SPLIT -> FULLY_CONNECTED whose weights are an activation."""
    arch, _, scheme = parts(name)
    return arch == "yolo11n" and scheme in ("f32", "f16")


def cli(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args])


# -- inspect ----------------------------------------------------------------------------------


def exporter_metadata(path: Path) -> dict[str, Any]:
    """The metadata.json of the zip Ultralytics appends after the flatbuffer ({} when there is none)."""
    try:
        with zipfile.ZipFile(path) as z:
            return dict(json.loads(z.read("metadata.json")))
    except (zipfile.BadZipFile, KeyError):
        return {}


def expected_outputs(name: str) -> list[list[int]]:
    """Ultralytics' heads at imgsz 160 (strides 8/16/32: 400 + 100 + 25 = 525 anchors): 4 box rows, one row
    per class (the YAML's nc), 32 mask coefficients, 17 x 3 keypoint values; classify: 1000 classes."""
    _, task, _ = parts(name)
    nc = len(exporter_metadata(yolo_file(name))["names"])
    anchors = sum((yb.IMGSZ // s) ** 2 for s in (8, 16, 32))
    return {
        "detect": [[1, 4 + nc, anchors]],
        "segment": [[1, 4 + nc + 32, anchors], [1, yb.IMGSZ // 4, yb.IMGSZ // 4, 32]],
        "pose": [[1, 4 + nc + 17 * 3, anchors]],
        "classify": [[1, nc]],
    }[task]


@pytest.mark.parametrize("name", NAMES)
def test_inspect(name: str) -> None:
    path = yolo_file(name)
    r = cli("inspect", "--json", path)
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    (sub,) = info["subgraphs"]
    (inp,) = sub["inputs"]
    assert inp["shape"] == [1, yb.IMGSZ, yb.IMGSZ, 3]
    assert inp["dtype"] == ("INT8" if parts(name)[2] == "int8" else "FLOAT32")
    assert sorted(o["shape"] for o in sub["outputs"]) == sorted(expected_outputs(name))
    ops = {row["op"] for row in info["ops"]}
    assert "CONV_2D" in ops
    if unfolded(name):
        assert {"FULLY_CONNECTED", "SPLIT", "PACK"} <= ops and "BATCH_MATMUL" not in ops


@pytest.mark.parametrize("name", NAMES)
def test_inspect_shows_the_exporter_metadata(name: str) -> None:
    """Item 4: bytes after the flatbuffer are user data, shown by inspect."""
    path = yolo_file(name)
    r = cli("inspect", path)
    assert r.exit_code == 0, r.output
    assert "metadata.json" in r.stdout  # the zip Ultralytics appends, named by its member


# -- check ------------------------------------------------------------------------------------


def check_json(path: Path, *flags: str) -> dict[str, Any]:
    r = cli("check", "--format", "json", "--exit-zero", *flags, path)
    assert r.exit_code == 0, r.output
    (f,) = json.loads(r.stdout)["files"]
    return dict(f)


def hybrid_classifier(name: str) -> bool:
    """A dynamic-range classifier's last FULLY_CONNECTED is a hybrid op (v12), above the classic delegate's v9:
    it and the SOFTMAX after it run on the CPU."""
    _, task, scheme = parts(name)
    return task == "classify" and scheme == "dr8"


@pytest.mark.parametrize("name", NAMES)
def test_check(name: str) -> None:
    """Classic target, both backends: every op is on the GPU but a hybrid classifier's tail; OpenCL builds every
    graph, and the verdict carries the OpenGL backend's init failure where it has one (item 6)."""
    f = check_json(yolo_file(name))
    assert f["backends"]["opencl"]["init"] == "ok", f["backends"]
    (plan,) = f["partitions"]
    if hybrid_classifier(name):
        assert plan["cpu_ops"] == 2, plan
    else:
        assert plan["gpu_ops"] == plan["ops"], plan
    gl = f["backends"]["opengl"]
    if gl["init"] != "ok":
        assert gl["init"] == "init-failure" and f["verdict"] == "init-failure" and gl["reason"] in f["reason"]
    else:
        assert f["verdict"] == ("partial" if hybrid_classifier(name) else "ready"), f["reason"]


@pytest.mark.parametrize("name", NAMES)
def test_check_opengl(name: str) -> None:
    """Item 6: the OpenGL backend fails these graphs at init (YOLOv8's heads: TRANSPOSE, which has no GL shader;
    YOLO11: its attention, unfolded or not, with first dimensions other than 1); only YOLOv8's classifier
    builds, and check says so."""
    f = check_json(yolo_file(name), "--backend", "opengl")
    arch, task, _ = parts(name)
    if arch == "yolov8n" and task == "classify":
        assert f["verdict"] == ("partial" if hybrid_classifier(name) else "ready"), f["reason"]
    else:
        assert f["verdict"] == "init-failure", f["reason"]
    if unfolded(name):
        assert "Batch size mismatch" in f["reason"]
    elif arch == "yolov8n" and task != "classify":
        assert "TRANSPOSE" in f["reason"]


@pytest.fixture(scope="module")
def gl_answers(gl_oracle: Any) -> dict[str, Any]:
    folder, why = corpus()
    if folder is None:
        pytest.skip(why)
    return dict(gl_oracle([folder / n for n in NAMES]))


@pytest.mark.parametrize("name", NAMES)
def test_check_opengl_agrees_with_the_delegate(name: str, gl_answers: dict[str, Any]) -> None:
    """Item 6: `check --backend opengl` and Google's GL delegate agree on node set, partitions, init outcome."""
    from test_oracle_fidelity import compare

    path = yolo_file(name)
    compare(name, path, gl_answers[str(path)])


@pytest.mark.parametrize("name", NAMES)
def test_check_litert_gpu(name: str) -> None:
    """LiteRT's GPU accelerator has no OpenGL backend to fail and takes the hybrid FULLY_CONNECTED: every graph is
    ready, in one partition."""
    f = check_json(yolo_file(name), "--target", "litert-gpu")
    (plan,) = f["partitions"]
    assert f["verdict"] == "ready", f["reason"]
    assert plan["gpu_ops"] == plan["ops"] and len(plan["partitions"]) == 1, plan


# -- fix --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`gpulint fix` on a corpus file, run once per file for every test that needs its output."""
    out = tmp_path_factory.mktemp("yolo-fixed")
    done: dict[str, tuple[Any, Path]] = {}

    def get(name: str) -> tuple[Any, Path]:
        if name not in done:
            dst = out / name
            done[name] = (cli("fix", yolo_file(name), "-o", dst), dst)
        return done[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_fix(name: str, fixed: Any) -> None:
    r, dst = fixed(name)
    assert r.exit_code == 0, r.output
    assert "verified on the LiteRT CPU interpreter" in r.stdout or "nothing to change" in r.output.lower()
    assert dst.is_file()
    before, after = read(yolo_file(name)).subgraphs[0], read(dst).subgraphs[0]
    for a, b in ((before.inputs, after.inputs), (before.outputs, after.outputs)):  # the interface is kept
        assert [before.tensors[i].shape for i in a] == [after.tensors[i].shape for i in b]
    assert check_json(dst)["backends"]["opencl"]["init"] == "ok"


@pytest.mark.parametrize("name", NAMES)
def test_fix_keeps_the_exporter_metadata(name: str, fixed: Any) -> None:
    """Item 4: every file fix writes keeps the exporter's metadata zip."""
    path = yolo_file(name)
    meta = exporter_metadata(path)
    assert meta["task"] == parts(name)[1] and meta["names"]  # what the exporter wrote
    r, dst = fixed(name)
    assert r.exit_code == 0, r.output
    assert exporter_metadata(dst) == meta


@pytest.fixture(scope="module")
def ultralytics_view(fixed: Any) -> Any:
    """What Ultralytics (`YOLO(path)` and one prediction, in .yolo-venv) reads from each original and fixed file;
    one child process for all of them."""
    if not (VENV / "bin" / "python").is_file():
        pytest.skip(f"no Ultralytics venv at {VENV}: run {SETUP}")
    folder, why = corpus()
    if folder is None:
        pytest.skip(why)
    paths = [str(folder / n) for n in NAMES]
    paths += [str(dst) for n in NAMES if (dst := fixed(n)[1]).is_file()]
    env = {**os.environ, "YOLO_OFFLINE": "1", "ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.setdefault("YOLO_CONFIG_DIR", str(VENV / "ultralytics-config"))
    p = subprocess.run(
        [str(VENV / "bin" / "python"), str(Path(yb.__file__)), "--load", *paths],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NAMES)
def test_fixed_file_loads_in_ultralytics(name: str, fixed: Any, ultralytics_view: dict[str, Any]) -> None:
    """Done means: a fixed file loads in Ultralytics with its metadata (task, class names, keypoint shape)."""
    original = ultralytics_view[str(yolo_file(name))]
    assert "error" not in original, original
    assert original["task"] == parts(name)[1] and len(original["names"]) == len(
        exporter_metadata(yolo_file(name))["names"]
    )
    got = ultralytics_view.get(str(fixed(name)[1]), {"error": "fix wrote nothing"})
    assert got == original


# -- verify -----------------------------------------------------------------------------------


def verify_json(*args: object) -> tuple[int, dict[str, Any]]:
    r = cli("verify", "--format", "json", *args)
    try:
        return r.exit_code, json.loads(r.stdout)
    except json.JSONDecodeError:
        return r.exit_code, {"status": "no JSON", "output": r.output[-2000:]}


@needs_opencl()
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", [n for n in NAMES if parts(n)[2] in FLOAT])
def test_verify_passes(name: str, precision: str) -> None:
    """Done means: every float, fp16-weight and dynamic-range export PASSes at fp32 and fp16 over 5 seeds."""
    code, out = verify_json(yolo_file(name), "--runs", SEEDS, "--precision", precision)
    # the classifiers' probabilities at fp16: a tolerance that covers their whole range cannot fail,
    # which is INCONCLUSIVE (exit 4) and says what would decide it (#49); never a FAIL, never at fp32
    if out["status"] == "INCONCLUSIVE":
        assert (code, precision) == (4, "fp16") and "-cls" in name, out
        assert all(o["decidable"] for o in out["outputs"] if o["status"] == "INCONCLUSIVE"), out["outputs"]
    else:
        assert (code, out["status"]) == (0, "PASS"), out
    assert out["runs"] == SEEDS
    for o in out["outputs"]:
        assert o["nonfinite_in_candidate"] == 0, o


# In half precision (fp32-fp16 and fp16 alike) the delegate's rounding of an int8 result runs in half
# arithmetic (FLT4 in quantize_and_dequantize.cc; the executor's quantize4 does the same): a value whose
# quotient by the scale is near a midpoint takes the next grid point (on yolo11n-pose, 1.6% of the conv
# results, 0.7% of the MULs', 0.4% of the ADDs'). The pose exports' keypoint rows carry those 1-step moves
# to 3-5 steps (the other rows stay within 1): yolo11n-pose int8 and int8io32 5 steps, yolov8n-pose 3 and
# 3.04. These were strict xfails against a flat 3 steps; verify now adds the steps the model's own half
# rounding flips make, measured on the CPU (compare.py, verify.twins.half_probe_twins: 6 and 3 steps on
# these), and they PASS with 3 steps to spare.
def int8_cases() -> list[Any]:
    return [
        pytest.param(name, precision, id=f"{name}-{precision}")
        for name in NAMES
        if parts(name)[2] in INT8
        for precision in ("fp32", "fp16")
    ]


@needs_opencl()
@pytest.mark.parametrize(("name", "precision"), int8_cases())
def test_verify_int8(name: str, precision: str) -> None:
    """Full int8 (float or int8 I/O), at fp32 and fp16: every output computed, no NaN; the int8 ops
    judged against the delegate's computation of them (float, each int8 result rounded to its grid),
    LiteRT's int8 kernels within 2 steps of that (information, not the verdict); PASS: the executor
    rounds as the delegate does (add_quant_adjustments; before it did, every detect, pose and segment
    export was 12-13 steps off), at fp16 on halves, in half arithmetic (elementwise.cl quantize4;
    rounding the float result of a unary or binary op instead put yolo11n-pose int8 6 steps off)."""
    code, out = verify_json(yolo_file(name), "--precision", precision)
    assert "int8 op(s)" in out["cpu_reference"], out["cpu_reference"]
    for o in out["outputs"]:
        assert o["nonfinite_in_candidate"] == 0, o
        assert o["int8_gap"]["max_abs_error_steps"] <= 2, (o["name"], o["int8_gap"])
        assert ("half_flip_steps" in o["executor"]) == (precision != "fp32"), o["executor"]
    assert (code, out["status"]) == (0, "PASS"), [(o["name"], o["reason"]) for o in out["outputs"]]


@needs_opencl()
def test_verify_json_on_error_is_one_object(tmp_path: Path) -> None:
    """Item 5: `verify --format json` prints one JSON object in every outcome, an error included."""
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a model")
    r = cli("verify", "--format", "json", junk)
    assert r.exit_code == 2
    assert json.loads(r.stdout)["status"] in ("ERROR", "error")


# A detector whose class scores all moved: the class head's last convs (80 outputs, the bias Ultralytics'
# bias_init sets to log(5 / nc / (640 / stride)^2), below -5) get +10 on the bias, so every score goes from
# below 2e-4 to about 0.5 while the box pixels stay as they were.
def wrong_class_scores(src: Path, dst: Path) -> int:
    model = read(src)
    g = model.subgraphs[0]
    changed = 0
    for op in g.operators:
        if model.op_name(op) != "CONV_2D" or len(op.inputs) < 3 or op.inputs[2] < 0:
            continue
        bias = g.tensors[op.inputs[2]]
        data = model.buffers[bias.buffer].data
        if bias.shape != [80] or bias.type != "FLOAT32" or not data:
            continue
        values = np.frombuffer(bytes(data), np.float32)
        if np.all(values < -5) and np.ptp(values) == 0:
            model.buffers[bias.buffer].data = (values + 10).astype(np.float32).tobytes()
            changed += 1
    write(model, dst)
    return changed


@needs_opencl()
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("arch", yb.ARCHS)
def test_wrong_class_scores_fail(tmp_path: Path, arch: str, precision: str) -> None:
    """Done means: a candidate with wrong class scores FAILs at both precisions (item 3: no output part may hide
    behind another part's range)."""
    name = f"{arch}_{yb.IMGSZ}_f32.tflite"
    src = yolo_file(name)
    cand = tmp_path / "wrong_scores.tflite"
    assert wrong_class_scores(src, cand) == 3  # one class conv per stride
    code, out = verify_json(src, "--candidate", cand, "--precision", precision)
    assert (code, out["status"]) == (1, "FAIL"), out


# -- fix --verify, bench, report ---------------------------------------------------------------


@needs_opencl()
@pytest.mark.parametrize("name", NAMES)
def test_fix_verify(tmp_path: Path, name: str) -> None:
    """`fix --verify` writes the fixed file: the executor agrees with the CPU on every export, full int8 included."""
    dst = tmp_path / name
    r = cli("fix", "--verify", yolo_file(name), "-o", dst)
    assert str(tmp_path) not in r.output.replace(str(dst), "")  # no temporary file named
    assert r.exit_code == 0 and dst.is_file(), r.output[-2000:]


@needs_opencl()
@pytest.mark.parametrize("name", NAMES)
def test_bench(name: str) -> None:
    """bench times the executor and the CPU interpreter on every file (the 2x bar is bench/bench_yolo.py's)."""
    r = cli("bench", yolo_file(name), "--runs", "2", "--no-start", "--format", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["cpu_interpreter_ms"] > 0 and out["executor_ms"] > 0 and out["ops"]


def test_report_on_the_whole_corpus(tmp_path: Path) -> None:
    folder, why = corpus()
    if folder is None:
        pytest.skip(why)
    html = tmp_path / "yolo.html"
    r = cli("report", *(folder / n for n in NAMES), "-o", html)
    assert r.exit_code in (0, 1), r.output
    text = html.read_text()
    for n in NAMES:
        assert n in text


@needs_opencl()
def test_report_verify_renders_every_model(tmp_path: Path) -> None:
    """A multi-model `report --verify` writes its page, each model's verification in it or the reason it is
    missing (item 1: one model the executor could not run aborted the page)."""
    names = [f"{a}_{yb.IMGSZ}_f32.tflite" for a in yb.ARCHS]
    html = tmp_path / "yolo.html"
    r = cli("report", "--verify", *(yolo_file(n) for n in names), "-o", html)
    assert r.exit_code in (0, 1), r.output
    text = html.read_text()
    assert all(n in text for n in names) and text.count("PASS") >= len(names)

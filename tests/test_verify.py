"""`gpulint verify`: metrics, tolerances, partitioned runs, attribution, bisect, saved references,
`fix --verify`, and the corpus end to end (PASS as given and after fix)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import corpus_params
from helpers import conv_model, needs_opencl
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import Model, read, write
from gpulint.model.build import ModelBuilder

needs_device = needs_opencl()
runner = CliRunner()
RNG = np.random.default_rng(3)


def verify_json(*args: str) -> tuple[int, dict[str, object]]:
    r = runner.invoke(app, ["verify", *args, "--format", "json"])
    assert r.exit_code in (0, 1, 3), r.output
    return r.exit_code, json.loads(r.stdout)


def split_model() -> Model:
    """CONV_2D -> REVERSE_V2 (no GPU implementation) -> CONV_2D -> CONV_2D: a CPU partition."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("image", [1, 8, 8, 4])
    y = x
    for i in range(3):
        w = g.const(f"w{i}", RNG.standard_normal((4, 3, 3, 4)).astype(np.float32) * 0.3)
        b = g.const(f"b{i}", RNG.standard_normal(4).astype(np.float32))
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
        y = g.op("CONV_2D", [x if i == 0 else y, w, b], [1, 8, 8, 4], options=opts, out_name=f"conv{i}")
        if i == 0:
            y = g.op("REVERSE_V2", [y, g.const("axis", np.array([2], np.int32))], [1, 8, 8, 4], out_name="reverse")
    g.output(y)
    return mb.build()


# -- the command ----------------------------------------------------------------------------------


@needs_device
def test_verify_pass_names_device_and_partition(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    code, out = verify_json(str(path), "--runs", "2")
    assert code == 0 and out["status"] == "PASS"
    assert out["runs"] == 2 and out["precision"] == "fp32" and out["device"]
    assert [p["kind"] for p in out["partitions"]] == ["gpu"]  # type: ignore[union-attr,index]
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["max_abs_error"] <= o["atol"] and 0.999 < o["cosine_similarity"] <= 1.0 + 1e-9


@needs_device
def test_verify_with_nothing_on_the_executor_is_no_bare_pass(tmp_path: Path) -> None:
    """A graph with no op the delegate takes (REVERSE_V2 alone): the CPU was compared with the CPU.
    Not a bare PASS: status CPU-ONLY, exit 3, and the text says what was and was not shown (#40)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    g.output(g.op("REVERSE_V2", [x, g.const("axis", np.array([1], np.int32))], [1, 4, 4, 4]))
    path = tmp_path / "cpu_only.tflite"
    write(mb.build(), path)
    code, out = verify_json(str(path))
    assert code == 3 and out["status"] == "CPU-ONLY" and out["executor_ops"] == 0, out
    assert all(o["status"] == "PASS" for o in out["outputs"])  # type: ignore[union-attr,index]
    text = runner.invoke(app, ["verify", str(path)])
    assert text.exit_code == 3
    assert text.output.startswith(f"{path}: CPU-ONLY against the LiteRT CPU interpreter")
    assert "no op ran on the GPU side" in text.output and "PASS against" not in text.output


@needs_device
def test_verify_runs_cpu_partition_on_the_interpreter(tmp_path: Path) -> None:
    path = tmp_path / "split.tflite"
    write(split_model(), path)
    code, out = verify_json(str(path))
    assert code == 0, out
    kinds = [p["kind"] for p in out["partitions"]]  # type: ignore[union-attr,index]
    assert "cpu" in kinds and "gpu" in kinds
    cpu = next(p for p in out["partitions"] if p["kind"] == "cpu")  # type: ignore[union-attr]
    assert "REVERSE_V2" in cpu["summary"] and cpu["ran_on"] == "LiteRT CPU interpreter"


def split_model_candidate(tmp_path: Path, edit: Callable[[Model], None]) -> tuple[Path, Path]:
    """split_model() written as orig.tflite, and as candidate.tflite after `edit` changed it."""
    orig, cand = tmp_path / "orig.tflite", tmp_path / "candidate.tflite"
    write(split_model(), orig)
    bad = read(orig)
    edit(bad)
    write(bad, cand)
    return orig, cand


def change_weight(model: Model, name: str, change: Callable[[np.ndarray], None]) -> None:
    """Weight `name` of `model` replaced by a copy of its values that `change` edited in place."""
    w = next(t for t in model.subgraphs[0].tensors if t.name == name)
    values = model.tensor_data(w).copy()  # type: ignore[union-attr]
    change(values)
    model.buffers[w.buffer].data = values.tobytes()


def split_model_with_weight(
    tmp_path: Path, name: str, at: tuple[int, ...], change: Callable[[float], float]
) -> tuple[Path, Path]:
    """split_model() written as orig.tflite, and a candidate in which one element of weight
    `name` is changed."""

    def one_element(values: np.ndarray) -> None:
        values[at] = change(float(values[at]))

    return split_model_candidate(tmp_path, lambda bad: change_weight(bad, name, one_element))


@needs_device
def test_corrupted_weight_fails_blames_rewrite_and_bisect_names_op(tmp_path: Path) -> None:
    orig, cand = split_model_with_weight(tmp_path, "w1", (0, 1, 1, 0), lambda v: v + 50.0)
    code, out = verify_json(str(orig), "--candidate", str(cand), "--bisect")
    assert code == 1 and out["status"] == "FAIL"
    assert str(out["attribution"]).startswith("rewrite:")  # the CPU-vs-CPU comparison FAILs: a fact
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["rewrite"]["status"] == "FAIL" and o["executor"]["status"] == "PASS"
    assert out["bisect"]["op"] == "CONV_2D" and out["bisect"]["tensor"] == "conv1"  # type: ignore[index]
    text = runner.invoke(app, ["verify", str(orig), "--candidate", str(cand), "--bisect"])
    assert text.exit_code == 1 and "FAIL" in text.stdout and "first divergence (rewrite): op" in text.stdout


@needs_device
def test_a_wrong_executor_is_blamed_as_a_fact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor whose outputs are off (one value of 512 by 1e-3): the executor comparison
    FAILs, the rewrite comparison PASSes."""
    from gpulint.executor.executor import Executor

    real = Executor.run

    def off(self: Executor, inputs: list[np.ndarray], profile: bool = False) -> list[np.ndarray]:
        outs = real(self, inputs, profile)
        outs[0].flat[7] += 1e-3
        return outs

    monkeypatch.setattr(Executor, "run", off)
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    code, out = verify_json(str(path), "--candidate", str(path))
    assert code == 1 and str(out["attribution"]).startswith("executor:")
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["rewrite"]["status"] == "PASS" and o["executor"]["status"] == "FAIL"
    assert "1 of 512 values" in o["executor"]["reason"]


@needs_device
def test_saved_reference_replays_without_the_original_inputs(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(5), path)
    ref = tmp_path / "ref.npz"
    code, first = verify_json(str(path), "--runs", "2", "--save-reference", str(ref))
    assert code == 0 and ref.exists()
    with np.load(ref) as z:
        assert sorted(z.files) == ["run0_input0", "run0_output0", "run1_input0", "run1_output0"]
    code, again = verify_json(str(path), "--reference", str(ref))
    assert code == 0 and again["runs"] == 2
    assert again["outputs"][0]["max_abs_error"] == first["outputs"][0]["max_abs_error"]  # type: ignore[index]


@needs_device
def test_inputs_file_by_name_and_bad_shape(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(4), path)
    good = tmp_path / "in.npz"
    np.savez(good, image=RNG.standard_normal((1, 8, 8, 3)).astype(np.float32))
    assert runner.invoke(app, ["verify", str(path), "--inputs", str(good)]).exit_code == 0
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((1, 4, 4, 3), np.float32))
    r = runner.invoke(app, ["verify", str(path), "--inputs", str(bad)])
    assert r.exit_code == 2 and "is [1, 4, 4, 3], the model takes [1, 8, 8, 3]" in r.stderr


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    r = runner.invoke(app, ["verify", str(tmp_path / "missing.tflite")])
    assert r.exit_code == 2 and r.stderr.startswith("gpulint: error:") and "Traceback" not in r.output
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a model at all")
    r = runner.invoke(app, ["verify", str(junk)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    r = runner.invoke(app, ["verify", str(junk), "--tolerance", "oops"])
    assert r.exit_code == 2 and "NAME=ATOL" in r.stderr


@needs_device
def test_fix_verify_writes_only_a_passing_model(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(6), path)
    out = tmp_path / "out.tflite"
    r = runner.invoke(app, ["fix", str(path), "-o", str(out), "--verify"])
    assert r.exit_code == 0, r.output
    assert "fixed model: PASS" in r.stdout and out.exists()


@needs_device
def test_interpreter_crash_is_an_error_not_a_dead_process(tmp_path: Path) -> None:
    """verify runs the interpreter in a child: a model it refuses gives exit 2 and a message."""
    path = tmp_path / "conv.tflite"
    model = conv_model(4)
    model.subgraphs[0].operators[0].inputs[1] = 99  # a tensor index that does not exist
    from gpulint.model import to_bytes

    path.write_bytes(to_bytes(model))
    proc = subprocess.run([sys.executable, "-m", "gpulint", "verify", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "gpulint: error:" in proc.stderr and "Traceback" not in proc.stderr


# -- corpus ---------------------------------------------------------------------------------------


@needs_device
@pytest.mark.parametrize("path", corpus_params())
def test_corpus_verifies_as_given_and_after_fix(path: Path, tmp_path: Path) -> None:
    """Every corpus model within tolerance as given, at each precision; one the delegate refuses as
    converted (the TF converter's dynamic batch) ran wholly on the CPU, which is CPU-ONLY (exit 3),
    not a PASS (#40). After `fix` every model runs on the executor and PASSes."""
    for precision in ("fp32", "fp32-fp16", "fp16"):  # F32_F16: float sums in convs; F16: half sums too
        code, out = verify_json(str(path), "--precision", precision)
        assert (code, out["status"]) in ((0, "PASS"), (3, "CPU-ONLY")), [o["reason"] for o in out["outputs"]]  # type: ignore[union-attr]
        assert out["precision"] == precision and (out["executor_ops"] > 0) == (code == 0)  # type: ignore[operator]
    fixed = tmp_path / "fixed.tflite"
    r = runner.invoke(app, ["fix", str(path), "-o", str(fixed), "--verify"])
    assert r.exit_code == 0, r.output
    assert "fixed model: PASS" in r.stdout
    code, out = verify_json(str(fixed))
    assert (code, out["status"]) == (0, "PASS") and out["executor_ops"] > 0, out["partitions"]  # type: ignore[operator]


@needs_device
def test_device_faults_are_errors_naming_device_and_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of resources at a kernel launch, or no memory for a buffer: exit 2, one line that
    names the device (and the op, for a launch), no traceback."""
    import pyopencl as cl

    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)

    launch = cl.enqueue_nd_range_kernel

    def no_launch(queue: object, kernel: Any, *args: object, **kw: object) -> object:
        if kernel.function_name.startswith(
            "input_to_slices"
        ):  # the input's conversion goes through (named input_to_slices__N on PoCL: program.one_program)
            return launch(queue, kernel, *args, **kw)
        raise cl.MemoryError("clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES")

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", no_launch)
    r = runner.invoke(app, ["verify", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    # the kernel depends on the device (conv_o2_raw_fused on a CPU, conv_o1_raw on a GPU: its
    # 3-channel input read as given)
    assert re.search(r"op 0 CONV_2D \(kernel conv_o\d_raw(_fused)?\) failed to launch", r.stderr)
    assert "OUT_OF_RESOURCES" in r.stderr
    monkeypatch.undo()

    real_buffer = cl.Buffer

    def no_memory(*args: object, **kw: object) -> object:
        if kw.get("hostbuf") is not None and getattr(kw["hostbuf"], "nbytes", 0) > 1000:
            raise cl.MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")
        return real_buffer(*args, **kw)

    monkeypatch.setattr(cl, "Buffer", no_memory)
    r = runner.invoke(app, ["verify", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    # the first buffer made from host data: the conv's zeroed output (its 3-channel input is read as given)
    assert "op 0 CONV_2D: " in r.stderr and "cannot allocate" in r.stderr
    assert "MEM_OBJECT_ALLOCATION_FAILURE" in r.stderr and "cannot run" not in r.stderr


# -- NaN and Inf ------------------------------------------------------------------------------------


def nan_ops_model() -> Model:
    """x -> RELU, RELU6 (via CONV fused), MAX_POOL_2D, MAXIMUM, MINIMUM, SOFTMAX, REDUCE_MAX: ops
    whose OpenCL fmax/fmin/clamp would turn a NaN into a number."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    w = g.const("w", np.eye(4, dtype=np.float32).reshape(4, 1, 1, 4))
    b = g.const("b", np.zeros(4, np.float32))
    conv_opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU6")
    g.output(g.op("CONV_2D", [x, w, b], [1, 4, 4, 4], options=conv_opts, out_name="conv_relu6"))
    g.output(g.op("RELU", [x], [1, 4, 4, 4], out_name="relu"))
    pool = dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    g.output(g.op("MAX_POOL_2D", [x], [1, 2, 2, 4], options=pool, out_name="pool"))
    zero = g.const("zero", np.zeros((1, 1, 1, 4), np.float32))
    g.output(g.op("MAXIMUM", [x, zero], [1, 4, 4, 4], out_name="maximum"))
    g.output(g.op("MINIMUM", [x, zero], [1, 4, 4, 4], out_name="minimum"))
    g.output(g.op("SOFTMAX", [x], [1, 4, 4, 4], options=dict(beta=1.0), out_name="softmax"))
    axes = g.const("axes", np.array([3], np.int32))
    g.output(g.op("REDUCE_MAX", [x, axes], [1, 4, 4, 1], options=dict(keep_dims=True), out_name="rmax"))
    return mb.build()


@needs_device
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_executor_kernels_keep_nan(precision: str) -> None:
    from helpers import opencl_device

    from gpulint.executor import Executor

    device, _ = opencl_device()
    x = RNG.uniform(-1, 1, (1, 4, 4, 4)).astype(np.float32)
    x[0, 0, 0, 1] = np.nan
    got = Executor(nan_ops_model(), device, precision).run([x])
    for name, value in zip(["conv_relu6", "relu", "pool", "maximum", "minimum", "softmax", "rmax"], got, strict=True):
        assert np.isnan(value.ravel()).any(), f"{name}: the NaN was turned into a number"


@needs_device
def test_nan_producing_candidate_fails_and_names_the_op(tmp_path: Path) -> None:
    """One NaN in a weight: the executor's RELU used to turn it into 0 ("max abs 0", PASS)."""
    orig, cand = split_model_with_weight(tmp_path, "w2", (1, 1, 1, 2), lambda v: np.nan)
    code, out = verify_json(str(orig), "--candidate", str(cand))
    assert code == 1 and out["status"] == "FAIL"
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["executor"]["nonfinite_mismatch"] or o["rewrite"]["nonfinite_mismatch"]
    first = o["first_nonfinite"]
    assert first["op"] == "CONV_2D" and first["tensor"] == "conv2", first
    text = runner.invoke(app, ["verify", str(orig), "--candidate", str(cand)])
    assert "first NaN/Inf" in text.stdout and "conv2" in text.stdout
    assert "max abs 0," not in text.stdout or "NaN/Inf in the" in text.stdout


# -- per-element scale: a packed detection head ------------------------------------------------------


def packed_head_model(score_bias: float = -9.5) -> Model:
    """A YOLO-like head, [1, 128, 1, 8]: per anchor 4 box values in pixels (a 1x1 conv over 32
    channels with large weights: hundreds, with real accumulation noise on the CPU) and 4 class
    scores, sigmoid(... + score_bias): below 2e-4 at -9.5."""
    rng = np.random.default_rng(11)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("features", [1, 128, 1, 32])
    opts = dict(padding="VALID", stride_w=1, stride_h=1)
    wb = g.const("w_box", rng.standard_normal((4, 1, 1, 32)).astype(np.float32) * 40)
    bb = g.const("b_box", np.full(4, 320.0, np.float32))
    boxes = g.op("CONV_2D", [x, wb, bb], [1, 128, 1, 4], options=opts, out_name="boxes")
    ws = g.const("w_cls", rng.standard_normal((4, 1, 1, 32)).astype(np.float32) * 0.05)
    bs = g.const("b_cls", np.full(4, score_bias, np.float32))
    logits = g.op("CONV_2D", [x, ws, bs], [1, 128, 1, 4], options=opts, out_name="logits")
    scores = g.op("LOGISTIC", [logits], [1, 128, 1, 4], out_name="scores")
    g.output(g.op("CONCATENATION", [boxes, scores], [1, 128, 1, 8], options=dict(axis=3), out_name="head"))
    return mb.build()


@needs_device
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_packed_head_scores_cannot_hide_behind_the_boxes(
    precision: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22 item 3 / issue 14: box pixels and class scores in one output. The unmutated model
    PASSes; a candidate whose scores moved from below 2e-4 to 0.5 FAILs; so does an executor
    that moves only the scores (in half the boxes' noise x 2^15 would have hidden them)."""
    path = tmp_path / "head.tflite"
    write(packed_head_model(), path)
    code, out = verify_json(str(path), "--precision", precision, "--runs", "2")
    assert code == 0, out["outputs"]
    (o,) = out["outputs"]  # type: ignore[misc]
    ex = o["executor"]
    assert ex["atol_axis"] == 3 and ex["atol_min"] < ex["atol"] / 100, ex["tolerance_source"]
    assert ex["decides"].startswith("every element within atol") and "by slice along axis 3" in ex["decides"]

    moved = tmp_path / "moved.tflite"
    write(packed_head_model(score_bias=0.0), moved)
    code, out = verify_json(str(path), "--candidate", str(moved), "--precision", precision)
    assert code == 1 and str(out["attribution"]).startswith("rewrite:")

    from gpulint.executor.executor import Executor

    real = Executor.run

    def wrong_scores(self: Executor, inputs: list[np.ndarray], profile: bool = False) -> list[np.ndarray]:
        outs = real(self, inputs, profile)
        outs[0][..., 4:] = 0.5
        return outs

    monkeypatch.setattr(Executor, "run", wrong_scores)
    code, out = verify_json(str(path), "--precision", precision)
    assert code == 1 and str(out["attribution"]).startswith("executor:")
    (o,) = out["outputs"]  # type: ignore[misc]
    assert "512 of 1024 values" in o["executor"]["reason"]
    text = runner.invoke(app, ["verify", str(path), "--precision", precision])
    assert text.exit_code == 1 and "every element within atol" in text.stdout and "x its tolerance" in text.stdout


# -- dynamic-range (hybrid) models -----------------------------------------------------------------


def hybrid_conv_model(cpu_tail: bool = False) -> Model:
    """x [1,8,8,16] -> CONV_2D with per-channel int8 weights and float activations: LiteRT runs a
    hybrid kernel (activations quantized on the fly), the delegate computes in float. `cpu_tail`:
    then REVERSE_V2 (no classic parser) and three TANH; the delegate takes the larger partition
    (the TANHs), so the conv runs its hybrid kernel on the CPU."""
    rng = np.random.default_rng(5)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 16])
    w = rng.standard_normal((24, 3, 3, 16)).astype(np.float32) * 0.2
    scale = np.abs(w).reshape(24, -1).max(axis=1) / 127
    wq = np.clip(np.round(w / scale[:, None, None, None]), -127, 127).astype(np.int8)
    wt = g.const("w_int8", wq, quant=([float(s) for s in scale], [0] * 24), quant_dim=0)
    b = g.const("b", rng.standard_normal(24).astype(np.float32))
    opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="NONE")
    t = g.op("CONV_2D", [x, wt, b], [1, 8, 8, 24], options=opts, out_name="conv", version=2)
    if cpu_tail:
        t = g.op("REVERSE_V2", [t, g.const("axis", np.array([1], np.int32))], [1, 8, 8, 24])
        for _ in range(3):
            t = g.op("TANH", [t], [1, 8, 8, 24])
    g.output(t)
    return mb.build()


@needs_device
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_dynamic_range_model_is_compared_like_with_like(precision: str, tmp_path: Path) -> None:
    """Issue 15 item 2: the hybrid kernel's activation quantization (2e-2 off here) used to FAIL
    the executor against a tolerance of 1e-5. The executor is judged against the same graph
    with the weights dequantized to float; the hybrid gap is reported beside it, as information."""
    from gpulint import reference

    path = tmp_path / "dr.tflite"
    model = hybrid_conv_model()
    write(model, path)
    assert reference.hybrid_ops(model) == [0]
    code, out = verify_json(str(path), "--precision", precision, "--runs", "2")
    assert code == 0, out["outputs"]
    assert "1 hybrid (dynamic-range) op(s)" in str(out["cpu_reference"])
    (o,) = out["outputs"]  # type: ignore[misc]
    gap = o["hybrid_gap"]
    assert gap["max_abs_error"] > 1e-3 and "quantize each activation to int8" in gap["reason"]
    if precision == "fp32":
        assert o["executor"]["atol"] < gap["max_abs_error"] / 10  # the gap is not folded into the tolerance
    text = runner.invoke(app, ["verify", str(path), "--precision", precision])
    assert text.exit_code == 0 and "hybrid" in text.stdout


@needs_device
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_hybrid_op_in_a_cpu_partition_stays_hybrid_in_the_reference(precision: str, tmp_path: Path) -> None:
    """The device runs a hybrid op of a CPU partition with the hybrid kernel, as the candidate's
    CPU part does here; a reference that computed it in float put the hybrid gap (1.4e-2) into the
    executor's error and FAILed a correct run."""
    from gpulint import reference

    path = tmp_path / "dr_cpu.tflite"
    model = hybrid_conv_model(cpu_tail=True)
    write(model, path)
    assert reference.hybrid_ops(model) == [0]
    code, out = verify_json(str(path), "--precision", precision)
    assert code == 0, out["outputs"]
    assert [(p["kind"], p["ops"]) for p in out["partitions"]] == [("cpu", [0, 1]), ("gpu", [2, 3, 4])]  # type: ignore[union-attr,index]


@needs_device
def test_corpus_dynamic_range_model_verifies(tmp_path: Path) -> None:
    """As converted (a dynamic batch) the interpreter refuses the delegate: every op, hybrid ones
    included, runs on the CPU and the reference keeps them hybrid. Made static by `gpulint fix`,
    the delegate takes them and the reference computes them in float."""
    from conftest import corpus_file

    from gpulint import reference

    path = corpus_file("mobilenet_v1_025_224_dr8.tflite")
    assert reference.hybrid_ops(read(path))
    code, out = verify_json(str(path))
    assert code == 3 and out["status"] == "CPU-ONLY" and out["executor_ops"] == 0  # nothing shown of the GPU
    assert not out["cpu_reference"] and [p["kind"] for p in out["partitions"]] == ["cpu"]  # type: ignore[union-attr,index]
    fixed = tmp_path / "dr8_static.tflite"
    assert runner.invoke(app, ["fix", str(path), "-o", str(fixed)]).exit_code == 0
    code, out = verify_json(str(fixed))
    assert code == 0 and out["status"] == "PASS" and "hybrid" in str(out["cpu_reference"])


# -- bisect -----------------------------------------------------------------------------------------


@needs_device
def test_bisect_names_the_nan_op_not_an_earlier_drift(tmp_path: Path) -> None:
    """A candidate whose first conv drifts (finite) and whose last conv makes a NaN: bisect
    names the op that made the NaN, and keeps the earlier drift beside it."""

    def drift(w0: np.ndarray) -> None:
        w0 *= np.float32(1.01)

    def nan(w2: np.ndarray) -> None:
        w2[1, 1, 1, 2] = np.nan

    def edit(bad: Model) -> None:
        change_weight(bad, "w0", drift)
        change_weight(bad, "w2", nan)

    orig, cand = split_model_candidate(tmp_path, edit)
    code, out = verify_json(str(orig), "--candidate", str(cand), "--bisect")
    assert code == 1
    b = out["bisect"]
    assert b["op"] == "CONV_2D" and b["tensor"] == "conv2", b  # type: ignore[index]
    assert b["drift_before"]["tensor"] == "conv0", b  # type: ignore[index]


@needs_device
def test_bisect_judges_intermediates_on_their_noise(tmp_path: Path) -> None:
    """Every intermediate is judged against its own CPU noise (the reference side on inputs one
    ulp away), as the outputs are, not at the floor alone."""
    orig, cand = split_model_with_weight(tmp_path, "w1", (0, 1, 1, 0), lambda v: v + 50.0)
    code, out = verify_json(str(orig), "--candidate", str(cand), "--bisect")
    b = out["bisect"]
    assert code == 1 and b["tensor"] == "conv1" and "drift_before" not in b  # type: ignore[index,operator]
    assert "rewrite-proof" in b["tolerance_source"]  # type: ignore[index]


# -- full-int8 models -------------------------------------------------------------------------------


def int8_chain_model(depth: int = 4, narrow: int | None = None) -> Model:
    """x float [1, 32] -> QUANTIZE -> `depth` int8 FULLY_CONNECTEDs (per-channel int8 weights, int32
    bias, RELU on every other one) -> DEQUANTIZE, the shape of a PT2E export. Each output's scale
    and zero point cover its values on 256 calibration inputs like the model's; `narrow`: that
    layer's range is a third of its values' (an int8 tensor that saturates, as a calibration
    narrower than the inputs makes one)."""
    rng = np.random.default_rng(7)
    calib = rng.uniform(-1, 1, (256, 32))
    mb = ModelBuilder()
    g = mb.subgraph("main")
    s_in = 1.0 / 127
    t = g.op("QUANTIZE", [g.input("x", [1, 32])], [1, 32], dtype="INT8", quant=(s_in, 0), out_name="x_q")
    for i in range(depth):
        w = rng.standard_normal((32, 32)) / np.sqrt(32)
        b = rng.standard_normal(32) * 0.1
        calib = calib @ w.T + b
        if i % 2:
            calib = np.maximum(calib, 0)
        lo, hi = min(float(calib.min()), 0.0), max(float(calib.max()), 0.0)
        if narrow == i:
            lo, hi = lo / 3, hi / 3
        s_out = (hi - lo) / 255
        zp = int(np.clip(np.round(-128 - lo / s_out), -128, 127))
        ws = np.abs(w).max(axis=1) / 127
        wq = g.const(f"w{i}", np.round(w / ws[:, None]).astype(np.int8), quant=(list(ws), [0] * 32), quant_dim=0)
        bq = g.const(f"b{i}", np.round(b / (s_in * ws)).astype(np.int32), quant=(list(s_in * ws), [0] * 32))
        relu = dict(fused_activation_function="RELU" if i % 2 else "NONE")
        t = g.op(
            "FULLY_CONNECTED",
            [t, wq, bq],
            [1, 32],
            dtype="INT8",
            quant=(s_out, zp),
            options=relu,
            version=5,
            out_name=f"fc{i}",
        )
        s_in = s_out
    g.output(g.op("DEQUANTIZE", [t], [1, 32], version=2, out_name="y"))
    return mb.build()


def test_int8_twin_computes_as_the_delegate(tmp_path: Path) -> None:
    """The int8 ops in float on dequantized weights, each int8 result rounded into its own tensor
    (QUANTIZE after the op, DEQUANTIZE before a reader), as the delegate's add_quant_adjustments
    has it. On the interpreter every int8 tensor is within a step of LiteRT's int8 kernels, the
    saturating one too: the rounding clamps as the kernels do. Ops left out keep their kernels."""
    from gpulint import reference
    from gpulint.model.ir import clone

    model = int8_chain_model(depth=8, narrow=3)
    fcs = [i for i, op in enumerate(model.subgraphs[0].operators) if model.op_name(op) == "FULLY_CONNECTED"]
    assert reference.int8_ops(model) == fcs  # not the QUANTIZE of the float input, not the DEQUANTIZE

    def float_fcs(twin: Model) -> list[bool]:
        """For each FULLY_CONNECTED: computed in float, its result rounded by the QUANTIZE after it?"""
        ops, tensors = twin.subgraphs[0].operators, twin.subgraphs[0].tensors
        found = []
        for i, op in enumerate(ops):
            if twin.op_name(op) == "FULLY_CONNECTED":
                floats = all(tensors[t].type == "FLOAT32" for t in op.inputs + op.outputs)
                rounded = twin.op_name(ops[i + 1]) == "QUANTIZE" and ops[i + 1].inputs == op.outputs
                found.append(floats and rounded and tensors[ops[i + 1].outputs[0]].type == "INT8")
        return found

    twin = reference.fake_quant_twin(clone(model))
    part = reference.fake_quant_twin(clone(model), fcs[:2])
    assert float_fcs(twin) == [True] * 8 and float_fcs(part) == [True] * 2 + [False] * 6
    paths = [tmp_path / "int8.tflite", tmp_path / "twin.tflite"]
    write(model, paths[0])
    write(twin, paths[1])
    x = reference.random_inputs(model, 0)
    kernels, computed = (reference.run_all_tensors(p, x) for p in paths)
    for i in range(8):
        steps = np.abs(kernels[f"fc{i}"].astype(int) - computed[f"fc{i}"].astype(int))
        assert steps.max() <= 1, (i, steps)


@needs_device
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_int8_model_is_compared_with_the_delegates_computation(
    precision: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15 (full int8): the CPU side computes the delegated int8 ops as the delegate does (in
    float, each int8 result rounded to its grid); LiteRT's int8 kernels are measured against that
    and reported per output, as information, never as the verdict. Here the kernels are made 6
    steps off (their run for the gap is shifted): the verdict does not move, the gap says 6."""
    from gpulint import reference

    path = tmp_path / "int8.tflite"
    model = int8_chain_model()
    write(model, path)
    code, out = verify_json(str(path), "--precision", precision, "--runs", "3")
    assert code == 0, out["outputs"]
    assert "4 int8 op(s)" in str(out["cpu_reference"]) and "add_quant_adjustments" in str(out["cpu_reference"])
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["int8_gap"]["max_abs_error_steps"] <= 1 and "requantize in fixed point" in o["int8_gap"]["reason"]
    assert o["hybrid_gap"] is None
    # In half precision the tolerance adds the steps half rounding flips make on the CPU (the probe).
    assert ("half_flip_steps" in o["executor"]) == (precision != "fp32")
    if o["executor"].get("half_flip_steps"):
        assert "steps from half rounding flips" in o["executor"]["tolerance_source"]

    step = model.subgraphs[0].tensors[model.subgraphs[0].operators[-2].outputs[0]].quantization.scale[0]  # type: ignore[union-attr,index]
    real = reference.run

    def kernels_off(path: Any, inputs: list[np.ndarray], timeout: float | None = None) -> list[np.ndarray]:
        return [y + np.float32(6 * step) for y in real(path, inputs, timeout)]

    monkeypatch.setattr(reference, "run", kernels_off)
    code, shifted = verify_json(str(path), "--precision", precision, "--runs", "3")
    (s,) = shifted["outputs"]  # type: ignore[misc]
    assert code == 0 and s["executor"]["max_abs_error"] == o["executor"]["max_abs_error"]
    assert 5.9 < s["int8_gap"]["max_abs_error_steps"] < 6.1
    text = runner.invoke(app, ["verify", str(path), "--precision", precision])
    assert text.exit_code == 0 and "LiteRT's int8 kernels against that (information): y 6" in text.stdout, text.stdout


@needs_device
def test_wrong_int8_weight_fails_and_bisect_names_its_op(tmp_path: Path) -> None:
    """A broken int8 candidate (one output channel of one layer's weights negated) FAILs, the rewrite
    comparison is blamed, and bisect names that layer: the twins are compared tensor by tensor, in
    quantization steps."""

    def negate_row(w: np.ndarray) -> None:
        w[5] = -w[5]

    orig, cand = tmp_path / "orig.tflite", tmp_path / "candidate.tflite"
    write(int8_chain_model(), orig)
    bad = read(orig)
    change_weight(bad, "w2", negate_row)
    write(bad, cand)
    code, out = verify_json(str(orig), "--candidate", str(cand), "--bisect")
    assert code == 1 and str(out["attribution"]).startswith("rewrite:"), out["attribution"]
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["rewrite"]["status"] == "FAIL" and o["executor"]["status"] == "PASS"
    b = out["bisect"]
    assert (b["op"], b["tensor"], b["comparison"]) == ("FULLY_CONNECTED", "fc2", "rewrite"), b  # type: ignore[index]
    assert "quantization steps" in b["tolerance_source"]  # type: ignore[index]


@needs_device
def test_fix_verify_on_an_int8_model(tmp_path: Path) -> None:
    """`fix --verify` judges an int8 model as verify does: against the delegate's computation."""
    path, out = tmp_path / "int8.tflite", tmp_path / "fixed.tflite"
    write(int8_chain_model(), path)
    r = runner.invoke(app, ["fix", str(path), "-o", str(out), "--verify"])
    assert r.exit_code == 0 and out.is_file(), r.output
    assert "fixed model: PASS" in r.stdout and "4 int8 op(s)" in r.stdout


@needs_device
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_a_saturating_int8_tensor_is_clamped_as_the_delegate_clamps(precision: str, tmp_path: Path) -> None:
    """Layer 2's int8 output covers a third of its values: the delegate clamps them to its range
    (and rounds every int8 result), so does LiteRT (0 steps from the delegate's computation here);
    an executor that computed on in float was 46 steps off. The executor rounds and clamps as the
    delegate does (prepare.add_quant_adjustments) and PASSes."""
    path = tmp_path / "int8_saturating.tflite"
    model = int8_chain_model(narrow=2)
    write(model, path)
    code, out = verify_json(str(path), "--precision", precision)
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["int8_gap"]["max_abs_error_steps"] <= 1
    assert code == 0 and out["status"] == "PASS", o["executor"]["reason"]
    step = model.subgraphs[0].tensors[model.subgraphs[0].operators[-2].outputs[0]].quantization.scale[0]  # type: ignore[union-attr,index]
    # measured on PoCL: 0 at fp32, 1.01 steps at fp16 (one rounding moved by half storage)
    assert o["executor"]["max_abs_error"] <= 1.1 * step, o["executor"]


# -- integer inputs ---------------------------------------------------------------------------------


def token_model() -> Model:
    """ids INT64 [1, 16] -> CAST -> RESHAPE -> EMBEDDING_LOOKUP (1000 rows), the same ids ->
    GATHER (300 rows), and a second integer input `step` that only an ADD reads."""
    rng = np.random.default_rng(7)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    ids = g.input("ids", [1, 16], dtype="INT64")
    step = g.input("step", [1], dtype="INT32")
    ids32 = g.op("CAST", [ids], [1, 16], dtype="INT32", out_name="ids32")
    flat = g.op("RESHAPE", [ids32, g.const("shape", np.array([16], np.int32))], [16], dtype="INT32", out_name="flat")
    table = g.const("table", rng.standard_normal((1000, 8)).astype(np.float32))
    g.output(g.op("EMBEDDING_LOOKUP", [flat, table], [16, 8], out_name="emb"))
    small = g.const("small", rng.standard_normal((300, 4)).astype(np.float32))
    g.output(g.op("GATHER", [small, ids32], [1, 16, 4], options=dict(axis=0), out_name="gathered"))
    one = g.const("one", np.array([1], np.int32))
    g.output(g.op("ADD", [step, one], [1], dtype="INT32", out_name="next_step"))
    return mb.build()


@needs_device
def test_integer_inputs_stay_inside_the_tables_they_index(tmp_path: Path) -> None:
    """Issue 15 item 3: random token ids used to include negatives and values past the table,
    so the reference ended in exit 2. They are drawn inside the smallest table they index; an
    integer input nothing bounds gets a small range and a note pointing at --inputs."""
    path = tmp_path / "tokens.tflite"
    write(token_model(), path)
    code, out = verify_json(str(path), "--runs", "3")
    assert code == 3 and out["status"] == "CPU-ONLY", (
        out
    )  # no op of it runs on the GPU: within tolerance, nothing shown
    ids, step = out["integer_inputs"]  # type: ignore[misc]
    assert (ids["input"], ids["low"], ids["high"]) == ("ids", 0, 299) and "GATHER's table of 300" in ids["note"]
    assert step["input"] == "step" and step["source"] == "" and "--inputs" in step["note"]
    text = runner.invoke(app, ["verify", str(path)])
    assert text.exit_code == 3, text.output
    assert "input step: random integers in [0, 3]: no op of the model says what range it takes" in text.stdout


def test_integer_range_follows_the_readers() -> None:
    from gpulint import reference

    mb = ModelBuilder()
    g = mb.subgraph("main")
    a = g.input("a", [1, 4, 2], dtype="INT32")
    b = g.input("b", [4], dtype="INT32")
    params = g.const("params", np.zeros((5, 7, 3), np.float32))
    g.output(g.op("GATHER_ND", [params, a], [1, 4, 3], out_name="nd"))
    squeezed = g.op("EXPAND_DIMS", [b, g.const("axis", np.array(0, np.int32))], [1, 4], dtype="INT32")
    depth, on, off = (
        g.const(n, np.array(v, dt)) for n, v, dt in (("d", 6, np.int32), ("on", 1, np.float32), ("off", 0, np.float32))
    )
    g.output(g.op("ONE_HOT", [squeezed, depth, on, off], [1, 4, 6], options=dict(axis=-1), out_name="hot"))
    model = mb.build()
    sg = model.subgraphs[0]
    nd, hot = (reference.integer_range(model, t) for t in sg.inputs)
    assert (nd.low, nd.high) == (0, 4) and "GATHER_ND" in nd.source  # the smaller of 5 and 7
    assert (hot.low, hot.high) == (0, 5) and "ONE_HOT" in hot.source
    x = reference.random_inputs(model, 0)
    assert x[0].min() >= 0 and x[0].max() <= 4 and x[1].max() <= 5


@needs_device
def test_interpreter_errors_are_one_sentence(tmp_path: Path) -> None:
    """LiteRT's error reporter runs a kernel's check, its message and "Node number N (OP) failed
    to invoke." together ("... [0, 999]Node number 1"); the user gets one sentence."""
    path = tmp_path / "tokens.tflite"
    write(token_model(), path)
    bad = tmp_path / "bad.npz"
    np.savez(bad, ids=np.full((1, 16), 5000, np.int64), step=np.zeros(1, np.int32))
    r = runner.invoke(app, ["verify", str(path), "--inputs", str(bad)])
    assert r.exit_code == 2 and "Node number" not in r.stderr and "Traceback" not in r.output
    assert "failed to invoke: " in r.stderr and "out of bounds" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# -- errors: JSON in every outcome, the user's file named, no compiler chatter ----------------------


def custom_op_model() -> Model:
    """CONV_2D -> MediaPipe's Landmarks2TransformMatrix: a custom op the LiteRT interpreter has no
    kernel for (MediaPipe registers it in its own graph runner)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 3])
    w = g.const("w", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = g.const("b", np.zeros(4, np.float32))
    opts = dict(padding="SAME", stride_w=1, stride_h=1)
    y = g.op("CONV_2D", [x, w, b], [1, 8, 8, 4], options=opts, out_name="conv")
    g.output(g.op("Landmarks2TransformMatrix", [y], [1, 4, 4], custom_options=b"", out_name="matrix"))
    return mb.build()


def test_verify_json_is_one_object_in_every_outcome(tmp_path: Path) -> None:
    """Issue 22 item 5: an error printed no JSON. It prints one object with an "error" field; the
    exit code stays 2 and stderr keeps its one line."""
    path = tmp_path / "custom.tflite"
    write(custom_op_model(), path)
    for args in ([str(path)], [str(tmp_path / "missing.tflite")], [str(path), "--tolerance", "oops"]):
        r = runner.invoke(app, ["verify", *args, "--format", "json"])
        assert r.exit_code == 2, r.output
        out = json.loads(r.stdout)
        assert out["status"] == "ERROR" and out["error"] and r.stderr.startswith("gpulint: error:")
    r = runner.invoke(app, ["verify", str(path), "--format", "json"])
    assert "unresolved custom op: Landmarks2TransformMatrix" in json.loads(r.stdout)["error"]


def test_fix_verify_error_names_the_users_file(tmp_path: Path) -> None:
    """Issue 22 item 1: `fix --verify` staged the fixed model in a temporary folder and its error
    named that file. It names the model the user gave."""
    path = tmp_path / "custom.tflite"
    write(custom_op_model(), path)
    r = runner.invoke(app, ["fix", str(path), "-o", str(tmp_path / "out.tflite"), "--verify"])
    assert r.exit_code == 2 and not (tmp_path / "out.tflite").exists()
    assert r.stderr.startswith(f"gpulint: error: {path}: --verify cannot run") and "gpulint-fix-" not in r.stderr
    assert "candidate.tflite" not in r.stderr


@needs_device
def test_bisect_names_a_nan_op_before_a_dynamic_range_drift(tmp_path: Path) -> None:
    """Issue 22 item 2: an early op with a dynamic-range-sized gap (its weights quantized to int8,
    run as a hybrid op) and a later op that makes NaN. The first op whose output has a NaN/Inf
    where the reference has numbers is the answer, stated as such (it used to read as one more
    divergence); the drift is kept beside it."""
    from gpulint.model.ir import Quantization

    def nan(w1: np.ndarray) -> None:
        w1[2, 1, 1, 1] = np.nan

    def edit(bad: Model) -> None:
        sg = bad.subgraphs[0]
        w = next(t for t in sg.tensors if t.name == "w0")
        w0 = bad.tensor_data(w).copy()  # type: ignore[union-attr]
        scale = np.abs(w0).reshape(4, -1).max(axis=1) / 127
        w.type = "INT8"
        w.quantization = Quantization(scale=[float(s) for s in scale], zero_point=[0] * 4)
        bad.buffers[w.buffer].data = np.round(w0 / scale[:, None, None, None]).astype(np.int8).tobytes()
        bad.opcode(sg.operators[0]).version = 2  # hybrid CONV_2D
        change_weight(bad, "w1", nan)

    orig, cand = split_model_candidate(tmp_path, edit)
    code, out = verify_json(str(orig), "--candidate", str(cand), "--bisect")
    assert code == 1
    b = out["bisect"]
    assert b["tensor"] == "conv1" and b["first_nonfinite"] > 0, b  # type: ignore[index]
    assert "the first op whose output has NaN/Inf" in b["reason"]  # type: ignore[index]
    assert b["drift_before"]["tensor"] == "conv0", b  # type: ignore[index]
    text = runner.invoke(app, ["verify", str(orig), "--candidate", str(cand), "--bisect"])
    assert "first op to make a NaN/Inf (rewrite): op 2 CONV_2D -> conv1" in text.stdout, text.stdout
    assert "before it, op 0 CONV_2D drifts (finite)" in text.stdout


@needs_device
def test_an_all_nan_output_says_so(tmp_path: Path) -> None:
    """Issue 15 item 6: an all-NaN FAIL printed "max abs 0, mean abs 0". Each comparison says how
    many values are NaN/Inf, and on which side."""
    paths = []
    for name, value in (("ok", 1.0), ("nan", np.nan)):
        mb = ModelBuilder()
        g = mb.subgraph("main")
        x = g.input("x", [1, 8, 8, 4])
        w = g.const("w", np.full((4, 1, 1, 4), value, np.float32))
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        g.output(g.op("CONV_2D", [x, w, g.const("b", np.zeros(4, np.float32))], [1, 8, 8, 4], options=opts))
        paths.append(tmp_path / f"{name}.tflite")
        write(mb.build(), paths[-1])
    r = runner.invoke(app, ["verify", str(paths[0]), "--candidate", str(paths[1])])
    assert r.exit_code == 1 and "max abs 0" not in r.stdout
    assert (
        "rewrite  FAIL: no value is a number on both sides (NaN/Inf in 256 of 256 values: 256 in the candidate only)"
        in r.stdout
    )
    assert (
        "executor PASS at fp32: no value is a number on both sides (NaN/Inf in 256 of 256 values: 256 on both sides)"
        in r.stdout
    )
    code, out = verify_json(str(paths[1]))
    assert code == 0  # the same NaN on both sides agrees
    (o,) = out["outputs"]  # type: ignore[misc]
    assert o["executor"]["nonfinite_on_both"] == 256 and o["executor"]["values"] == 256


# -- half precision (issue 18) --------------------------------------------------------------------


@needs_device
def test_output_error_is_stated_at_the_chosen_precision(tmp_path: Path) -> None:
    """Per output, the executor's error at the precision that ran, and that error over the CPU noise."""
    from helpers import conv_model

    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    r = runner.invoke(app, ["verify", str(path), "--precision", "fp16", "--format", "json"])
    (o,) = json.loads(r.stdout)["outputs"]
    ex = o["executor"]
    assert ex["cpu_noise"] > 0 and ex["error_over_noise"] == pytest.approx(ex["max_abs_error"] / ex["cpu_noise"])
    r = runner.invoke(app, ["verify", str(path), "--precision", "fp16"])
    assert "executor PASS at fp16: max abs" in r.stdout and "x CPU noise" in r.stdout, r.stdout


def test_first_half_loss_reads_jumps_not_drift() -> None:
    """An op whose error grows a few half roundings is healthy; one whose error jumps LOSS_JUMP x
    past what it reads, to LOSS_MIN of its range or more, lost its precision; an Inf where the CPU
    has a number overflowed, and what follows an overflow is not blamed on a loss of precision."""
    from gpulint.verify.half import first_half_loss

    row = dict(op="ADD", tensor="t", values=4, overflowed=0, cpu_max_abs=1.0)
    healthy = [
        {**row, "op_index": 0, "error": 3e-4, "input_error": 0.0},
        {**row, "op_index": 1, "error": 2e-3, "input_error": 3e-4},
        {**row, "op_index": 2, "error": 0.03, "input_error": 0.01},  # large, but carried in
    ]
    assert first_half_loss(healthy) is None
    jump = {**row, "op_index": 3, "op": "SUB", "error": 0.2, "input_error": 2e-3}
    found = first_half_loss([*healthy, jump])
    assert found is not None and found["precision_loss"]["op_index"] == 3 and "overflow" not in found
    inf = {**row, "op_index": 4, "op": "EXP", "overflowed": 2, "cpu_max_abs": 4.9e8, "error": 0.0, "input_error": 0.0}
    found = first_half_loss([*healthy, jump, inf])
    assert found is not None and found["overflow"]["op_index"] == 4 and found["precision_loss"]["op_index"] == 3
    assert "beyond half's largest 65504" in found["overflow"]["reason"]
    after = {**jump, "op_index": 5, "op": "DIV", "error": 1.0}
    found = first_half_loss([*healthy, inf, after])
    assert found is not None and found["overflow"]["op_index"] == 4 and "precision_loss" not in found
    # Values wholly below half's smallest normal (6.1e-5) keep few bits: underflow, not a jump.
    tiny = {**row, "op_index": 6, "op": "MUL", "error": 0.4, "input_error": 0.0, "cpu_max_abs": 2e-6}
    found = first_half_loss([*healthy, tiny])
    assert found is not None and list(found) == ["underflow"] and "below half's smallest normal" in str(found)

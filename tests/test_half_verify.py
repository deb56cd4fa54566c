"""Issue 18, verify side: `verify --precision fp16` (F16: half storage and half arithmetic, what
phones run) against fp32-fp16 (F32_F16: half arithmetic, float accumulators) on built models, the first
op where the half path overflowed or lost its precision named from the intermediates, and the
check rules GPU701-703's patterns run on the executor: each breaks at fp16, not at fp32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import needs_opencl, opencl_device
from test_numerics_rule import hand_softmax, layernorm, lint, sum_of_squares
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import Model, write
from gpulint.model.build import ModelBuilder

runner = CliRunner()
needs_device = needs_opencl()


def dot_model(scale: float, weight: float) -> Model:
    """x [1, 8] -> MUL by `scale` -> the result twice (CONCATENATION) -> FULLY_CONNECTED whose
    rows are [w, -w], w = `weight`, bias 0.5: a dot product of large values that cancels to its
    bias. On inputs that are multiples of 1/64 every product and sum is exact in float, and every
    stored value exact in half: fp32 gives 0.5 exactly. fp32-fp16 does too: its four-product
    partial sums are halves, but those of -w are the negatives of those of w (rounding to nearest
    is symmetric), and the float sum cancels them exactly. At fp16 the whole sum runs in half."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8])
    y = g.op("MUL", [x, g.const("scale", np.array([scale], np.float32))], [1, 8], out_name="scaled")
    z = g.op("CONCATENATION", [y, y], [1, 16], options=dict(axis=1), out_name="twice")
    w = np.full((4, 8), weight)
    wt = g.const("w", np.concatenate([w, -w], axis=1).astype(np.float32))
    b = g.const("b", np.full(4, 0.5, np.float32))
    opts = dict(fused_activation_function="NONE")
    g.output(g.op("FULLY_CONNECTED", [z, wt, b], [1, 4], options=opts, out_name="dot"))
    return mb.build()


# Products 10,600 .. 12,600 (2 x 100 x 64 x the input), four of them below 65504 (F32_F16's
# partial sums: 48,000 and 45,984), six past it: F16's half sum overflows at the sixth.
OVERFLOW = dict(scale=128.0, weight=100.0)
# Products below 64 x 61 = 3904 and partial sums up to 27,000, where one half step is 16: the
# 8 products' sum loses its last bits and the cancellation leaves those, not 0.
LOSS = dict(scale=64.0, weight=61.0)
INPUTS = np.array([[57, 61, 59, 63, 55, 62, 53, 60]], np.float32) / 64


def verify_json(path: Path, inputs: Path, precision: str) -> tuple[int, dict[str, Any]]:
    r = runner.invoke(app, ["verify", str(path), "--inputs", str(inputs), "--precision", precision, "--format", "json"])
    return r.exit_code, json.loads(r.stdout)


def staged(tmp_path: Path, model: Model, x: np.ndarray) -> tuple[Path, Path]:
    path, inputs = tmp_path / "model.tflite", tmp_path / "inputs.npz"
    write(model, path)
    np.savez(inputs, x)  # arr_0: the model's one input, whatever its name
    return path, inputs


@needs_device
def test_f16_overflow_fails_and_names_the_op_f32_f16_passes(tmp_path: Path) -> None:
    """Done means: a built model where F16 goes Inf and F32_F16 does not, caught by verify with the
    op named (before: --precision fp16 stored in half and computed in float, and PASSed)."""
    path, inputs = staged(tmp_path, dot_model(**OVERFLOW), INPUTS)  # type: ignore[arg-type]
    code, out = verify_json(path, inputs, "fp32-fp16")
    assert (code, out["status"], out["half_precision"]) == (0, "PASS", None), out["outputs"]
    assert out["outputs"][0]["max_abs_error"] == 0.0
    code, out = verify_json(path, inputs, "fp16")
    assert (code, out["status"], out["precision"]) == (1, "FAIL", "fp16")
    assert out["outputs"][0]["nonfinite_in_candidate"] == 4
    h = out["half_precision"]
    assert (h["op"], h["op_index"], h["tensor"]) == ("FULLY_CONNECTED", 2, "dot"), h
    assert h["overflow"]["nonfinite"] == 4 and "inside the op's arithmetic" in h["overflow"]["reason"]
    assert "precision_loss" not in h  # the ops before it are exact
    text = runner.invoke(app, ["verify", str(path), "--inputs", str(inputs), "--precision", "fp16"])
    assert text.exit_code == 1
    assert "in half precision (fp16, run 0), first op that overflowed: op 2 FULLY_CONNECTED -> dot" in text.stdout


@needs_device
def test_f16_precision_loss_fails_and_names_the_op_f32_f16_passes(tmp_path: Path) -> None:
    """No Inf, but the half sum of large products loses the bits the cancellation leaves."""
    path, inputs = staged(tmp_path, dot_model(**LOSS), INPUTS)  # type: ignore[arg-type]
    code, out = verify_json(path, inputs, "fp32-fp16")
    assert (code, out["status"]) == (0, "PASS"), out["outputs"]
    code, out = verify_json(path, inputs, "fp16")
    assert (code, out["status"]) == (1, "FAIL")
    o = out["outputs"][0]
    assert o["nonfinite_in_candidate"] == 0 and o["max_abs_error"] > 1
    h = out["half_precision"]
    assert (h["op"], h["tensor"]) == ("FULLY_CONNECTED", "dot") and "overflow" not in h, h
    assert h["precision_loss"]["error"] > 1 and h["precision_loss"]["input_error"] == 0.0
    text = runner.invoke(app, ["verify", str(path), "--inputs", str(inputs), "--precision", "fp16"])
    assert "first op that lost its precision: op 2 FULLY_CONNECTED -> dot" in text.stdout


@needs_device
def test_f32_f16_products_in_half_overflow_and_the_op_is_named(tmp_path: Path) -> None:
    """F32_F16 sums a conv's products in float only four at a time: products of 512 x 512 pass
    65504 in its half partial sums, as they do on a phone (before, fp32-fp16 computed them in
    float and gave 0.5 exactly). fp32 stays exact."""
    path, inputs = staged(tmp_path, dot_model(scale=512.0, weight=512.0), INPUTS)
    code, out = verify_json(path, inputs, "fp32")
    assert (code, out["status"], out["outputs"][0]["max_abs_error"]) == (0, "PASS", 0.0), out["outputs"]
    code, out = verify_json(path, inputs, "fp32-fp16")
    assert (code, out["status"]) == (1, "FAIL")
    assert out["outputs"][0]["nonfinite_in_candidate"] == 4
    h = out["half_precision"]
    assert (h["op"], h["op_index"], h["tensor"]) == ("FULLY_CONNECTED", 2, "dot"), h
    assert "inside the op's arithmetic" in h["overflow"]["reason"]


# -- the check rules' patterns on the executor -----------------------------------------------------

RNG = np.random.default_rng(0)
RULE_CASES: dict[str, tuple[Model, np.ndarray, str]] = {
    # GPU701: a SUM of 1024 squares of values of RMS 20 (387,866) is Inf in half.
    "GPU701": (sum_of_squares(), (RNG.standard_normal((1, 1024)) * 20).astype(np.float32), "SUM"),
    # GPU702: exp of logits up to 20 (4.9e8) with no maximum subtracted.
    "GPU702": (hand_softmax(shift=False), np.linspace(0, 20, 64, dtype=np.float32)[None], "EXP"),
    # GPU703: a LayerNorm of a near-zero row: the squares (1e-10) underflow, the variance and eps
    # 1e-12 are 0 in half, 1/sqrt(0) = Inf (the CPU's 1.1e5 is beyond half too).
    "GPU703": (layernorm(1e-12), (RNG.standard_normal((1, 8, 64)) * 1e-5).astype(np.float32), "RSQRT"),
}


@needs_device
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("code", list(RULE_CASES))
def test_rule_patterns_break_at_fp16_not_at_fp32(code: str, tmp_path: Path) -> None:
    """Each GPU70x pattern, where `check` warns, run on the executor: fp32 within 1e-5 (of the output's
    range) of the CPU interpreter, fp16 NaN/Inf; and verify --precision fp16 FAILs naming the op that
    overflowed."""
    from gpulint import reference
    from gpulint.executor import Executor

    model, x, first = RULE_CASES[code]
    assert code in [f.code for f in lint(model)]
    device, _ = opencl_device()
    path, inputs = staged(tmp_path, model, x)
    (want,) = reference.run(path, [x])
    (f32,) = Executor(model, device, "fp32").run([x])
    (f16,) = Executor(model, device, "fp16").run([x])
    scale = float(np.abs(want).max())
    assert np.isfinite(f32).all() and float(np.abs(f32 - want).max()) <= 1e-5 * scale, code
    assert not np.isfinite(f16).all(), code
    exit_code, out = verify_json(path, inputs, "fp16")
    assert exit_code == 1 and out["outputs"][0]["nonfinite_in_candidate"] > 0
    h = out["half_precision"]
    assert h["overflow"]["op"] == first and h["op"] == first, h
    if code == "GPU703":  # what made the variance 0: its squares, below half's smallest normal
        assert h["underflow"]["op"] == "SQUARED_DIFFERENCE", h

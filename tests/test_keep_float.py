"""Issue 39's fallback: what is still past half's range after the half-precision passes, and the two ways
to keep it in float (gpulint.passes.keep_float): the whole graph in float on either runtime, or the ops on
the CPU, with the classic delegate's cost in GPU ops (its default one partition)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.fix import fix_model, select_passes
from gpulint.model import Model, write
from gpulint.model.build import ModelBuilder
from gpulint.passes import PassOptions
from gpulint.passes.keep_float import cpu_cost, first_overflows, overflows

runner = CliRunner()
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models" / "tfconv"


def logits_past_half() -> Model:
    """x * x (up to 9e4 for |x| <= 300), scaled by 2 (1.8e5), SOFTMAX, ADD x: the logits themselves past half."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 64])
    sq = g.op("MUL", [x, x], [1, 64], out_name="sq")
    logits = g.op("MUL", [sq, g.const("two", np.array([2.0], np.float32))], [1, 64], out_name="logits")
    p = g.op("SOFTMAX", [logits], [1, 64], options=dict(beta=1.0), out_name="p")
    g.output(g.op("ADD", [p, x], [1, 64], out_name="y"))
    return mb.build()


def _x(amplitude: float) -> list[np.ndarray]:
    return [np.random.default_rng(0).uniform(-amplitude, amplitude, (1, 64)).astype(np.float32)]


def test_the_first_op_past_the_range_and_what_must_stay_with_it() -> None:
    model = logits_past_half()
    found = overflows(model, _x(300))
    assert len(found) == 1, [o.describe() for o in found]
    o = found[0]
    assert (o.op, o.name, o.tensor) == (0, "MUL", "sq") and 65504 < o.value <= 9e4
    assert o.names == ["MUL", "MUL", "SOFTMAX"]  # the scale makes 1.8e5, SOFTMAX reads it; ADD reads [0, 1]
    assert o.gpu_ops == (4, 1, 4)  # one GPU partition: the ADD alone once the three are the CPU's
    words = o.describe()
    assert "is_precision_loss_allowed = 0" in words and "precision FP32" in words
    assert "1 of 4 ops on the GPU instead of 4" in words and "no per-op option" in words
    assert overflows(model, _x(30)) == []  # 900 and 1800: in range


def test_an_op_whose_input_is_past_the_range_is_not_a_first() -> None:
    model = logits_past_half()
    tensors = {"x": _x(300)[0], "sq": np.full((1, 64), 9e4, np.float32), "logits": np.full((1, 64), np.inf, np.float32)}
    assert [o.op for o in first_overflows(model, tensors)] == [0]


def test_no_cost_where_the_delegate_does_not_take_the_ops() -> None:
    assert cpu_cost(logits_past_half(), [99]) is None


def test_fix_says_what_is_left(tmp_path: Path) -> None:
    path, npz = tmp_path / "m.tflite", tmp_path / "x.npz"
    write(logits_past_half(), path)
    np.savez(npz, *_x(300))
    r = runner.invoke(app, ["fix", str(path), "--unsafe-fixes", "--inputs", str(npz), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "keep in float: MUL (op 0) reaches" in r.stdout and "SOFTMAX (op 2)" in r.stdout, r.stdout
    r = runner.invoke(app, ["fix", str(path), "--dry-run"])  # no calibration inputs: nothing said
    assert "keep in float" not in r.stdout
    _, report = fix_model(path, logits_past_half(), select_passes(None, False), PassOptions(), inputs=_x(300))
    assert report.keep_float == []  # only with the half-precision passes asked for


def test_transformer_block_attention_is_left_in_float(tmp_path: Path) -> None:
    """The TF corpus's post-norm block on inputs in +-300: scaled-variance takes its first LayerNorm and
    scale-logits its Q.K^T (4.6e5); the scaled logits are past half themselves (1.3e5), which fix names with the
    cost of each choice."""
    model = CORPUS / "transformer_block_32x48_f32.tflite"
    if not model.exists():
        pytest.skip(f"no shared corpus model {model}")
    npz = tmp_path / "x.npz"
    np.savez(npz, np.random.default_rng(0).uniform(-300, 300, (1, 32, 48)).astype(np.float32))
    r = runner.invoke(app, ["fix", str(model), "--unsafe-fixes", "--inputs", str(npz), "--dry-run"])
    assert r.exit_code == 0, r.output
    kept = [line for line in r.stdout.splitlines() if "keep in float:" in line]
    assert len(kept) == 1 and "BATCH_MATMUL (op 7) reaches 1.34e+05" in kept[0], r.stdout
    assert "and SOFTMAX (op 8) after it reads such values" in kept[0]
    # --unsafe-fixes runs tile-broadcast too, whose 2 TILEs (GPU807, ops 23 and 37) make it 46 ops
    assert "34 of 46 ops on the GPU instead of 46" in kept[0]

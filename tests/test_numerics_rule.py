"""GPU7xx: half-precision overflow patterns. Each pattern: a model where the rule fires, near misses
where it must not, and numpy showing the pattern breaks in F16 and not in F32, step by step: every
op's result rounded to half (as the delegate's F16 kernels compute and store it; reductions
accumulate in float and store in half, tasks/reduce.cc) against float32, both against float64."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import corpus_params

from gpulint.check import Settings, check_file
from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Finding, Linter

TARGETS = pack.load_targets()
Array = np.ndarray


def lint(model: Model, target: str = "classic") -> list[Finding]:
    return [f for f in Linter(TARGETS[target]).lint(model).findings if f.code.startswith("GPU7")]


def single(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def axis(g: SubgraphBuilder, a: int) -> int:
    return g.const(f"axis{len(g.sg.tensors)}", np.array([a], np.int32))


def keep(g: SubgraphBuilder, op: str, x: int, shape: list[int], a: int = -1) -> int:
    return g.op(op, [x, axis(g, a)], shape, options=dict(keep_dims=True))


def rel_error(got: Array, want: Array) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def breaks_in_f16_only(step: Callable[[type], Array], x: Array) -> None:
    """`step(dtype)` evaluates the model with every op's result cast to dtype."""
    want = step(np.float64)
    assert rel_error(step(np.float32), want) < 1e-5
    assert rel_error(step(np.float16), want) > 1e-1


# -- GPU701: a sum (or mean) of squares ------------------------------------------------------------


def sum_of_squares(n: int = 1024, bounded: bool = False, reducer: str = "SUM") -> Model:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, n])
        if bounded:
            x = g.op("TANH", [x], [1, n])
        sq = g.op("MUL", [x, x], [1, n], out_name="sq")
        return keep(g, reducer, sq, [1, 1])

    return single(build)


def test_gpu701_fires_on_a_sum_of_unscaled_squares() -> None:
    (f,) = lint(sum_of_squares())
    assert (f.code, f.op, f.op_index, f.tensors) == ("GPU701", "MUL", 0, ["x"])
    assert [f.code for f in lint(sum_of_squares(reducer="MEAN"))] == ["GPU701"]


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(sum_of_squares(bounded=True), id="after-tanh"),  # 1024 * 1 < 65504
        pytest.param(sum_of_squares(n=64), id="few-values"),  # below MIN_REDUCED
    ],
)
def test_gpu701_near_misses(model: Model) -> None:
    assert lint(model) == []


def test_gpu701_not_for_the_coreml_target() -> None:
    assert lint(sum_of_squares(), "coreml") == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow is the point
def test_gpu701_breaks_in_f16_not_in_f32() -> None:
    x = np.random.default_rng(0).standard_normal(1024) * 20  # an unnormalised dense output: RMS 20

    def step(dt: type) -> Array:
        sq = (x.astype(dt) * x.astype(dt)).astype(dt)  # elementwise.cc: computed and stored in half
        return np.array(np.sum(sq, dtype=np.float64 if dt is np.float64 else np.float32)).astype(dt)

    breaks_in_f16_only(step, x)
    assert np.isinf(step(np.float16))
    big = np.full(4, 300.0)  # MEAN: the square itself is Inf above 255.9
    assert np.isinf((big.astype(np.float16) * big.astype(np.float16)).astype(np.float16)).all()


# -- GPU702: exp with no max subtracted ------------------------------------------------------------


def hand_softmax(shift: bool, bounded: bool = False) -> Model:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("logits", [1, 64])
        if bounded:
            x = g.op("TANH", [x], [1, 64], out_name="t")
        if shift:
            m = keep(g, "REDUCE_MAX", x, [1, 1])
            x = g.op("SUB", [x, m], [1, 64], out_name="shifted")
        e = g.op("EXP", [x], [1, 64], out_name="e")
        s = keep(g, "SUM", e, [1, 1])
        return g.op("DIV", [e, s], [1, 64])

    return single(build)


def test_gpu702_fires_on_exp_without_max_subtraction() -> None:
    (f,) = lint(hand_softmax(shift=False))
    assert (f.code, f.op, f.tensors) == ("GPU702", "EXP", ["logits"])


@pytest.mark.parametrize("shift,bounded", [(True, False), (False, True)], ids=["max-subtracted", "after-tanh"])
def test_gpu702_near_misses(shift: bool, bounded: bool) -> None:
    assert lint(hand_softmax(shift, bounded)) == []


def test_gpu702_softmax_op_is_not_flagged() -> None:
    # The delegate's SOFTMAX computes in float and subtracts the maximum (tasks/softmax1x1.cc).
    assert lint(single(lambda g: g.op("SOFTMAX", [g.input("x", [1, 64])], [1, 64], options=dict(beta=1.0)))) == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow is the point
def test_gpu702_breaks_in_f16_not_in_f32() -> None:
    x = np.linspace(0.0, 20.0, 64)  # logits up to 20: exp(20) = 4.9e8 > 65504

    def step(dt: type) -> Array:
        e = np.exp(x.astype(dt)).astype(dt)
        s = np.array(np.sum(e, dtype=np.float64 if dt is np.float64 else np.float32)).astype(dt)
        return (e / s).astype(dt)

    breaks_in_f16_only(step, x)


# -- GPU703: a division by a variance that is 0 in half ---------------------------------------------


def layernorm(eps: float, fused_form: bool = False) -> Model:
    """TFLite's unfused LayerNorm (SQUARED_DIFFERENCE, as Keras converts), or the chain the OpenCL
    backend fuses into a float kernel (MEAN -> SUB -> SQUARE -> MEAN -> ADD -> RSQRT -> MUL)."""

    def build(g: SubgraphBuilder) -> int:
        shape, row = [1, 8, 64], [1, 8, 1]
        x = g.input("x", shape)
        mean = keep(g, "MEAN", x, row)
        d = g.op("SUB", [x, mean], shape, out_name="d")
        sq = g.op("SQUARE", [d], shape) if fused_form else g.op("SQUARED_DIFFERENCE", [x, mean], shape)
        var = keep(g, "MEAN", sq, row)
        v = g.op("ADD", [var, g.const("eps", np.array(eps, np.float32))], row, out_name="var_eps")
        r = g.op("RSQRT", [v], row)
        return g.op("MUL", [d, r], shape)

    return single(build)


def test_gpu703_fires_on_a_tiny_eps() -> None:
    (f,) = lint(layernorm(1e-12))
    assert (f.code, f.op, f.tensors) == ("GPU703", "RSQRT", ["var_eps"])
    assert "eps 1e-12 (0 in half)" in f.message
    assert "a subnormal in half" in lint(layernorm(1e-6))[0].message


@pytest.mark.parametrize(
    "model",
    [pytest.param(layernorm(1e-3), id="eps-1e-3"), pytest.param(layernorm(1e-12, fused_form=True), id="fused")],
)
def test_gpu703_near_misses(model: Model) -> None:
    assert lint(model) == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflow is the point
def test_gpu703_breaks_in_f16_not_in_f32() -> None:
    x = np.random.default_rng(1).standard_normal(64) * 1e-5  # a near-zero row (a padded position)

    def step(dt: type) -> Array:
        acc = np.float64 if dt is np.float64 else np.float32
        xs: Array = x.astype(dt)
        mean: Array = np.array(np.mean(xs, dtype=acc)).astype(dt)
        sq = ((xs - mean).astype(dt) ** 2).astype(dt)  # deviations below 2.4e-4 square to 0 in half
        var: Array = np.array(np.mean(sq, dtype=acc)).astype(dt)
        r = (1 / np.sqrt((var + dt(1e-12)).astype(dt))).astype(dt)  # half(1e-12) is 0
        out: Array = ((xs - mean).astype(dt) * r).astype(dt)
        return out

    breaks_in_f16_only(step, x)
    assert not np.isfinite(step(np.float16)).any()


# -- the corpus -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_params())
def test_corpus_numerics_findings(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = check_file(str(path), Settings())
    found = [f for f in r.findings if f.code.startswith("GPU7")]
    with capsys.disabled():
        print(f"\n{path.name}: {len(found)} GPU7xx findings " + str(sorted({f.code for f in found})))
    # A model is not drowned: at most one finding per norm/softmax, never one per op.
    assert len(found) <= max(4, len(r.ops) // 10)
    if path.name.startswith("transformer_block"):
        # Keras' LayerNorm (eps 1e-3, over 48 channels) and SOFTMAX are safe in half.
        assert found == []

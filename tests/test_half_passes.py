"""Issue 39: `gpulint fix` passes for half precision (stable-softmax, scaled-variance,
split-reduction). Each is proven equal in float on the LiteRT CPU interpreter by fix's own proof
(compare.REWRITE_PROOF: atol 10 x the CPU's noise, at least 1e-5, rtol 1e-5), and its purpose on
models made with the project's builder: on inputs that reach the pattern's limits the original
FAILs `verify --precision fp16` (NaN/Inf or past the tolerance) and the rewritten model PASSes,
on the executor (--engine opencl) and on LiteRT's real GPU accelerator (--engine litert-gpu)
where one can run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import needs_accelerator, needs_opencl
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.fix import fix_model, select_passes
from gpulint.model import Model, read, write
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.passes import PassOptions, preserved, registry

runner = CliRunner()
HALF = ("stable-softmax", "scaled-variance", "split-reduction", "scale-logits")


def _axis(g: SubgraphBuilder, a: int | list[int]) -> int:
    return g.const(f"axis{len(g.sg.tensors)}", np.array(np.atleast_1d(a), np.int32))


def _reduce(g: SubgraphBuilder, op: str, x: int, shape: list[int], a: int | list[int] = -1, keep: bool = True) -> int:
    return g.op(op, [x, _axis(g, a)], shape, options=dict(keep_dims=keep))


def _model(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def softmax(log: bool = False, keep: bool = True) -> Model:
    """EXP -> SUM -> DIV (softmax), or x - LOG(SUM(EXP(x))) (log-softmax), over 256 logits."""

    def build(g: SubgraphBuilder) -> int:
        shape, row = [1, 8, 256], [1, 8, 1] if keep else [1, 8]
        x = g.input("logits", shape)
        e = g.op("EXP", [x], shape, out_name="e")
        s = _reduce(g, "SUM", e, row, keep=keep)
        if not log:
            return g.op("DIV", [e, s], shape, out_name="p")
        lse = g.op("LOG", [s], row, out_name="lse")
        if not keep:
            lse = g.op("RESHAPE", [lse, g.const("rs", np.array([1, 8, 1], np.int32))], [1, 8, 1])
        return g.op("SUB", [x, lse], shape, out_name="logp")

    return _model(build)


def layernorm(eps: float = 1e-5) -> Model:
    """Keras' unfused LayerNorm over 768 channels: SQUARED_DIFFERENCE -> MEAN -> ADD -> RSQRT -> MUL."""

    def build(g: SubgraphBuilder) -> int:
        shape, row = [1, 16, 768], [1, 16, 1]
        x = g.input("x", shape)
        mean = _reduce(g, "MEAN", x, row)
        d = g.op("SUB", [x, mean], shape, out_name="d")
        var = _reduce(g, "MEAN", g.op("SQUARED_DIFFERENCE", [x, mean], shape), row)
        v = g.op("ADD", [var, g.const("eps", np.array(eps, np.float32))], row, out_name="var_eps")
        return g.op("MUL", [d, g.op("RSQRT", [v], row)], shape, out_name="y")

    return _model(build)


def rmsnorm() -> Model:
    """MUL(x, x) -> MEAN -> ADD 1e-6 -> RSQRT -> MUL(x, .) over 768 channels."""

    def build(g: SubgraphBuilder) -> int:
        shape, row = [1, 16, 768], [1, 16, 1]
        x = g.input("x", shape)
        var = _reduce(g, "MEAN", g.op("MUL", [x, x], shape), row)
        v = g.op("ADD", [var, g.const("eps", np.array(1e-6, np.float32))], row)
        return g.op("MUL", [x, g.op("RSQRT", [v], row)], shape, out_name="y")

    return _model(build)


def l2norm() -> Model:
    """SQUARE -> SUM -> SQRT -> DIV over 1024 values: an L2 norm written by hand."""

    def build(g: SubgraphBuilder) -> int:
        shape, row = [1, 4, 1024], [1, 4, 1]
        x = g.input("x", shape)
        n = g.op("SQRT", [_reduce(g, "SUM", g.op("SQUARE", [x], shape), row)], row)
        return g.op("DIV", [x, n], shape, out_name="y")

    return _model(build)


def sum_mean(op: str = "MUL") -> Model:
    """A mean written out: SUM over 4096 values, then MUL by 1/4096 (or DIV by 4096)."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4096])
        s = _reduce(g, "SUM", x, [1, 4, 1], 2)
        c = 1 / 4096 if op == "MUL" else 4096.0
        return g.op(op, [s, g.const("c", np.array([c], np.float32))], [1, 4, 1], out_name="mean")

    return _model(build)


def pooled_sum() -> Model:
    """SUM over H and W of [1, 64, 64, 8] (4096 values), DIV by 4096: a hand-written global pool."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 64, 64, 8])
        s = _reduce(g, "SUM", x, [1, 1, 1, 8], [1, 2])
        return g.op("DIV", [s, g.const("n", np.array([4096.0], np.float32))], [1, 1, 1, 8], out_name="pooled")

    return _model(build)


def attention_logits(op: str = "MUL") -> Model:
    """Self-attention's logits as converters write them: BATCH_MATMUL(x, x^T) over 12 features, then MUL by
    1/sqrt(12) (or DIV by sqrt(12)), then SOFTMAX."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 32, 12])
        kt = g.op("TRANSPOSE", [x, g.const("perm", np.array([0, 2, 1], np.int32))], [1, 12, 32], out_name="kt")
        s = g.op("BATCH_MATMUL", [x, kt], [1, 32, 32], options=dict(adj_x=False, adj_y=False), out_name="qk")
        c = 1 / np.sqrt(12) if op == "MUL" else np.sqrt(12)
        logits = g.op(op, [s, g.const("c", np.array([c], np.float32))], [1, 32, 32], out_name="logits")
        return g.op("SOFTMAX", [logits], [1, 32, 32], options=dict(beta=1.0), out_name="p")

    return _model(build)


def _uniform(shape: list[int], lo: float, hi: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def _flat_rows(shape: list[int], amplitude: float) -> np.ndarray:
    """Small values, every other row constant (padding): its variance is 0."""
    x = _uniform(shape, -amplitude, amplitude, 2)
    x[0, ::2] = 0.25
    return x


# name: (model, pass, inputs that reach the pattern's limits)
CASES: dict[str, tuple[Callable[[], Model], str, Callable[[], np.ndarray]]] = {
    "softmax": (softmax, "stable-softmax", lambda: _uniform([1, 8, 256], 0, 20)),  # logits up to 20
    "log-softmax": (lambda: softmax(log=True), "stable-softmax", lambda: _uniform([1, 8, 256], 0, 20)),
    "layernorm": (layernorm, "scaled-variance", lambda: _uniform([1, 16, 768], -300, 300)),  # up to 300
    "rmsnorm": (rmsnorm, "scaled-variance", lambda: _uniform([1, 16, 768], -300, 300)),
    "l2norm": (l2norm, "scaled-variance", lambda: _uniform([1, 4, 1024], -30, 30)),
    "layernorm-eps-1e-12": (lambda: layernorm(1e-12), "scaled-variance", lambda: _flat_rows([1, 16, 768], 0.004)),
    "sum-times-1/n": (sum_mean, "split-reduction", lambda: _uniform([1, 4, 4096], 0, 100)),
    "sum-over-hw-div-n": (pooled_sum, "split-reduction", lambda: _uniform([1, 64, 64, 8], 0, 100)),
    # Q.K^T up to 1.2e5, the scaled logits 3.5e4
    "attention-logits": (attention_logits, "scale-logits", lambda: _uniform([1, 32, 12], -100, 100)),
}


def _fix(tmp_path: Path, case: str) -> tuple[Path, Path, Path, Any]:
    """The original, its inputs and the rewritten model, written; and fix's report."""
    build, name, x = CASES[case]
    model, inputs = build(), x()
    path, npz, fixed = tmp_path / "original.tflite", tmp_path / "inputs.npz", tmp_path / "fixed.tflite"
    write(model, path)
    np.savez(npz, inputs)
    out, report = fix_model(path, model, select_passes([name], False), PassOptions(), inputs=[inputs])
    write(out, fixed)
    return path, npz, fixed, report


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_pass_is_proven_equal_in_float(tmp_path: Path, case: str) -> None:
    """fix's proof on the CPU interpreter, on the calibration inputs: within fp32 rounding."""
    path, _, fixed, report = _fix(tmp_path, case)
    assert [a.name for a in report.applied] == [CASES[case][1]], (report.skipped, report.rejected)
    assert report.verified and not report.rejected
    ref = np.abs(np.load(tmp_path / "inputs.npz")["arr_0"]).max()
    assert max(report.max_error) <= 1e-4 * max(1.0, float(ref)), report.max_error
    assert read(fixed).subgraphs[0].outputs  # the interface kept: same output names
    names = [t.name for t in read(fixed).subgraphs[0].tensors]
    assert all(read(path).subgraphs[0].tensors[t].name in names for t in read(path).subgraphs[0].outputs)


def test_stable_softmax_rewrites(tmp_path: Path) -> None:
    for model in (softmax(), softmax(log=True), softmax(log=True, keep=False)):
        out, report = _run(model, "stable-softmax")
        assert len(report.changes) == 1, report.skipped
        ops = [out.op_name(op) for op in out.subgraphs[0].operators]
        assert ops[:3] == ["REDUCE_MAX", "SUB", "EXP"] or ops[:4] == ["REDUCE_MAX", "SUB", "REDUCE_MAX", "EXP"]
        again = registry()["stable-softmax"].run(out, PassOptions())
        assert again.changes == []  # the shift is found: a fixed point


def _run(model: Model, name: str, options: PassOptions | None = None) -> tuple[Model, Any]:
    result = registry()[name].run(model, options or PassOptions())
    return model, result


def test_stable_softmax_leaves_what_another_reader_would_see() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("logits", [1, 64])
        e = g.op("EXP", [x], [1, 64], out_name="e")
        s = _reduce(g, "SUM", e, [1, 1])
        return g.op("ADD", [g.op("DIV", [e, s], [1, 64]), e], [1, 64])  # e read by an ADD too

    _, result = _run(_model(build), "stable-softmax")
    assert result.changes == [] and "read by ADD" in result.skipped[0]


def test_scaled_variance_needs_bounds_or_calibration() -> None:
    _, result = _run(layernorm(), "scaled-variance")
    assert result.changes == [] and "give calibration inputs (gpulint fix --inputs X.npz)" in result.skipped[0]
    calibrated = PassOptions(calibration=(("squared_difference_2", 600.0**2), ("mean_3", 3e4)))
    out, result = _run(layernorm(), "scaled-variance", calibrated)
    assert "x2^-4" in result.changes[0] and "eps x2^-8" in result.changes[0], result.changes
    assert _run(out, "scaled-variance", calibrated)[1].changes == []  # scaled already: a fixed point


def test_scaled_variance_uses_the_graphs_bounds() -> None:
    """x * 100 after TANH: |x| <= 100, squares up to 1e4, past 4096: k = 1 from the graph alone."""

    def build(g: SubgraphBuilder) -> int:
        shape, row = [1, 4, 1024], [1, 4, 1]
        t = g.op("TANH", [g.input("x", shape)], shape)
        x = g.op("MUL", [t, g.const("k", np.array([100.0], np.float32))], shape)
        return g.op("RSQRT", [_reduce(g, "MEAN", g.op("MUL", [x, x], shape), row)], row)

    _, result = _run(_model(build), "scaled-variance")
    assert "x2^-1" in result.changes[0] and "from the graph's own bounds" in result.changes[0]


def test_split_reduction_only_where_it_helps() -> None:
    def plain(g: SubgraphBuilder) -> int:
        return _reduce(g, "SUM", g.input("x", [1, 4096]), [1, 1])

    def gaps(g: SubgraphBuilder) -> int:
        s = _reduce(g, "SUM", g.input("x", [64, 4, 64]), [1, 4, 1], [0, 2])
        return g.op("MUL", [s, g.const("c", np.array([1 / 4096], np.float32))], [1, 4, 1])

    assert _run(_model(plain), "split-reduction")[1].changes == []  # the same total either way
    _, result = _run(_model(gaps), "split-reduction")
    assert result.changes == [] and "not consecutive" in result.skipped[0]
    out, result = _run(sum_mean(), "split-reduction")
    assert "split into 64 groups of 64, each scaled by 0.000244" in result.changes[0]
    assert [out.op_name(op) for op in out.subgraphs[0].operators] == ["RESHAPE", "SUM", "MUL", "SUM", "RESHAPE"]
    assert _run(out, "split-reduction")[1].changes == []


def test_scale_logits_rewrites() -> None:
    for op in ("MUL", "DIV"):
        out, result = _run(attention_logits(op), "scale-logits")
        assert len(result.changes) == 1 and "x0.289" in result.changes[0], result.changes
        ops = [out.op_name(o) for o in out.subgraphs[0].operators]
        assert ops == ["TRANSPOSE", "MUL", "BATCH_MATMUL", "SOFTMAX"], ops
        sg = out.subgraphs[0]
        assert sg.tensors[sg.operators[2].outputs[0]].name == "logits"  # the scale's output, kept
        assert registry()["scale-logits"].run(out, PassOptions()).changes == []  # a fixed point


def test_scale_logits_leaves_a_product_another_op_reads() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 4])
        kt = g.op("TRANSPOSE", [x, g.const("perm", np.array([0, 2, 1], np.int32))], [1, 4, 8])
        s = g.op("BATCH_MATMUL", [x, kt], [1, 8, 8], options=dict(adj_x=False, adj_y=False))
        scaled = g.op("MUL", [s, g.const("c", np.array([0.5], np.float32))], [1, 8, 8])
        return g.op("ADD", [scaled, s], [1, 8, 8])

    assert _run(_model(build), "scale-logits")[1].changes == []


def masked_mean() -> Model:
    """(x * mask) summed over 4096 positions, DIV by the mask's own SUM: a masked mean as litert-torch
    writes it, the divisor computed after the SUM it divides."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x, m = g.input("x", [1, 4096, 8]), g.input("mask", [1, 4096, 1])
    s = _reduce(g, "SUM", g.op("MUL", [x, m], [1, 4096, 8]), [1, 8], 1, keep=False)
    count = _reduce(g, "SUM", m, [1, 1], 1, keep=False)
    g.output(g.op("DIV", [s, count], [1, 8], out_name="mean"))
    return mb.build()


def test_split_reduction_divides_by_a_runtime_divisor(tmp_path: Path) -> None:
    path = tmp_path / "masked_mean.tflite"
    write(masked_mean(), path)
    r = np.random.default_rng(0)
    mask = (r.uniform(0, 1, (1, 4096, 1)) < 0.75).astype(np.float32)
    inputs = [r.uniform(0, 255, (1, 4096, 8)).astype(np.float32), mask]
    out, report = fix_model(path, read(path), select_passes(["split-reduction"], False), PassOptions(), inputs=inputs)
    assert report.verified and not report.rejected, report.skipped
    words = report.applied[0].changes[0]
    assert "each divided by" in words and "split into 128 groups of 32" in words, words
    assert max(report.max_error) <= 1e-4 * 255, report.max_error
    ops = [out.op_name(op) for op in out.subgraphs[0].operators]
    # the mask's SUM first: the divisor's RESHAPE reads it
    assert ops == ["MUL", "SUM", "RESHAPE", "SUM", "RESHAPE", "DIV", "SUM", "RESHAPE"], ops
    assert registry()["split-reduction"].run(out, PassOptions()).changes == []  # a fixed point


def test_half_passes_are_opt_in_and_say_what_they_preserve(tmp_path: Path) -> None:
    passes = registry()
    for name in HALF:
        assert passes[name].safe and passes[name].opt_in
        assert "within fp32 rounding" in preserved(passes[name])
    assert not {p.name for p in select_passes(None, False)} & set(HALF)  # not by default
    assert set(HALF) <= {p.name for p in select_passes(None, True)}  # --unsafe-fixes runs them
    path, out = tmp_path / "softmax.tflite", tmp_path / "fixed.tflite"
    write(softmax(), path)
    r = runner.invoke(app, ["fix", str(path), "--dry-run"])
    assert "1 opt-in pass(es) for half precision would apply: stable-softmax (--passes NAME)" in r.stdout
    r = runner.invoke(app, ["fix", str(path), "-o", str(out), "--passes", "stable-softmax"])  # alone, no flag
    assert r.exit_code == 0 and "stable-softmax: subgraph 0: EXP (op 2)" in r.stdout, r.output
    r = runner.invoke(app, ["fix", "--help"], env={"COLUMNS": "300"})
    for name in HALF:
        assert name in r.stdout
    assert "exact in exact arithmetic" in r.stdout and "--inputs" in r.stdout


def test_fix_inputs_bad_file(tmp_path: Path) -> None:
    path, bad = tmp_path / "ln.tflite", tmp_path / "bad.npz"
    write(layernorm(), path)
    np.savez(bad, np.zeros((1, 2), np.float32))
    r = runner.invoke(app, ["fix", str(path), "--dry-run", "--passes", "scaled-variance", "--inputs", str(bad)])
    assert r.exit_code == 2 and "the model takes [1, 16, 768]" in r.output


@pytest.mark.parametrize(
    ("code", "name"), [("GPU701", "scaled-variance"), ("GPU702", "stable-softmax"), ("GPU703", "scaled-variance")]
)
def test_rules_name_the_pass(code: str, name: str) -> None:
    r = runner.invoke(app, ["rule", code])
    assert f"gpulint fix --passes {name} (safe)" in r.stdout


# -- the purpose: fp16 FAIL before, PASS after, on both runtimes ------------------------------------


def _verify(path: Path, candidate: Path, npz: Path, engine: str) -> dict[str, Any]:
    args = ["verify", str(path), "--candidate", str(candidate), "--inputs", str(npz), "--precision", "fp16"]
    r = runner.invoke(app, [*args, "--engine", engine, "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def _error(out: dict[str, Any]) -> str:
    o = out["outputs"][0]
    if o["nonfinite_in_candidate"]:
        return f"{o['nonfinite_in_candidate']} NaN/Inf"
    return f"max abs {o['max_abs_error']:.3g} (atol {o['atol']:.3g})"


ENGINES = [
    pytest.param("opencl", marks=needs_opencl()),
    pytest.param("litert-gpu", marks=needs_accelerator()),
]
# LiteRT's accelerator gives 1.0 for a constant row of this LayerNorm (eps 1e-12) at fp32 too, the
# original and the rewrite alike: its own arithmetic, not half precision's, which no pass here changes.
NOT_HALF = {("layernorm-eps-1e-12", "litert-gpu")}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_fp16_fails_before_and_passes_after(
    tmp_path: Path, case: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if (case, engine) in NOT_HALF:
        pytest.skip("the accelerator is wrong on this model at fp32 as well (not a half-precision failure)")
    path, npz, fixed, _ = _fix(tmp_path, case)
    before = _verify(path, path, npz, engine)
    after = _verify(path, fixed, npz, engine)
    with capsys.disabled():
        print(f"\n{case} on {engine}: fp16 before {_error(before)}, after {_error(after)}")
    assert before["status"] == "FAIL", before["outputs"][0]["reason"]
    assert after["status"] == "PASS", after["outputs"][0]["reason"]


# -- verify --bisect in half: the first op past half's range, with the value that was ------------------------


@pytest.mark.parametrize("engine", [pytest.param("opencl", marks=needs_opencl())])
def test_bisect_names_the_first_op_past_half_and_its_value(tmp_path: Path, engine: str) -> None:
    path, npz = tmp_path / "attention.tflite", tmp_path / "x.npz"
    write(attention_logits(), path)
    np.savez(npz, _uniform([1, 32, 12], -100, 100))
    args = ["verify", str(path), "--inputs", str(npz), "--precision", "fp16", "--bisect", "--engine", engine]
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    line = next(s for s in r.stdout.splitlines() if "first op to make a NaN/Inf" in s)
    assert "op 1 BATCH_MATMUL -> qk" in line and "past half's largest 65504" in line, line
    value = float(line.split("the CPU's values reach ")[1].split(",")[0])
    assert 65504 < value <= 12 * 100**2  # 12 products of values up to 100
    r = runner.invoke(app, [*args, "--format", "json"])
    b = json.loads(r.stdout)["bisect"]
    assert b["op_index"] == 1 and b["cpu_max_abs"] == pytest.approx(value, rel=1e-2)


def test_half_range_within_half_names_a_step_inside_the_op() -> None:
    from gpulint.verify.divergence import half_range

    out = half_range(np.array([1.0, -300.0, np.inf], np.float32), None)
    assert out["cpu_max_abs"] == 300.0 and "a step inside the op went past half's largest 65504" in out["range"]
    assert "reach 7e+04" in half_range(np.array([7e4], np.float32), None)["range"]

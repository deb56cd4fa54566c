"""Graph outputs the GPU runtimes' fusion loses (#49): GPU810 (LiteRT's accelerator, LiteRT#8599), GPU811
(the classic OpenGL compiler, TF#44802), the OpenGL init failure of a conv folded with a constant
MUL/ADD, and the output-copy pass. Each case on both sides of its condition in check; the pass exact on
the CPU interpreter, the rules quiet after it; and, where the runtimes are here, the original wrong (or
failing at init) and the copy right on each (measured first by hand: see rules.yaml)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import needs_accelerator, refused_reshape, verify_status
from oracle import unavailable as gl_unavailable

from gpulint import reference
from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.model.ir import clone
from gpulint.model.write import write
from gpulint.passes import PassOptions, registry
from gpulint.rules import pack
from gpulint.rules.engine import Linter

TARGETS = pack.load_targets()
SH = [1, 8, 8, 8]
RNG = np.random.default_rng(3)


def producer(g: SubgraphBuilder, kind: str, x: int, y: int) -> int:
    zeros = g.const("b", np.zeros(8, np.float32))
    opts = {"padding": "SAME", "stride_w": 1, "stride_h": 1}
    if kind == "conv":
        w = g.const("w", (RNG.standard_normal((8, 1, 1, 8)) * 0.3).astype(np.float32))
        return g.op("CONV_2D", [x, w, zeros], SH, options=opts, out_name="p")
    if kind == "dw":
        w = g.const("w", (RNG.standard_normal((1, 3, 3, 8)) * 0.3).astype(np.float32))
        return g.op("DEPTHWISE_CONV_2D", [x, w, zeros], SH, options={**opts, "depth_multiplier": 1}, out_name="p")
    return g.op(kind.upper(), [x, y], SH, out_name="p")  # add, mul: two runtime operands


def reader(g: SubgraphBuilder, kind: str, p: int, x: int, y: int) -> int:
    if kind in ("relu", "tanh", "logistic"):
        return g.op(kind.upper(), [p], SH)
    if kind == "mul-const":
        return g.op("MUL", [p, g.const("k", np.array([2.0], np.float32))], SH)
    if kind == "add-const":
        return g.op("ADD", [p, g.const("k", np.full([8], 0.5, np.float32))], SH)
    if kind == "mul-other":
        return g.op("MUL", [p, g.input("z", SH)], SH)
    if kind == "add-own-input":  # reads the producer's own input too: the diamond FuseAutoInput skips
        return g.op("ADD", [p, x], SH)
    if kind in ("sum", "mean", "max"):
        op = {"sum": "SUM", "mean": "MEAN", "max": "REDUCE_MAX"}[kind]
        axes = g.const("axes", np.array([1, 2], np.int32))
        return g.op(op, [p, axes], [1, 1, 1, 8], options={"keep_dims": True})
    return g.op(kind.upper(), [p], SH)  # softmax


def model(prod: str, read: str, returned: bool = True, second_reader: bool = False) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x, y = g.input("x", SH), g.input("y", SH)
    p = producer(g, prod, x, y)
    r = reader(g, read, p, x, y)
    if second_reader:
        r = g.op("ADD", [r, g.op("RELU", [p], SH)], SH) if read not in ("sum", "mean", "max") else r
    g.output(*([p, r] if returned else [r]))
    return mb.build()


# (producer, reader) -> what each runtime does with it, as measured here
GL_ZEROS = [("add", "relu"), ("add", "tanh"), ("add", "mul-const"), ("add", "add-const"), ("add", "mul-other"),
            ("conv", "relu"), ("conv", "tanh"), ("dw", "relu"), ("dw", "tanh")]  # fmt: skip
GL_INIT_FAILURE = [("conv", "mul-const"), ("conv", "add-const"), ("dw", "mul-const"), ("dw", "add-const")]
MD_WRONG = [("add", "sum"), ("add", "mean"), ("add", "max"), *GL_INIT_FAILURE]
RIGHT_ON_BOTH = [("add", "add-own-input"), ("add", "softmax")]


def findings(m: Model, target: str, backend: str | None = None) -> list[str]:
    result = Linter(TARGETS[target], targets=TARGETS, backends=(backend,) if backend else None).lint(m)
    return sorted({f.code for f in result.findings if f.code in ("GPU810", "GPU811", "GPU203")})


def gl_codes(m: Model) -> list[str]:
    return findings(m, "classic", "opengl")


def copied(m: Model) -> tuple[Model, list[str]]:
    after = clone(m)
    return after, registry()["output-copy"].run(after, PassOptions()).changes


def case_id(c: tuple[str, str]) -> str:
    return f"{c[0]}-{c[1]}"


@pytest.mark.parametrize("case", GL_ZEROS, ids=case_id)
def test_gpu811_where_the_gl_compiler_merges_the_output_away(case: tuple[str, str]) -> None:
    assert gl_codes(model(*case)) == ["GPU811"]
    assert gl_codes(model(*case, returned=False)) == []
    assert gl_codes(model(*case, second_reader=True)) == []


@pytest.mark.parametrize("case", GL_INIT_FAILURE, ids=case_id)
def test_a_conv_folded_with_a_constant_fails_the_gl_delegate_at_init(case: tuple[str, str]) -> None:
    result = Linter(TARGETS["classic"], targets=TARGETS).lint(model(*case))
    assert result.verdict == "init-failure" and "Output tensor is not found in the graph" in result.reason
    assert Linter(TARGETS["classic"], targets=TARGETS).lint(model(*case, returned=False)).verdict == "ready"


@pytest.mark.parametrize("case", MD_WRONG, ids=case_id)
def test_gpu810_where_the_accelerator_loses_the_output(case: tuple[str, str]) -> None:
    assert findings(model(*case), "litert-gpu") == ["GPU810"]
    assert findings(model(*case, returned=False), "litert-gpu") == []


@pytest.mark.parametrize("case", [*RIGHT_ON_BOTH, ("mul", "sum"), ("add", "relu"), ("conv", "relu")], ids=case_id)
def test_the_accelerator_rule_is_silent_where_it_computes_right(case: tuple[str, str]) -> None:
    assert findings(model(*case), "litert-gpu") == []


@pytest.mark.parametrize("case", RIGHT_ON_BOTH, ids=case_id)
def test_the_gl_rule_is_silent_where_it_computes_right(case: tuple[str, str]) -> None:
    assert gl_codes(model(*case)) == []


@pytest.mark.parametrize("case", GL_ZEROS + MD_WRONG, ids=case_id)
def test_output_copy_is_exact_and_quiets_every_rule(tmp_path: Path, case: tuple[str, str]) -> None:
    before = model(*case)
    after, changes = copied(before)
    assert len(changes) == 1, changes
    assert copied(after)[1] == []  # a fixed point
    assert not {"GPU810", "GPU811"} & {*gl_codes(after), *findings(after, "litert-gpu")}
    if case in GL_ZEROS + GL_INIT_FAILURE:  # (the GL delegate has no SUM, MEAN or REDUCE_MAX shader)
        assert Linter(TARGETS["classic"], targets=TARGETS).lint(after).verdict == "ready"
    for name in ("GPU810", "GPU811"):
        assert pack.builtin_rules()[name].fix_pass == "output-copy"
    paths = [tmp_path / "before.tflite", tmp_path / "after.tflite"]
    write(before, paths[0])
    write(after, paths[1])
    a, b = reference.run_models(paths, reference.random_inputs(before, seed=5))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)  # a MUL by 1.0: the same bits


# -- on the real runtimes --------------------------------------------------------------------------


def before_and_after(tmp_path: Path, case: tuple[str, str], engine: str) -> tuple[str, str]:
    before = model(*case)
    write(before, tmp_path / "before.tflite")
    write(copied(before)[0], tmp_path / "after.tflite")
    return verify_status(tmp_path / "before.tflite", engine), verify_status(tmp_path / "after.tflite", engine)


@needs_accelerator()
@pytest.mark.parametrize("case", [("add", "sum"), ("conv", "mul-const")], ids=case_id)
def test_the_accelerator_computes_it_wrong_and_the_copy_right(tmp_path: Path, case: tuple[str, str]) -> None:
    assert before_and_after(tmp_path, case, "litert-gpu") == ("FAIL", "PASS")


@pytest.mark.parametrize(
    ("case", "before"), [(("add", "relu"), "FAIL"), (("conv", "tanh"), "FAIL"), (("conv", "mul-const"), "CPU-ONLY")]
)
def test_the_gl_delegate_computes_it_wrong_and_the_copy_right(
    tmp_path: Path, case: tuple[str, str], before: str
) -> None:
    if why := gl_unavailable():
        pytest.skip(why)
    assert before_and_after(tmp_path, case, "gl") == (before, "PASS")


def test_the_near_miss_is_right_on_the_gl_delegate(tmp_path: Path) -> None:
    if why := gl_unavailable():
        pytest.skip(why)
    write(model("add", "add-own-input"), tmp_path / "m.tflite")
    assert verify_status(tmp_path / "m.tflite", "gl") == "PASS"


def test_a_refused_graph_reports_no_runtime_defect() -> None:
    """Nothing runs on the GPU once the interpreter refuses the delegate: no GPU8xx finding."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x, y = g.input("x", SH), g.input("y", SH)
    p = g.op("ADD", [x, y], SH, out_name="p")
    g.output(p, g.op("RELU", [p], SH), refused_reshape(g, x))  # a dynamic-sized tensor: refused
    result = Linter(TARGETS["classic"], targets=TARGETS, backends=("opengl",)).lint(mb.build())
    codes = {f.code for f in result.findings}
    assert result.verdict == "refused" and "GPU811" not in codes, (result.verdict, codes)

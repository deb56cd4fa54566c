"""The interpreter's whole-graph refusal: which Prepare leaves a tensor dynamic-sized (rules/prepare.py).

Each case is a small graph built here; the corpus models and the real delegate are in the oracle tests.
"""

from __future__ import annotations

import numpy as np

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Linter
from gpulint.rules.prepare import find_refusal

I32 = np.int32


def model(build) -> Model:  # type: ignore[no-untyped-def]
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def batch_of(g: SubgraphBuilder, x: int) -> int:
    """SHAPE -> STRIDED_SLICE: the batch as a scalar, computed at Prepare (both persistent)."""
    shape = g.op("SHAPE", [x], [4], dtype="INT32", out_name="shape")
    ends = [g.const(n, np.array([v], I32)) for n, v in (("b", 0), ("e", 1), ("s", 1))]
    return g.op("STRIDED_SLICE", [shape, *ends], [], dtype="INT32", out_name="batch", options=dict(shrink_axis_mask=1))


def test_shape_arithmetic_computed_at_prepare_keeps_the_graph_static() -> None:
    # SHAPE, STRIDED_SLICE and CONCATENATION of known operands all run at Prepare (persistent).
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4, 8])
        b = g.op("RESHAPE", [batch_of(g, x), g.const("one", np.array([1], I32))], [1], dtype="INT32")
        target = g.op(
            "CONCATENATION", [b, g.const("n", np.array([128], I32))], [2], dtype="INT32", options=dict(axis=0)
        )
        return g.op("RESHAPE", [x, target], [1, 128])

    assert find_refusal(model(build)) is None


def test_pack_of_the_batch_refuses_the_graph() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4, 8])
        target = g.op(
            "PACK", [batch_of(g, x), g.const("n", np.array(128, I32))], [2], dtype="INT32", options=dict(values_count=2)
        )
        return g.op("RESHAPE", [x, target], [1, 128])

    r = find_refusal(model(build))
    assert r is not None and (r.op, r.op_index, r.tensor_index) == ("RESHAPE", 3, -1)
    assert "computed at run time by PACK (op 2)" in r.why


def test_runtime_paddings_and_axes() -> None:
    def pad(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4, 8])
        p = g.input("p", [4, 2], dtype="INT32")
        return g.op("PAD", [x, p], [1, 6, 6, 8])

    def mean(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4, 8])
        axes = g.op("ADD", [g.input("a", [2], dtype="INT32"), g.const("z", np.array([0, 0], I32))], [2], dtype="INT32")
        return g.op("MEAN", [x, axes], [1, 8], options=dict(keep_dims=False))

    r = find_refusal(model(pad))
    assert r is not None and r.op == "PAD" and r.tensor_index >= 0 and "graph input" in r.why
    r = find_refusal(model(mean))
    assert r is not None and r.op == "MEAN" and "computed at run time by ADD (op 0)" in r.why


def test_slice_with_a_fully_known_output_shape_stays_static() -> None:
    # slice.cc 148-150: a fully specified output shape settles it, whatever begin/size are.
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8])
        begin = g.input("begin", [3], dtype="INT32")
        return g.op("SLICE", [x, begin, g.const("size", np.array([1, 4, 4], I32))], [1, 4, 4])

    assert find_refusal(model(build)) is None


def test_refused_model_places_nothing_on_the_gpu() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4, 8])
        y = g.op("RELU", [x], [1, 4, 4, 8])
        target = g.op(
            "PACK", [batch_of(g, y), g.const("n", np.array(128, I32))], [2], dtype="INT32", options=dict(values_count=2)
        )
        return g.op("RESHAPE", [y, target], [1, 128])

    targets = pack.load_targets()
    result = Linter(targets["classic"], targets=targets).lint(model(build))
    assert result.verdict == "refused" and result.refusal is not None
    assert not result.plans[0].delegated
    assert {p.placement for p in result.ops if p.op == "RELU"} == {"refused"}
    assert {b["init"] for b in result.backends.values()} == {"refused"}
    assert [f.code for f in result.findings if f.code.startswith("GPU6")] == []


def test_one_word_for_one_reason_in_a_refused_graph() -> None:
    """#40 item 6: op 0 was `refused` while op 5 was `cpu`, both with the refusal as their only
    reason. RELU is supported but cut off from the one delegated partition (TANH, LOGISTIC, past
    a custom op); in a refused graph no partition is made, so it is `refused` like its neighbours.
    An op the delegate does not support stays `cpu` with its own reason."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 4, 8])
        y = g.op("RELU", [x], [1, 4, 4, 8])
        y = g.op("MyCustom", [y], [1, 4, 4, 8], custom_options=b"")
        y = g.op("LOGISTIC", [g.op("TANH", [y], [1, 4, 4, 8])], [1, 4, 4, 8])
        target = g.op(
            "PACK", [batch_of(g, y), g.const("n", np.array(128, I32))], [2], dtype="INT32", options=dict(values_count=2)
        )
        return g.op("RESHAPE", [y, target], [1, 128])

    targets = pack.load_targets()
    result = Linter(targets["classic"], targets=targets).lint(model(build))
    assert result.verdict == "refused"
    refusal = "the interpreter refuses the GPU delegate for the whole graph: "
    by_reason: dict[str, set[str]] = {}
    for p in result.ops:
        for r in p.reasons:
            by_reason.setdefault(r, set()).add(p.placement)
    assert all(len(words) == 1 for words in by_reason.values()), by_reason
    placed = {p.op: p for p in result.ops}
    assert [placed[op].placement for op in ("RELU", "TANH", "LOGISTIC")] == ["refused"] * 3
    assert placed["RELU"].reasons[0].startswith(refusal) and not placed["RELU"].codes
    assert placed["MyCustom"].placement == "cpu" and placed["MyCustom"].reasons == ["MyCustom"]

"""The `litert-gpu` target (LiteRT's GPU accelerator, ML Drift): where it decides unlike `classic`.

Each case is a one-op graph built here and placed by both targets; the citations are to
google-ai-edge/LiteRT@f67457790c9c ml_drift_delegate/tflite/model_builder.cc (`mdb`). The real
accelerator's answers for the corpus and the grid are in tests/test_oracle_litert.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Linter
from gpulint.rules.placement import Placement

TARGETS = pack.load_targets()
F32, I32 = np.float32, np.int32


def model(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def place(m: Model, target: str) -> Placement:
    return Linter(TARGETS[target], targets=TARGETS).lint(m).ops[0]


def both(m: Model) -> tuple[Placement, Placement]:
    return place(m, "classic"), place(m, "litert-gpu")


def test_target_loads_with_a_webgpu_backend_and_mdb_sources() -> None:
    t = TARGETS["litert-gpu"]
    assert set(t.backends) == {"webgpu"}
    assert "DENSIFY" not in t.ops and "ARG_MAX" in t.ops and "TOPK_V2" in t.ops
    assert all(s.source for s in t.ops.values()), "every op cites its source"


def test_densify_has_no_parser() -> None:
    # mdb NewOperationParser has no DENSIFY case: "Operation is not supported." (the classic one folds it)
    def build(g: SubgraphBuilder) -> int:
        w = g.const("w", np.ones((4, 1, 1, 4), F32))
        return g.op("DENSIFY", [w], [4, 1, 1, 4])

    _, lit = both(model(build))
    assert lit.placement == "cpu" and lit.codes[0][0] == "GPU101"


@pytest.mark.parametrize(("op", "version", "classic", "litert"), [("ADD", 5, "cpu", "gpu"), ("ADD", 7, "cpu", "cpu")])
def test_add_version_limit_is_six(op: str, version: int, classic: str, litert: str) -> None:
    # mdb 2250: ADD max version 6 (classic: 2)
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [1, 4, 4, 8]), g.input("b", [1, 4, 4, 8])
        return g.op(op, [a, b], [1, 4, 4, 8], version=version)

    c, lit = both(model(build))
    assert (c.placement, lit.placement) == (classic, litert)


def test_strided_slice_version_limit_is_two() -> None:
    # mdb 5258: STRIDED_SLICE max version 2 (classic: 4)
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        ends = [
            g.const(n, np.array(v, I32)) for n, v in (("b", [0, 0, 0, 0]), ("e", [1, 4, 8, 4]), ("s", [1, 1, 1, 1]))
        ]
        return g.op("STRIDED_SLICE", [x, *ends], [1, 4, 8, 4], version=3)

    c, lit = both(model(build))
    assert c.placement == "gpu" and lit.placement == "cpu" and lit.codes[0][0] == "GPU104"


def test_enhanced_broadcast_takes_a_3d_operand_with_batch() -> None:
    # mdb 2253-2256 kEnhancedBroadcast: numpy broadcasting; classic's kStandard refuses [2,8,8,4] + [8,1,4]
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [2, 8, 8, 4]), g.input("b", [8, 1, 4])
        return g.op("ADD", [a, b], [2, 8, 8, 4])

    c, lit = both(model(build))
    assert c.placement == "cpu" and lit.placement == "gpu"


def test_scalar_runtime_operand_broadcast_is_refused() -> None:
    # mdb 2308-2311: a broadcast needs every tensor of rank 1-4 (PreCheckTfLiteShape): rank 0 is refused
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [1, 8, 8, 4]), g.input("b", [])
        return g.op("SUB", [a, b], [1, 8, 8, 4])

    _, lit = both(model(build))
    assert lit.placement == "cpu" and "has bad input dims size: 0" in lit.reasons[0]


def test_runtime_prelu_alpha_stays_on_the_cpu_instead_of_failing_init() -> None:
    # mdb 4082-4093: ML Drift reads alpha in IsSupported; the classic builder fails at init
    def build(g: SubgraphBuilder) -> int:
        x, alpha = g.input("x", [1, 8, 8, 4]), g.input("alpha", [1, 1, 4])
        return g.op("PRELU", [x, alpha], [1, 8, 8, 4])

    c, lit = both(model(build))
    assert c.placement == "init-failure" and lit.placement == "cpu"


def test_comparison_needs_no_cast_or_select_consumer() -> None:
    # classic builder 1073-1093 delegates a comparison only ahead of CAST/SELECT; ML Drift has no such rule
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [1, 8, 8, 4]), g.input("b", [1, 8, 8, 4])
        return g.op("GREATER", [a, b], [1, 8, 8, 4], dtype="BOOL")

    c, lit = both(model(build))
    assert c.placement == "cpu" and lit.placement == "gpu"


def test_cast_to_int32_and_arg_max() -> None:
    # CAST: SupportAllPrecisionOp (mdb 549-566); ARG_MAX: INT32 output (mdb 7182-7184), classic has no parser
    def cast(g: SubgraphBuilder) -> int:
        return g.op("CAST", [g.input("x", [1, 8, 8, 4])], [1, 8, 8, 4], dtype="INT32")

    def arg_max(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        return g.op("ARG_MAX", [x, g.const("axis", np.array([3], I32))], [1, 8, 8], dtype="INT32")

    assert place(model(cast), "litert-gpu").placement == "gpu"
    c, lit = both(model(arg_max))
    assert c.codes[0][0] == "GPU101" and lit.placement == "gpu"


def test_arg_max_to_int64_fails_the_tensor_gate() -> None:
    # mdb 7182-7184: ARG_MAX's output must be INT32 (unsupported_mix_f32 in the corpus: an INT64 one)
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        return g.op("ARG_MAX", [x, g.const("axis", np.array([3], I32))], [1, 8, 8], dtype="INT64")

    lit = place(model(build), "litert-gpu")
    assert lit.placement == "cpu" and lit.codes[0][0] == "GPU107"


def test_transpose_and_gather_have_no_opengl_backend_to_fail_on() -> None:
    # The OpenGL backend has no TRANSPOSE shader (classic: init failure there); the accelerator builds it.
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        return g.op("TRANSPOSE", [x, g.const("perm", np.array([0, 2, 1, 3], I32))], [1, 8, 8, 4])

    c, lit = both(model(build))
    assert c.placement == "init-failure" and lit.placement == "gpu" and not lit.backend_failures


def test_identical_inputs_are_refused_except_for_add_and_mul() -> None:
    # mdb 2280-2286: the same tensor twice is refused at partition time, except by ADD and MUL
    def build(op: str) -> Callable[[SubgraphBuilder], int]:
        def inner(g: SubgraphBuilder) -> int:
            x = g.input("x", [1, 8, 8, 4])
            return g.op(op, [x, x], [1, 8, 8, 4])

        return inner

    assert place(model(build("SUB")), "litert-gpu").placement == "cpu"
    assert place(model(build("MUL")), "litert-gpu").placement == "gpu"
    assert place(model(build("SUB")), "classic").placement == "init-failure"


def test_const_scalar_bool_operand_cannot_be_parsed() -> None:
    # mdb CanParseInputsWithConstTensor 2626-2636: a one-element constant that is neither float nor INT32
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4], "BOOL")
        return g.op("LOGICAL_AND", [x, g.const("t", np.array(True), "BOOL")], [1, 8, 8, 4], dtype="BOOL")

    lit = place(model(build), "litert-gpu")
    assert lit.placement == "cpu" and "Can't parse inputs with const tensors." in lit.reasons


def test_dynamic_update_slice_needs_runtime_start_indices() -> None:
    # mdb 2144-2147
    def build(g: SubgraphBuilder) -> int:
        x, u = g.input("x", [1, 8, 8, 4]), g.input("u", [1, 2, 2, 4])
        return g.op("DYNAMIC_UPDATE_SLICE", [x, u, g.const("i", np.zeros(4, I32))], [1, 8, 8, 4])

    lit = place(model(build), "litert-gpu")
    assert lit.placement == "cpu" and "start_indices must be a runtime tensor" in lit.reasons

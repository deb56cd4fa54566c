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


def test_target_loads_with_its_backends_and_mdb_sources() -> None:
    t = TARGETS["litert-gpu"]
    assert set(t.backends) == {"opencl", "metal", "webgpu"}  # the backends: tests/test_litert_backends.py
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


# -- measured on the accelerator in ai-edge-litert 2.3.0 (issue #38) ------------------------------


def activation(op: str) -> Model:
    return model(lambda g: g.op(op, [g.input("x", [1, 8, 8, 4])], [1, 8, 8, 4]))


@pytest.mark.parametrize(("op", "placement"), [("RELU_0_TO_1", "cpu"), ("RELU_N1_TO_1", "gpu"), ("RELU6", "gpu")])
def test_relu_0_to_1_has_no_compat_case(op: str, placement: str) -> None:
    # ReLUOperationParser's ValidateSupport calls compat, whose switch has RELU_N1_TO_1 (947) but not
    # RELU_0_TO_1: its default refuses (1269-1274). The accelerator logs "Not supported op RELU_0_TO_1".
    lit = place(activation(op), "litert-gpu")
    assert lit.placement == placement
    if placement == "cpu":
        assert lit.reasons == [f"Not supported op {op}"]


@pytest.mark.parametrize(("op", "placement"), [("BITWISE_XOR", "cpu"), ("LOGICAL_AND", "gpu")])
def test_bitwise_xor_has_no_compat_case(op: str, placement: str) -> None:
    # The same default for BITWISE_XOR (ElementwiseOperationParser, mdb 6797); LOGICAL_AND has a case
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [1, 8, 8, 4], "BOOL"), g.input("b", [1, 8, 8, 4], "BOOL")
        return g.op(op, [a, b], [1, 8, 8, 4], dtype="BOOL")

    lit = place(model(build), "litert-gpu")
    assert lit.placement == placement
    assert placement == "gpu" or lit.reasons == ["Not supported op BITWISE_XOR"]


def lookup(table: Callable[[SubgraphBuilder], int]) -> Model:
    def build(g: SubgraphBuilder) -> int:
        return g.op("EMBEDDING_LOOKUP", [g.input("ids", [4], "INT32"), table(g)], [4, 8])

    return model(build)


def test_fp16_embedding_table_has_no_quantization_params() -> None:
    # mdb 2981-2986: a table that is neither FLOAT32 nor quantized; an fp16 one behind a DEQUANTIZE
    # counts as FLOAT16 (FP16GraphPartitionHelper points the node at it first)
    table = np.ones((16, 8), np.float16)
    direct = Linter(TARGETS["litert-gpu"], targets=TARGETS).lint(lookup(lambda g: g.const("t", table))).ops[0]
    behind = lookup(lambda g: g.op("DEQUANTIZE", [g.const("t", table)], [16, 8]))
    dequantized = Linter(TARGETS["litert-gpu"], targets=TARGETS).lint(behind).ops[1]
    for p in (direct, dequantized):
        assert p.placement == "cpu" and p.reasons == ["EMBEDDING_LOOKUP: Empty quantization params."]


def test_fp32_and_int8_embedding_tables_are_taken() -> None:
    f32 = lookup(lambda g: g.const("t", np.ones((16, 8), F32)))
    i8 = lookup(lambda g: g.const("t", np.ones((16, 8), np.int8), quant=(0.1, 0)))
    assert place(f32, "litert-gpu").placement == "gpu"
    assert place(i8, "litert-gpu").placement == "gpu"


def dequantize_into(op: str, shape: tuple[int, ...]) -> Model:
    """An int8 weight behind a constant DEQUANTIZE, read by `op` (the weight-only int8 export)."""

    def build(g: SubgraphBuilder) -> int:
        w = g.const("w", np.ones(shape, np.int8), quant=(0.02, 0))
        wd = g.op("DEQUANTIZE", [w], list(shape))
        if op == "FULLY_CONNECTED":
            return g.op(op, [g.input("x", [1, shape[-1]]), wd, -1], [1, shape[0]])
        return g.op(op, [g.input("x", list(shape)), wd], list(shape))

    return model(build)


@pytest.mark.parametrize(
    ("op", "shape", "words"),
    [
        ("FULLY_CONNECTED", (576, 576), "Shape mismatch: {bhwc, {576, 1, 1, 576}} vs {bhwc, {1, 1, 576, 576}}"),
        ("ADD", (2, 4, 8), "Shape mismatch: {bhwc, {2, 1, 4, 8}} vs {bhwc, {1, 2, 4, 8}}"),
        ("FULLY_CONNECTED", (1, 16), None),
        ("ADD", (1, 4, 8), None),
        ("ADD", (2, 4, 4, 8), None),
    ],
)
def test_constant_dequantize_of_rank_2_or_3_fails_to_build(op: str, shape: tuple[int, ...], words: str | None) -> None:
    # mdb DequantizeOperationParser::Parse 2087-2101: its constant is BHWC(1, 1, a, b) / (1, a, b, c), its
    # output value (a, 1, 1, b) / (a, 1, b, c); equal only when a is 1, or at rank 4
    r = Linter(TARGETS["litert-gpu"], targets=TARGETS).lint(dequantize_into(op, shape))
    dq = r.ops[0]
    if words is None:
        assert r.verdict == "ready" and dq.folded
    else:
        assert r.verdict == "init-failure" and dq.placement == "init-failure" and dq.reasons == [words]


def select(cond_shape: list[int], out: list[int], const: bool = True) -> Model:
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", out), g.input("b", out)
        c = g.const("mask", np.ones(cond_shape, bool), "BOOL") if const else g.input("c", cond_shape, "BOOL")
        return g.op("SELECT_V2", [c, a, b], out)

    return model(build)


@pytest.mark.parametrize(
    ("cond", "out", "const", "placement"),
    [
        ([8, 8], [1, 2, 8, 8], True, "init-failure"),  # the causal mask under [1, H, T, T] scores
        ([8, 8], [1, 2, 8, 8], False, "init-failure"),
        ([2, 8, 8], [1, 2, 8, 8], True, "init-failure"),
        ([1, 1, 8, 8], [1, 2, 8, 8], True, "gpu"),
        ([1, 8, 8], [1, 2, 8, 8], True, "gpu"),
        ([8, 8], [2, 8, 8], True, "gpu"),  # an output batch other than 1 builds
    ],
)
def test_select_condition_with_a_batch_into_an_output_of_batch_one(
    cond: list[int], out: list[int], const: bool, placement: str
) -> None:
    lit = place(select(cond, out, const), "litert-gpu")
    assert lit.placement == placement
    if placement == "init-failure":
        assert lit.reasons[0].startswith("Unable to parse bc coord for BATCH axis.")


@pytest.mark.parametrize(("op", "same", "placement"), [("BATCH_MATMUL", True, "init-failure"),
                                                       ("BATCH_MATMUL", False, "gpu"),
                                                       ("CONCATENATION", True, "gpu"),
                                                       ("ADD_N", True, "gpu")])  # fmt: skip
def test_one_tensor_twice_aborts_batch_matmul(op: str, same: bool, placement: str) -> None:
    # BATCH_MATMUL(x, x): ML Drift's graph CHECK-fails and the process aborts; CONCATENATION and ADD_N
    # (the ADD parser, mdb 6781-6784) take a repeated input
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8])
        y = x if same else g.input("y", [1, 8, 8])
        options = {"axis": 2} if op == "CONCATENATION" else None
        return g.op(op, [x, y], [1, 8, 16] if op == "CONCATENATION" else [1, 8, 8], options=options)

    lit = place(model(build), "litert-gpu")
    assert lit.placement == placement
    if placement == "init-failure":
        assert "aborts the whole process" in lit.reasons[0]


def update(operand: list[int], upd: list[int], start: str = "INT32") -> Model:
    def build(g: SubgraphBuilder) -> int:
        x, u, i = g.input("x", operand), g.input("u", upd), g.input("i", [len(operand)], start)
        return g.op("DYNAMIC_UPDATE_SLICE", [x, u, i], operand)

    return model(build)


@pytest.mark.parametrize(
    ("operand", "upd", "start", "reason"),
    [
        ([1, 8, 8, 4], [1, 2, 2, 4], "INT32", None),
        ([1, 8, 8, 4], [1, 8, 8, 4], "INT32", None),
        ([1, 8, 8, 4], [1, 9, 2, 4], "INT32", "Updated_slice shape must be less or equal to the array to update, "
                                               "but they are updated_slice: [1924], array_to_update: [1884]"),
        ([8, 4], [8, 6], "INT32", "Updated_slice shape must be less or equal to the array to update, "
                                  "but they are updated_slice: [1186], array_to_update: [1184]"),
        ([1, 8, 8, 4], [1, 2, 2, 4], "INT64", "start_indices must be of type int32."),
        ([1, 8, 8, 4], [2, 2, 4], "INT32", "Operand and update must have the same number of dimensions, "
                                           "but got: operand: 4, update: 3"),
    ],
)  # fmt: skip
def test_dynamic_update_slice_update_size_and_compat(
    operand: list[int], upd: list[int], start: str, reason: str | None
) -> None:
    # compat 762-796 through ValidateSupport, then mdb 2157-2167: the update no larger on any axis
    lit = place(update(operand, upd, start), "litert-gpu")
    assert (lit.placement, lit.reasons[:1]) == (("gpu", []) if reason is None else ("cpu", [reason]))


def test_a_user_pack_states_its_own_runtime_and_does_not_inherit_one() -> None:
    stated = pack.parse_target("target: mine\nbase: litert-gpu\nruntime: ai-edge-litert 2.4.0\n", "mine.yaml", TARGETS)
    silent = pack.parse_target("target: other\nbase: litert-gpu\n", "other.yaml", TARGETS)
    assert (stated.runtime, silent.runtime) == ("ai-edge-litert 2.4.0", "")
    with pytest.raises(pack.PackError, match="runtime"):
        pack.parse_target("target: bad\nruntime: [2, 3]\n", "bad.yaml", TARGETS)

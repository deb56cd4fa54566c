"""The iOS targets: `coreml` (the Core ML delegate) and `metal` (the iOS GPU delegate).

No Apple device is here, so nothing checks these against the real delegates. Instead every
condition read from their source has a one-op model on each side of it: one the delegate takes,
one it leaves on the CPU. Citations are to google-ai-edge/LiteRT@f67457790c9c tflite/delegates/
(`coreml` = coreml/coreml_delegate.mm; the builders are coreml/builders/<op>_op_builder.cc).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Linter, LintResult
from gpulint.rules.placement import Placement
from gpulint.rules.signature import Graph

TARGETS = pack.load_targets()
F32, F16, I32 = np.float32, np.float16, np.int32
X = [1, 4, 4, 8]


def model(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def target(name: str = "coreml", **settings: Any) -> pack.Target:
    return pack.configure(TARGETS[name], settings) if settings else TARGETS[name]


def place(m: Model, op: int = 0, name: str = "coreml", **settings: Any) -> Placement:
    """The delegate's per-node decision alone (no partitioning, no whole-graph refusal)."""
    return Linter(target(name, **settings), targets=TARGETS).place(Graph.of(m, 0).signature(op))


def lint(m: Model, name: str = "coreml", **settings: Any) -> LintResult:
    return Linter(target(name, **settings), targets=TARGETS).lint(m)


def unary(op: str, shape: list[int] = X, version: int = 1, dtype: str = "FLOAT32", **options: Any) -> Model:
    def build(g: SubgraphBuilder) -> int:
        q = (0.1, 0) if dtype == "INT8" else None
        x = g.input("x", shape, dtype, quant=q)
        return g.op(op, [x], shape, version=version, dtype=dtype, quant=q, options=options or None)

    return model(build)


def binary(op: str, a: list[int], b: list[int] | None = None, const_b: Any = None, **options: Any) -> Model:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("a", a)
        y = g.const("b", const_b) if const_b is not None else g.input("b", b or a)
        try:
            out = list(np.broadcast_shapes(tuple(a), tuple(b or np.shape(const_b) or a)))
        except ValueError:  # shapes numpy cannot broadcast: the case is about refusing them
            out = list(a)
        return g.op(op, [x, y], out, options=options or None)

    return model(build)


def takes(p: Placement) -> bool:
    return p.placement == "gpu"


# -- the pack -----------------------------------------------------------------------------------


def test_packs_load_and_every_op_cites_its_source() -> None:
    core, metal = TARGETS["coreml"], TARGETS["metal"]
    assert all(s.source for s in core.ops.values())
    assert (core.max_partitions, core.min_partition_nodes, core.tensor_gate) == (0, 2, False)
    assert core.settings == {"coreml_version": 3, "all_devices": False}
    assert set(metal.ops) == set(TARGETS["classic"].ops) and set(metal.backends) == {"metal"}


def test_configure_changes_check_parameters_and_refuses_unknown_settings() -> None:
    two = target(coreml_version=2)
    assert dict(two.ops["RESHAPE"].checks[-1].params) == {"coreml_version": 2}
    assert dict(TARGETS["coreml"].ops["RESHAPE"].checks[-1].params) == {"coreml_version": 3}
    with pytest.raises(pack.PackError, match="no setting"):
        pack.configure(TARGETS["coreml"], {"warp": 9})


# -- Core ML: op versions and the first input ------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "ok", "above"),
    [("RELU", 1, 2), ("DEPTHWISE_CONV_2D", 2, 3), ("FULLY_CONNECTED", 6, 7)],  # coreml 45-58
)
def test_op_versions(op: str, ok: int, above: int) -> None:
    def build(version: int) -> Model:
        def b(g: SubgraphBuilder) -> int:
            if op == "RELU":
                return g.op(op, [g.input("x", X)], X, version=version)
            if op == "DEPTHWISE_CONV_2D":
                w = g.const("w", np.ones((1, 3, 3, 8), F32))
                opts = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
                return g.op(
                    op, [g.input("x", X), w, g.const("bias", np.zeros(8, F32))], X, version=version, options=opts
                )
            w = g.const("w", np.ones((4, 8), F32))
            return g.op(op, [g.input("x", [1, 8]), w, -1], [1, 4], version=version)

        return model(b)

    assert takes(place(build(ok)))
    p = place(build(above))
    assert p.placement == "cpu" and p.codes[0][0] == "GPU104"


def test_ops_outside_the_switch_stay_on_the_cpu() -> None:
    p = place(binary("SUB", X))
    assert p.placement == "cpu" and p.codes[0][0] == "GPU101"


def test_first_input_must_be_float32() -> None:
    # coreml 60-69: this is what keeps full-integer quantized ops off Core ML
    assert takes(place(unary("RELU")))
    p = place(unary("RELU", dtype="INT8"))
    assert p.placement == "cpu" and "is INT8, not FLOAT32" in p.reasons[0]


def test_transpose_conv_checks_its_third_input() -> None:
    def build(dtype: str, const_shape: bool = True) -> Model:
        def b(g: SubgraphBuilder) -> int:
            q = (0.1, 0) if dtype == "INT8" else None
            shape = g.const("shape", np.array([1, 8, 8, 4], I32)) if const_shape else g.input("shape", [4], "INT32")
            w = g.const("w", np.ones((4, 3, 3, 8), F32))
            x = g.input("x", X, dtype, quant=q)
            return g.op(
                "TRANSPOSE_CONV", [shape, w, x], [1, 8, 8, 4], options=dict(padding="SAME", stride_w=2, stride_h=2)
            )

        return model(b)

    assert takes(place(build("FLOAT32")))
    assert "input 2" in place(build("INT8")).reasons[0]
    # convolution_op_builder.cc 353-356: the output shape must be constant
    assert "output shape is not constant" in place(build("FLOAT32", const_shape=False)).reasons[0]


# -- Core ML: ADD / MUL (util.cc IsBinaryOpSupported, IsBroadcastable) -------------------------------


@pytest.mark.parametrize("op", ["ADD", "MUL"])
@pytest.mark.parametrize(
    ("a", "b", "ok"),
    [
        (X, X, True),
        (X, [1, 1, 1, 8], True),  # (H, W) differ, one side is 1x1
        (X, [1, 4, 4, 1], True),  # C differs, one side is 1
        (X, [8], True),  # rank 1 pads to [1, 1, 1, 8]
        (X, [1, 4, 1, 8], False),  # (H, W) differ and neither is 1x1
        (X, [1, 4, 4, 2], False),  # C differs and neither is 1
        ([2, 4, 4, 8], [1, 4, 4, 8], False),  # batch differs: only against a one-element constant
        ([1, 2, 4, 4, 8], [1, 2, 4, 4, 8], False),  # rank 5 does not broadcast
    ],
)
def test_binary_broadcast(op: str, a: list[int], b: list[int], ok: bool) -> None:
    assert takes(place(binary(op, a, b))) is ok


def test_binary_batch_may_differ_against_a_one_element_constant() -> None:
    assert takes(place(binary("ADD", [2, 4, 4, 8], const_b=np.ones((1,), F32))))
    assert not takes(place(binary("ADD", [2, 4, 4, 8], const_b=np.ones((1, 1, 1, 8), F32))))


def test_binary_takes_float16_only_as_a_constant() -> None:
    assert takes(place(binary("MUL", X, const_b=np.ones(8, F16))))

    def runtime_f16(g: SubgraphBuilder) -> int:
        return g.op("MUL", [g.input("a", X), g.input("b", X, "FLOAT16")], X)

    assert "FLOAT16 constants" in place(model(runtime_f16)).reasons[0]


# -- Core ML: the other per-op conditions ------------------------------------------------------------


@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pools_take_no_fused_activation(op: str) -> None:
    opts = dict(padding="SAME", stride_w=1, stride_h=1, filter_width=2, filter_height=2)
    assert takes(place(unary(op, **opts)))
    assert not takes(place(unary(op, fused_activation_function="RELU", **opts)))


@pytest.mark.parametrize(
    ("shape", "axis", "inputs", "act", "ok"),
    [
        (X, 3, 2, "NONE", True),
        (X, -1, 2, "NONE", True),
        ([1, 4, 8], 2, 2, "NONE", True),
        (X, 1, 2, "NONE", False),  # channels only
        ([1, 4, 8], 1, 2, "NONE", False),
        ([4, 8], 1, 2, "NONE", False),  # rank 3 or 4 only
        (X, 3, 1, "NONE", False),  # two inputs or more
        (X, 3, 2, "RELU", False),  # no fused activation
    ],
)
def test_concatenation(shape: list[int], axis: int, inputs: int, act: str, ok: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        xs = [g.input(f"x{i}", shape) for i in range(inputs)]
        out = list(shape)
        out[axis] *= inputs
        return g.op("CONCATENATION", xs, out, options=dict(axis=axis, fused_activation_function=act))

    assert takes(place(model(build))) is ok


def conv(weights_const: bool = True, bias: str = "const", act: str = "NONE", kernel: int = 3) -> Model:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", X)
        w = g.const("w", np.ones((4, kernel, 3, 8), F32)) if weights_const else g.input("w", [4, kernel, 3, 8])
        b = {"const": lambda: g.const("b", np.zeros(4, F32)), "runtime": lambda: g.input("b", [4])}[bias]()
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function=act)
        return g.op("CONV_2D", [x, w, b], [1, 4, 4, 4], options=opts)

    return model(build)


def test_convolution() -> None:
    # convolution_op_builder.cc 312-365
    assert takes(place(conv()))
    assert "weights `w` are not constant" in place(conv(weights_const=False)).reasons[0]
    assert "bias `b` is not constant" in place(conv(bias="runtime")).reasons[0]
    assert "SIGN_BIT" in place(conv(act="SIGN_BIT")).reasons[0]
    assert "kernel size limit" in place(conv(kernel=16385)).reasons[0]


def test_convolution_reads_fp16_weights_behind_a_dequantize_as_constants() -> None:
    # FP16GraphPartitionHelper points the conv at the fp16 constant: weights constant, model delegated whole
    def build(g: SubgraphBuilder) -> int:
        w16 = g.const("w16", np.ones((4, 3, 3, 8), F16))
        w = g.op("DEQUANTIZE", [w16], [4, 3, 3, 8])
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [g.input("x", X), w, g.const("b", np.zeros(4, F32))], [1, 4, 4, 4], options=opts)

    r = lint(model(build))
    assert r.verdict == "ready" and r.plans[0].delegated_nodes == {0, 1}


def test_an_fp16_constant_as_first_input_is_not_float32() -> None:
    # the remapped first input is FLOAT16: coreml 67 refuses it
    def build(g: SubgraphBuilder) -> int:
        a = g.op("DEQUANTIZE", [g.const("a16", np.ones(X, F16))], X)
        return g.op("ADD", [a, g.input("b", X)], X)

    assert "is FLOAT16, not FLOAT32" in place(model(build), op=1).reasons[0]


@pytest.mark.parametrize(
    ("x", "bias", "fmt", "ok"),
    [
        ([1, 8], "const", "DEFAULT", True),
        ([1, 1, 8], "const", "DEFAULT", True),
        ([1, 8], "none", "DEFAULT", True),  # no bias (version 6): taken, see coreml_fully_connected
        ([2, 8], "const", "DEFAULT", False),  # one batch only
        ([1, 8], "runtime", "DEFAULT", False),
        ([1, 8], "const", "SHUFFLED4x16INT8", False),
        ([1, 8], "weights", "DEFAULT", False),  # runtime weights
    ],
)
def test_fully_connected(x: list[int], bias: str, fmt: str, ok: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        w = g.input("w", [4, 8]) if bias == "weights" else g.const("w", np.ones((4, 8), F32))
        b = {"const": lambda: g.const("b", np.zeros(4, F32)), "runtime": lambda: g.input("b", [4])}.get(
            bias, lambda: -1
        )()
        return g.op(
            "FULLY_CONNECTED", [g.input("x", x), w, b], [*x[:-1], 4], version=6, options=dict(weights_format=fmt)
        )

    assert takes(place(model(build))) is ok


@pytest.mark.parametrize(
    ("shape", "axes", "keep", "ok"),
    [
        (X, [1, 2], True, True),
        (X, [-3, -2], True, True),
        (X, [1], True, True),
        (X, [1, 2], False, False),  # keep_dims only
        (X, [3], True, False),  # H and W only
        (X, [0, 1], True, False),
        ([1, 4, 8], [1], True, False),  # 4-D input only
    ],
)
def test_mean(shape: list[int], axes: list[int], keep: bool, ok: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        out = [1 if (i in axes or i - len(shape) in axes) else d for i, d in enumerate(shape)]
        return g.op(
            "MEAN", [g.input("x", shape), g.const("axes", np.array(axes, I32))], out, options=dict(keep_dims=keep)
        )

    assert takes(place(model(build))) is ok


@pytest.mark.parametrize("op", ["PAD", "PADV2", "MIRROR_PAD"])
@pytest.mark.parametrize(
    ("pads", "ok"),
    [
        ([[0, 0], [1, 1], [2, 2], [0, 0]], True),
        ([[1, 0], [1, 1], [1, 1], [0, 0]], False),  # batch
        ([[0, 0], [1, 1], [1, 1], [0, 1]], False),  # channels
        ([[0, 0], [1, 1], [0, 0]], False),  # 4-D only
    ],
)
def test_pads(op: str, pads: list[list[int]], ok: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        shape = X if len(pads) == 4 else X[1:]
        out = [d + a + b for d, (a, b) in zip(shape, pads, strict=True)]
        ins = [g.input("x", shape), g.const("p", np.array(pads, I32))]
        if op == "PADV2":
            ins.append(g.const("v", np.zeros((), F32)))
        return g.op(op, ins, out, options=dict(mode="REFLECT") if op == "MIRROR_PAD" else None)

    assert takes(place(model(build))) is ok


def test_pad_runtime_paddings_and_mirror_pad_mode() -> None:
    def build(mode: str, const: bool = True) -> Model:
        def b(g: SubgraphBuilder) -> int:
            p = (
                g.const("p", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], I32))
                if const
                else g.input("p", [4, 2], "INT32")
            )
            return g.op("MIRROR_PAD", [g.input("x", X), p], [1, 6, 6, 8], options=dict(mode=mode))

        return model(b)

    assert takes(place(build("REFLECT")))
    assert place(build("SYMMETRIC")).reasons[0] == "Only REFLECT mode is supported for MIRROR_PAD."
    assert place(build("REFLECT", const=False)).reasons[0] == "Only constant padding is supported for PAD."


def reshape(shape: list[int] | None, new_shape: list[int] | None = None, const: bool = True) -> Model:
    def build(g: SubgraphBuilder) -> int:
        out = shape or new_shape or []
        ins = [g.input("x", [1, 128])]
        if shape is not None:
            ins.append(g.const("s", np.array(shape, I32)) if const else g.input("s", [len(shape)], "INT32"))
        return g.op("RESHAPE", ins, out, options=dict(new_shape=new_shape or []))

    return model(build)


def test_reshape_only_with_core_ml_2() -> None:
    # reshape_op_builder.cc 124-147; Core ML 3 is the default on iOS 13+ (coreml 161-171)
    assert "Core ML 3" in place(reshape([1, 4, 4, 8])).reasons[0]
    assert takes(place(reshape([1, 4, 4, 8]), coreml_version=2))
    assert takes(place(reshape([1, 16, 8]), coreml_version=2))
    assert not takes(place(reshape([16, 8]), coreml_version=2))  # 3 or 4 dims
    assert place(reshape([1, 4, 4, 8], const=False), coreml_version=2).reasons[0] == "Reshape has non-const shape."
    assert takes(place(reshape(None, [1, 4, 4, 8]), coreml_version=2))  # new_shape alone
    assert not takes(place(reshape(None, [16, 8]), coreml_version=2))


def test_resize_bilinear_needs_a_constant_size() -> None:
    def build(const: bool) -> Model:
        def b(g: SubgraphBuilder) -> int:
            size = g.const("size", np.array([8, 8], I32)) if const else g.input("size", [2], "INT32")
            return g.op("RESIZE_BILINEAR", [g.input("x", X), size], [1, 8, 8, 8])

        return model(b)

    assert takes(place(build(True)))
    assert place(build(False)).reasons[0] == "Output size of ResizeBilinear should be constant."


def test_softmax_beta_one_only() -> None:
    assert takes(place(unary("SOFTMAX", [1, 8], beta=1.0)))
    assert "beta 0.5" in place(unary("SOFTMAX", [1, 8], beta=0.5)).reasons[0]


@pytest.mark.parametrize("op", ["HARD_SWISH", "LOGISTIC", "RELU", "RELU_N1_TO_1", "RELU6", "TANH"])
def test_ops_taken_unconditionally(op: str) -> None:
    assert takes(place(unary(op)))
    assert not takes(place(unary(op, version=2)))


# -- Core ML: partitions, init, the device gate ----------------------------------------------------


def chain(ops: list[str]) -> Model:
    def build(g: SubgraphBuilder) -> int:
        t = g.input("x", X)
        for op in ops:
            t = g.op(op, [t, g.input(f"y{len(g.sg.tensors)}", X)] if op == "SUB" else [t], X)
        return t

    return model(build)


def test_every_partition_of_two_nodes_or_more_is_delegated() -> None:
    # coreml 172-177: max_delegated_partitions unlimited, min_nodes_per_partition 2
    r = lint(chain(["RELU", "RELU", "SUB", "RELU", "RELU"]))
    assert r.plans[0].delegated == {0, 1, 3, 4} and r.plans[0].final_partitions == 3
    r = lint(chain(["RELU", "SUB", "RELU", "RELU"]))
    assert r.plans[0].delegated == {2, 3}
    assert "smaller than the delegate's minimum of 2" in r.ops[0].reasons[0]


def test_a_whole_graph_of_one_supported_node_is_delegated() -> None:
    # FP16GraphPartitionHelper Scenario 1 (delegates/utils.cc 206-214) takes every node, whatever the minimum
    r = lint(unary("RELU"))
    assert r.verdict == "ready" and r.plans[0].delegated == {0}


def test_rank_above_four_at_the_partition_boundary_fails_at_init() -> None:
    # no tensor gate on Core ML: the op is taken, then GetDims fails when the Core ML model is built
    assert lint(unary("RELU", [1, 2, 4, 4, 8])).verdict == "init-failure"
    assert lint(unary("RELU")).verdict == "ready"


def test_the_neural_engine_gate_is_stated_unless_all_devices() -> None:
    assert any(f.code == "GPU110" for f in lint(unary("RELU")).findings)
    assert not any(f.code == "GPU110" for f in lint(unary("RELU"), all_devices=True).findings)
    assert not any(f.code == "GPU110" for f in lint(unary("RELU"), name="metal").findings)


# -- Metal --------------------------------------------------------------------------------------


def test_metal_takes_what_the_classic_builder_takes() -> None:
    for m in (conv(), binary("SUB", X), unary("RELU", dtype="INT8")):
        assert place(m, name="metal").placement == place(m, name="classic").placement == "gpu"


def test_metal_hands_only_float32_to_the_interpreter() -> None:
    # metal_delegate.mm 322-337: "Output tensor is not found in the graph."
    def build(dtype: str) -> Callable[[SubgraphBuilder], int]:
        def b(g: SubgraphBuilder) -> int:
            return g.op("CAST", [g.input("x", X)], X, dtype=dtype)

        return b

    assert lint(model(build("FLOAT32")), name="metal").verdict == "ready"
    r = lint(model(build("INT32")), name="metal")
    assert r.verdict == "init-failure" and "Output tensor is not found" in r.backends["metal"]["reason"]
    assert lint(model(build("INT32")), name="classic").backends["opencl"]["init"] == "ok"


def test_metal_refuses_dynamic_graphs_as_the_classic_delegate() -> None:
    # kTfLiteDelegateFlagsNone (metal_delegate.mm 608): the interpreter refuses dynamic-sized tensors
    def build(g: SubgraphBuilder) -> int:
        return g.op("PAD", [g.input("x", X), g.input("p", [4, 2], "INT32")], X)

    assert lint(model(build), name="metal").verdict == "refused"
    assert lint(model(build), name="coreml").verdict == "refused"

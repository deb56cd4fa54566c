"""The exact message of every rule, each on a small model that triggers it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from flatbuffers import flexbuffers

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Finding, Linter

TARGETS = pack.load_targets()


def lint(model: Model, target: str = "classic", quantized: bool = True) -> list[Finding]:
    return Linter(TARGETS[target], quantized).lint(model).findings


def single(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def conv(g: SubgraphBuilder, x: int, cin: int, cout: int, hw: int = 8, **options: object) -> int:
    w = g.const(f"w{len(g.sg.tensors)}", np.zeros((cout, 3, 3, cin), np.float32))
    return g.op(
        "CONV_2D",
        [x, w, -1],
        [1, hw, hw, cout],
        out_name=f"conv{len(g.sg.tensors)}",
        options=dict(padding="SAME", stride_w=1, stride_h=1, **options),
    )


def messages(findings: list[Finding], code: str) -> list[str]:
    return [f.message for f in findings if f.code == code]


def test_gpu101_unsupported_op() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8])
        return g.op("ARG_MAX", [x, g.const("axis", np.array([1], np.int32))], [1], dtype="INT64")

    assert messages(lint(single(build)), "GPU101") == [
        "`ARG_MAX` has no GPU delegate implementation and runs on the CPU"
    ]


def test_gpu102_unsupported_custom_op_gpu103_mediapipe_only() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        y = g.op("TFLite_Detection_PostProcess", [x], [1, 8, 8, 4], custom_options=b"")
        m = g.input("m", [1, 4, 4])
        return g.op("TransformTensorBilinear", [y, m], [1, 8, 8, 4], version=2, custom_options=b"")

    findings = lint(single(build))
    assert messages(findings, "GPU102") == [
        "custom op `TFLite_Detection_PostProcess` is not one the GPU delegate accepts (classic target)"
    ]
    assert messages(findings, "GPU103") == [
        "custom op `TransformTensorBilinear` runs on the GPU only in MediaPipe's GPU runtime; "
        "the stock delegate puts it on the CPU"
    ]
    assert messages(lint(single(build), "mediapipe"), "GPU103") == []


def test_gpu104_version_too_high() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        return g.op("SOFTMAX", [x], [1, 8, 8, 4], version=4, options=dict(beta=1.0))

    assert messages(lint(single(build)), "GPU104") == ["`SOFTMAX` v4 is above the GPU delegate's maximum v2"]


def test_gpu105_quantized_ops_disabled() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8], "INT8", quant=(0.1, 0))
        return g.op("DEQUANTIZE", [x], [1, 8], version=2)

    assert messages(lint(single(build), quantized=False), "GPU105") == [
        "`DEQUANTIZE` needs the delegate's quantized-models flag, which --no-quantized turns off"
    ]
    assert messages(lint(single(build)), "GPU105") == []


def test_gpu106_op_constraint() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        return g.op("SOFTMAX", [x], [1, 8, 8, 4], options=dict(beta=2.0))

    assert messages(lint(single(build)), "GPU106") == [
        "`SOFTMAX` is refused by the GPU delegate: Softmax.beta != 1 is not supported."
    ]


def test_gpu107_tensor_type() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("ids", [1, 8], "INT32")
        return g.op("ADD", [x, x], [1, 8], dtype="INT32")

    assert messages(lint(single(build)), "GPU107") == [
        "`ADD` has runtime tensor `ids` of type INT32; the GPU delegate takes FLOAT32/FLOAT16/INT8/UINT8"
    ]
    assert messages(lint(single(build), quantized=False), "GPU107") == [
        "`ADD` has runtime tensor `ids` of type INT32; the GPU delegate takes FLOAT32/FLOAT16"
    ]


def test_gpu108_rank_5() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 16])
        return g.op(
            "RESHAPE", [x, g.const("shape", np.array([1, 8, 8, 4, 4], np.int32))], [1, 8, 8, 4, 4], out_name="grouped"
        )

    assert messages(lint(single(build)), "GPU108") == [
        "`RESHAPE` has tensor `grouped` of rank 5; the GPU delegate handles rank 4 at most"
    ]


def two_gpu_partitions(g: SubgraphBuilder) -> int:
    """conv -> REVERSE_V2 (no GPU parser) -> conv -> conv: the second GPU partition is larger."""
    x = g.input("x", [1, 8, 8, 4])
    a = conv(g, x, 4, 4)
    cut = g.op("REVERSE_V2", [a, g.const("axis", np.array([3], np.int32))], [1, 8, 8, 4], out_name="cut")
    b = conv(g, cut, 4, 4)
    return conv(g, b, 4, 4)


def test_gpu109_outside_delegated_partition_gpu601_split() -> None:
    findings = lint(single(two_gpu_partitions))
    assert messages(findings, "GPU109") == [
        "`CONV_2D` is supported but lies outside the delegated partition and runs on the CPU"
    ]
    assert [f.op_index for f in findings if f.code == "GPU109"] == [0]
    assert messages(findings, "GPU601") == [
        "subgraph 0 runs as 1 delegated GPU partition and 1 CPU partition with 2 CPU<->GPU transfers"
    ]  # the first conv's GPU partition is not delegated (max_partitions 1): it runs on the CPU with REVERSE_V2


def test_gpu201_init_failure() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 8])
        w = g.const("w", np.zeros((2, 8, 8), np.float32))
        return g.op("BATCH_MATMUL", [x, w], [1, 4, 8])

    assert messages(lint(single(build)), "GPU201") == [
        "`BATCH_MATMUL` is accepted at partition time but the delegate fails to initialize on it: "
        "Not supported batched mat mul case"
    ]


def test_gpu301_channels_gpu302_rgb_input() -> None:
    findings = lint(single(lambda g: conv(g, g.input("image", [1, 8, 8, 3]), 3, 6)))
    assert messages(findings, "GPU301") == [
        "`CONV_2D` writes `conv2` (C=6, 1.33x memory): channels not a multiple of 4"
    ]
    assert messages(findings, "GPU302") == [
        "input `image` is [1, 8, 8, 3] with 3 channels; feed RGBA (4 channels) to avoid a conversion copy"
    ]


def test_gpu401_reshuffle() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        return g.op("SPACE_TO_DEPTH", [x], [1, 4, 4, 16], options=dict(block_size=2))

    assert messages(lint(single(build)), "GPU401") == [
        "`SPACE_TO_DEPTH` moves data between space and depth: a full copy on the GPU"
    ]


def atrous(g: SubgraphBuilder) -> int:
    x = g.input("x", [1, 16, 16, 4])
    block = g.const("block", np.array([2, 2], np.int32))
    s = g.op("SPACE_TO_BATCH_ND", [x, block, g.const("pad", np.array([[2, 2], [2, 2]], np.int32))], [4, 10, 10, 4])
    w = g.const("w", np.zeros((4, 3, 3, 4), np.float32))
    c = g.op("CONV_2D", [s, w, -1], [4, 8, 8, 4], options=dict(padding="VALID", stride_w=1, stride_h=1))
    return g.op("BATCH_TO_SPACE_ND", [c, block, g.const("crops", np.zeros((2, 2), np.int32))], [1, 16, 16, 4])


def test_gpu402_atrous_pattern() -> None:
    findings = lint(single(atrous))
    assert messages(findings, "GPU402") == [
        "`SPACE_TO_BATCH_ND` -> `CONV_2D` -> `BATCH_TO_SPACE_ND` (ops 0, 1, 2) is an atrous conv with dilation 2; "
        "fold it into one dilated `CONV_2D`"
    ]
    assert {f.fix for f in findings if f.code == "GPU402"} == {"fold-atrous"}


def test_gpu403_channel_moving_reshape() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 16])
        return g.op("RESHAPE", [x, g.const("shape", np.array([1, 8, 128], np.int32))], [1, 8, 128])

    assert messages(lint(single(build)), "GPU403") == [
        "`RESHAPE` changes the channel layout ([1, 8, 8, 16] -> [1, 8, 128]): a full copy on the GPU"
    ]


def test_gpu501_quantized_model_gpu502_int16() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8], "INT8", quant=(0.1, 0))
        y = g.op("RELU", [x], [1, 8], dtype="INT8", quant=(0.1, 0))
        z = g.input("z", [1, 8], "INT16", quant=(0.1, 0))
        g.output(g.op("RELU", [z], [1, 8], dtype="INT16", quant=(0.1, 0)))
        return y

    findings = lint(single(build))
    assert messages(findings, "GPU501") == ["2 runtime tensors are INT8: the GPU computes them in float"]
    assert messages(lint(single(build), quantized=False), "GPU501") == [
        "2 runtime tensors are INT8: the GPU computes them in float (and with --no-quantized the delegate refuses them)"
    ]
    assert messages(findings, "GPU502") == [
        "2 runtime tensors are INT16 (16x8 quantization): every int16 op variant is above the GPU delegate's versions"
    ]


def test_gpu503_int4_weights() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        w = g.const("w4", b"\x11" * 72, "INT4", shape=[4, 3, 3, 4])
        return g.op(
            "CONV_2D", [x, w, -1], [1, 8, 8, 4], version=7, options=dict(padding="SAME", stride_w=1, stride_h=1)
        )

    findings = lint(single(build))
    assert messages(findings, "GPU503") == [
        "`CONV_2D` reads INT4 constant `w4`: int4/int2 weights are above the GPU delegate's versions"
    ]
    assert messages(findings, "GPU104") == ["`CONV_2D` v7 is above the GPU delegate's maximum v6"]


def test_gpu504_dynamic_shape() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8], shape_signature=[-1, 8])
        return g.op("RELU", [x], [1, 8])

    assert messages(lint(single(build)), "GPU504") == [
        "input `x` has a dynamic shape [-1, 8]; the GPU delegate needs static shapes"
    ]


def test_gpu505_control_flow() -> None:
    mb = ModelBuilder()
    main, then, other = mb.subgraph("main"), mb.subgraph("then"), mb.subgraph("else")
    for sg in (then, other):
        v = sg.input("v", [1, 4])
        sg.output(sg.op("RELU", [v], [1, 4]))
    cond = main.input("cond", [], "BOOL")
    x = main.input("x", [1, 4])
    main.output(main.op("IF", [cond, x], [1, 4], options=dict(then_subgraph_index=1, else_subgraph_index=2)))
    assert messages(lint(mb.build()), "GPU505") == [
        "`IF` runs its subgraphs 1, 2 from the CPU; GPU work inside them is dispatched per call"
    ]


def test_gpu602_not_worth_delegating() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8])
        a = g.op("REVERSE_V2", [x, g.const("axis", np.array([1], np.int32))], [1, 8])
        return g.op("TOPK_V2", [a, g.const("k", np.array(2, np.int32))], shapes=[[1, 2], [1, 2]])[0]

    assert messages(lint(single(build)), "GPU602") == ["subgraph 0: none of its 2 ops can run on the GPU"]


def test_every_rule_has_a_message_test() -> None:
    tested = {
        word.upper()
        for name in globals()
        if name.startswith("test_gpu")
        for word in name.split("_")
        if word.startswith("gpu")
    }
    assert set(pack.builtin_rules()) <= tested


@pytest.mark.parametrize("code", sorted(pack.builtin_rules()))
def test_rule_entries_are_complete(code: str) -> None:
    rule = pack.builtin_rules()[code]
    assert rule.summary and rule.rationale and rule.references, code
    if rule.fix_pass:
        assert rule.fix_safety in ("safe", "unsafe")


def dynamic_batch_classifier(g: SubgraphBuilder) -> int:
    """A Keras-style head with a dynamic batch: SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE."""
    x = g.input("x", [1, 4, 4, 8], shape_signature=[-1, 4, 4, 8])
    shape = g.op("SHAPE", [x], [4], dtype="INT32", out_name="shape")
    i32 = np.int32
    batch = g.op(
        "STRIDED_SLICE",
        [shape, g.const("b", np.array([0], i32)), g.const("e", np.array([1], i32)), g.const("s", np.array([1], i32))],
        [],
        dtype="INT32",
        out_name="batch",
        options=dict(shrink_axis_mask=1),
    )
    target = g.op(
        "PACK",
        [batch, g.const("n", np.array(128, i32))],
        [2],
        dtype="INT32",
        out_name="target",
        options=dict(values_count=2),
    )
    return g.op("RESHAPE", [x, target], [1, 128], out_name="flat")


def test_gpu202_graph_refused() -> None:
    found = messages(lint(single(dynamic_batch_classifier)), "GPU202")
    assert found == [
        "the interpreter refuses the GPU delegate for the whole graph: `flat` is dynamic-sized after Prepare "
        "(RESHAPE, op 3 of subgraph 0: its shape operand `target` is computed at run time by PACK (op 2)). "
        'The interpreter says: "Attempting to use a delegate that only supports static-sized tensors with a graph '
        'that has dynamic-sized tensors (tensor#-1 is a dynamic-sized tensor)."'
    ]


def test_gpu203_backend_init_failure() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 4])
        return g.op("TRANSPOSE", [x, g.const("perm", np.array([0, 2, 1], np.int32))], [1, 4, 8])

    assert messages(lint(single(build)), "GPU203") == [
        "`TRANSPOSE` fails to initialize on the OpenGL ES backend (devices without OpenCL): "
        "No shader implementation for transpose"
    ]


@pytest.mark.parametrize(
    ("shape", "pads", "fails"),
    [
        ([1, 8, 8, 4], [[0, 0], [1, 1], [1, 1], [0, 0]], False),
        ([1, 8, 8, 4], [[0, 0], [0, 0], [0, 0], [0, 4]], False),
        ([1, 8, 4], [[0, 0], [1, 1], [0, 0]], True),  # the builder's BHWC(1, ...) for 3x2 paddings
        ([1, 8, 4], [[0, 0], [0, 0], [0, 0]], True),
    ],
)
def test_gpu203_opengl_pad_of_the_batch(shape: list[int], pads: list[list[int]], fails: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        out = [d + a + b for d, (a, b) in zip(shape, pads, strict=True)]
        return g.op("PAD", [g.input("x", shape), g.const("p", np.array(pads, np.int32))], out)

    found = messages(lint(single(build)), "GPU203")
    expected = "`PAD` fails to initialize on the OpenGL ES backend (devices without OpenCL): Padding for BATCH is not supported."
    assert found == ([expected] if fails else [])


@pytest.mark.parametrize(
    ("shape", "axes", "fails"),
    [
        ([1, 8, 8, 4], [1, 2], False),
        ([1, 8, 8, 4], [-3, -2], False),
        ([1, 8, 8, 4], [1], True),  # one of the two alone is not {HEIGHT, WIDTH}
        ([1, 8, 8, 4], [3], True),
        ([1, 8, 4], [1, 2], True),  # a 3-D input is BWC: axes 1, 2 are WIDTH, CHANNELS
        ([8, 4], [1], True),
    ],
)
def test_gpu203_opengl_mean_over_height_and_width_only(shape: list[int], axes: list[int], fails: bool) -> None:
    # gl/kernels/mean.cc 246-249 and ExtractAxisFromIndex (model_builder_helper.cc 123-153); each
    # row measured on the GL oracle
    def build(g: SubgraphBuilder) -> int:
        out = [1 if i in {a % len(shape) for a in axes} else d for i, d in enumerate(shape)]
        x, a = g.input("x", shape), g.const("axes", np.array(axes, np.int32))
        return g.op("MEAN", [x, a], out, options=dict(keep_dims=True))

    found = messages(lint(single(build)), "GPU203")
    expected = (
        "`MEAN` fails to initialize on the OpenGL ES backend (devices without OpenCL): "
        "Mean calculation is supported only for height and width."
    )
    assert found == ([expected] if fails else [])


@pytest.mark.parametrize("runtime", [True, False])
def test_gpu203_opengl_convolution_takes_one_runtime_tensor(runtime: bool) -> None:
    # FULLY_CONNECTED with runtime weights becomes a CONVOLUTION_2D with two inputs (builder
    # 1300-1307), which gl/kernels/conv.cc 176-180 refuses; a [1, 16] weight passes the batch check
    def build(g: SubgraphBuilder) -> int:
        w = g.input("w", [1, 16]) if runtime else g.const("w", np.ones((1, 16), np.float32))
        return g.op("FULLY_CONNECTED", [g.input("x", [1, 16]), w, -1], [1, 1])

    found = messages(lint(single(build)), "GPU203")
    expected = (
        "`FULLY_CONNECTED` fails to initialize on the OpenGL ES backend (devices without OpenCL): "
        "Convolution does not support more than 1 runtime tensor"
    )
    assert found == ([expected] if runtime else [])


def resize_to_computed_size(shape_first: bool) -> Model:
    """RESIZE whose size is SHAPE -> STRIDED_SLICE -> MUL of its input (as U^2-Net exports have it);
    `shape_first`: the graph starts with SHAPE, so the INT32 MUL is the first (largest) partition."""
    i32 = np.int32
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 4])
    y = x if shape_first else g.op("RELU", [x], [1, 8, 8, 4])
    s = g.op("SHAPE", [y], [4], dtype="INT32", options=dict(out_type="INT32"))
    ends = [g.const(n, np.array([v], i32)) for n, v in (("b", 1), ("e", 3), ("s", 1))]
    hw = g.op("STRIDED_SLICE", [s, *ends], [2], dtype="INT32")
    size = g.op("MUL", [hw, g.const("two", np.array([2, 2], i32))], [2], dtype="INT32")
    r = g.op("RESIZE_BILINEAR", [y, size], [1, 16, 16, 4])
    g.output(g.op("RELU", [r], [1, 16, 16, 4]))
    return mb.build()


def test_int32_mul_on_a_shape_computed_at_prepare_passes_the_tensor_gate() -> None:
    # SHAPE, STRIDED_SLICE and MUL of known operands are computed at Prepare (kTfLitePersistentRo),
    # and IsAllAllowedTensors (builder 3055-3077) only holds arena tensors to the float types: the
    # delegate takes the INT32 MUL. Alone in the largest partition, its INT32 input then fails the
    # OpenGL delegate (gl_delegate.cc 180-187), as the GL oracle does with this model.
    r = Linter(TARGETS["classic"], targets=TARGETS).lint(resize_to_computed_size(shape_first=True))
    mul = r.ops[2]
    assert mul.op == "MUL" and mul.placement == "init-failure"
    assert mul.backend_failures == {"opengl": "Input tensor is not found in the graph."}
    assert r.backends["opengl"]["init"] == "init-failure" and r.backends["opencl"]["init"] == "ok"
    assert [p.placement for p in r.ops] == ["cpu", "cpu", "init-failure", "cpu", "cpu"]


def test_int32_mul_on_a_computed_shape_outside_the_partition_is_only_cut_off() -> None:
    # the same MUL beside a larger float partition (RELU first): the RELU is delegated, the MUL is
    # supported but cut off, and nothing fails (GL oracle: 1 of 6 nodes delegated, ok)
    r = Linter(TARGETS["classic"], targets=TARGETS).lint(resize_to_computed_size(shape_first=False))
    assert r.verdict != "init-failure" and r.plans[0].delegated == {0}
    assert r.ops[3].op == "MUL" and r.ops[3].reasons == ["outside the delegated partition"]


def test_an_int32_mul_of_graph_inputs_stays_behind_the_tensor_gate() -> None:
    # the other side: an INT32 operand in the arena (a graph input) is refused by the gate
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [2], "INT32")
        return g.op("MUL", [x, g.const("two", np.array([2, 2], np.int32))], [2], dtype="INT32")

    (mul,) = Linter(TARGETS["classic"], targets=TARGETS).lint(single(build)).ops
    assert mul.placement == "cpu" and mul.codes[0][0] == "GPU107"


@pytest.mark.parametrize("sized", [True, False])
def test_gpu203_mediapipe_bilinear_needs_its_output_size(sized: bool) -> None:
    # MediaPipe's TransformTensorBilinearV2ToV1 makes every version-2 node version 1; the GL shader
    # then wants the output size from the options (GL oracle: initialises with it, fails without)
    def build(g: SubgraphBuilder) -> int:
        x, m = g.input("x", [1, 64, 64, 3]), g.input("m", [1, 4, 4])
        opts = bytes(flexbuffers.Dumps({"output_height": 32, "output_width": 32})) if sized else b""
        return g.op("TransformTensorBilinear", [x, m], [1, 32, 32, 3], custom_options=opts, version=2)

    found = messages(lint(single(build), target="mediapipe"), "GPU203")
    expected = (
        "`TransformTensorBilinear` fails to initialize on the OpenGL ES backend (devices without OpenCL): "
        "This case is not supported by TransformTensorBilinear."
    )
    assert found == ([] if sized else [expected])


@pytest.mark.parametrize("after", ["RESHAPE", "ABS"])
def test_gpu203_mediapipe_landmarks_stay_version_2_without_reshapes(after: str) -> None:
    # TransformLandmarksV2ToV1 only converts a node between two RESHAPEs; both backends' kernels
    # take version 1 only (GL oracle: face_landmark_with_attention's shape initialises)
    def build(g: SubgraphBuilder) -> int:
        flat, m = g.input("x", [1, 16]), g.input("m", [1, 4, 4])
        pts = g.op("RESHAPE", [flat, g.const("s", np.array([1, 8, 2], np.int32))], [1, 8, 2])
        out = g.op("TransformLandmarks", [pts, m], [1, 8, 2], custom_options=b"", version=2)
        if after == "ABS":
            return g.op("ABS", [out], [1, 8, 2])
        return g.op("RESHAPE", [out, g.const("s2", np.array([1, 16], np.int32))], [1, 16])

    found = messages(lint(single(build), target="mediapipe"), "GPU203")
    expected = [
        "`TransformLandmarks` fails to initialize on the OpenCL backend: Transform Landmarks operation "
        "supports only version 1.",
        "`TransformLandmarks` fails to initialize on the OpenGL ES backend (devices without OpenCL): "
        "This case is not supported by TransformLandmarks",
    ]
    assert found == ([] if after == "RESHAPE" else expected)


def test_gpu201_a_mediapipe_op_on_a_graph_input_kills_the_process() -> None:
    def build(g: SubgraphBuilder) -> int:
        return g.op("TransformLandmarks", [g.input("x", [1, 8, 2]), g.input("m", [1, 4, 4])], [1, 8, 2], version=2)

    (found,) = messages(lint(single(build), target="mediapipe"), "GPU201")
    assert found.endswith(
        "no op makes `x` (a graph input), whose producer MediaPipe's V2-to-V1 transformation reads: "
        "the process dies (SIGSEGV)"
    )


def test_gpu704_half_overflow_value() -> None:
    # found by the CPU interpreter on the user's inputs (check --input-range / --inputs), not by Linter
    from gpulint.verify.values import ValueInputs, value_findings

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 1024])
        axis = g.const("axis", np.array([-1], np.int32))
        return g.op("SUM", [x, axis], [1, 1], options=dict(keep_dims=True), out_name="total")

    found = value_findings(single(build), ValueInputs(low=0, high=255))
    assert messages(found, "GPU704") == [
        "`SUM` makes `total` reach 134366 on float inputs uniform in [0, 255] (seeds 0-2), past half's largest "
        "65504: Inf on the GPU in half; no half-precision pass keeps it in range on these inputs: keep-in-float, "
        "SUM (op 0) (`gpulint fix --inputs X.npz` says what each way costs)"
    ]


def _parse_failures() -> dict[str, Callable[[SubgraphBuilder], int]]:
    """One op each that the classic builder's Parse fails (the GL oracle's "OP: ..." errors)."""

    def const_batch(g: SubgraphBuilder) -> int:
        x = g.input("x", [2, 8, 8, 4])
        return g.op("SUB", [x, g.const("c", np.ones((2, 8, 8, 4), np.float32))], [2, 8, 8, 4])

    def const_rank(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 4])
        return g.op(
            "CONCATENATION", [x, g.const("c", np.zeros((1, 8, 4), np.float32))], [1, 8, 8], options=dict(axis=2)
        )

    def const_condition(g: SubgraphBuilder) -> int:
        c = g.const("c", np.ones((1, 8, 8, 4), bool), "BOOL")
        return g.op("SELECT_V2", [c, g.input("a", [1, 8, 8, 4]), g.input("b", [1, 8, 8, 4])], [1, 8, 8, 4])

    def pack_twice(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 4])
        return g.op("PACK", [x, x], [1, 2, 8, 4], options=dict(axis=1, values_count=2))

    return {
        "Batch size is not equal to 1.": const_batch,
        "Expected a 4D tensor of shape BxHxWxC but got 1x8x4": const_rank,
        "ReadNonConstantTensor: value is a constant tensor: 0": const_condition,
        "Node is already a consumer of the value": pack_twice,
    }


@pytest.mark.parametrize("words", sorted(_parse_failures()))
def test_gpu201_a_failure_in_the_builders_parse_fails_every_backend(words: str) -> None:
    # Parse runs before either backend builds anything (BuildModel), so OpenCL fails too
    result = Linter(TARGETS["classic"], targets=TARGETS).lint(single(_parse_failures()[words]))
    assert result.verdict == "init-failure" and words in result.reason
    assert {b: o["init"] for b, o in result.backends.items()} == {"opencl": "init-failure", "opengl": "init-failure"}


@pytest.mark.parametrize("kernel", [1, 3])
def test_gpu806_gl_grouped_1x1_conv(kernel: int) -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 16])
        w = g.const("w", np.zeros((16, kernel, kernel, 8), np.float32))
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [x, w, g.const("b", np.zeros(16, np.float32))], [1, 8, 8, 16], options=opts)

    model = single(build)
    expected = [
        "`CONV_2D` (op 0) is a grouped 1x1 convolution (2 groups): the OpenGL ES backend (devices without "
        "OpenCL) builds it with its 1x1 shader, which has no groups, and computes a dense convolution: wrong outputs"
    ]
    # a 3x3 one fails to initialize on OpenGL instead (GPU203); OpenCL alone computes groups right
    assert messages(lint(model), "GPU806") == (expected if kernel == 1 else [])
    only_cl = Linter(TARGETS["classic"], backends=("opencl",)).lint(model).findings
    assert messages(only_cl, "GPU806") == []


def test_gpu806_leaves_a_conv_the_builder_makes_depthwise() -> None:
    # one input channel per group and as many outputs as inputs: a DEPTHWISE_CONVOLUTION, not the 1x1 shader
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 16])
        w = g.const("w", np.zeros((16, 1, 1, 1), np.float32))
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [x, w, g.const("b", np.zeros(16, np.float32))], [1, 8, 8, 16], options=opts)

    assert messages(lint(single(build)), "GPU806") == []


def test_each_backend_fails_at_its_first_failing_subgraph() -> None:
    # The interpreter delegates subgraph 0, then 1, and stops at the first failure: OpenGL fails
    # on subgraph 0's TRANSPOSE, OpenCL only on subgraph 1's BATCH_MATMUL (a failure on every backend).
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 4])
    g.output(g.op("TRANSPOSE", [x, g.const("perm", np.array([0, 2, 1], np.int32))], [1, 4, 8]))
    body = mb.subgraph("other")
    y = body.input("y", [1, 4, 8])
    body.output(body.op("BATCH_MATMUL", [y, body.const("w", np.zeros((2, 8, 8), np.float32))], [1, 4, 8]))
    result = Linter(TARGETS["classic"]).lint(mb.build())
    bmm = "`BATCH_MATMUL` (op 0): Not supported batched mat mul case"
    assert result.backends == {
        "opencl": {"init": "init-failure", "reason": f"subgraph 1, {bmm}"},
        "opengl": {"init": "init-failure", "reason": "No shader implementation for transpose (at `TRANSPOSE`, op 0)"},
    }
    assert result.verdict == "init-failure"
    assert result.reason == (
        f"fails to initialize on the OpenCL backend: subgraph 1, {bmm}; on the OpenGL ES backend (devices "
        "without OpenCL): No shader implementation for transpose (at `TRANSPOSE`, op 0)"
    )


def test_every_rule_cites_public_sources() -> None:
    # `gpulint rule` and the HTML report show these to users, who cannot open our research notes.
    for rule in pack.builtin_rules().values():
        assert rule.references, rule.code
        assert not any("shared/" in r or "research" in r for r in rule.references), rule.code


@pytest.mark.parametrize(
    ("value", "axis", "fails"),
    [(1.0, 3, True), (0.0, 3, False), (0.0, 1, False), (0.0, 0, True)],  # batch: no padding made
)
def test_gpu203_opengl_constant_concat_operand(value: float, axis: int, fails: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        shape = [1, 8, 8, 4]
        c = g.const("c", np.full(shape, value, np.float32))
        out = [d * 2 if i == axis else d for i, d in enumerate(shape)]
        return g.op("CONCATENATION", [g.input("x", shape), c], out, options=dict(axis=axis))

    found = messages(lint(single(build)), "GPU203")
    expected = "`CONCATENATION` fails to initialize on the OpenGL ES backend (devices without OpenCL): "
    assert [m for m in found if m.startswith(expected + "No shader implementation for const")] == (
        [expected + "No shader implementation for const"] if fails else []
    )


def test_gpu110_delegate_device_gate() -> None:
    def build(g: SubgraphBuilder) -> int:
        return g.op("RELU", [g.input("x", [1, 8])], [1, 8])

    (msg,) = messages(lint(single(build), "coreml"), "GPU110")
    assert msg.startswith("the coreml delegate is created only on some devices: with the default enabled_devices")
    assert messages(lint(single(build)), "GPU110") == []


def test_gpu111_target_runtime() -> None:
    def build(g: SubgraphBuilder) -> int:
        return g.op("RELU", [g.input("x", [1, 8])], [1, 8])

    assert messages(lint(single(build), "litert-gpu"), "GPU111") == [
        "the litert-gpu target models ai-edge-litert 2.3.0 (LiteRT 2.3's GPU accelerator, "
        "libLiteRtWebGpuAccelerator.so); other releases decide some ops differently"
    ]
    assert messages(lint(single(build)), "GPU111") == []


def test_gpu801_gpu802_gpu803_gpu804_gpu805_runtime_defects() -> None:
    # Known defects of LiteRT's GPU accelerator: only on litert-gpu. Both sides of each condition
    # are in tests/test_runtime_defects.py.
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 16])
        w = g.op(
            "DEQUANTIZE",
            [g.op("DENSIFY", [g.const("w", np.ones((6, 16), np.float16))], [6, 16], dtype="FLOAT16")],
            [6, 16],
        )
        fc = g.op("FULLY_CONNECTED", [x, w, -1], [1, 6], out_name="fc")
        p = g.op(
            "PAD", [g.input("p", [2, 3, 6]), g.const("pads", np.array([[0, 1], [0, 0], [0, 0]], np.int32))], [3, 3, 6]
        )
        a = g.op("ADD", [g.input("s", [1, 3, 3, 6]), p], [1, 3, 3, 6], out_name="scores")
        q = g.op("BATCH_MATMUL", [g.input("q", [4, 8, 6]), g.input("k", [4, 6, 8])], [4, 8, 8])
        w8 = g.const("w8", np.ones((6, 6), np.int8), quant=(np.full(6, 0.01, np.float32), np.zeros(6, np.int64)))
        h = g.input("h", [1, 8, 6])
        r = g.op(
            "ADD", [g.op("FULLY_CONNECTED", [h, w8, -1], [1, 8, 6], options={"keep_num_dims": True}), h], [1, 8, 6]
        )
        g.output(fc)
        g.output(a)
        g.output(q)
        return r

    findings = lint(single(build), "litert-gpu")
    assert messages(findings, "GPU801") == [
        "1 DENSIFY op(s) make weights on the CPU for 1 op(s) on the GPU (first: `FULLY_CONNECTED`, op 2, reads "
        "`dequantize_1`): LiteRT 2.3's GPU accelerator runs such a sparse-weight model with CPU fallback and its "
        "outputs are wrong"
    ]
    assert messages(findings, "GPU802") == [
        "`PAD` pads axis [0] of the rank-3 tensor `p` [2, 3, 6]: LiteRT's GPU accelerator has been reported to "
        "return its rows shifted by one (google-ai-edge/LiteRT#9272)"
    ]
    assert messages(findings, "GPU803") == [
        "`ADD` broadcasts FLOAT32[1,3,3,6] with FLOAT32[3,3,6], two runtime inputs of different ranks: the GPU "
        "delegate's model builder has been reported to misalign them (google-ai-edge/LiteRT#8980)"
    ]
    assert messages(findings, "GPU804") == [
        "`BATCH_MATMUL` multiplies rank-3 FLOAT32[4,8,6] by FLOAT32[4,6,8] with a batch of 4: heads-as-batch rank-3 "
        "attention has been reported to compute wrong on GPU delegates (google-ai-edge/LiteRT#8619)"
    ]
    assert messages(findings, "GPU805") == [
        "`FULLY_CONNECTED` on a rank-3 input [1, 8, 6] with INT8 weights (dynamic-range quantized) is read by `ADD` "
        "(op 7): on Mali, LiteRT's ML Drift OpenCL accelerator has been reported to fail kernel creation for this "
        "pair (google-ai-edge/LiteRT#9277)"
    ]
    assert not [f for f in lint(single(build)) if f.code.startswith("GPU8")]  # classic: none


def test_gpu701_gpu702_gpu703_half_precision_numerics() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 1024])
        sq = g.op("MUL", [x, x], [1, 1024])
        s = g.op(
            "SUM", [sq, g.const("a", np.array([1], np.int32))], [1, 1], out_name="ss", options=dict(keep_dims=True)
        )
        e = g.op("EXP", [s], [1, 1])
        v = g.op("ADD", [s, g.const("eps", np.array(1e-12, np.float32))], [1, 1], out_name="v")
        g.output(e)
        return g.op("RSQRT", [v], [1, 1])

    f16 = "when the delegate computes in F16 (the Android default: precision loss allowed)"
    findings = lint(single(build))
    assert messages(findings, "GPU701") == [
        "`MUL` squares `x` (nothing bounds it) for the `SUM` of 1024 values (op 1): in half the square overflows "
        f"above 255.9 and the sum above 65504 (an RMS above 8), {f16}"
    ]
    assert messages(findings, "GPU702") == [
        f"`EXP` of `ss` (nothing bounds it) with no maximum subtracted first: exp is Inf in half above 11.09, {f16}"
    ]
    assert messages(findings, "GPU703") == [
        "`RSQRT` of `v`, a `SUM` of squares plus eps 1e-12 (0 in half): a near-constant row's variance is 0 in "
        f"half and RSQRT gives Inf (then NaN), {f16}"
    ]


def test_gpu807_gl_constant_broadcast() -> None:
    # Both sides of the condition, and the GL delegate itself, are in tests/test_gl_broadcast.py.
    def build(g: SubgraphBuilder) -> int:
        return g.op("ADD", [g.input("x", [1, 1]), g.const("c", np.zeros(48, np.float32))], [1, 48])

    assert messages(lint(single(build)), "GPU807") == [
        "`ADD` (op 0) broadcasts the runtime FLOAT32[1,1] along C with the constant FLOAT32[48] to FLOAT32[1,48]: the "
        "OpenGL ES backend (devices without OpenCL) reads the runtime operand only within its own shape, so every "
        "output past it is wrong"
    ]
    assert messages(lint(single(build), "litert-gpu"), "GPU807") == []


def test_gpu808_gpu809_litert_layout_defects() -> None:
    # Both sides of each condition, and the accelerator itself, are in tests/test_layout_passes.py.
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 16], "INT32")
        g.output(g.op("ADD", [x, g.const("c", np.arange(16, dtype=np.int32))], [1, 8, 16], dtype="INT32"))
        w = g.op("DEQUANTIZE", [g.const("w", np.ones((16, 16), np.int8), quant=(0.01, 0))], [16, 16])
        return g.op("FULLY_CONNECTED", [g.input("h", [1, 16]), w, -1], [1, 16])

    findings = lint(single(build), "litert-gpu")
    assert messages(findings, "GPU808") == [
        "`ADD` reads the non-float constant INT32[16] beside the runtime INT32[1,8,16]: ML Drift has been reported "
        "to lay such a constant out with its first dim as the batch and splat it across the channels "
        "(google-ai-edge/LiteRT#9664)"
    ]
    assert messages(findings, "GPU809") == [
        "`FULLY_CONNECTED` (op 2) takes its weights from a DEQUANTIZE of INT8[16,16]: LiteRT's GPU accelerator has "
        'been reported to fail kernel creation for it (a "Shape mismatch" between two BHWC layouts of the '
        "weights), which fails the whole compile (google-ai-edge/LiteRT#9523)"
    ]
    assert not [f for f in lint(single(build)) if f.code in ("GPU808", "GPU809")]  # classic: none


def test_gpu404_broadcast_to_on_cpu() -> None:
    # Both sides of the condition, the pass and both runtimes are in tests/test_broadcast_to.py.
    def build(g: SubgraphBuilder) -> int:
        shape = g.const("s", np.array([1, 4, 8, 64], np.int32))
        return g.op("BROADCAST_TO", [g.input("x", [1, 4, 1, 64]), shape], [1, 4, 8, 64], version=2)

    assert messages(lint(single(build), "litert-gpu"), "GPU404") == [
        "`BROADCAST_TO` (op 0) expands `x` [1, 4, 1, 64] to [1, 4, 8, 64] on the CPU: no GPU runtime parses it, "
        "and TILE, which they take, computes the same"
    ]
    assert messages(lint(single(build)), "GPU404") == []  # scoped to LiteRT's accelerator


def test_gpu810_gpu811_lost_graph_outputs() -> None:
    # Both sides of each condition, the pass and both runtimes are in tests/test_output_fusion.py.
    def build(g: SubgraphBuilder) -> int:
        s = g.op("ADD", [g.input("x", [1, 4, 4, 8]), g.input("y", [1, 4, 4, 8])], [1, 4, 4, 8], out_name="acc")
        g.output(s)
        return g.op("SUM", [s, g.const("axes", np.array([1, 2], np.int32))], [1, 1, 1, 8], options={"keep_dims": True})

    assert messages(lint(single(build), "litert-gpu"), "GPU810") == [
        "`ADD` (op 0) writes the graph output `acc`, which `SUM` (op 1) also reads: LiteRT's GPU accelerator merges "
        "the two and hands back another value for `acc` (google-ai-edge/LiteRT#8599)"
    ]

    def relu(g: SubgraphBuilder) -> int:
        s = g.op("ADD", [g.input("x", [1, 4, 4, 8]), g.input("y", [1, 4, 4, 8])], [1, 4, 4, 8], out_name="acc")
        g.output(s)
        return g.op("RELU", [s], [1, 4, 4, 8])

    assert messages(lint(single(relu)), "GPU811") == [
        "`ADD` (op 0) writes the graph output `acc`, which only `RELU` (op 1) reads inside the graph: the OpenGL ES "
        "backend merges the two into one shader and never writes `acc` (zeros)"
    ]


def test_gpu812_gl_batched_conv() -> None:
    # Both sides of the condition and the GL delegate are in tests/test_gl_batched_conv.py.
    def build(g: SubgraphBuilder) -> int:
        w = g.const("w", np.zeros((8, 3, 3, 4), np.float32))
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [g.input("x", [2, 8, 8, 4]), w, -1], [2, 8, 8, 8], out_name="y", options=opts)

    assert messages(lint(single(build)), "GPU812") == [
        "`CONV_2D` (op 0) has a batch of 2: the OpenGL ES backend computes only the first image of `y` and leaves "
        "the others zeros"
    ]

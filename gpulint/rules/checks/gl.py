"""The OpenGL ES backend's kernels (tflite/delegates/gpu/gl/kernels/*.cc): what it cannot
build of an op the delegate took. Target packs name these under a backend's `init_checks:`
(one op) and `graph_checks:` (the whole delegated partition); a failure is an init failure on
that backend only (GPU203).
"""

from __future__ import annotations

from typing import Any

from gpulint.rules.checks.builder import const_operand
from gpulint.rules.checks.registry import check, graph_check
from gpulint.rules.signature import OpSignature
from gpulint.text import clean


def _runtime_pair(sig: OpSignature) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The BHWC shapes of a two-runtime-input op, in the order the builder binds them: ADD and MUL
    put the "larger" tensor first (builder ElementwiseOperationParser 1147-1158)."""
    rt = sig.runtime_inputs
    if len(rt) != 2 or rt[0].index == rt[1].index or min(rt[0].rank, rt[1].rank) < 1:
        return None
    a, b = rt[0].bhwc, rt[1].bhwc
    if sig.op in ("ADD", "MUL") and a[1] <= b[1] and a[2] <= b[2] and a[3] == b[3]:
        a, b = b, a
    return a, b


def _same_or_hw_broadcast(sig: OpSignature) -> bool:
    """The two-runtime-input forms the OpenGL ADD and elementwise shaders build: equal shapes, or
    the second 1x1xC (add.cc 85-108, elementwise.cc 154-163). True when the op is not such a pair."""
    pair = _runtime_pair(sig)
    if pair is None:
        return True
    a, b = pair
    return a == b or (b[1] == 1 and b[2] == 1 and a[3] == b[3])


@check
def gl_add_shapes(sig: OpSignature) -> str | None:
    """gl/kernels/add.cc 85-108: two runtime inputs of equal shape, or the second 1x1xC."""
    return None if _same_or_hw_broadcast(sig) else "Shapes are not equal"


@check
def gl_elementwise_shapes(sig: OpSignature) -> str | None:
    """gl/kernels/elementwise.cc 154-185: SUB, DIV, MAXIMUM, ... with two runtime inputs of equal
    shape, or the second 1x1xC; anything else falls to the constant path, which has no constant."""
    if _same_or_hw_broadcast(sig):
        return None
    return "Couldn't read scalar of const vector data from the attributes."


@check
def gl_mul_shapes(sig: OpSignature) -> str | None:
    """gl/kernels/mul.cc 41-55: each dimension of the second runtime input equals the first's or is 1."""
    pair = _runtime_pair(sig)
    if pair is None:
        return None
    a, b = pair
    for dim in (2, 1, 3):
        if not (b[dim] == a[dim] or (b[dim] == 1 and a[dim] != 1)):
            return f"Second runtime tensor dimension {dim} must either match first tensor's dimensions or be 1."
    return None


# The GL shader that refuses a second runtime input, per op (the builder turns a
# FULLY_CONNECTED with runtime weights into a CONVOLUTION_2D: builder 1300-1307).
GL_RUNTIME_WEIGHTS = {
    "CONV_2D": "Convolution",
    "FULLY_CONNECTED": "Convolution",
    "DEPTHWISE_CONV_2D": "DepthWise Convolution",
    "TRANSPOSE_CONV": "Convolution Transposed",
}


@check
def gl_runtime_weights(sig: OpSignature) -> str | None:
    """Weights that are a runtime tensor (a graph input, another op's output, a DEQUANTIZE the
    delegate computes): the builder adds them as the node's second input (builder 634-651,
    926-930, 1300-1307, 2716-2720) and the OpenGL shaders take one (gl/kernels/conv.cc 44-48 and
    176-180, depthwise_conv.cc 42-46, transpose_conv.cc 41-45). GL oracle: a [1, 16] weight from a
    DEQUANTIZE left on the CPU, read by FULLY_CONNECTED. Sparse weights are not such: MergeDensify
    (transformations/merge_densify.cc 36-80, one of the general transformations GL applies) folds a
    DENSIFY, or a DENSIFY -> DEQUANTIZE, back into a convolution's weights."""
    if len(sig.runtime_inputs) < 2:
        return None
    w = sig.input(1)
    producer = sig.producer(w) if w is not None else None
    if producer is not None and producer.op == "DEQUANTIZE" and producer.inputs:
        producer = sig.producer(producer.inputs[0])
    if producer is not None and producer.op == "DENSIFY" and sig.op != "TRANSPOSE_CONV":
        return None
    return f"{GL_RUNTIME_WEIGHTS.get(sig.op, 'Convolution')} does not support more than 1 runtime tensor"


def grouped_conv(sig: OpSignature) -> tuple[str, int]:
    """What the builder makes of a CONV_2D with constant weights (builder 655-705, 751-): ("", 1)
    when it is not grouped, ("depthwise", g) for one input channel per group and as many outputs as
    inputs, ("grouped", g) for one grouped CONVOLUTION_2D (groups of a multiple of 4 input and
    output channels), ("split", g) for the rest (ResolveGroupedConvolution)."""
    x, w = sig.input(0), sig.input(1)
    out = sig.outputs[0] if sig.outputs else None
    if x is None or w is None or out is None or x.rank != 4 or w.rank != 4 or not w.is_const or not w.shape[3]:
        return "", 1
    src_c, group_in, dst_c = x.shape[3], w.shape[3], w.shape[0]
    if src_c == group_in or src_c % group_in:
        return "", 1
    groups = src_c // group_in
    if group_in == 1 and src_c == out.shape[-1]:
        return "depthwise", groups
    if group_in % 4 == 0 and (dst_c // groups) % 4 == 0:
        return "grouped", groups
    return "split", groups


def conv1x1_refusal(sig: OpSignature) -> str | None:
    """Why gl/kernels/conv.cc's Convolution1x1 shader (173-194), the first CONVOLUTION_2D shader the
    registry tries, does not take the conv; None where it does. It has no group check."""
    w = sig.input(1)
    if w is None or w.rank != 4 or (w.shape[1], w.shape[2]) != (1, 1):
        return "Height and width should be 1."
    if (sig.options.get("dilation_h_factor", 1), sig.options.get("dilation_w_factor", 1)) != (1, 1):
        return "Dilations are not supported."
    if (sig.options.get("stride_h", 1), sig.options.get("stride_w", 1)) != (1, 1):
        return "Strides are not supported."
    return None  # a 1x1 kernel at stride 1 pads nothing, SAME or VALID


def grouped_1x1_groups(sig: OpSignature) -> int:
    """The groups of a grouped CONVOLUTION_2D that OpenGL's 1x1 shader takes, ignoring them (GPU806); 0 if none."""
    kind, groups = grouped_conv(sig)
    return groups if kind == "grouped" and conv1x1_refusal(sig) is None else 0


@check
def gl_conv_groups(sig: OpSignature) -> str | None:
    """A grouped CONV_2D on OpenGL, as the builder lowers it (grouped_conv): a depthwise conv
    OpenGL builds; a split one needs a SPLIT shader OpenGL has not; a grouped CONVOLUTION_2D goes
    to the registry (gl/kernels/registry.cc 135-152), which tries the 1x1 shader, then the general
    one, which refuses groups (conv.cc 50-54), and joins their errors. The 1x1 shader takes a
    grouped 1x1 conv and computes it as a dense one (GPU806). The GL oracle shows all four."""
    kind, _ = grouped_conv(sig)
    if kind == "split":
        return "No shader implementation for split"
    if kind == "grouped" and (first := conv1x1_refusal(sig)) is not None:
        return f"{first}, Convolution does not support more than 1 group"
    return None


# -- checks over the whole delegated partition ------------------------------------------------


def _partition_values(graph: Any, delegated: set[int]) -> list[tuple[int, int]]:
    """(tensor, first op) for the runtime tensors of the delegated partition, in the order the
    builder creates its values: each op's runtime inputs, then its outputs, in execution order."""
    seen: dict[int, int] = {}
    weights: set[int] = set()  # what a delegated DENSIFY/DEQUANTIZE makes of constants: read as weights
    for n in sorted(delegated):
        op = graph.subgraph.operators[n]
        if graph.model.op_name(op) in ("DENSIFY", "DEQUANTIZE") and all(
            t < 0 or graph.is_const(t) or t in weights for t in op.inputs
        ):
            weights.update(op.outputs)
            continue
        for t in (*op.inputs, *op.outputs):
            if t >= 0 and t not in seen and t not in weights and not graph.is_const(t):
                seen[t] = n
    return list(seen.items())


@graph_check
def gl_batch_size(graph: Any, delegated: set[int]) -> tuple[int | None, str] | None:
    """common/model.cc 533-552 CheckBatchSizeForAllValues, called by the OpenGL backend only
    (gl/api.cc 385, gl/api2.cc 743): every value's B (of BHWC) equals the first value's."""
    values = [(t, n) for t, n in _partition_values(graph, delegated) if graph.subgraph.tensors[t].shape]
    if not values:
        return None
    batch = graph.subgraph.tensors[values[0][0]].shape[0]
    odd = [(t, n) for t, n in values if graph.subgraph.tensors[t].shape[0] != batch]
    if not odd:
        return None
    t, n = odd[0]
    name = clean(graph.subgraph.tensors[t].name or f"tensor {t}", 80)
    return n, (
        f"Batch size mismatch, expected {batch} but got {len(odd)} values with divergent batch sizes "
        f"(first: `{name}` {list(graph.subgraph.tensors[t].shape)})"
    )


@graph_check
def gl_float_io(graph: Any, delegated: set[int]) -> tuple[int | None, str] | None:
    """gl_delegate.cc 180-227 (TfLiteGpuDelegate): every runtime tensor the partition takes from or
    hands back to the interpreter must be FLOAT32, else "Input/Output tensor is not found in the graph." """

    def other(t: int) -> bool:
        # Quantized tensors only reach a partition with the quantized-models flag, which only
        # TfLiteGpuDelegateV2 has; it converts them at the boundary (delegate.cc quant_conversion_map).
        tensor = graph.subgraph.tensors[t]
        return tensor.type != "FLOAT32" and tensor.quantization is None

    for n in sorted(delegated):
        op = graph.subgraph.operators[n]
        for t in op.inputs:
            outside = t >= 0 and not graph.is_const(t) and graph.producer.get(t) not in delegated
            if outside and other(t):
                return n, "Input tensor is not found in the graph."
        for t in op.outputs:
            readers = graph.consumers.get(t, [])
            leaves = t in graph.graph_outputs or any(r not in delegated for r in readers)
            if leaves and other(t):
                return n, "Output tensor is not found in the graph."
    return None


@check
def gl_elementwise_const(sig: OpSignature) -> str | None:
    """gl/kernels/elementwise.cc 175-185: SUB, DIV, MAXIMUM, ... take a constant only as a scalar or a
    per-channel vector (builder ParseInputsWithConstTensorImpl: linear when every dim but the last is 1)."""
    const = const_operand(sig)
    if const is None or all(d == 1 for d in const.shape[:-1]):
        return None
    return "Couldn't read scalar of const vector data from the attributes."


@check
def gl_mean_axes(sig: OpSignature) -> str | None:
    """gl/kernels/mean.cc 241-249: the shader takes exactly {HEIGHT, WIDTH}. The builder names the
    axes by the input's rank (model_builder_helper.cc ExtractAxisFromIndex 123-153: rank 4 BHWC,
    3 BWC, 2 BC, 1 B), so only axes 1 and 2 of a 4-D input together pass: a 3-D input has no
    height, and one of the two alone is not the set (oracle: [1, 2] of a rank-3 tensor, [1] or
    [2] alone of a rank-4 one all fail)."""
    x = sig.input(0)
    axes = sig.const_values(sig.inputs[1]) if len(sig.inputs) > 1 and x is not None else None
    if x is None or axes is None:
        return None
    if x.rank == 4 and {int(a) % 4 for a in axes} == {1, 2}:
        return None
    return "Mean calculation is supported only for height and width."


@check
def gl_batched_matmul(sig: OpSignature) -> str | None:
    """Only two runtime operands make a BATCHED_MATMUL node, which gl/kernels/registry.cc has no
    shader for; a constant 2-D right-hand side becomes a 1x1 CONVOLUTION_2D (model_builder.cc
    331-370, BatchedMatMulOperationParser), which it has."""
    if len(sig.runtime_inputs) == 2:
        return "No shader implementation for batched_matmul"
    return None


@check
def gl_const_node(sig: OpSignature) -> str | None:
    """A constant operand of CONCATENATION or PACK becomes a CONSTANT node in the builder
    (model_builder.cc 507-518, 1640-1653), and gl/kernels/registry.cc has no shader for it. The one
    way out is MakePaddingFromZerosConcat (transformations/make_padding.cc 48-98): a two-input
    concat on H, W or C whose first all-zero constant operand becomes zero padding. A constant of
    another rank than 4 fails in the builder first (builder.const_operand_rank)."""
    consts = [t for t in sig.inputs if t.is_const]
    if not consts:
        return None
    if sig.op == "CONCATENATION" and len(sig.inputs) == 2 and len(consts) == 1 and sig.outputs:
        rank = sig.outputs[0].rank
        axis = int(sig.options.get("axis", 0)) % max(rank, 1)
        values = sig.const_values(consts[0])
        if axis != 0 and rank == 4 and values is not None and not any(values):
            return None  # ExtractAxisFromIndex: any axis but the batch is H, W or C
    return "No shader implementation for const"


@check
def gl_pad_batch(sig: OpSignature) -> str | None:
    """gl/kernels/pad.cc 49-51 rejects padding of the batch. The builder (model_builder.cc
    1773-1784, PadOperationParser) reads 4x2 paddings as BHWC and 3x2 paddings as
    BHWC(1, ...) before and after: a 3-D PAD or MIRROR_PAD always "pads" the batch by 1."""
    paddings = sig.const_values(sig.inputs[1]) if len(sig.inputs) > 1 else None
    if paddings is None or len(paddings) not in (6, 8):
        return None
    if len(paddings) == 8 and paddings[0] == paddings[1] == 0:
        return None
    return "Padding for BATCH is not supported."

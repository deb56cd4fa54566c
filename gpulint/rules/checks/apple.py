"""The checks of the two iOS delegates that are too rich to be data.

Core ML: `coreml` = tflite/delegates/coreml/coreml_delegate.mm (IsNodeSupportedByDelegate 38-154),
`util` = coreml/builders/util.cc (IsBinaryOpSupported, IsBroadcastable), and each
coreml/builders/*_op_builder.cc's Is*OpSupported; Metal: tflite/delegates/gpu/metal_delegate.mm.
All at google-ai-edge/LiteRT@f67457790c9c (the same files as tensorflow/tensorflow's
tensorflow/lite/delegates/...). No Apple device is here, so none of this is checked against the
real delegate: each condition has a one-op model on either side of it in tests/test_apple_targets.py.

The Core ML delegate returns a bare `false` for an op it refuses; the reasons below say which of
its conditions failed, in the source's words where it logs any.
"""

from __future__ import annotations

from typing import Any

from gpulint.rules.checks.gl import gl_float_io
from gpulint.rules.checks.registry import check, graph_check
from gpulint.rules.signature import OpSignature, TensorSpec

MAX_KERNEL = 16384  # convolution_op_builder.cc 345


def _dtype(sig: OpSignature, t: TensorSpec) -> str:
    """The type the delegate sees: FP16GraphPartitionHelper points an op at the fp16 constant
    behind a DEQUANTIZE before asking whether it is supported (delegates/utils.cc 257-268)."""
    p = sig.graph.producer.get(t.index)
    if p is not None and p in sig.graph.folded_fp16:
        return "FLOAT16"
    return t.dtype


def _activation(sig: OpSignature) -> str:
    return str(sig.options.get("fused_activation_function", "NONE"))


@check
def coreml_float_input(sig: OpSignature, index: int = 0) -> str | None:
    """coreml 60-69: the first input (TRANSPOSE_CONV: the third) must be FLOAT32; this is how the
    delegate keeps full-integer quantized ops off Core ML."""
    t = sig.input(index)
    if t is None:
        return f"Core ML delegate: input {index} is missing"
    dtype = _dtype(sig, t)
    if dtype != "FLOAT32":
        return f"Core ML delegate: input {index} (`{t.name}`) is {dtype}, not FLOAT32"
    return None


@check
def coreml_options(sig: OpSignature) -> str | None:
    """coreml 80, 116, 142 and each builder's first line: node->builtin_data must be set."""
    return None if sig.has_options else "Core ML delegate: the op has no builtin options"


@check
def coreml_no_activation(sig: OpSignature) -> str | None:
    """coreml 83-86, 105-108 (pools), concatenation_op_builder.cc 74: fused activation NONE only."""
    act = _activation(sig)
    return None if act == "NONE" else f"Core ML delegate: fused activation {act} is not supported on {sig.op}"


def _shape4(t: TensorSpec) -> tuple[int, ...]:
    return (1,) * (4 - t.rank) + tuple(t.shape)


@check
def coreml_binary(sig: OpSignature) -> str | None:
    """util IsBinaryOpSupported 96-104: both inputs FLOAT32, or FLOAT16 constants; then
    IsBroadcastable 41-82 over the shapes padded to B,H,W,C: rank 4 at most; a different B only
    against a one-element constant; a different (H, W) only when one side is (1, 1); a different
    C only when one side is 1."""
    if len(sig.inputs) < 2 or sig.input(0) is None or sig.input(1) is None:
        return "Core ML delegate: the op needs two inputs"
    a, b = sig.inputs[0], sig.inputs[1]
    for t in (a, b):
        dtype = _dtype(sig, t)
        if not (dtype == "FLOAT32" or (dtype == "FLOAT16" and t.is_const)):
            return f"Core ML delegate: `{t.name}` is {dtype}; the op takes FLOAT32, or FLOAT16 constants"
    if a.rank > 4 or b.rank > 4:
        return "Core ML delegate: operands of rank above 4 do not broadcast"
    sa, sb = _shape4(a), _shape4(b)
    shapes = f"{list(a.shape)} and {list(b.shape)}"
    if sa[0] != sb[0] and not ((a.is_const and a.elements == 1) or (b.is_const and b.elements == 1)):
        return f"Core ML delegate: {shapes} differ in batch, and neither is a one-element constant"
    if sa[1:3] != sb[1:3] and sa[1:3] != (1, 1) and sb[1:3] != (1, 1):
        return f"Core ML delegate: {shapes} differ in height/width, and neither is 1x1 there"
    if sa[3] != sb[3] and sa[3] != 1 and sb[3] != 1:
        return f"Core ML delegate: {shapes} differ in channels, and neither has 1"
    return None


@check
def coreml_concatenation(sig: OpSignature) -> str | None:
    """concatenation_op_builder.cc 65-83: two inputs or more, along the channels only (axis 2 or -1
    of a 3-D first input, 3 or -1 of a 4-D one)."""
    if len(sig.inputs) < 2:
        return "Core ML delegate: CONCATENATION needs two inputs or more"
    x = sig.input(0)
    axis = int(sig.options.get("axis", 0))
    rank = x.rank if x is not None else 0
    if (rank == 3 and axis in (2, -1)) or (rank == 4 and axis in (3, -1)):
        return None
    return f"Core ML delegate: concatenation along axis {axis} of a rank-{rank} input (channels only)"


@check
def coreml_convolution(sig: OpSignature) -> str | None:
    """convolution_op_builder.cc 312-365: no SIGN_BIT activation; constant weights whose dims 1
    and 2 are at most 16384; TRANSPOSE_CONV: a constant output shape; else a constant bias."""
    if sig.op != "TRANSPOSE_CONV" and _activation(sig) == "SIGN_BIT":
        return "Core ML delegate: fused activation SIGN_BIT"
    w = sig.input(1)
    if w is None:
        return "Core ML delegate: the op has no weights"
    if not w.is_const:
        return f"Core ML delegate: weights `{w.name}` are not constant"
    if w.rank >= 3 and (w.shape[1] > MAX_KERNEL or w.shape[2] > MAX_KERNEL):
        return f"Core ML delegate: weights {list(w.shape)} above the kernel size limit {MAX_KERNEL}"
    if sig.op == "TRANSPOSE_CONV":
        shape = sig.input(0)
        if shape is None or not shape.is_const:
            return "Core ML delegate: TRANSPOSE_CONV's output shape is not constant"
        return None
    # The source reads input 2 whenever the node has two inputs or more; an omitted bias (-1)
    # would be dereferenced there, which no converter writes: only a runtime bias is refused.
    bias = sig.input(2)
    if bias is not None and not bias.is_const:
        return f"Core ML delegate: bias `{bias.name}` is not constant"
    return None


@check
def coreml_fully_connected(sig: OpSignature) -> str | None:
    """fully_connected_op_builder.cc 149-192: DEFAULT weights format; float input; constant float
    weights; a single batch (the input's last dim is all its elements); a constant float bias;
    no SIGN_BIT. An omitted bias (-1) makes GetInputSafe fail, and TF_LITE_ENSURE_OK then returns
    that error code from the bool function, which reads as true: the op is taken unchecked."""
    if str(sig.options.get("weights_format", "DEFAULT")) != "DEFAULT":
        return "Core ML delegate: FULLY_CONNECTED weights format is not DEFAULT"
    x, w = sig.input(0), sig.input(1)
    if x is None or w is None:
        return "Core ML delegate: FULLY_CONNECTED needs an input and weights"
    if _dtype(sig, x) not in ("FLOAT32", "FLOAT16"):
        return f"Core ML delegate: input `{x.name}` is {_dtype(sig, x)}"
    if _dtype(sig, w) not in ("FLOAT32", "FLOAT16") or not w.is_const:
        return f"Core ML delegate: weights `{w.name}` are not constant float ({_dtype(sig, w)})"
    if x.rank == 0 or x.shape[-1] != x.elements:
        return f"Core ML delegate: input {list(x.shape)} is not a single batch (Core ML 2 fully connected)"
    if len(sig.inputs) > 2:
        bias = sig.inputs[2]
        if bias.omitted:
            return None
        if _dtype(sig, bias) not in ("FLOAT32", "FLOAT16") or not bias.is_const:
            return f"Core ML delegate: bias `{bias.name}` is not constant float"
    if _activation(sig) == "SIGN_BIT":
        return "Core ML delegate: fused activation SIGN_BIT"
    return None


@check
def coreml_mean(sig: OpSignature) -> str | None:
    """pooling_layer_builder.cc 141-166: keep_dims, a 4-D input, and axes among H and W (1, 2, -3,
    -2). The axes are read as data: runtime axes are refused here (and make the graph dynamic)."""
    if not sig.options.get("keep_dims", False):
        return "keep_dims should be true for Mean op."
    x = sig.input(0)
    if x is None or x.rank != 4:
        return "Mean op is only supported for 4D input."
    axes_t = sig.input(1)
    axes = sig.const_values(axes_t) if axes_t is not None else None
    if axes is None:
        return "Core ML delegate: MEAN's axes are not constant"
    if any((int(a) + 4) % 4 not in (1, 2) for a in axes):
        return "Mean op should reduce for H and W dimensions."
    return None


@check
def coreml_pad(sig: OpSignature) -> str | None:
    """pad_op_builder.cc 100-131 (PAD, PADV2, MIRROR_PAD): constant 4x2 paddings, none on the
    batch or the channels."""
    p = sig.input(1)
    values = sig.const_values(p) if p is not None else None
    if p is None or values is None:
        return "Only constant padding is supported for PAD."
    if p.shape != (4, 2):
        return "Only 4D inputs are supported for PAD."
    if values[0] != 0 or values[1] != 0:
        return "Padding for batch dimension is not supported in PAD."
    if values[6] != 0 or values[7] != 0:
        return "Padding for channel dimension is not supported in PAD."
    return None


@check
def coreml_mirror_pad(sig: OpSignature) -> str | None:
    """pad_op_builder.cc 133-143: REFLECT mode only, then as PAD."""
    if str(sig.options.get("mode", "REFLECT")) != "REFLECT":
        return "Only REFLECT mode is supported for MIRROR_PAD."
    return coreml_pad(sig)


@check
def coreml_reshape(sig: OpSignature, coreml_version: int) -> str | None:
    """reshape_op_builder.cc 124-147: never with Core ML 3 (the default on iOS 13+); with Core ML 2,
    a constant INT32 1-D shape of 3 or 4 elements (or new_shape of 3 or 4 dims without one)."""
    if coreml_version >= 3:
        return "Core ML delegate: RESHAPE is not delegated with Core ML 3 (--coreml-version 2 takes some)"
    if len(sig.inputs) == 1:
        dims = sig.options.get("new_shape") or []
        return None if len(dims) in (3, 4) else f"Core ML delegate: new_shape of {len(dims)} dims (3 or 4 only)"
    shape = sig.input(1)
    if shape is None or not sig.graph.has_data(shape.index):
        return "Reshape has non-const shape."
    if shape.rank != 1 or shape.dtype != "INT32" or shape.shape[0] not in (3, 4):
        return f"Core ML delegate: shape tensor {shape.describe()} (a 1-D INT32 of 3 or 4 elements only)"
    return None


@check
def coreml_resize_bilinear(sig: OpSignature) -> str | None:
    """resize_bilinear_op_builder.cc 91-104: a constant output size."""
    size = sig.input(1)
    return None if size is not None and size.is_const else "Output size of ResizeBilinear should be constant."


@check
def coreml_softmax_beta(sig: OpSignature) -> str | None:
    """coreml 139-143: "Only supports when beta is 1.0 for now"."""
    beta = float(sig.options.get("beta", 0.0))
    return None if beta == 1.0 else f"Core ML delegate: SOFTMAX beta {beta:g} (1.0 only)"


@graph_check
def coreml_io_rank(graph: Any, delegated: set[int]) -> tuple[int | None, str] | None:
    """coreml_delegate_kernel.mm 30-42, 97-175: the Core ML model's inputs and outputs are built
    with GetDims, which fails for a tensor of rank above 4, so the delegate fails to initialize."""

    def rank(t: int) -> int:
        return len(graph.subgraph.tensors[t].shape)

    for n in sorted(delegated):
        op = graph.subgraph.operators[n]
        for t in op.inputs:
            if t >= 0 and not graph.is_const(t) and graph.producer.get(t) not in delegated and rank(t) > 4:
                return n, f"partition input of rank {rank(t)} (GetDims: 4 at most)"
        for t in op.outputs:
            leaves = t in graph.graph_outputs or any(r not in delegated for r in graph.consumers.get(t, []))
            if leaves and rank(t) > 4:
                return n, f"partition output of rank {rank(t)} (GetDims: 4 at most)"
    return None


@graph_check
def metal_float_io(graph: Any, delegated: set[int]) -> tuple[int | None, str] | None:
    """metal_delegate.mm 295-343 (Delegate::Prepare): each runtime tensor the partition takes from
    or hands back to the interpreter must be FLOAT32 once quantized ones are mapped to their float
    copies, else "Input/Output tensor is not found in the graph." - the test gl_delegate.cc makes."""
    return gl_float_io(graph, delegated)

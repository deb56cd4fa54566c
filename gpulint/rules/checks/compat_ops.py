"""The classic delegate's compatibility checks of one op family (compat = tflite/tools/
versioning/gpu_compatibility.cc, builder = tflite/delegates/gpu/common/model_builder.cc, for
what its IsSupported asks): convolutions, padding and slicing, casts and comparisons, gathers,
LSTM. A refusal here is made at partition time: the op runs on the CPU.
"""

from __future__ import annotations

from gpulint.model import schema
from gpulint.rules.checks.compat import FLOAT_TYPES, inputs_consts_outputs, one_or_two_operands, runtime_outputs
from gpulint.rules.checks.registry import check
from gpulint.rules.signature import OpSignature


@check
def depthwise_shapes(sig: OpSignature) -> str | None:
    """compat CheckDepthwiseConvGpuDelegateCompatibility, after strides/dilation/activation."""
    x, w = sig.inputs[0], sig.inputs[1]
    bias = sig.inputs[2] if len(sig.inputs) > 2 and not sig.inputs[2].omitted else None
    out = sig.outputs[0]
    for name, t in (("input", x), ("filter", w), ("output", out)):
        if t.rank != 4:
            return f"{name}.dims.size != 4"
    if x.shape[0] != out.shape[0]:
        return "input.b != output.b"
    if w.shape[3] != out.shape[3]:
        return "filter.i != output.c"
    if out.shape[3] != x.shape[3] * sig.options.get("depth_multiplier", 0):
        return "output.c != input.c * depth_multiplier"
    if bias is not None and bias.elements != out.shape[3]:
        return "bias.size != output.c"
    return None


@check
def fully_connected(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinFullyConnected."""
    fmt = sig.options.get("weights_format", "DEFAULT")
    if fmt != "DEFAULT":
        code = schema.enum_value("FullyConnectedOptionsWeightsFormat", fmt)
        return f"Unsupported FullyConnected weights format: {code}"
    if len(sig.runtime_inputs) > 2:
        return "FullyConnected doesn't support more than 2 runtime inputs."
    if sig.inputs and sig.inputs[0].is_const:
        return "FullyConnected doesn't support constant input."
    # compat's keep_num_dims check (rank(in) != rank(out)) never fires under the interpreter: the
    # delegate partitions after every op's Prepare (core/subgraph.cc 2538-2546), and FC's Prepare
    # gives a keep_num_dims output the input's rank, whatever the file declares (the oracle agrees).
    return None


@check
def pad(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinPad/Padv2/MirrorPad."""
    if sig.op == "MIRROR_PAD" and sig.options.get("mode") != "REFLECT":
        # the message prints TfLiteMirrorPaddingMode (builtin_op_data.h: unknown 0, reflect 1,
        # symmetric 2), the schema's MirrorPadMode plus one (GL oracle: SYMMETRIC says 2)
        mode = schema.enum_value("MirrorPadMode", sig.options.get("mode", 0)) + 1
        return f"Only Reflective padding is supported for Mirror Pad operation. But node has {mode}"
    if (why := runtime_outputs(sig, 1, 1)) is not None:
        return why
    if len(sig.inputs) < 2:
        return f"Requested index goes beyond array size: 1 vs {len(sig.inputs)}"
    p = sig.inputs[1]
    if p.rank != 2:
        return f"Invalid paddings tensor dimension: expected 2 dim, got {p.rank} dim"
    if p.shape[0] not in (3, 4) or p.shape[1] != 2:
        return f"Invalid paddings tensor shape: expected 4x2 or 3x2, got {p.shape[0]}x{p.shape[1]}"
    return None


@check
def resampler_shapes(sig: OpSignature) -> str | None:
    """builder ResamplerOperationParser::Parse: src and warp batches match, warp has 2+ channels."""
    src, warp = sig.inputs[0], sig.inputs[1]
    if src.rank != 4 or warp.rank != 4 or src.shape[0] != warp.shape[0] or warp.shape[3] < 2:
        return "Resampler: src and warp must be rank 4 with equal batch, and warp must have at least 2 channels"
    return None


@check
def resize(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinResizeBilinear."""
    if sig.options.get("align_corners") and sig.options.get("half_pixel_centers"):
        return "If half_pixel_centers is True, align_corners must be False."
    return None


@check
def strided_slice(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinStridedSlice."""
    if sig.options.get("ellipsis_mask", 0):
        return "StridedSlice does not support ellipsis_mask."
    if sig.options.get("new_axis_mask", 0):
        return "StridedSlice does not support new_axis_mask."
    if sig.options.get("shrink_axis_mask", 0):
        return "StridedSlice does not support shrink_axis_mask parameter."
    if len(sig.inputs) < 4:
        return "STRIDED_SLICE requires 4 inputs."
    if sig.inputs[0].rank not in (3, 4):
        return "STRIDED_SLICE supports for 3 or 4 dimensional tensors only."
    return None


@check
def slice_(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinSlice."""
    if len(sig.inputs) < 3:
        return f"SLICE requires 3 inputs, but node has {len(sig.inputs)} inputs."
    rank = sig.inputs[0].rank
    if rank not in (3, 4):
        return f"SLICE supports for 3 or 4 dimensional tensors only, but node has {rank} dimensional tensors."
    return None


@check
def softmax_beta(sig: OpSignature) -> str | None:
    return None if sig.options.get("beta", 0.0) == 1.0 else "Softmax.beta != 1 is not supported."


@check
def block_size(sig: OpSignature) -> str | None:
    """compat DEPTH_TO_SPACE / SPACE_TO_DEPTH."""
    bs = sig.options.get("block_size", 0)
    if bs == 1:
        return f"{sig.op} block_size = 1 is a no-op."
    if bs < 1:
        return f"{sig.op} block_size must be > 1."
    return None


@check
def cast_types(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinCast: BOOL->F16/F32, F16/F32->BOOL, {F32,I32}->{F32,I32}."""
    src, dst = sig.inputs[0].dtype, sig.outputs[0].dtype
    ok = (
        (src == "BOOL" and dst in FLOAT_TYPES)
        or (src in FLOAT_TYPES and dst == "BOOL")
        or (src in ("FLOAT32", "INT32") and dst in ("FLOAT32", "INT32"))
    )
    return None if ok else f"Not supported Cast case. Input type: {src} and output type: {dst}"


@check
def cast_from_bool(sig: OpSignature) -> str | None:
    """builder CastOperationParser::IsSupported (388-407): a BOOL input to a float output needs one
    producer and one reader, and the cast's output exactly one reader (not a model output)."""
    x = sig.inputs[0] if sig.inputs else None
    if x is None or x.dtype != "BOOL" or not sig.outputs or sig.outputs[0].dtype not in FLOAT_TYPES:
        return None
    out = sig.outputs[0]
    if sig.producer(x) is None or len(sig.consumers(x)) != 1:
        return "Not supported cast case"
    if out.is_graph_output or len(sig.consumers(out)) != 1:
        return "Cast from bool not supported for outputs"
    return None


COMPARISONS = ("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL")


@check
def comparison_consumer(sig: OpSignature) -> str | None:
    """builder 1073-1093: a comparison is delegated only when its one consumer is CAST, SELECT or
    SELECT_V2 with a float output."""
    if not sig.outputs:
        return "Not supported logical op case."
    consumers = sig.consumers(sig.outputs[0])
    if sig.outputs[0].is_graph_output or len(consumers) != 1:
        return "Not supported logical op case."
    c = consumers[0]
    if c.op not in ("CAST", "SELECT", "SELECT_V2") or not c.outputs or c.outputs[0].dtype not in FLOAT_TYPES:
        return "Not supported logical op case."
    return None


@check
def gather(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinGather (LiteRT: INT32 data is accepted)."""
    if one_or_two_operands(sig) is not None:
        return "Op can only handle 1 or 2 operand(s)."
    if sig.inputs[1].rank != 1:
        return "Only support 1D indices"
    return None if sig.inputs[1].dtype == "INT32" else "Only accept INT32 indices"


@check
def one_hot(sig: OpSignature) -> str | None:
    """compat CheckOneHotGpuDelegateCompatibility."""
    if len(sig.inputs) != 4 and len(sig.outputs) != 1:
        return "Expects 4 inputs and 1 output"
    error = (
        "Indices must be int32 type, on/off tensors must be constant, scalar, float type, axis must be -1 or last dim"
    )
    idx = sig.inputs[0]
    if idx.dtype != "INT32":
        return error
    axis = sig.options.get("axis", -1)
    if axis != -1 and (not idx.shape or axis != idx.shape[-1]):
        return error
    for i in range(idx.rank - 1):
        if idx.rank > 3 and i == 0:
            continue
        if idx.shape[i] != 1:
            return f"Unsupported non-singleton dim at {i}"
    on, off = sig.inputs[2], sig.inputs[3]
    if on.dtype != "FLOAT32" or off.dtype != "FLOAT32":
        return error
    if not on.is_const or not off.is_const or on.rank > 1 or off.rank > 1:
        return error
    if (on.shape and on.shape[0] > 1) or (off.shape and off.shape[0] > 1):
        return error
    return None


@check
def select(sig: OpSignature) -> str | None:
    """compat CheckSelectV2GpuDelegateCompatibility."""
    if len(sig.inputs) != 3 or len(sig.outputs) != 1:
        return "Expected 3 inputs and 1 output"
    error = (
        "Cond must be float or bool type, if, else tensors must be float and either be same the shape as "
        "output or constant, scalar."
    )
    cond, a, b = sig.inputs
    if cond.dtype not in ("BOOL", *FLOAT_TYPES) or a.dtype not in FLOAT_TYPES or b.dtype not in FLOAT_TYPES:
        return error
    out = sig.outputs[0].shape
    for t in (a, b):
        if t.shape and t.shape != out and (t.rank > 1 or t.shape[0] > 1):
            return error
    return None


@check
def lstm(sig: OpSignature) -> str | None:
    """compat kTfLiteBuiltinLstm: the FULL kernel, or the BASIC kernel with its fixed shape."""
    act = sig.options.get("fused_activation_function", "NONE")
    code = schema.enum_value("ActivationFunctionType", act)
    if sig.options.get("kernel_type", "FULL") == "FULL":
        if len(sig.inputs) not in (20, 24):
            return f"Expected 20 or 24 input tensors, but node has {len(sig.inputs)} input(s)."
        if len(sig.outputs) != 1:
            return f"Expected 1 output tensor, but node has {len(sig.outputs)} output(s)."
        if act not in ("SIGMOID", "TANH"):
            return f"Only sigmoid or tanh activation is supported, but node has {code}"
        return None
    if (why := inputs_consts_outputs(sig, 3, 2, 4)) is not None:
        return why
    if act != "TANH":
        return f"Only TANH activation is supported. but node has {code}"
    if sig.options.get("cell_clip", 0) != 0:
        return "cell_clip is not supported."
    if sig.options.get("proj_clip", 0) != 0:
        return "proj_clip is not supported."
    return None


@check
def cumsum(sig: OpSignature) -> str | None:
    """compat CheckCumsumGpuDelegateCompatibility."""
    if len(sig.inputs) != 2:
        return "Expects 2 inputs and 1 output"
    x, axis = sig.inputs
    if x.dtype not in FLOAT_TYPES or sig.outputs[0].dtype != x.dtype or axis.dtype != "INT32" or not axis.is_const:
        return "Input/output must be float type and indices must be constant int32 type"
    return None


@check
def dequantize_input(sig: OpSignature) -> str | None:
    if len(sig.inputs) != 1 or len(sig.outputs) != 1:
        return f"Expected 1 input & output each from Dequantize, got: %d, %d{len(sig.inputs)}{len(sig.outputs)}"
    return "Unsupported dequantization type." if sig.inputs[0].dtype == "INT16" else None


@check
def batch_matmul_io(sig: OpSignature) -> str | None:
    n, m = len(sig.inputs), len(sig.outputs)
    return None if n == 2 and m == 1 else f"Expected 2 inputs and 1 output, got: {n} inputs and {m} outputs"

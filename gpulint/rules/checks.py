"""The per-op constraints of the GPU delegate that are too rich to be data.

Each check takes an OpSignature (and the parameters its YAML entry gives) and returns the
reason the delegate refuses the op, or None. Messages quote the delegate's own wording where
it has one; the citations are to google-ai-edge/LiteRT@f67457790c9c (`compat` =
tflite/tools/versioning/gpu_compatibility.cc, `builder` = tflite/delegates/gpu/common/
model_builder.cc), as summarized in shared/research/gpu_delegate_rules.md.

Rule packs name these checks under `checks:` (refusal at partition time: the op runs on the
CPU) or `init_checks:` (accepted at partition time, fails when the delegate initializes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from gpulint.model import schema
from gpulint.rules.signature import OpSignature, TensorSpec
from gpulint.text import clean

Check = Callable[..., str | None]
CHECKS: dict[str, Check] = {}

FLOAT_TYPES = ("FLOAT32", "FLOAT16")


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


def _dims(t: TensorSpec) -> str:
    return "[" + ",".join(map(str, t.shape)) + "]"


# -- input/output counts (compat CheckInputsOutputs / CheckInputsConstsOutputs) ---------------


def _runtime_outputs(sig: OpSignature, runtime: int, outputs: int) -> str | None:
    n = len(sig.runtime_inputs)
    if n != runtime:
        return f"Expected {runtime} runtime input tensor(s), but node has {n} runtime input(s)."
    if len(sig.outputs) != outputs:
        return f"Expected {outputs} output tensor(s), but node has {len(sig.outputs)} output(s)."
    return None


@check
def inputs_outputs(sig: OpSignature, runtime: int, outputs: int = 1) -> str | None:
    """compat CheckInputsOutputs: runtime inputs, then outputs."""
    return _runtime_outputs(sig, runtime, outputs)


@check
def inputs_consts_outputs(sig: OpSignature, runtime: int, consts: int, outputs: int = 1) -> str | None:
    """compat CheckInputsConstsOutputs: constant inputs first, then as CheckInputsOutputs."""
    n = len(sig.const_inputs)
    if n != consts:
        return f"Expected {consts} const input tensor(s), but node has {n} const input(s)."
    return _runtime_outputs(sig, runtime, outputs)


@check
def input_count(sig: OpSignature, count: int, message: str) -> str | None:
    """A check on the number of inputs (omitted ones included, as op_sig.inputs.size())."""
    return None if len(sig.inputs) == count else message.format(n=len(sig.inputs))


@check
def min_inputs(sig: OpSignature, count: int, message: str) -> str | None:
    return None if len(sig.inputs) >= count else message.format(n=len(sig.inputs))


@check
def builtin_options_required(sig: OpSignature) -> str | None:
    return None if sig.has_options else "Unable to retrieve builtin_data."


@check
def one_or_two_operands(sig: OpSignature) -> str | None:
    """compat: CheckInputsConstsOutputs(2 runtime, 0 const, 1) or (1 runtime, 1 const, 1)."""
    if inputs_consts_outputs(sig, 2, 0) is None or inputs_consts_outputs(sig, 1, 1) is None:
        return None
    return "Op can only handle 1 or 2 operand(s)."


# ML Drift's names for the elementwise ops (tflite/delegates/gpu/common/operations.cc ToString).
MD_OP_NAMES = {"SUB": "subtract", "SQUARED_DIFFERENCE": "squared_diff", "ATAN2": "atan2"}


@check
def md_constant_operands(sig: OpSignature) -> str | None:
    """An elementwise op whose inputs are all constants, as the accelerator that ai-edge-litert
    2.3.0 ships judges it. That build evaluates such nodes itself: the public source at
    f67457790c9c has no such path (compat refuses them: "Op can only handle 1 or 2 operand(s)."),
    but libLiteRtWebGpuAccelerator.so in the PyPI wheel carries its messages ("Invalid all
    constant inputs", ": constant inputs and output must have the same rank, but got ",
    ": constant inputs have different types: "), and the oracle shows it: SUB, DIV, MUL, ADD,
    MAXIMUM, SQUARED_DIFFERENCE of two equal-rank constants are taken, a rank-4 and a rank-1
    constant refused with that message. Other nodes: None (the op's other checks decide)."""
    if not sig.inputs or sig.runtime_inputs:
        return None
    ranks = [t.rank for t in sig.inputs]
    out_rank = sig.outputs[0].rank if sig.outputs else ranks[0]
    name = MD_OP_NAMES.get(sig.op, sig.op.lower())
    if len({*ranks, out_rank}) > 1:
        got = ", ".join(map(str, ranks))
        return f"{name}: constant inputs and output must have the same rank, but got {got} and {out_rank}"
    if len({t.dtype for t in sig.inputs}) > 1:
        return f"{name}: constant inputs have different types: " + ", ".join(t.dtype for t in sig.inputs)
    return None


@check
def md_operands(sig: OpSignature) -> str | None:
    """one_or_two_operands (compat), except for all-constant inputs: md_constant_operands."""
    if sig.inputs and not sig.runtime_inputs:
        return md_constant_operands(sig)
    return one_or_two_operands(sig)


@check
def conv_inputs_outputs(sig: OpSignature) -> str | None:
    """compat CheckConvoultionInputOutput."""
    rt = len(sig.runtime_inputs)
    if rt > 2:
        return f"Expected 1 or 2 input tensor(s), but node has {rt} runtime inputs."
    if len(sig.outputs) != 1:
        return f"Expected 1 output tensor(s), but node has {len(sig.outputs)} runtime outputs."
    if rt == 1 and len(sig.inputs) < 2:
        return f"Requested index goes beyond array size: 1 vs {len(sig.inputs)}"
    return None


# -- options -----------------------------------------------------------------------------------


@check
def activation(sig: OpSignature) -> str | None:
    """compat IsActivationSupported: NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGMOID."""
    act = sig.options.get("fused_activation_function", "NONE")
    return "TfLiteFusedActivation.kTfLiteActSignBit" if act == "SIGN_BIT" else None


@check
def fused_activation(sig: OpSignature) -> str | None:
    """builder MaybeFuseActivation, for ops whose compat check skips the activation (ADD,
    CONCATENATION, FULLY_CONNECTED): an unsupported one fails when the graph is built."""
    act = sig.options.get("fused_activation_function", "NONE")
    return (
        "Unsupported fused activation"
        if act not in ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGMOID")
        else None
    )


def _values(sig: OpSignature, fields: tuple[str, str], params: dict[str, int] | None) -> tuple[int, int]:
    src = params if params is not None else sig.options
    return int(src.get(fields[0], 0)), int(src.get(fields[1], 0))


@check
def strides(sig: OpSignature, custom: str | None = None) -> str | None:
    """compat CheckStrides."""
    h, w = _values(sig, ("stride_h", "stride_w"), custom_params(sig, custom) if custom else None)
    return f"Incorrect stride values: stride_height = {h}, stride_width = {w}" if h <= 0 or w <= 0 else None


@check
def dilations(sig: OpSignature) -> str | None:
    """compat CheckDilation."""
    h, w = _values(sig, ("dilation_h_factor", "dilation_w_factor"), None)
    return f"Incorrect dilation values: dilation_height = {h}, dilation_width = {w}" if h <= 0 or w <= 0 else None


@check
def kernels(sig: OpSignature, custom: str | None = None) -> str | None:
    """compat CheckKernels."""
    h, w = _values(sig, ("filter_height", "filter_width"), custom_params(sig, custom) if custom else None)
    return f"Incorrect kernel values: kernel_height = {h}, kernel_width = {w}" if h <= 0 or w <= 0 else None


@check
def option_not(sig: OpSignature, field: str, value: Any, message: str) -> str | None:
    return message if sig.options.get(field) == value else None


# Custom ops carry their parameters as a raw C struct in custom_options (custom_initial_data).
# TfLiteTransposeConvParams {padding, stride_width, stride_height, ...};
# TfLitePoolParams {padding, stride_width, stride_height, filter_width, filter_height, activation, ...}.
CUSTOM_STRUCTS = {
    "transpose_conv": ("padding", "stride_w", "stride_h"),
    "pool": ("padding", "stride_w", "stride_h", "filter_width", "filter_height", "activation"),
}


def custom_params(sig: OpSignature, kind: str | None) -> dict[str, int] | None:
    data = sig.operator.custom_options
    fields = CUSTOM_STRUCTS.get(kind or "", ())
    if data is None or not fields or len(data) < 4 * len(fields):
        return None
    values = struct.unpack_from(f"<{len(fields)}i", bytes(data[: 4 * len(fields)]))
    return dict(zip(fields, values, strict=True))


@check
def custom_data(sig: OpSignature, kind: str) -> str | None:
    """compat RetrieveCustomInitialData: the custom op's parameter struct must be there."""
    return None if custom_params(sig, kind) is not None else "Unable to retrieve custom_initial_data."


# -- constant operands --------------------------------------------------------------------------


@check
def axes_const_int32(sig: OpSignature, index: int = 1) -> str | None:
    """compat CheckAxesAreInt32Const."""
    t = sig.input(index)
    if t is None or not t.is_const:
        return f"{sig.op} is only supported with constant axes."
    if t.dtype != "INT32":
        return f"{sig.op} supports int32 tensor for axes. But node has {t.dtype}"
    return None


@check
def const_input(sig: OpSignature, index: int, what: str, dtype: str | None = None) -> str | None:
    """An operand the delegate reads as a constant when it builds the graph."""
    t = sig.input(index)
    if t is None or not t.is_const:
        return f"{sig.op} {what} must be a constant tensor"
    if dtype is not None and t.dtype != dtype:
        return f"{sig.op} {what} must be {dtype}, not {t.dtype}"
    return None


# -- op families -------------------------------------------------------------------------------


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """compat CheckIsBroadcastable / ML Drift model_builder_helper.cc IsBroadcastable 396-407:
    right to left, each pair of dims equal or one of them 1."""
    return all(x == y or 1 in (x, y) for x, y in zip(reversed(a), reversed(b), strict=False))


@check
def add_mul_broadcast(sig: OpSignature, enhanced: bool = False) -> str | None:
    """compat CheckAddMulBroadcastCompatibility, as the classic delegate calls it (kStandard), or
    with kEnhancedBroadcast (LiteRT's GPU accelerator, ML Drift model_builder.cc 2253-2256):
    any numpy-style broadcast of ranks 2+."""
    if len(sig.inputs) < 2:
        return None
    a, b = sig.inputs[0], sig.inputs[1]
    if a.rank <= 1 or b.rank <= 1 or a.rank == b.rank:
        return None
    longer, shorter = (a, b) if a.rank > b.rank else (b, a)
    ld, sd = longer.shape, shorter.shape
    if enhanced and _broadcastable(ld, sd):
        return None
    if enhanced:
        return f"Doesn't support broadcasting - input0: {_dims(a)}, input1: {_dims(b)}"
    if longer.rank == 4 and shorter.rank == 3 and ld[0] == 1:
        return None
    if longer.rank == 4 and shorter.rank == 2:
        if sd[0] == 1 and sd[1] == 1:
            return None
        if ld[0] == sd[0] and ld[3] == sd[1]:
            return None
    return f"Doesn't support broadcasting - input0: {_dims(a)}, input1: {_dims(b)}"


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
        mode = schema.enum_value("MirrorPadMode", sig.options.get("mode", 0))
        return f"Only Reflective padding is supported for Mirror Pad operation. But node has {mode}"
    if (why := _runtime_outputs(sig, 1, 1)) is not None:
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
        return "Slice does not support ellipsis_mask."
    if sig.options.get("new_axis_mask", 0):
        return "Slice does not support new_axis_mask."
    if sig.options.get("shrink_axis_mask", 0):
        return "Slice does not support shrink_axis_mask parameter. "
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
    """builder CastOperationParser::IsSupported: a BOOL input to a float output needs one
    producer and one reader, and the cast's output exactly one reader (not a model output)."""
    x = sig.inputs[0] if sig.inputs else None
    if x is None or x.dtype != "BOOL" or not sig.outputs or sig.outputs[0].dtype not in FLOAT_TYPES:
        return None
    out = sig.outputs[0]
    if sig.producer(x) is None or len(sig.consumers(x)) != 1 or out.is_graph_output or len(sig.consumers(out)) != 1:
        return "Not supported cast case"
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
            return f"Unspported non-singleton dim at {i}"
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


# -- checks the delegate makes when it builds the graph (init failures) -------------------------


@check
def builder_two_constants(sig: OpSignature) -> str | None:
    """model_builder.cc ElementwiseOperationParser::Parse 1114-1175: a two-argument op takes two
    runtime inputs or one runtime and one constant (VerifyInputsConstsOutputs(1, 1, 1)). compat
    lets ADD and MUL of two constants through, so the builder fails them at init (the GL oracle:
    "MUL: Expected 1 const input tensor(s), but node has 2 const input(s).")."""
    n = len(sig.const_inputs)
    if len(sig.inputs) == 2 and n == 2:
        return f"Expected 1 const input tensor(s), but node has {n} const input(s)."
    return None


@check
def runtime_ranks(sig: OpSignature) -> str | None:
    """model_builder_helper ExtractTensorShape: runtime tensors must be rank 1-4."""
    for t in (*sig.inputs, *sig.outputs):
        if t.runtime and not 1 <= t.rank <= 4:
            return f'Tensor "{t.name}" has bad input dims size: {t.rank}.'
    return None


@check
def distinct_inputs(sig: OpSignature) -> str | None:
    """builder 1120-1143: the same tensor twice in SUB/DIV/..."""
    idx = [t.index for t in sig.runtime_inputs]
    return "No support of few identical inputs in the same operation." if len(idx) != len(set(idx)) else None


@check
def batch_matmul(sig: OpSignature) -> str | None:
    """builder 320-376: two runtime inputs, or a runtime input and a constant 2-D right-hand side."""
    rt = sig.runtime_inputs
    rhs = sig.input(1)
    if len(rt) == 2 or (len(rt) == 1 and rhs is not None and rhs.is_const and rhs.rank == 2):
        return None
    return "Not supported batched mat mul case"


@check
def conv_runtime_weights(sig: OpSignature) -> str | None:
    """builder 616-745: runtime weights must not be grouped (src.c == weights.c)."""
    x, w = sig.input(0), sig.input(1)
    if x is None or w is None or not w.runtime or x.rank != 4 or w.rank != 4:
        return None
    if x.shape[3] != w.shape[3]:
        return "No support of CONVOLUTION_2D with runtime grouped weights."
    return None


@check
def fc_weights_width(sig: OpSignature) -> str | None:
    """builder 1284-1385: input channels == weights width."""
    x, w = sig.input(0), sig.input(1)
    if x is None or w is None or not x.shape or w.rank != 2:
        return None
    if x.shape[-1] != w.shape[1]:
        return "Amount of input channels should match weights width"
    return None


@check
def concat_axis(sig: OpSignature) -> str | None:
    """builder 485-612: the axis must map to batch, height, width or channels."""
    x = sig.input(0)
    if x is None:
        return None
    axis = sig.options.get("axis", 0)
    axis = axis + x.rank if axis < 0 else axis
    if not 0 <= axis < x.rank or x.rank > 4:
        return "Can concatenate tensors only by batch, height, width, or channels."
    return None


@check
def prelu_alpha(sig: OpSignature) -> str | None:
    """builder 1696-1735: alpha is linear of size == channels, or has the input's full shape."""
    x, alpha = sig.input(0), sig.input(1)
    if x is None or alpha is None:
        return "PRELU needs an alpha tensor"
    if not alpha.is_const:
        return "Alpha tensor must be constant."
    channels = x.shape[-1] if x.shape else 1
    if alpha.rank >= 1 and all(d == 1 for d in alpha.shape[:-1]):  # linear: one value per channel
        return None if alpha.elements == channels else "Linear alpha shape does not match the number of input channels."
    full = alpha.shape == x.shape[1:] or alpha.shape == x.shape
    return None if full else "Alpha shape does not match input shape."


@check
def quantize_output(sig: OpSignature) -> str | None:
    """builder 1916-1949: QUANTIZE needs quantization parameters on its output."""
    out = sig.outputs[0] if sig.outputs else None
    if out is None or out.quant is None or not out.quant.scale:
        return "Output tensor of QUANTIZE has no quantization parameters."
    return None


@check
def slice_operands(sig: OpSignature) -> str | None:
    """builder 2204-2310: begin and size are read as constants."""
    for i, what in ((1, "begin"), (2, "size")):
        t = sig.input(i)
        if t is None or not t.is_const:
            return f"Slice {what} must be constant"
    return None


@check
def strided_slice_strides(sig: OpSignature) -> str | None:
    """builder 2474-2545: constant strides, none zero or negative."""
    t = sig.input(3)
    values = sig.const_values(t) if t is not None else None
    if t is None or values is None:
        return "Strides must be constant"
    if any(v == 0 for v in values):
        return "Zero stride is not supported"
    if any(v < 0 for v in values):
        return "Reverse slices are not supported."
    return None


@check
def transpose_perm(sig: OpSignature) -> str | None:
    """builder 2767-2815: perm of size 2, 3 or 4."""
    t = sig.input(1)
    if t is None or t.elements not in (2, 3, 4):
        return "Permutation for transpose is invalid."
    return None


@check
def densify_sparse(sig: OpSignature) -> str | None:
    """builder 880-905: DENSIFY's input must be a sparse constant."""
    x = sig.input(0)
    return None if x is not None and x.sparse else "Input tensor must be sparse."


@check
def densify_consumer(sig: OpSignature) -> str | None:
    """merge_densify.cc folds DENSIFY (optionally -> DEQUANTIZE) only into CONV_2D and DEPTHWISE_CONV_2D."""
    if not sig.outputs:
        return None
    for c in sig.consumers(sig.outputs[0]):
        readers = c.consumers(c.outputs[0]) if c.op == "DEQUANTIZE" and c.outputs else [c]
        for r in readers:
            if r.op not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                return f"DENSIFY feeds {r.op}; the delegate folds it only into CONV_2D or DEPTHWISE_CONV_2D"
    return None


def run(name: str, sig: OpSignature, params: dict[str, Any]) -> str | None:
    """A check's verdict. An op whose operands do not fit its definition (too few inputs, shapes
    of the wrong rank in a corrupt or hand-made file) is refused with that reason, not a crash."""
    try:
        reason = CHECKS[name](sig, **params)
        return clean(reason, 400) if reason else None  # reasons quote tensor names from the model
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        return f"the op's operands do not fit the {name} check ({type(e).__name__}: {e})"


# -- LiteRT's GPU accelerator (ML Drift): its parsers' IsSupported -------------------------------
# `mdb` = ml_drift_delegate/tflite/model_builder.cc, `opp` = ml_drift_delegate/tflite/
# operation_parser.cc, at google-ai-edge/LiteRT@f67457790c9c. ML Drift checks in IsSupported what
# the classic builder only finds out in Parse, so most of these refuse at partition time.

ELEMENTWISE_IDENTICAL_OK = ("ADD", "MUL")


def _tflite_shape(t: TensorSpec) -> str | None:
    """opp PreCheckTfLiteShape 285-303: rank 1 to 4."""
    return None if 1 <= t.rank <= 4 else f'Tensor "{t.name}" has bad input dims size: {t.rank}.'


@check
def md_elementwise(sig: OpSignature) -> str | None:
    """mdb ElementwiseOperationParser::IsSupported 2258-2312: two runtime inputs must be two
    distinct tensors (ADD and MUL may repeat one) of equal rank or numpy-broadcastable, and a
    broadcast needs every tensor of rank 1-4."""
    rt = sig.runtime_inputs
    if len(rt) == 1 and len(sig.const_inputs) == 1:
        return _const_operand_parses(sig.const_inputs[0])
    if len(rt) != 2 or len(sig.const_inputs) != 0:
        return None
    if len(sig.inputs) != 2:
        return "Applies only two input tensors"
    a, b = sig.inputs
    if a.index == b.index:
        if sig.op not in ELEMENTWISE_IDENTICAL_OK:
            return "No support of few identical inputs in the same operation."
        return None
    if a.rank == b.rank:
        return None
    if not _broadcastable(a.shape, b.shape):
        return "Inputs dimensions sizes don't match, broadcasting isn't applicable."
    for t in (a, b, *sig.outputs[:1]):
        if (why := _tflite_shape(t)) is not None:
            return why
    return None


def _const_operand_parses(c: TensorSpec) -> str | None:
    """mdb CanParseInputsWithConstTensor 2576-2648: a sparse constant, or a one-element constant
    that is neither float-convertible (FLOAT32/16, quantized INT8/UINT8/INT4) nor INT32, is refused."""
    floaty = c.dtype in FLOAT_TYPES or (c.quant is not None and c.dtype in ("INT8", "UINT8", "INT4"))
    if c.sparse or (c.elements == 1 and not floaty and c.dtype != "INT32"):
        return "Can't parse inputs with const tensors."
    return None


@check
def md_fused_activation(sig: OpSignature) -> str | None:
    """opp PreCheckMaybeFuseActivationSkipSize 452-468: NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGMOID."""
    act = sig.options.get("fused_activation_function", "NONE")
    if act in ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGMOID"):
        return None
    return f"Unsupported fused activation: {schema.enum_value('ActivationFunctionType', act)}"


@check
def md_const_operand(sig: OpSignature, index: int, what: str) -> str | None:
    """mdb PreReadTensor of an operand (paddings, perm, begin/size, alpha ...): it must hold data."""
    t = sig.input(index)
    if t is None:
        return f"input #{index} tensor is not available"
    return None if t.is_const else "src has no data."


@check
def md_runtime_input(sig: OpSignature, index: int = 0) -> str | None:
    """mdb Conv2D 1315-1317, Slice 4808-4810: the data input must be a runtime tensor."""
    t = sig.input(index)
    if t is not None and t.is_const:
        return "input must be a runtime tensor" if sig.op == "CONV_2D" else "Constant input is not supported."
    return None


@check
def md_operand_counts(sig: OpSignature, runtime: int, consts: int) -> str | None:
    """opp ValidateSupport 68-86: required runtime and constant inputs (outputs not counted)."""
    if len(sig.runtime_inputs) != runtime:
        return f"Expected {runtime} runtime input tensor(s), but node has {len(sig.runtime_inputs)} runtime input(s)."
    if len(sig.const_inputs) != consts:
        return f"Expected {consts} const input tensor(s), but node has {len(sig.const_inputs)} const input(s)."
    return None


@check
def md_dynamic_update_slice(sig: OpSignature) -> str | None:
    """mdb DynamicUpdateSliceOperationParser::IsSupported 2144-2177: runtime start indices, and
    operand, update, indices and output of rank 1-4."""
    if len(sig.inputs) < 3:
        return "input #2 tensor is not available"
    if sig.inputs[2].is_const:
        return "start_indices must be a runtime tensor"
    for t, what in ((sig.inputs[0], "operand"), (sig.inputs[1], "update"), (sig.inputs[2], "start_indices")):
        if not 1 <= t.rank <= 4:
            return f"{what} dims must be 1D-4D."
    return None


@check
def md_batch_matmul(sig: OpSignature) -> str | None:
    """mdb BatchedMatMulOperationParser::IsSupported 665-700: two runtime inputs, or a runtime
    input and a constant right-hand side of rank 2, 3 or 4."""
    rt = len(sig.runtime_inputs)
    if rt == 2:
        return None
    if rt != 1:
        return "Not supported batched mat mul case: too many inputs"
    rhs = sig.input(1)
    if rhs is None or not rhs.is_const:
        return "Not supported batched mat mul case: non-constant tensor"
    if rhs.rank not in (2, 3, 4):
        return "Not supported batched mat mul case: second input has unsupported rank"
    return None


@check
def md_axis_in_range(
    sig: OpSignature, axes_input: int = 1, option: str | None = None, data: int = 0, output: bool = False
) -> str | None:
    """opp PreCheckAxisFromIndex 262-283: each axis (a constant input, or an option) inside the
    rank of the data input (or of the output: PACK, mdb 3993), and that rank 1-4."""
    x = (sig.outputs[0] if sig.outputs else None) if output else sig.input(data)
    if x is None:
        return None
    if option is not None:
        axes: list[int | float] | None = [sig.options.get(option, 0)]
    else:
        t = sig.input(axes_input)
        axes = sig.const_values(t) if t is not None else None
    for a in axes or []:
        i = int(a) + x.rank if a < 0 else int(a)
        if not 0 <= i < x.rank:
            return "Index for axis out of range"
        if not 1 <= x.rank <= 4:
            return "Unknown layout."
    return None


@check
def md_slice_shape(sig: OpSignature) -> str | None:
    """mdb SliceOperationParser::IsSupported 4811-4886: begin and size as long as the input's rank (1-4)."""
    x, begin = sig.input(0), sig.input(1)
    if x is None or begin is None:
        return None
    n = begin.elements
    if x.rank == 4 and n not in (3, 4):
        return "Slicing starts count must be 3 or 4 for 4d input"
    if x.rank in (1, 2, 3) and n != x.rank:
        return f"Slicing starts count must be {x.rank} for {x.rank}d input"
    if x.rank > 4 or x.rank == 0:
        return "Slicing is unsupported for input with rank > 4"
    return None


@check
def md_strided_slice(sig: OpSignature) -> str | None:
    """mdb StridedSliceOperationParser 5334-5363 (its own compatibility check: no ellipsis, new-axis
    or shrink-axis mask, 4 inputs) and IsSupported 5263-5311: constant begin/end/strides as long
    as the input's rank (or one less), strides neither zero nor negative."""
    for mask, words in (("ellipsis_mask", "ellipsis_mask."), ("new_axis_mask", "new_axis_mask.")):
        if sig.options.get(mask, 0):
            return f"Slice does not support {words}"
    if sig.options.get("shrink_axis_mask", 0):
        return "Slice does not support shrink_axis_mask parameter. "
    if len(sig.inputs) < 4:
        return "STRIDED_SLICE requires 4 inputs."
    x, begin = sig.input(0), sig.input(1)
    if x is None or begin is None or not begin.is_const:
        return "src has no data."
    if x.rank not in (begin.elements, begin.elements + 1):
        return "STRIDED_SLICE input/params dimensions mismatch."
    t = sig.input(3)
    values = sig.const_values(t) if t is not None else None
    if values is None:
        return "src has no data."
    if any(v == 0 for v in values):
        return "stride values must be non-zero"
    if any(v < 0 for v in values):
        return "Reverse slices are not supported."
    return None


@check
def md_select(sig: OpSignature) -> str | None:
    """mdb SelectV2OperationParser's own compatibility check 4717-4745: the condition BOOL or
    float; each branch the output's shape, or a scalar (any type: no float requirement)."""
    if len(sig.inputs) != 3 or len(sig.outputs) != 1:
        return "Expected 3 inputs and 1 output"
    cond, a, b = sig.inputs
    error = (
        "Cond must be float or bool type, if, else tensors must be either be same the shape as output or "
        "constant, scalar."
    )
    if cond.dtype not in ("BOOL", *FLOAT_TYPES):
        return error
    out = sig.outputs[0].shape
    for t in (a, b):
        if t.shape and t.shape != out and (t.rank > 1 or t.shape[0] > 1):
            return error
    return None


@check
def md_dequantize(sig: OpSignature) -> str | None:
    """mdb DequantizeOperationParser::IsSupported 1992-2055: a constant input of rank 2-4; a
    runtime input with quantization parameters of one scale."""
    x = sig.input(0)
    if x is None:
        return "input #0 tensor is not available"
    if not x.runtime:
        if not 2 <= x.rank <= 4:
            return f"Unsupported dims for tensor: {x.name} Got dims:{x.rank}"
        return None
    if x.quant is None or not x.quant.scale:
        return "Encountered Dequantize input with no quant params"
    if len(x.quant.scale) > 1:
        return "Unsupported quantization scale size"
    return None


@check
def md_quantize_output(sig: OpSignature) -> str | None:
    """mdb QuantizeOperationParser::IsSupported 4389-4394."""
    out = sig.outputs[0] if sig.outputs else None
    if out is None or out.quant is None:
        return "Encountered Quantize output with no quant params"
    return None


@check
def md_topk(sig: OpSignature) -> str | None:
    """mdb TopKOperationParser::IsSupported 5596-5607: k a constant scalar, two outputs."""
    k = sig.input(1)
    if k is None or not k.is_const:
        return "TopK k must be constant tensor."
    if k.elements != 1:
        return "TopK k must be scalar."
    return None if len(sig.outputs) == 2 else "TopK requires 2 output tensors"


@check
def md_one_hot(sig: OpSignature) -> str | None:
    """mdb OneHotOperationParser::IsSupported 3919-3944 (gpu_compatibility.cc is not called)."""
    if len(sig.inputs) < 4:
        return f"Invalid number of inputs: {len(sig.inputs)}, while expected at least 4."
    idx = sig.inputs[0]
    axis = sig.options.get("axis", -1)
    if sig.has_options and axis != -1 and (not idx.shape or axis != idx.shape[-1]):
        return "OneHot axis must be -1 or the last dimension."
    if idx.rank >= 4 and idx.shape[3] != 1:
        return "OneHot indices channel dimension must be 1."
    return None


@check
def md_gather_types(sig: OpSignature) -> str | None:
    """mdb GatherOperationParser::IsSupported 3497-3499."""
    if sig.inputs and sig.outputs and sig.inputs[0].dtype != sig.outputs[0].dtype:
        return "Input / output dtype mismatch."
    return None


# -- backend kernels (tflite/delegates/gpu/gl/kernels/*.cc): init failures on one backend -------


def _bhwc(t: TensorSpec) -> tuple[int, ...]:
    """model_builder_helper.cc ExtractTensorShape 97-121: B, BC, BWC and BHWC as BHWC."""
    s = list(t.shape)
    if len(s) == 1:
        return (s[0], 1, 1, 1)
    if len(s) == 2:
        return (s[0], 1, 1, s[1])
    if len(s) == 3:
        return (s[0], 1, s[1], s[2])
    return tuple(s)


def _runtime_pair(sig: OpSignature) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The BHWC shapes of a two-runtime-input op, in the order the builder binds them: ADD and MUL
    put the "larger" tensor first (builder ElementwiseOperationParser 1147-1158)."""
    rt = sig.runtime_inputs
    if len(rt) != 2 or rt[0].index == rt[1].index or min(rt[0].rank, rt[1].rank) < 1:
        return None
    a, b = _bhwc(rt[0]), _bhwc(rt[1])
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


@check
def gl_conv_groups(sig: OpSignature) -> str | None:
    """A grouped CONV_2D (the filter has fewer input channels than the input) on OpenGL, as the
    builder lowers it (builder 655-705): one input channel per group and as many outputs as
    inputs becomes a DEPTHWISE_CONVOLUTION, which OpenGL builds; groups of a multiple of 4
    input and output channels stay one grouped CONVOLUTION_2D, which gl/kernels/conv.cc 50-54
    refuses; other groups are split (ResolveGroupedConvolution, builder 751-), and OpenGL has no
    SPLIT shader. The GL oracle shows all three."""
    x, w = sig.input(0), sig.input(1)
    out = sig.outputs[0] if sig.outputs else None
    if x is None or w is None or out is None or x.rank != 4 or w.rank != 4 or not w.is_const:
        return None
    src_c, group_in, dst_c = x.shape[3], w.shape[3], w.shape[0]
    if not group_in or src_c == group_in or src_c % group_in:
        return None
    if group_in == 1 and src_c == out.shape[-1]:
        return None  # a depthwise conv
    groups = src_c // group_in
    if group_in % 4 == 0 and (dst_c // groups) % 4 == 0:
        return "Convolution does not support more than 1 group"
    return "No shader implementation for split"


# -- checks over a backend's whole delegated partition ------------------------------------------

GraphCheck = Callable[[Any, set[int]], tuple[int | None, str] | None]
GRAPH_CHECKS: dict[str, GraphCheck] = {}


def graph_check(fn: GraphCheck) -> GraphCheck:
    GRAPH_CHECKS[fn.__name__] = fn
    return fn


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


def _const_operand(sig: OpSignature) -> TensorSpec | None:
    """The constant operand of a binary op with one runtime input and one constant of more than one element."""
    rt, const = sig.runtime_inputs, sig.const_inputs
    if len(rt) != 1 or len(const) != 1 or const[0].elements <= 1:
        return None
    return const[0]


@check
def gl_const_batch(sig: OpSignature) -> str | None:
    """The OpenGL kernels read a constant operand of more than one element as one HWC image: with a
    4-D constant whose batch is not 1, "<OP>: Batch size is not equal to 1." (seen from the oracle)."""
    const = _const_operand(sig)
    if const is None or const.rank != 4 or const.shape[0] == 1:
        return None
    return f"{sig.op}: Batch size is not equal to 1."


@check
def gl_elementwise_const(sig: OpSignature) -> str | None:
    """gl/kernels/elementwise.cc 175-185: SUB, DIV, MAXIMUM, ... take a constant only as a scalar or a
    per-channel vector (builder ParseInputsWithConstTensorImpl: linear when every dim but the last is 1)."""
    const = _const_operand(sig)
    if const is None:
        return gl_const_batch(sig)
    if all(d == 1 for d in const.shape[:-1]):
        return gl_const_batch(sig)
    return "Couldn't read scalar of const vector data from the attributes."


@check
def gl_mean_axes(sig: OpSignature) -> str | None:
    """gl/kernels/mean.cc: MEAN over height and width only (of a 4-D tensor)."""
    x = sig.input(0)
    axes = sig.const_values(sig.inputs[1]) if len(sig.inputs) > 1 and x is not None else None
    if x is None or axes is None or x.rank != 4:
        return None
    if {int(a) % 4 for a in axes} <= {1, 2}:
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
def gl_mediapipe_version_1(sig: OpSignature) -> str | None:
    """MediaPipe's GL shaders for TransformTensorBilinear (transform_tensor_bilinear.cc,
    IsSupported: a 1x1x4x4 matrix, attr.version == 1) and TransformLandmarks (transform_landmarks.cc,
    IsSupported: attr.version == 1) run version 1 only. MediaPipe's own runner turns version 2 into
    version 1 first (ApplyCustomTransformations: transform_*_v2_to_v1); TfLiteGpuDelegate does not."""
    if sig.version == 1 and (sig.op != "TransformTensorBilinear" or _matrix_4x4(sig)):
        return None
    return f"This case is not supported by {sig.op}" + ("." if sig.op == "TransformTensorBilinear" else "")


def _matrix_4x4(sig: OpSignature) -> bool:
    m = sig.input(1)
    return m is not None and _bhwc(m) == (1, 1, 4, 4)


@check
def gl_const_node(sig: OpSignature) -> str | None:
    """A constant operand of CONCATENATION or PACK becomes a CONSTANT node in the builder
    (model_builder.cc 507-518, 1640-1653), and gl/kernels/registry.cc has no shader for it. The one
    way out is MakePaddingFromZerosConcat (transformations/make_padding.cc 48-98): a two-input
    concat on H, W or C whose first all-zero constant operand becomes zero padding."""
    consts = [t for t in sig.inputs if t.is_const]
    if not consts:
        return None
    if sig.op == "CONCATENATION" and len(sig.inputs) == 2 and len(consts) == 1 and sig.outputs:
        rank = sig.outputs[0].rank
        axis = int(sig.options.get("axis", 0)) % max(rank, 1)
        values = sig.const_values(consts[0])
        if axis != 0 and rank in (2, 3, 4) and values is not None and not any(values):
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

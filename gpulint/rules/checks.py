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

from collections.abc import Callable
from typing import Any

from gpulint.rules.signature import OpSignature, TensorSpec

Check = Callable[..., str | None]
CHECKS: dict[str, Check] = {}

FLOAT_TYPES = ("FLOAT32", "FLOAT16")


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


def _dims(t: TensorSpec) -> str:
    return "[" + ", ".join(map(str, t.shape)) + "]"


def _count(n: int, allowed: int | list[int]) -> bool:
    return n in allowed if isinstance(allowed, list) else n == allowed


# -- input/output counts ---------------------------------------------------------------------


@check
def runtime_inputs(sig: OpSignature, count: int | list[int]) -> str | None:
    """compat CheckInputsOutputs / CheckInputsConstsOutputs."""
    n = len(sig.runtime_inputs)
    if not _count(n, count):
        return f"Expected {_plural(count)} runtime input tensor(s), but node has {n} runtime input(s)."
    return None


@check
def const_inputs(sig: OpSignature, count: int | list[int]) -> str | None:
    n = len(sig.const_inputs)
    if not _count(n, count):
        return f"Expected {_plural(count)} const input tensor(s), but node has {n} const input(s)."
    return None


@check
def inputs(sig: OpSignature, count: int | list[int]) -> str | None:
    n = len(sig.present_inputs)
    if not _count(n, count):
        return f"Expected {_plural(count)} input tensor(s), but node has {n}."
    return None


@check
def min_inputs(sig: OpSignature, count: int) -> str | None:
    n = len(sig.present_inputs)
    return None if n >= count else f"Expected at least {count} input tensors, but node has {n}."


@check
def outputs(sig: OpSignature, count: int | list[int]) -> str | None:
    n = len(sig.outputs)
    if not _count(n, count):
        return f"Expected {_plural(count)} output tensor(s), but node has {n} output(s)."
    return None


def _plural(count: int | list[int]) -> str:
    return " or ".join(map(str, count)) if isinstance(count, list) else str(count)


@check
def builtin_options_required(sig: OpSignature) -> str | None:
    return None if sig.has_options else "missing builtin options"


@check
def one_or_two_operands(sig: OpSignature) -> str | None:
    """compat 1167-1210: 2 runtime inputs, or 1 runtime + 1 constant; 1 output."""
    rt, const = len(sig.runtime_inputs), len(sig.const_inputs)
    if len(sig.outputs) != 1 or not ((rt == 2 and const == 0) or (rt == 1 and const == 1)):
        return "Op can only handle 1 or 2 operand(s)."
    return None


@check
def conv_inputs_outputs(sig: OpSignature) -> str | None:
    """compat CheckConvolutionInputOutput 171-188."""
    rt = len(sig.runtime_inputs)
    if rt > 2:
        return f"Expected 1 or 2 input tensor(s), but node has {rt} runtime inputs."
    if len(sig.outputs) != 1:
        return f"Expected 1 output tensor(s), but node has {len(sig.outputs)} output(s)."
    if rt == 1 and sig.input(1) is None:
        return "Expected weights as the second input."
    return None


# -- options -----------------------------------------------------------------------------------


@check
def activation(sig: OpSignature) -> str | None:
    """compat IsActivationSupported 83-99."""
    act = sig.options.get("fused_activation_function", "NONE")
    if act in ("NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGMOID"):
        return None
    if act == "SIGN_BIT":
        return "TfLiteFusedActivation.kTfLiteActSignBit"
    return f"Unsupported fused activation {act}"


@check
def positive(sig: OpSignature, fields: list[str]) -> str | None:
    """compat CheckStrides / CheckDilation / CheckKernels 190-230: each must be > 0."""
    for f in fields:
        if sig.options.get(f, 0) <= 0:
            return f"Incorrect {f}: {sig.options.get(f, 0)} (must be > 0)"
    return None


@check
def option_equals(sig: OpSignature, field: str, value: Any, message: str) -> str | None:
    actual = sig.options.get(field)
    return None if actual == value else message.format(actual=actual)


@check
def option_not(sig: OpSignature, field: str, value: Any, message: str) -> str | None:
    return message if sig.options.get(field) == value else None


# -- constant operands --------------------------------------------------------------------------


@check
def const_input(sig: OpSignature, index: int, what: str, dtype: str | None = None) -> str | None:
    """An operand the delegate reads at build time (axes, paddings, sizes, perm, ...)."""
    t = sig.input(index)
    if t is None or not t.is_const:
        return f"{sig.op} is only supported with constant {what}."
    if dtype is not None and t.dtype != dtype:
        return f"{what} must be {dtype}, not {t.dtype}"
    return None


@check
def axes_const_int32(sig: OpSignature, index: int = 1) -> str | None:
    """compat CheckAxesAreInt32Const."""
    return const_input(sig, index, "axes", "INT32")


# -- op families -------------------------------------------------------------------------------


@check
def add_mul_broadcast(sig: OpSignature) -> str | None:
    """compat CheckAddMulBroadcastCompatibility 484-529, as the runtime delegate calls it (kStandard)."""
    if len(sig.present_inputs) < 2:
        return None
    a, b = sig.present_inputs[0], sig.present_inputs[1]
    if a.rank <= 1 or b.rank <= 1 or a.rank == b.rank:
        return None
    longer, shorter = (a, b) if a.rank > b.rank else (b, a)
    ld, sd = longer.shape, shorter.shape
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
    """compat 266-305."""
    x, w = sig.input(0), sig.input(1)
    out = sig.outputs[0] if sig.outputs else None
    if x is None or w is None or out is None:
        return "Expected input, filter and output"
    for name, t in (("input", x), ("filter", w), ("output", out)):
        if t.rank != 4:
            return f"{name} rank should be 4, but got {t.rank}"
    if x.shape[0] != out.shape[0]:
        return f"input batch {x.shape[0]} does not match output batch {out.shape[0]}"
    if w.shape[3] != out.shape[3]:
        return f"filter channels {w.shape[3]} do not match output channels {out.shape[3]}"
    dm = sig.options.get("depth_multiplier", 1)
    if out.shape[3] != x.shape[3] * dm:
        return f"output channels {out.shape[3]} != input channels {x.shape[3]} x depth_multiplier {dm}"
    bias = sig.input(2)
    if bias is not None and bias.elements != out.shape[3]:
        return f"bias size {bias.elements} does not match output channels {out.shape[3]}"
    return None


@check
def fully_connected(sig: OpSignature) -> str | None:
    """compat 797-831."""
    if sig.options.get("weights_format", "DEFAULT") != "DEFAULT":
        return f"Unsupported weights format {sig.options['weights_format']}"
    if len(sig.runtime_inputs) > 2:
        return f"FullyConnected doesn't support more than 2 runtime inputs, got {len(sig.runtime_inputs)}."
    x = sig.input(0)
    if x is not None and x.is_const:
        return "FullyConnected doesn't support constant input."
    if sig.options.get("keep_num_dims") and x is not None and sig.outputs and x.rank != sig.outputs[0].rank:
        return (
            f"Input and output dimensions are different and FullyConnected doesn't support keep_num_dims: "
            f"{x.rank} vs {sig.outputs[0].rank}"
        )
    return None


@check
def pad(sig: OpSignature) -> str | None:
    """compat 1103-1133: paddings (and PADV2's constant value) constant, paddings [4,2] or [3,2]."""
    p = sig.input(1)
    if p is None or not p.is_const:
        return "Padding tensor must be constant."
    if p.shape not in ((4, 2), (3, 2)):
        return f"Invalid paddings tensor dimension: expected [4, 2] or [3, 2], got {_dims(p)}"
    if sig.op == "PADV2" and (v := sig.input(2)) is not None and not v.is_const:
        return "Constant values tensor must be constant."
    return None


@check
def resize(sig: OpSignature) -> str | None:
    """compat 1063-1083: the size operand is constant; not align_corners with half_pixel_centers."""
    if sig.options.get("align_corners") and sig.options.get("half_pixel_centers"):
        return "If half_pixel_centers is True, align_corners must be False."
    return None


@check
def strided_slice_masks(sig: OpSignature) -> str | None:
    """compat 1009-1034."""
    for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask"):
        if sig.options.get(mask, 0):
            return f"{mask} is not supported (got {sig.options[mask]})"
    return None


@check
def input_rank(sig: OpSignature, ranks: list[int]) -> str | None:
    x = sig.input(0)
    if x is None or x.rank not in ranks:
        got = "none" if x is None else x.rank
        return f"Input rank must be {' or '.join(map(str, ranks))}, got {got}"
    return None


@check
def softmax_beta(sig: OpSignature) -> str | None:
    beta = sig.options.get("beta", 0.0)
    return None if beta == 1.0 else f"Softmax with beta {beta:g} is not supported (only beta == 1)"


@check
def block_size(sig: OpSignature) -> str | None:
    """compat 684-699, 986-1001."""
    bs = sig.options.get("block_size", 0)
    if bs == 1:
        return f"{sig.op} with block_size = 1 is a no-op."
    if bs < 1:
        return f"{sig.op} block_size must be > 1, got {bs}"
    return None


@check
def cast_types(sig: OpSignature) -> str | None:
    """compat 633-656: BOOL->F16/F32, F16/F32->BOOL, {F32,I32}->{F32,I32}."""
    x = sig.input(0)
    if x is None or not sig.outputs:
        return "Expected 1 input and 1 output"
    src, dst = x.dtype, sig.outputs[0].dtype
    ok = (
        (src == "BOOL" and dst in FLOAT_TYPES)
        or (src in FLOAT_TYPES and dst == "BOOL")
        or (src in ("FLOAT32", "INT32") and dst in ("FLOAT32", "INT32"))
    )
    return None if ok else f"Not supported Cast case. Input type: {src} and output type: {dst}"


@check
def cast_from_bool(sig: OpSignature) -> str | None:
    """builder CastOperationParser 378-409: a BOOL input must come from a comparison with one consumer."""
    x = sig.input(0)
    if x is None or x.dtype != "BOOL":
        return None
    if sig.outputs and sig.outputs[0].is_graph_output:
        return "Cast from bool not supported for outputs"
    if sig.outputs and len(sig.consumers(sig.outputs[0])) != 1:
        return "Cast from bool needs exactly one consumer of its output"
    producer = sig.producer(x)
    if producer is None or producer.op not in COMPARISONS or len(sig.consumers(x)) != 1:
        return "Cast from bool needs the input produced by a comparison op with a single consumer"
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
    """compat 833-850: 2 runtime inputs or 1 runtime + 1 const; indices 1-D INT32."""
    rt, const = len(sig.runtime_inputs), len(sig.const_inputs)
    if not ((rt == 2 and const == 0) or (rt == 1 and const == 1)):
        return "Op can only handle 1 or 2 operand(s)."
    idx = sig.input(1)
    if idx is None or idx.dtype != "INT32":
        return f"Indices must be INT32, got {idx.dtype if idx else 'none'}"
    if idx.rank != 1:
        return f"Only 1-D indices are supported, got rank {idx.rank}"
    return None


@check
def one_hot(sig: OpSignature) -> str | None:
    """compat 324-369."""
    if len(sig.present_inputs) != 4 or len(sig.outputs) != 1:
        return "Expects 4 inputs and 1 output"
    idx, on, off = sig.inputs[0], sig.inputs[2], sig.inputs[3]
    if idx.dtype != "INT32":
        return "Indices must be int32 type"
    out = sig.outputs[0]
    axis = sig.options.get("axis", -1)
    if axis != -1 and axis != out.rank - 1:
        return f"Unsupported axis: {axis}"
    for i, d in enumerate(out.shape[:-1]):
        if d != 1 and not (i == 0 and out.rank > 3):
            return f"Unspported non-singleton dim at {i}"
    for name, t in (("on", on), ("off", off)):
        if t.dtype != "FLOAT32" or not t.is_const or t.elements != 1:
            return f"{name}_value must be a constant FLOAT32 scalar"
    return None


@check
def select(sig: OpSignature) -> str | None:
    """compat 371-419."""
    if len(sig.present_inputs) != 3 or len(sig.outputs) != 1:
        return "Expected 3 inputs and 1 output"
    cond, a, b = sig.inputs[0], sig.inputs[1], sig.inputs[2]
    out = sig.outputs[0]
    if cond.dtype not in ("BOOL", *FLOAT_TYPES):
        return f"Condition tensor must be BOOL, FLOAT32 or FLOAT16, got {cond.dtype}"
    for cd, od in zip(reversed(cond.shape), reversed(out.shape), strict=False):
        if cd != od and cd != 1:
            return "Cond tensor must be broadcastable to the output"
    for t in (a, b):
        if t.shape != out.shape and t.elements != 1:
            return "Input tensors must have the output shape or be a scalar"
        if t.rank == 2 and not t.is_const:
            return "2-D if/else tensors must be constant"
    return None


@check
def lstm(sig: OpSignature) -> str | None:
    """compat 856-904: the FULL kernel, or the BASIC kernel with its fixed shape."""
    kind = sig.options.get("kernel_type", "FULL")
    act = sig.options.get("fused_activation_function", "NONE")
    if kind == "FULL":
        if len(sig.inputs) not in (20, 24) or len(sig.outputs) != 1:
            return (
                f"LSTM full kernel expects 20 or 24 inputs and 1 output, got {len(sig.inputs)} and {len(sig.outputs)}"
            )
        if act not in ("SIGMOID", "TANH"):
            return f"LSTM activation {act} is not SIGMOID or TANH"
        return None
    if len(sig.runtime_inputs) != 3 or len(sig.const_inputs) != 2 or len(sig.outputs) != 4:
        return "LSTM basic kernel expects 3 runtime inputs, 2 constant inputs and 4 outputs"
    if act != "TANH":
        return f"LSTM basic kernel supports only TANH activation, got {act}"
    if sig.options.get("cell_clip", 0) != 0 or sig.options.get("proj_clip", 0) != 0:
        return "LSTM basic kernel does not support clipping"
    if sig.outputs[3].shape and sig.outputs[3].shape[-1] % 4:
        return f"LSTM basic kernel needs output[3] depth divisible by 4, got {sig.outputs[3].shape[-1]}"
    return None


@check
def cumsum(sig: OpSignature) -> str | None:
    """compat 307-322."""
    x = sig.input(0)
    if x is None or x.dtype not in FLOAT_TYPES or not sig.outputs or sig.outputs[0].dtype != x.dtype:
        return "CUMSUM input and output must be the same float type"
    return axes_const_int32(sig, 1)


@check
def dequantize_input(sig: OpSignature) -> str | None:
    x = sig.input(0)
    return "Unsupported dequantization type." if x is not None and x.dtype == "INT16" else None


@check
def add_n(sig: OpSignature) -> str | None:
    return None if len(sig.present_inputs) == 2 else "ADD_N only supports 2 inputs."


# -- checks the delegate makes when it builds the graph (init failures) -------------------------


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
        return f"Amount of input channels ({x.shape[-1]}) should match weights width ({w.shape[1]})"
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
    linear = sum(1 for d in alpha.shape if d != 1) <= 1 and alpha.elements == channels
    full = alpha.shape == x.shape[1:] or alpha.shape == x.shape
    return None if linear or full else "Alpha shape should be linear of size channels or match the input shape."


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
        return f"Permutation for transpose is invalid (size {t.elements if t else 0})"
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
    return CHECKS[name](sig, **params)

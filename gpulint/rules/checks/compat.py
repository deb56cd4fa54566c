"""The classic delegate's compatibility checks (compat = tflite/tools/versioning/
gpu_compatibility.cc) on operand counts, options, constant operands and broadcasts, which many
ops share; checks of one op family are in compat_ops.py. A refusal here is made at partition
time: the op runs on the CPU.
"""

from __future__ import annotations

import struct
from typing import Any

from gpulint.rules.checks.registry import check
from gpulint.rules.signature import OpSignature, TensorSpec

FLOAT_TYPES = ("FLOAT32", "FLOAT16")


def _dims(t: TensorSpec) -> str:
    return "[" + ",".join(map(str, t.shape)) + "]"


# -- input/output counts (compat CheckInputsOutputs / CheckInputsConstsOutputs) ---------------


def runtime_outputs(sig: OpSignature, runtime: int, outputs: int) -> str | None:
    n = len(sig.runtime_inputs)
    if n != runtime:
        return f"Expected {runtime} runtime input tensor(s), but node has {n} runtime input(s)."
    if len(sig.outputs) != outputs:
        return f"Expected {outputs} output tensor(s), but node has {len(sig.outputs)} output(s)."
    return None


@check
def inputs_outputs(sig: OpSignature, runtime: int, outputs: int = 1) -> str | None:
    """compat CheckInputsOutputs: runtime inputs, then outputs."""
    return runtime_outputs(sig, runtime, outputs)


@check
def inputs_consts_outputs(sig: OpSignature, runtime: int, consts: int, outputs: int = 1) -> str | None:
    """compat CheckInputsConstsOutputs: constant inputs first, then as CheckInputsOutputs."""
    n = len(sig.const_inputs)
    if n != consts:
        return f"Expected {consts} const input tensor(s), but node has {n} const input(s)."
    return runtime_outputs(sig, runtime, outputs)


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


@check
def compat_no_case(sig: OpSignature) -> str:
    """compat 1269-1274, the switch's `default:`: an op CheckGpuDelegateCompatibility has no case
    for is refused by any parser that calls it (ML Drift's ValidateSupport does unless its options
    say check_gpu_compatibility = false, operation_parser.h 71)."""
    return f"Not supported op {sig.op}"


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


# -- broadcasts --------------------------------------------------------------------------------


def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
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
    if enhanced and broadcastable(ld, sd):
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

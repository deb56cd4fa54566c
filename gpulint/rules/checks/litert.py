"""LiteRT's GPU accelerator (ML Drift): its parsers' IsSupported.

`mdb` = ml_drift_delegate/tflite/model_builder.cc, `opp` = ml_drift_delegate/tflite/
operation_parser.cc, at google-ai-edge/LiteRT@f67457790c9c. ML Drift checks in IsSupported what
the classic builder only finds out in Parse, so most of these refuse at partition time.
"""

from __future__ import annotations

from gpulint.model import schema
from gpulint.rules.checks.builder import adds_a_value_twice
from gpulint.rules.checks.compat import FLOAT_TYPES, broadcastable, one_or_two_operands
from gpulint.rules.checks.registry import check
from gpulint.rules.signature import OpSignature, TensorSpec

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


# ADD_N has the ADD parser (mdb 6781-6784), so it takes a repeated input as ADD does.
ELEMENTWISE_IDENTICAL_OK = ("ADD", "ADD_N", "MUL")


def _tflite_shape(t: TensorSpec) -> str | None:
    """opp PreCheckTfLiteShape 285-303: rank 1 to 4."""
    return None if 1 <= t.rank <= 4 else f'Tensor "{t.name}" has bad input dims size: {t.rank}.'


@check
def md_elementwise(sig: OpSignature) -> str | None:
    """mdb ElementwiseOperationParser::IsSupported 2258-2312: two runtime inputs must be two
    distinct tensors (ADD, ADD_N and MUL may repeat one) of equal rank or numpy-broadcastable, and a
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
    if not broadcastable(a.shape, b.shape):
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


# TfLiteType's values (tflite/core/c/c_api_types.h), which compat prints with StrCat.
TFLITE_TYPE_NUMBERS = {
    "FLOAT32": 1, "INT32": 2, "UINT8": 3, "INT64": 4, "STRING": 5, "BOOL": 6, "INT16": 7, "COMPLEX64": 8,
    "INT8": 9, "FLOAT16": 10, "FLOAT64": 11, "COMPLEX128": 12, "UINT64": 13, "RESOURCE": 14, "VARIANT": 15,
    "UINT32": 16, "UINT16": 17, "INT4": 18, "BFLOAT16": 19,
}  # fmt: skip


def _layout_dims(t: TensorSpec) -> str:
    """mdb DynamicUpdateSliceOperationParser::MapAxis 2225-2233 (ranks 1-3 right-aligned in BHWC),
    printed as StrCat prints it: the four numbers run together."""
    padded = (1,) * (4 - t.rank) + t.shape
    return "".join(map(str, padded))


@check
def md_dynamic_update_slice(sig: OpSignature) -> str | None:
    """DYNAMIC_UPDATE_SLICE as the accelerator decides, in its order: ValidateSupport runs compat
    762-796 (three inputs, operand and update of one type and one rank, 1-D INT32 start indices),
    then mdb DynamicUpdateSliceOperationParser::IsSupported 2144-2177: runtime start indices,
    operand and update of rank 1-4, the update no larger than the operand on any axis, and start
    indices and output of rank 1-4."""
    if len(sig.inputs) != 3:
        return "DynamicUpdateSlice requires 3 inputs."
    operand, update, start = sig.inputs
    if operand.dtype != update.dtype:
        a, b = (TFLITE_TYPE_NUMBERS.get(t.dtype, t.dtype) for t in (operand, update))
        return (
            "Array to update and updated slice must have the same data type, but got: "
            f"array to update: {a}, updated slice: {b}"
        )
    if start.rank != 1:
        return f"Start indices must be 1D, but got: {start.rank}"
    if start.dtype != "INT32":
        return "start_indices must be of type int32."
    if update.rank != operand.rank:
        return (
            "Operand and update must have the same number of dimensions, but got: "
            f"operand: {operand.rank}, update: {update.rank}"
        )
    if start.is_const:
        return "start_indices must be a runtime tensor"
    for t, what in ((operand, "operand"), (update, "update")):
        if not 1 <= t.rank <= 4:
            return f"{what} dims must be 1D-4D."
    if any(u > o for u, o in zip(update.shape, operand.shape, strict=True)):
        return (
            "Updated_slice shape must be less or equal to the array to update, but they are updated_slice: "
            f"[{_layout_dims(update)}], array_to_update: [{_layout_dims(operand)}]"
        )
    out = sig.outputs[0] if sig.outputs else None
    if out is not None and not 1 <= out.rank <= 4:
        return "output dims must be 1D-4D."
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


@check
def md_distinct_inputs(sig: OpSignature) -> str | None:
    """One value as two inputs of a node: BATCH_MATMUL, SELECT_V2 and PACK (where no RESHAPE copy
    comes between; builder.adds_a_value_twice) add the same value to the node twice (mdb 705-760,
    4747-4790, PackOperationParser) and ML Drift's graph CHECK-fails ("Check failed:
    !IsInput(consumer, value) Node 0 is already a consumer of the value 0", model.cc:218 in
    @ml_drift), which aborts the process where ai-edge-litert 2.3.0 builds the graph: no CPU
    fallback, measured (PACK(x, x) of [1, 8, 4] too). ADD, MUL and ADD_N take a repeated input
    (mdb 2280-2286); so does CONCATENATION (measured)."""
    if not adds_a_value_twice(sig):
        return None
    return (
        "Check failed: !IsInput(consumer, value): the node reads one tensor twice, and the accelerator "
        "aborts the whole process (no CPU fallback)"
    )


@check
def md_select_condition_batch(sig: OpSignature) -> str | None:
    """A SELECT_V2 condition whose batch (its first dimension: the B of the layout of
    model_builder_helper.cc 117-122) is not 1, broadcast into an output of batch 1, fails at init:
    ML Drift's kernel generator reads the condition at x, y, z only (gpu_operation.cc:955 in
    @ml_drift). A rank-2 causal mask [T, T] under [1, H, T, T] scores is the usual case; a
    [1, 1, T, T] mask builds, and so does any mask when the output's batch is not 1. Measured on
    ai-edge-litert 2.3.0 with constant and runtime conditions of rank 1-4."""
    cond = sig.input(0)
    out = sig.outputs[0] if sig.outputs else None
    if cond is None or out is None:
        return None
    if (cond.shape[0] if cond.rank else 1) == 1 or (out.shape[0] if out.rank else 1) != 1:
        return None
    return "Unable to parse bc coord for BATCH axis. Layout is bhwc, args are cond_x, cond_y, cond_z."


def _bhwc(dims: tuple[int, ...]) -> str:
    return "{bhwc, {" + ", ".join(map(str, dims)) + "}}"


@check
def md_const_dequantize_layout(sig: OpSignature) -> str | None:
    """A constant DEQUANTIZE of rank 2 or 3 whose first dimension is not 1 fails when the graph is
    built. mdb DequantizeOperationParser::Parse 2087-2101 makes it a CONSTANT node whose tensor
    reads [a, b] as BHWC(1, 1, a, b) and [a, b, c] as BHWC(1, a, b, c) (ReadConstTensor 2062-2085),
    while its output value has the runtime layout (a, 1, 1, b) / (a, 1, b, c) (model_builder_helper.cc
    117-122); ML Drift compares the two (gpu_model_util.cc:247 in @ml_drift). Whatever reads it
    (FULLY_CONNECTED, BATCH_MATMUL, ADD): measured on ai-edge-litert 2.3.0, per-tensor and
    per-channel int8 alike; rank 4, or a first dimension of 1, builds."""
    x = sig.input(0)
    if x is None or not x.is_const or x.rank not in (2, 3) or x.shape[0] == 1:
        return None
    a, *rest = x.shape
    value = (a, 1, 1, *rest) if x.rank == 2 else (a, 1, *rest)
    const = (1, 1, a, *rest) if x.rank == 2 else (1, a, *rest)
    return f"Shape mismatch: {_bhwc(value)} vs {_bhwc(const)}"


QUANTIZED_TABLE_TYPES = ("INT8", "INT4", "INT2")


@check
def md_embedding_table_dies(sig: OpSignature) -> str | None:
    """An EMBEDDING_LOOKUP whose table is not a constant (a graph input, or the output of an int8
    DEQUANTIZE, as litert-torch's weight-only int8 exports write their embeddings): the accelerator
    takes it and its process dies building the graph (SIGSEGV, measured on ai-edge-litert 2.3.0: a
    DEQUANTIZE -> EMBEDDING_LOOKUP model alone; a constant float table builds, an fp16 table behind a
    DEQUANTIZE is refused first). Like runtime depthwise weights, the parser reads the table's
    constant data, which a computed tensor does not have."""
    table = sig.input(1)
    if table is None or table.is_const or md_embedding_lookup(sig) is not None:
        return None
    producer = sig.producer(table)
    folds = producer is not None and producer.op == "DEQUANTIZE" and all(t.is_const for t in producer.present_inputs)
    return (
        "its table is computed at run time, and the accelerator's process dies building the graph (SIGSEGV, no "
        "CPU fallback; measured on ai-edge-litert 2.3.0)"
        + ("; `gpulint fix` folds the DEQUANTIZE of its constant (dequantize-constants)" if folds else "")
    )


@check
def md_embedding_lookup(sig: OpSignature) -> str | None:
    """mdb EmbeddingLookupOperationParser::IsSupported 2976-3010, then compat 715-761 (ValidateSupport).
    The table is read as the accelerator sees it: an fp16 constant behind a DEQUANTIZE is FLOAT16
    with no quantization (FP16GraphPartitionHelper points the node at it before asking), so an
    fp16 table is refused: "Empty quantization params." (measured on ai-edge-litert 2.3.0)."""
    if len(sig.inputs) != 2:
        return f"Expected 2, but got {len(sig.inputs)} inputs."
    ids, table = sig.inputs
    dtype, quant = table.dtype, table.quant
    producer = sig.producer(table)
    if producer is not None and producer.index in sig.graph.folded_fp16 and producer.inputs:
        dtype, quant = producer.inputs[0].dtype, producer.inputs[0].quant
    if quant is None and dtype != "FLOAT32":
        return "EMBEDDING_LOOKUP: Empty quantization params."
    if dtype in QUANTIZED_TABLE_TYPES:
        # opp PreCheckReadQuantizedValueByTensorIdx 343-380
        if table.rank not in (2, 4):
            return f"PreCheckReadQuantizedValueByTensorIdx: Expected 2D or 4D quantized tensor: {table.index}"
        if table.rank == 4 and (table.shape[1] != 1 or table.shape[2] != 1):
            return (
                "PreCheckReadQuantizedValueByTensorIdx: Expected 4D quantized tensor with height of 1 and width "
                f"of 1: {table.index}"
            )
    elif dtype != "FLOAT32":
        return "EMBEDDING_LOOKUP: Unsupported weights type."
    out = sig.outputs[0] if sig.outputs else None
    if out is None:
        return "Expected 1, but got 0 outputs."
    if ids.rank != 1:
        return f"Expected 1D, but got {ids.rank}D input #0."
    if table.rank < 2:
        return f"Expected > 1D, but got {table.rank}D input #1."
    if table.rank != out.rank:
        return f"Expected {table.rank}, but got {out.rank} for output."
    for i in range(1, out.rank):
        if table.shape[i] != out.shape[i]:
            return f"Expected {table.shape[i]}, but got {out.shape[i]} for output.dim[{i}]."
    return None


@check
def md_drq_fully_connected_batch(sig: OpSignature, min_rows: int = 2) -> str | None:
    """A dynamic-range quantized FULLY_CONNECTED (a runtime float input of batch 1, constant INT8
    weights with their own quantization, no DEQUANTIZE between) whose output flattens the input's
    rows onto the BATCH axis: mdb FullyConnectedOperationParser 3395-3410 makes a
    FULLY_CONNECTED_INT8 node and adds the op's output as it is, without the RESHAPE the float path
    adds when the output's shape is not the input's with C replaced (IsFullyConnectedOutputReshapeNeeded,
    mdb 299-307, used at 3460-3465). An input [1, N, K] (keep_num_dims false, as litert-torch writes
    x @ W.T on a rank-3 x) gives an output [N, C], which ML Drift reads as BHWC (N, 1, 1, C)
    (model_builder_helper.cc 115-124) while the kernel computes (1, 1, N, C); the output's layout is
    BHWC (b != 1, as tflite/delegates/gpu/common/gpu_model.cc 238 picks it) and the kernel writes it
    without a batch coordinate: "Unable to parse bc coord for BATCH axis." (ml_drift's
    TensorDescriptor, its tensor_desc_test GetAddressFailedDueToMissingBatchCoord).

    `min_rows`: the fewest rows (the input's H*W) that fail. On WebGPU (ai-edge-litert 2.3.0, Mesa
    lavapipe, measured here) 17: up to 16 rows build, whatever K and C; an input of batch > 1 builds.
    On OpenCL and Metal 2: google-ai-edge/LiteRT#9277 (Mali, LiteRT 2.1.3/2.1.5; "the rank-2
    variant compiles", which needs no reshape) and issue #38's op matrix (an Apple M4; OpenCL on a
    Galaxy S26), where WebGPU built what the other two did not; their thresholds, if any, only a
    device can tell."""
    x, w = sig.input(0), sig.input(1)
    out = sig.outputs[0] if sig.outputs else None
    if x is None or w is None or out is None or not x.runtime or x.dtype not in FLOAT_TYPES:
        return None
    if not w.is_const or w.dtype != "INT8" or w.quant is None or not w.quant.scale or w.rank != 2:
        return None
    if x.rank > 4 or out.rank > 4:
        return None
    b, h, wd, _ = x.bhwc  # ML Drift's ExtractTensorShape (ml_drift_delegate/tflite/model_builder_helper.cc 115-124)
    expected = (b, h, wd, w.shape[0])
    got = out.bhwc
    if got == expected or got[0] == 1 or b != 1 or h * wd < min_rows:
        return None
    return (
        "Failed to create DelegateKernelLiteRt: INVALID_ARGUMENT: Unable to parse bc coord for BATCH axis. "
        f"Layout is bhwc (a dynamic-range int8 FULLY_CONNECTED whose output {list(out.shape)} puts the "
        f"{h * wd} rows of its input {list(x.shape)} on the BATCH axis; google-ai-edge/LiteRT#9277)"
    )


@check
def md_batched_depth_to_space(sig: OpSignature) -> str | None:
    """A DEPTH_TO_SPACE whose input has a batch above 1, as ML Drift's OpenCL backend fails to build
    it: the kernel source it hands clBuildProgram carries a stray quote and a literal `\\n";`, so the
    driver's compiler rejects it and the compile fails (google-ai-edge/LiteRT#8459, open: Adreno 620,
    LiteRT 2.1.3, 2.1.5, 2.1.6 and the libLiteRtClGlAccelerator.so of its day; batch 1 runs). WebGPU
    builds it (measured here, ai-edge-litert 2.3.0 on lavapipe, batch 2); Metal is not reported."""
    x = sig.input(0)
    if x is None or x.rank != 4 or x.shape[0] <= 1:
        return None
    return (
        f"the OpenCL kernel generated for DEPTH_TO_SPACE on a batch of {x.shape[0]} does not compile "
        "(clBuildProgram rejects its source; google-ai-edge/LiteRT#8459)"
    )

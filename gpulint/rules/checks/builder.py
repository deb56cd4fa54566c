"""What the classic delegate's builder (tflite/delegates/gpu/common/model_builder.cc, each
parser's Parse) refuses when it builds the graph, after compat accepted the op: target packs
name these under `init_checks:`, and a failure is an init failure (GPU201), not a CPU fallback.
"""

from __future__ import annotations

from gpulint.rules.checks.registry import check
from gpulint.rules.signature import OpSignature, TensorSpec


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


@check
def depthwise_runtime_multiplier(sig: OpSignature) -> str | None:
    """A DEPTHWISE_CONV_2D with runtime weights (a graph input, a DEQUANTIZE the delegate leaves to
    the CPU or computes itself) and a depth multiplier other than 1: Parse takes the weights as a
    second input and leaves the constant weights empty, then TransposeWeights copies from them
    (builder 926-948 and 955-; ML Drift's copy, mdb 1849-1856 and 1892-1941), and the process dies.
    Measured: SIGSEGV on the GL delegate and on LiteRT 2.3's accelerator; with multiplier 1, with
    constant weights, or with fp16 weights (folded into constants) the same graph builds."""
    multiplier = sig.options.get("depth_multiplier", 1)
    if len(sig.runtime_inputs) < 2 or multiplier == 1:
        return None
    return (
        f"depth multiplier {multiplier} with weights computed at run time: the builder's TransposeWeights "
        "reads the constant weights, which are empty, and the process dies (SIGSEGV; no CPU fallback)"
    )


def const_operand(sig: OpSignature) -> TensorSpec | None:
    """The constant operand of a binary op with one runtime input and one constant of more than one
    element: what ParseInputsWithConstTensorImpl reads as a tensor, not a scalar (builder 119-187)."""
    rt, const = sig.runtime_inputs, sig.const_inputs
    if len(rt) != 1 or len(const) != 1 or const[0].elements <= 1:
        return None
    return const[0]


@check
def const_operand_batch(sig: OpSignature) -> str | None:
    """ElementwiseOperationParser with one constant operand (builder 1161-1175 ->
    ParseInputsWithConstTensorImpl 119-187): a constant of more than one element that is not a
    per-channel vector is read as an HWC tensor, and a 4-D one whose batch is not 1 fails there
    (model_builder_helper.cc SetAllDimensions(HWC) 321-341). This is Parse, so every backend fails
    (the GL oracle prefixes the op's name, as BuildModel does for a Parse error)."""
    const = const_operand(sig)
    return "Batch size is not equal to 1." if const is not None and const.rank == 4 and const.shape[0] != 1 else None


@check
def const_operand_rank(sig: OpSignature) -> str | None:
    """CONCATENATION and PACK read a constant operand as a BHWC tensor (builder 500-518 and
    1640-1651: ReadTensor into TensorFloat32), which must be 4-D (model_builder_helper.cc
    SetAllDimensions(BHWC) 367-372); Parse, so every backend fails (GL oracle: ranks 2 and 3, zero
    or not)."""
    for t in sig.const_inputs:
        if t.rank != 4:
            return f"Expected a 4D tensor of shape BxHxWxC but got {'x'.join(str(d) for d in t.shape)}"
    return None


@check
def select_condition_runtime(sig: OpSignature) -> str | None:
    """SelectV2OperationParser adds the condition with AddInput (builder 2128-2150), which takes
    runtime tensors only (object_reader.cc ReadNonConstantTensor 35-48); Parse, every backend."""
    cond = sig.input(0)
    if cond is None or not cond.is_const:
        return None
    return f"ReadNonConstantTensor: value is a constant tensor: {cond.index}"


def _stacked_axis(rank: int, axis: int) -> int:
    """ExtractAxisFromIndex (model_builder_helper.cc 123-153) as a BHWC index."""
    axis %= max(rank, 1)
    return {4: (0, 1, 2, 3), 3: (0, 2, 3), 2: (0, 3), 1: (0,)}.get(rank, (0, 1, 2, 3))[axis]


def adds_a_value_twice(sig: OpSignature) -> bool:
    """The parser would make one value this node's input twice, which GraphFloat32::AddConsumer
    refuses ("Node N is already a consumer of the value M", model.cc 226-236). BATCH_MATMUL and
    SELECT/SELECT_V2 add each runtime input; PACK each input that already has the shape it stacks
    (other inputs go through a RESHAPE copy first, builder 1661-1675; ML Drift's parsers alike)."""
    seen = [t.index for t in sig.runtime_inputs]
    repeated = {i for i in seen if seen.count(i) > 1}
    if not repeated or sig.op != "PACK":
        return bool(repeated)
    out = sig.outputs[0] if sig.outputs else None
    if out is None or not 1 <= out.rank <= 4:
        return False
    required = list(out.bhwc)
    required[_stacked_axis(out.rank, int(sig.options.get("axis", 0)))] = 1
    return any(t.bhwc == tuple(required) for t in sig.runtime_inputs if t.index in repeated)


@check
def value_added_twice(sig: OpSignature) -> str | None:
    """The classic builder's Parse fails (every backend); see adds_a_value_twice."""
    if not adds_a_value_twice(sig):
        return None
    return 'the node reads one tensor twice: "Node is already a consumer of the value" (GraphFloat32::AddConsumer)'

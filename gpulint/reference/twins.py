"""A model as the GPU delegate computes it, for the CPU interpreter to run: the float twin
(hybrid ops' int8 weights dequantized) and the fake-quant twin (int8 ops in float, each int8
result rounded to its grid)."""

from __future__ import annotations

from collections.abc import Sequence

from gpulint.model.ir import Model, Operator, Subgraph, Tensor

# -- dynamic-range (hybrid) models -----------------------------------------------------------

QUANTIZED_WEIGHTS = ("INT8", "UINT8", "INT16")


def hybrid_ops(model: Model) -> list[int]:
    """Ops of the main subgraph that LiteRT runs with hybrid kernels: a float activation in, a
    quantized constant (a dynamic-range int8 weight) beside it, a float result. Those kernels
    quantize the activation to int8 on the fly; the GPU delegate dequantizes the weight once and
    computes in float."""
    sg = model.subgraphs[0]
    found = []
    for index, op in enumerate(sg.operators):
        if model.op_name(op) in ("DEQUANTIZE", "QUANTIZE"):
            continue
        ins = [sg.tensors[t] for t in op.inputs if t >= 0]
        consts = [t for t in ins if model.tensor_data(t) is not None]
        runtime = [t for t in ins if model.tensor_data(t) is None]
        quantized = [
            t for t in consts if t.type in QUANTIZED_WEIGHTS and t.quantization is not None and t.quantization.scale
        ]
        outs = [sg.tensors[t].type for t in op.outputs if t >= 0]
        if quantized and any(t.type == "FLOAT32" for t in runtime) and outs and all(o == "FLOAT32" for o in outs):
            found.append(index)
    return found


def float_twin(model: Model, ops: Sequence[int] | None = None) -> Model:
    """`model` with the quantized constant weights of its hybrid ops (or of `ops`, those of them
    the delegate runs) dequantized to float32 (per tensor or per channel, as the delegate
    dequantizes them): the same graph, computed in float where the GPU computes it. Changes
    `model` in place and returns it; tensor names stay, so intermediates still match."""
    sg = model.subgraphs[0]
    made: dict[int, int] = {}
    for index in hybrid_ops(model) if ops is None else ops:
        op = sg.operators[index]
        for k, t in enumerate(op.inputs):
            tensor = sg.tensors[t] if t >= 0 else None
            if tensor is None or tensor.type not in QUANTIZED_WEIGHTS or model.tensor_data(tensor) is None:
                continue
            op.inputs[k] = _dequantized_const(model, sg, t, made)
    return model


def _dequantized_const(model: Model, sg: Subgraph, t: int, made: dict[int, int]) -> int:
    """The float32 copy of quantized constant `t`, made once per tensor (`made`); `t` itself
    where it cannot be dequantized."""
    from gpulint.passes.edit import add_const, dequantize

    if t not in made:
        value = dequantize(model, sg.tensors[t])
        if value is None:
            return t
        made[t] = add_const(model, sg, f"{sg.tensors[t].name}/dequantized", value)
    return made[t]


# -- full-int8 models ----------------------------------------------------------------------------

INT8_ACTIVATIONS = ("INT8", "UINT8")  # the types the delegate's PopulateQuantParams reads (model_builder_helper.cc)
QUANTIZED_CONSTANTS = ("INT8", "UINT8", "INT16", "INT32")  # weights and biases the delegate dequantizes once


def _int8_activation(model: Model, t: int) -> bool:
    """A runtime int8/uint8 tensor with one scale: a value the delegate holds in float and
    rounds to its grid."""
    if t < 0:
        return False
    tensor = model.subgraphs[0].tensors[t]
    q = tensor.quantization
    return (
        tensor.type in INT8_ACTIVATIONS
        and model.tensor_data(tensor) is None
        and q is not None
        and q.scale is not None
        and len(q.scale) == 1
    )


def int8_ops(model: Model) -> list[int]:
    """Ops of the main subgraph that LiteRT runs with integer kernels: an int8/uint8 activation
    in or out. A DEQUANTIZE (exact) and a QUANTIZE of a float tensor (the rounding itself) are
    not among them: the interpreter and the delegate do the same there."""
    sg = model.subgraphs[0]
    found = []
    for index, op in enumerate(sg.operators):
        name = model.op_name(op)
        reads = any(_int8_activation(model, t) for t in op.inputs)
        writes = any(_int8_activation(model, t) for t in op.outputs)
        if name == "DEQUANTIZE" or (name == "QUANTIZE" and not reads):
            continue
        if reads or writes:
            found.append(index)
    return found


def fake_quant_twin(model: Model, ops: Sequence[int] | None = None) -> Model:
    """`model` with its int8 ops (or those of `ops` that are int8 ops: the ones the delegate
    runs) computed as the GPU delegate computes them: in float, on weights and biases
    dequantized once, each int8 result rounded to its tensor's grid and clamped to its range.

    The delegate's graph builder gives every int8 runtime tensor a float value with its
    quantization parameters, and its add_quant_adjustments transformation puts a
    QUANTIZE_AND_DEQUANTIZE after every op that writes one (tensorflow/lite/delegates/gpu/
    common/transformations/add_quant_adjustments.cc; the kernel clamps to [min, max] and rounds,
    tasks/quantize_and_dequantize.cc). Here each such op writes a float tensor that a QUANTIZE
    rounds into the original int8 tensor (name, scale and zero point kept, so intermediates
    still match by name), and an op computed in float reads an int8 tensor through a
    DEQUANTIZE. Ops left out keep their integer kernels and read and write the int8 tensors
    as before, as a CPU partition does beside the delegate. The rounding differs from the
    delegate's only on exact halves (the interpreter's QUANTIZE rounds them away from zero,
    the delegate's kernel up). Changes `model` in place and returns it."""
    sg = model.subgraphs[0]
    chosen = set(int8_ops(model))
    if ops is not None:
        chosen &= set(ops)
    if not chosen:
        return model
    to_float = model.opcode_index("DEQUANTIZE", 2)  # version 2: int8 input (op_version.cc)
    to_int8 = model.opcode_index("QUANTIZE", 2)

    def float_tensor(t: int, suffix: str) -> int:
        old = sg.tensors[t]
        signature = list(old.shape_signature) if old.shape_signature is not None else None
        sg.tensors.append(Tensor(f"{old.name}/{suffix}", list(old.shape), "FLOAT32", shape_signature=signature))
        return len(sg.tensors) - 1

    as_float: dict[int, int] = {}  # int8 activation -> its DEQUANTIZE, made once before its first float reader
    consts: dict[int, int] = {}  # quantized constant -> its dequantized float32 copy (shared constants stay)
    order: list[Operator] = []
    for index, op in enumerate(sg.operators):
        if index not in chosen:
            order.append(op)
            continue
        for k, t in enumerate(op.inputs):
            if t < 0:
                continue
            tensor = sg.tensors[t]
            if _int8_activation(model, t):
                if t not in as_float:
                    as_float[t] = float_tensor(t, "dequantized")
                    order.append(Operator(to_float, [t], [as_float[t]]))
                op.inputs[k] = as_float[t]
            elif tensor.type in QUANTIZED_CONSTANTS and model.tensor_data(tensor) is not None:
                op.inputs[k] = _dequantized_const(model, sg, t, consts)
        order.append(op)
        if model.op_name(op) == "QUANTIZE":  # a requantization: now a rounding of the float value
            continue
        for k, t in enumerate(op.outputs):
            if _int8_activation(model, t):
                computed = float_tensor(t, "float")
                op.outputs[k] = computed
                order.append(Operator(to_int8, [computed], [t]))
    sg.operators = order
    return model

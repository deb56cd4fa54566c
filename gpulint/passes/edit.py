"""Small graph edits the passes share: who reads what, new constants, and pruning.

Passes change the IR in place and leave unused tensors, buffers and operator codes behind;
`prune` removes them at the end and renumbers every reference (op inputs and outputs,
subgraph inputs and outputs, signature defs, tensor buffers, opcode indices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpulint.model.build import DTYPES
from gpulint.model.ir import Buffer, Model, Operator, Options, Quantization, Subgraph, Tensor


def consumers(sg: Subgraph) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for oi, op in enumerate(sg.operators):
        for t in op.inputs:
            if t >= 0:
                out.setdefault(t, []).append(oi)
    return out


def producers(sg: Subgraph) -> dict[int, int]:
    return {t: oi for oi, op in enumerate(sg.operators) for t in op.outputs}


def only_reader(sg: Subgraph, t: int, readers: dict[int, list[int]]) -> int | None:
    """The one op that reads `t`, if exactly one does and `t` is not a graph output."""
    r = readers.get(t, [])
    return r[0] if len(r) == 1 and t not in sg.outputs else None


def const_value(model: Model, sg: Subgraph, t: int) -> np.ndarray | None:
    if t < 0:
        return None
    return model.tensor_data(sg.tensors[t])


def add_const(model: Model, sg: Subgraph, name: str, value: np.ndarray, quant: Quantization | None = None) -> int:
    """A new constant tensor with its own buffer."""
    arr = np.asarray(value)  # not ascontiguousarray: it makes a scalar 1-D
    model.buffers.append(Buffer(arr.tobytes(), empty_data=arr.size == 0))
    sg.tensors.append(Tensor(name, list(arr.shape), DTYPES[arr.dtype], len(model.buffers) - 1, quant))
    return len(sg.tensors) - 1


def set_const(model: Model, sg: Subgraph, t: int, value: np.ndarray) -> None:
    """Give tensor `t` new constant data in a buffer of its own (shared buffers stay intact)."""
    arr = np.asarray(value)  # tobytes() is C order; ascontiguousarray would make a scalar 1-D
    model.buffers.append(Buffer(arr.tobytes(), empty_data=arr.size == 0))
    tensor = sg.tensors[t]
    tensor.buffer = len(model.buffers) - 1
    tensor.shape = list(arr.shape)
    tensor.type = DTYPES[arr.dtype]
    if tensor.shape_signature is not None:
        tensor.shape_signature = list(arr.shape)


def pad_axis(value: np.ndarray, axis: int, size: int) -> np.ndarray:
    """`value` grown with zeros at the end of `axis` to `size`."""
    pad = [(0, 0)] * value.ndim
    pad[axis] = (0, size - value.shape[axis])
    return np.pad(value, pad)


def replace_uses(sg: Subgraph, old: int, new: int) -> None:
    for op in sg.operators:
        op.inputs = [new if t == old else t for t in op.inputs]
    sg.outputs = [new if t == old else t for t in sg.outputs]


def new_op(
    model: Model,
    name: str,
    inputs: list[int],
    outputs: list[int],
    options: dict[str, Any] | None = None,
    options_type: str | None = None,
    version: int = 1,
) -> Operator:
    opts = Options.of(options_type, **(options or {})) if options_type else None
    return Operator(model.opcode_index(name, version), inputs, outputs, builtin_options=opts)


def prune(model: Model) -> None:
    """Drop tensors, buffers and operator codes nothing refers to, and renumber the rest."""
    for si, sg in enumerate(model.subgraphs):
        used = set(sg.inputs) | set(sg.outputs)
        for op in sg.operators:
            used.update(t for t in (*op.inputs, *op.outputs, *(op.intermediates or [])) if t >= 0)
        if len(used) == len(sg.tensors):
            continue
        keep = sorted(used)
        remap = {old: new for new, old in enumerate(keep)}
        sg.tensors = [sg.tensors[i] for i in keep]
        for op in sg.operators:
            op.inputs = [remap[t] if t >= 0 else t for t in op.inputs]
            op.outputs = [remap[t] for t in op.outputs]
            if op.intermediates is not None:
                op.intermediates = [remap[t] for t in op.intermediates]
        sg.inputs = [remap[t] for t in sg.inputs]
        sg.outputs = [remap[t] for t in sg.outputs]
        for sd in model.signature_defs or []:
            if sd.subgraph_index == si:
                for tm in sd.inputs + sd.outputs:
                    tm.tensor_index = remap[tm.tensor_index]

    used_buffers = {0} | {t.buffer for sg in model.subgraphs for t in sg.tensors}
    used_buffers |= {md.buffer for md in model.metadata or []}
    used_buffers |= set(model.metadata_buffer or [])
    if len(used_buffers) < len(model.buffers):
        keep = sorted(b for b in used_buffers if b < len(model.buffers))
        remap = {old: new for new, old in enumerate(keep)}
        model.buffers = [model.buffers[i] for i in keep]
        for sg in model.subgraphs:
            for t in sg.tensors:
                t.buffer = remap[t.buffer]
        for md in model.metadata or []:
            md.buffer = remap[md.buffer]
        if model.metadata_buffer is not None:
            model.metadata_buffer = [remap[b] for b in model.metadata_buffer]

    used_codes = sorted({op.opcode_index for sg in model.subgraphs for op in sg.operators})
    if len(used_codes) < len(model.operator_codes):
        remap = {old: new for new, old in enumerate(used_codes)}
        model.operator_codes = [model.operator_codes[i] for i in used_codes]
        for sg in model.subgraphs:
            for op in sg.operators:
                op.opcode_index = remap[op.opcode_index]


def fold_constant_ops(
    model: Model, op_name: str, fold: Callable[[Subgraph, Tensor, Tensor], np.ndarray | str | None]
) -> tuple[list[str], list[str]]:
    """Replace every `op_name` op whose one input is a constant by a constant output.

    `fold(subgraph, input, output)` gives the output's values, a reason to leave the op (str),
    or None to pass over it silently. The output tensor keeps its index and name, so its readers
    do not change; ops that write a model output are left alone. Returns (changes, skipped).
    """
    changes: list[str] = []
    skipped: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        keep = []
        for oi, op in enumerate(sg.operators):
            if model.op_name(op) != op_name or len(op.inputs) != 1 or op.inputs[0] < 0 or len(op.outputs) != 1:
                keep.append(op)
                continue
            src, out = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
            values = fold(sg, src, out) if op.outputs[0] not in sg.outputs else None
            if not isinstance(values, np.ndarray):
                if values:
                    skipped.append(f"subgraph {si} op {oi}: {values}")
                keep.append(op)
                continue
            set_const(model, sg, op.outputs[0], values.reshape(out.shape))
            out.quantization = None
            changes.append(f"subgraph {si}: folded {op_name} (op {oi}) of {src.type} constant `{src.name}` {src.shape}")
        sg.operators = keep
    if changes:
        prune(model)
    return changes, skipped


def dequantize(model: Model, tensor: Tensor) -> np.ndarray | None:
    """A constant's float32 values: fp16 widened, int8/uint8/int16/int32 scaled per tensor or channel."""
    arr = model.tensor_data(tensor)
    if arr is None or tensor.sparsity is not None:
        return None
    if tensor.type == "FLOAT16":
        return arr.astype(np.float32)
    if tensor.type == "FLOAT32":
        return arr.astype(np.float32)
    q = tensor.quantization
    if tensor.type not in ("INT8", "UINT8", "INT16", "INT32") or q is None or not q.scale:
        return None
    # As the interpreter's reference Dequantize: (value - zero_point) * scale in double, then float.
    scale = np.asarray(q.scale, np.float64)
    zp = np.asarray(q.zero_point or [0] * len(q.scale), np.float64)
    if zp.size != scale.size:
        return None
    values = arr.astype(np.float64)
    if len(scale) > 1:
        if not 0 <= q.quantized_dimension < values.ndim or values.shape[q.quantized_dimension] != len(scale):
            return None  # per-channel parameters that do not fit the tensor
        shape = [1] * values.ndim
        shape[q.quantized_dimension] = len(scale)
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    out: np.ndarray = ((values - zp) * scale).astype(np.float32)
    return out

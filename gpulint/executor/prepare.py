"""The model the kernels see: the executor's own copy of the model, rewritten by the steps in
STEPS, in order (as the delegate lists its model transformations), and the int8 interface
that is converted on the host.

Every step changes the copy in place; none runs on the caller's model. After them every
kernel sees float tensors, constants are folded, and ops are in the order lowering walks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpulint.executor import movement
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import links
from gpulint.executor.opcodes import BINARY
from gpulint.model.ir import Model, Operator, Quantization, Tensor, clone
from gpulint.passes import Pass, PassOptions, densify_constants, dequantize_constants, quantized_to_float
from gpulint.passes.edit import prune, set_const

NUMPY = {"INT32": np.int32, "INT64": np.int64, "FLOAT32": np.float32}
INT_TYPES: dict[str, type[np.integer[Any]]] = {"INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16}
# The delegate's op that rounds a float value to an int8 tensor's grid (add_quant_adjustments),
# a custom op of the executor's own copy of the model; its custom options are (min, max, scale)
# as float32 (see adjustment).
QUANTIZE_AND_DEQUANTIZE = "QUANTIZE_AND_DEQUANTIZE"
# The quantized types the delegate gives a grid (model_builder_helper.cc PopulateQuantParams).
QUANT_RANGES = {"INT8": (-128, 127), "UINT8": (0, 255)}
# Ops that only move values (or pick one of them): fed values on their output's grid, they make
# values on it, so the rounding the delegate puts after them gives those values back and is not
# run. Not PAD: its zeros are off the grid the delegate's fp16 scale floor makes (and, as there,
# the rounding after a PAD keeps it from merging into the conv that reads it).
MOVES_VALUES = frozenset(
    {
        "RESHAPE",
        "SQUEEZE",
        "EXPAND_DIMS",
        "TRANSPOSE",
        "SLICE",
        "STRIDED_SLICE",
        "SPLIT",
        "SPLIT_V",
        "GATHER",
        "CONCATENATION",
        "PACK",
        "UNPACK",
        "TILE",
        "DEPTH_TO_SPACE",
        "SPACE_TO_DEPTH",
        "MIRROR_PAD",
        "MAX_POOL_2D",
        "RESIZE_NEAREST_NEIGHBOR",
    }
)


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Model], None]
    fusing_only: bool = False  # only when ops may fuse (not for an executor that keeps intermediates)


@dataclass
class Prepared:
    """The prepared model, and its int8 interface: graph input -> (the float tensor its
    DEQUANTIZE makes, the input's quantization), graph output -> (the float tensor its QUANTIZE
    reads, the output's quantization). Those DEQUANTIZE and QUANTIZE ops run on the host."""

    model: Model
    edges_in: dict[int, tuple[int, Any]]
    edges_out: dict[int, tuple[int, Any]]

    @property
    def host_side(self) -> set[int]:
        """The float tensors the host writes or reads at the int8 interface."""
        return {s for s, _ in self.edges_out.values()} | {s for s, _ in self.edges_in.values()}


def _pass(p: Pass) -> Callable[[Model], None]:
    def run(model: Model) -> None:
        p.run(model, PassOptions())

    return run


def fold_shape_math(model: Model) -> None:
    """SHAPE(x) -> x's static shape, and a data-moving op of constants (STRIDED_SLICE, PACK,
    CONCATENATION, ...) -> the constant it makes, until none is left: the converter's
    dynamic-batch RESHAPE then reads a constant shape. The delegate runs such int32 chains on
    the CPU; here they cost nothing. A graph output stays an op's output."""
    sg = model.subgraphs[0]
    folded = True
    while folded:
        folded = False
        for oi, op in enumerate(sg.operators):
            name = model.op_name(op)
            values = [model.tensor_data(sg.tensors[t]) if t >= 0 else None for t in op.inputs]
            if name == "SHAPE" and op.inputs:  # the executor runs every tensor at its static shape
                result = [np.array(sg.tensors[op.inputs[0]].shape, np.int32)]
            elif name in movement.MOVEMENT_OPS and op.inputs and all(v is not None for v in values):
                opts = op.builtin_options.values if op.builtin_options is not None else {}
                data = [None if i in movement.PARAMS.get(name, ()) else v for i, v in enumerate(values)]
                try:
                    result = movement.apply(name, data, values, opts, [sg.tensors[t].shape for t in op.outputs])
                except (movement.Unsupported, ValueError, IndexError):
                    continue
            else:
                continue
            if any(t in sg.outputs for t in op.outputs):
                continue
            for t, r in zip(op.outputs, result, strict=True):
                dtype = NUMPY.get(str(sg.tensors[t].type))
                if dtype is None:
                    break
                set_const(model, sg, t, np.asarray(r).astype(dtype).reshape(sg.tensors[t].shape))
            else:
                del sg.operators[oi]
                folded = True
                break
    prune(model)


def add_quant_adjustments(model: Model) -> None:
    """int8 op -> the op in float, then QUANTIZE_AND_DEQUANTIZE(min, max, scale) of its output,
    as the delegate computes a full-int8 model: its graph builder gives every runtime int8/uint8
    tensor min = scale * (qmin - zero point), max = scale * (qmax - zero point) and the scale
    (tensorflow/lite/delegates/gpu/common/model_builder_helper.cc, PopulateQuantParams), and
    add_quant_adjustments puts a QUANTIZE_AND_DEQUANTIZE after every op whose quantized output
    another op reads (common/transformations/add_quant_adjustments.cc); that kernel clamps to
    [min, max] and rounds to the grid (common/tasks/quantize_and_dequantize.cc; ops/quantize.py
    runs it). Its QUANTIZE ops become the same rounding, with the output's parameters; a
    DEQUANTIZE of a runtime tensor too, with its input's, which is already rounded (or a graph
    input, on its grid), so it is left to quantized-to-float to drop. The op keeps computing
    under a new tensor, `<name>/float`, and the rounding writes the original one, so tensors
    keep their names (the rounded value is what verify's reference has under that name).

    Runs before quantized-to-float, which drops the quantization. Not on a graph output no op
    reads (the host quantizes it, as the delegate's output does), nor after ops in MOVES_VALUES
    fed only on their output's grid; nothing when a runtime tensor is quantized per channel
    (the delegate refuses those; quantized-to-float leaves such a model as it is)."""
    sg = model.subgraphs[0]
    runtime = {
        i
        for i, t in enumerate(sg.tensors)
        if t.type in QUANT_RANGES and t.quantization and t.quantization.scale and not model.is_constant(t)
    }
    if not runtime or any(sg.tensors[i].quantization.per_channel for i in runtime):  # type: ignore[union-attr]
        return
    readers = links(model)[0]
    code = model.opcode_index(QUANTIZE_AND_DEQUANTIZE)
    order: list[Operator] = []
    for op in sg.operators:
        name = model.op_name(op)
        order.append(op)
        if name == "QUANTIZE":
            out = op.outputs[0]
            if out in runtime and (out not in sg.outputs or readers.get(out)):  # else the host quantizes it
                op.opcode_index, op.custom_options = code, _grid(sg.tensors[out])
            continue
        if name == "DEQUANTIZE" or (name in MOVES_VALUES and _on_grid(model, op)):
            continue
        for k, t in enumerate(op.outputs):
            if t not in runtime or not readers.get(t):
                continue
            old = sg.tensors[t]
            assert old.quantization is not None
            q = Quantization(
                scale=list(old.quantization.scale or []), zero_point=list(old.quantization.zero_point or [])
            )
            signature = list(old.shape_signature) if old.shape_signature is not None else None
            sg.tensors.append(Tensor(f"{old.name}/float", list(old.shape), old.type, 0, q, shape_signature=signature))
            op.outputs[k] = len(sg.tensors) - 1
            order.append(Operator(code, [op.outputs[k]], [t], custom_options=_grid(old)))
    sg.operators = order


def _grid(tensor: Tensor) -> bytes:
    """An int8/uint8 tensor's (min, max, scale) as the delegate computes them, in float32."""
    q = tensor.quantization
    assert q is not None and q.scale
    scale, zero = np.float32(q.scale[0]), np.float32(q.zero_point[0] if q.zero_point else 0)
    low, high = (np.float32(v) for v in QUANT_RANGES[str(tensor.type)])
    return np.array([scale * (low - zero), scale * (high - zero), scale], np.float32).tobytes()


def _on_grid(model: Model, op: Operator) -> bool:
    """Every int8/uint8 input and output of `op` has one type, scale and zero point."""
    sg = model.subgraphs[0]
    grids = set()
    for t in [*op.inputs, *op.outputs]:
        tensor = sg.tensors[t] if t >= 0 else None
        if tensor is None or tensor.type not in QUANT_RANGES:
            continue
        q = tensor.quantization
        if q is None or not q.scale:
            return False
        grids.add((tensor.type, tuple(q.scale), tuple(q.zero_point or [0])))
    return len(grids) == 1


def adjustment(op: Operator) -> np.ndarray:
    """A QUANTIZE_AND_DEQUANTIZE's (min, max, scale, 0), as the kernels take it (quantize4 in
    elementwise.cl), from what add_quant_adjustments wrote."""
    values = np.frombuffer(bytes(op.custom_options or b""), np.float32)
    if values.size != 3:
        raise ExecutorError("a QUANTIZE_AND_DEQUANTIZE without its (min, max, scale)")
    return np.append(values, np.float32(0))


def source_name(model: Model, readers: dict[int, list[int]], t: int) -> str:
    """Tensor `t`'s name in the model the executor was given: an int8 op's float result,
    `<name>/float`, read by the rounding add_quant_adjustments put after it, was `<name>`."""
    sg = model.subgraphs[0]
    name = sg.tensors[t].name or ""
    after = readers.get(t, [])
    rounded = len(after) == 1 and model.op_name(sg.operators[after[0]]) == QUANTIZE_AND_DEQUANTIZE
    return name.removesuffix("/float") if rounded else name


def hoist_binary_operands(model: Model) -> None:
    """P ... CONV_2D | DEPTHWISE_CONV_2D ... BINARY(conv output, P's output) -> P moved ahead
    of the conv (its output rounded by a QUANTIZE_AND_DEQUANTIZE counts as its output), when P
    reads only tensors that exist by then (the channel PAD of a residual
    branch, say): the binary op can then be fused into the conv (fusion.py). The order stays
    topological."""
    ops = model.subgraphs[0].operators
    produced_by = links(model)[1]
    for ri in range(len(ops)):
        step = ops[ri]
        if model.op_name(step) not in BINARY or len(step.inputs) != 2:
            continue
        for a, u in (step.inputs, step.inputs[::-1]):
            p, q = produced_by.get(a), produced_by.get(u)
            if p is not None and model.op_name(ops[p]) == QUANTIZE_AND_DEQUANTIZE:  # the conv's rounded output
                p = produced_by.get(ops[p].inputs[0])
            if p is None or q is None or not p < q < ri:
                continue
            if model.op_name(ops[p]) not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                continue
            if any(produced_by.get(t, -1) >= p for t in ops[q].inputs if t >= 0):
                continue
            ops.insert(p, ops.pop(q))
            produced_by = links(model)[1]
            break


STEPS = (
    Step("densify-constants", _pass(densify_constants.PASS)),  # sparse constants -> dense
    Step("dequantize-constants", _pass(dequantize_constants.PASS)),  # fp16 / int8 weight DEQUANTIZE -> float32
    Step("add-quant-adjustments", add_quant_adjustments),  # int8 results rounded to their grid, as the delegate does
    Step("quantized-to-float", _pass(quantized_to_float.PASS)),  # int8 ops -> float ops, as the delegate runs them
    Step("fold-shape-math", fold_shape_math),
    Step("hoist-binary-operands", hoist_binary_operands, fusing_only=True),
)


def interface_edges(model: Model) -> tuple[dict[int, tuple[int, Any]], dict[int, tuple[int, Any]]]:
    """An int8 graph input read only by DEQUANTIZEs, and an int8 graph output a QUANTIZE makes:
    converted on the host, as the delegate converts them at its edges."""
    sg = model.subgraphs[0]
    edges_in, edges_out = {}, {}
    for t in sg.inputs:
        readers = [op for op in sg.operators if t in op.inputs]
        if sg.tensors[t].type in INT_TYPES and readers and all(model.op_name(op) == "DEQUANTIZE" for op in readers):
            edges_in[t] = (readers[0].outputs[0], sg.tensors[t].quantization)
    for t in sg.outputs:
        op = next((o for o in sg.operators if t in o.outputs), None)
        if sg.tensors[t].type in INT_TYPES and op is not None and model.op_name(op) == "QUANTIZE":
            edges_out[t] = (op.inputs[0], sg.tensors[t].quantization)
    return edges_in, edges_out


def prepare(source: Model, fusing: bool) -> Prepared:
    """A copy of `source` after STEPS (`fusing`: with the steps that serve fusion)."""
    model = clone(source)
    if not model.subgraphs:
        raise ExecutorError("the model has no subgraphs")
    for step in STEPS:
        if step.fusing_only and not fusing:
            continue
        try:
            step.run(model)
        except (IndexError, KeyError, ValueError, TypeError) as e:
            raise ExecutorError(f"cannot prepare the model for the executor ({step.name}: {e})") from None
    return Prepared(model, *interface_edges(model))

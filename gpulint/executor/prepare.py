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
from gpulint.model.ir import Model, clone
from gpulint.passes import Pass, PassOptions, densify_constants, dequantize_constants, quantized_to_float
from gpulint.passes.edit import prune, set_const

NUMPY = {"INT32": np.int32, "INT64": np.int64, "FLOAT32": np.float32}
INT_TYPES: dict[str, type[np.integer[Any]]] = {"INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16}


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


def hoist_binary_operands(model: Model) -> None:
    """P ... CONV_2D | DEPTHWISE_CONV_2D ... BINARY(conv output, P's output) -> P moved ahead
    of the conv, when P reads only tensors that exist by then (the channel PAD of a residual
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

"""LSTM with the basic kernel, the one the delegate runs: the gates are a FULLY_CONNECTED
over [input, previous activation] (conv.cl.j2), then one kernel for the cell (lstm.cl)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, int2, int4
from gpulint.executor.ops.conv import conv_launch
from gpulint.executor.ops.copy import copy_map
from gpulint.executor.ops.weights import bias


def lstm(cx: LowerContext, op: OpView) -> list[Launch]:
    oi, opts = op.index, op.opts
    if opts.get("kernel_type") != "BASIC" or len(op.inputs) != 5 or len(op.outputs) < 2:
        raise ExecutorError("LSTM other than the basic kernel (5 inputs)")
    if opts.get("cell_clip") or opts.get("proj_clip") or opts.get("fused_activation_function") != "TANH":
        raise ExecutorError("LSTM with clipping or an activation other than TANH")
    x, h, wt, bias_t, c = op.inputs
    w = cx.float_const(wt)
    if w is None:
        raise ExecutorError("runtime weights")
    rows, i = layout.bhwc(cx.shape(x))[0], cx.shape(x)[-1]
    units = cx.shape(h)[-1]
    # [input, previous activation] side by side: output 2 when the model has it
    joined_shape = [rows, i + units]
    joined = cx.buffers.tensor(op.outputs[2]) if len(op.outputs) > 2 else cx.buffers.scratch(joined_shape)
    b, j = np.meshgrid(np.arange(rows), np.arange(i + units), indexing="ij")
    index = np.where(j < i, b * i + j, rows * i + b * units + (j - i))
    sources = [(cx.buffers.tensor(x), cx.shape(x)), (cx.buffers.tensor(h), cx.shape(h))]
    launches = copy_map(cx, oi, sources, joined, joined_shape, [index])
    gates_shape = [rows, 4 * units]
    gates = cx.buffers.tensor(op.outputs[3]) if len(op.outputs) > 3 else cx.buffers.scratch(gates_shape)
    gate_bias = bias(cx, bias_t, 4 * units)
    weights = w.reshape(4 * units, 1, 1, i + units)
    shapes = (joined_shape, gates_shape)
    launches += conv_launch(cx, oi, joined, weights, gate_bias, gates, shapes, (1, 1, 1, 1, 1, 1), int2(0, 0), 0)
    state_shape = [rows, units]
    args = [gates, cx.buffers.tensor(c), cx.buffers.tensor(op.outputs[0]), cx.buffers.tensor(op.outputs[1])]
    args += [int4(layout.dims4(gates_shape)), int4(layout.dims4(state_shape)), np.int32(units)]
    return [*launches, cx.launch(oi, "lstm_cell", args, (layout.slices(units), rows))]


LOWER = {"LSTM": lstm}

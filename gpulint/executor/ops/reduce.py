"""Pooling (pool.cl), and reductions, SOFTMAX and CUMSUM (reduce.cl)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext, pads
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, grid, int2, int4
from gpulint.executor.opcodes import REDUCE
from gpulint.executor.ops.copy import copy_map


def pool(cx: LowerContext, op: OpView) -> list[Launch]:
    x, y, opts = op.inputs[0], op.outputs[0], op.opts
    xs, ys = cx.shape(x), cx.shape(y)
    kh, kw, sh, sw = opts["filter_height"], opts["filter_width"], opts["stride_h"], opts["stride_w"]
    pad = pads(xs, ys, (kh, kw), (sh, sw), (1, 1), opts["padding"])
    args = [
        cx.buffers.tensor(x),
        cx.buffers.tensor(y),
        int4(layout.dims4(xs)),
        int4(layout.dims4(ys)),
        np.int32(ys[-1]),
        int2(kw, kh),
        int2(sw, sh),
        pad,
        np.int32(op.name == "MAX_POOL_2D"),
        np.int32(op.act),
    ]
    return [cx.launch(op.index, "pool2d", args, grid(ys, 8))]


def reduce(cx: LowerContext, op: OpView) -> list[Launch]:
    """Over the axes given, into a buffer of the kept dims; copied to the output's layout when
    its rank (keep_dims) lays it out otherwise."""
    x, y = op.inputs[0], op.outputs[0]
    xs = cx.shape(x)
    axes_value = cx.const(op.inputs[1])
    if axes_value is None:
        raise ExecutorError("runtime axes")
    flags = [0, 0, 0, 0]
    for a in axes_value.ravel():
        flags[layout.bhwc_axis(len(xs), int(a))] = 1
    b, h, w, c = layout.bhwc(xs)
    kept = [1 if flags[0] else b, 1 if flags[1] else h, 1 if flags[2] else w, 1 if flags[3] else c]
    same = layout.bhwc(cx.shape(y)) == tuple(kept)
    dst = cx.buffers.tensor(y) if same else cx.buffers.scratch(kept)
    args = [
        cx.buffers.tensor(x),
        dst,
        int4(layout.dims4(xs)),
        np.int32(c),
        int4(layout.dims4(kept)),
        np.int32(kept[3]),
        int4(flags),
        np.int32(REDUCE[op.name]),
    ]
    launches = [cx.launch(op.index, "reduce", args, grid(kept))]
    if not same:
        index = np.arange(int(np.prod(kept))).reshape(cx.shape(y))
        launches += copy_map(cx, op.index, [(dst, kept)], cx.buffers.tensor(y), cx.shape(y), [index])
    return launches


def cumsum(cx: LowerContext, op: OpView) -> list[Launch]:
    x, y = op.inputs[0], op.outputs[0]
    axis = cx.const(op.inputs[1])
    if axis is None:
        raise ExecutorError("CUMSUM with a runtime axis")
    xs = cx.shape(x)
    args = [
        cx.buffers.tensor(x),
        cx.buffers.tensor(y),
        int4(layout.dims4(xs)),
        np.int32(layout.bhwc(xs)[3]),
        np.int32(layout.bhwc_axis(len(xs), int(axis.ravel()[0]))),
        np.int32(bool(op.opts.get("exclusive", False))),
        np.int32(bool(op.opts.get("reverse", False))),
    ]
    return [cx.launch(op.index, "cumsum", args, grid(xs))]


def softmax(cx: LowerContext, op: OpView) -> list[Launch]:
    x, y = op.inputs[0], op.outputs[0]
    b, h, w, c = layout.bhwc(cx.shape(x))
    args = [
        cx.buffers.tensor(x),
        cx.buffers.tensor(y),
        int4(layout.dims4(cx.shape(x))),
        np.int32(c),
        np.float32(op.opts.get("beta", 1.0)),
    ]
    return [cx.launch(op.index, "softmax", args, (w, h, b))]


LOWER = {
    "AVERAGE_POOL_2D": pool,
    "MAX_POOL_2D": pool,
    "SOFTMAX": softmax,
    "CUMSUM": cumsum,
    **{name: reduce for name in REDUCE},
}

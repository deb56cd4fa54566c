"""Pooling (pool.cl), and reductions, SOFTMAX and CUMSUM (reduce.cl)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext, pads
from gpulint.executor.device import Device, opencl
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
    _, h, w, _ = layout.bhwc(xs)
    _, oh, ow, _ = layout.bhwc(ys)
    whole = (kh, kw, oh, ow) == (h, w, 1, 1) and not (int(pad["x"]) or int(pad["y"]))
    if work_groups(cx.device) and op.name == "AVERAGE_POOL_2D" and whole and not op.act:
        # The delegate's GlobalPoolingToReduceOp (transformations/global_pooling_to_reduce_op.cc):
        # a window over the whole input, unpadded, is a MEAN over H and W. Only where that MEAN
        # runs in work groups (work_groups); a CPU device runs the pool kernel faster.
        return _reduce(cx, op.index, x, y, [0, 1, 1, 0], REDUCE["MEAN"])
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
    x = op.inputs[0]
    axes_value = cx.const(op.inputs[1])
    if axes_value is None:
        raise ExecutorError("runtime axes")
    flags = [0, 0, 0, 0]
    for a in axes_value.ravel():
        flags[layout.bhwc_axis(len(cx.shape(x)), int(a))] = 1
    return _reduce(cx, op.index, x, op.outputs[0], flags, REDUCE[op.name])


# The most items a GPU's work group gives one output in reduce_wg, as the delegate's
# GetMaximumWGTotalSize picks by default (tasks/reduce.cc).
GROUP = 256


def work_groups(device: Device) -> bool:
    """Reduce over B/H/W with a work group per output (reduce_wg)? On a GPU: one item looping
    over a 128x128 plane took 2.0 ms on an H100. Not on a CPU device, where the looping kernels
    ran faster: selfie_segmentation's global pools 0.10 ms as pools, 0.25 ms in reduce_wg with
    one item per group (PoCL, this machine)."""
    return not device.cpu


def _reduce(cx: LowerContext, oi: int, x: int, y: int, flags: list[int], code: int) -> list[Launch]:
    """Over the axes flagged (B, H, W, C), into a buffer of the kept dims; copied to the output's
    layout when its rank (keep_dims) lays it out otherwise."""
    xs = cx.shape(x)
    b, h, w, c = layout.bhwc(xs)
    kept = [1 if flags[0] else b, 1 if flags[1] else h, 1 if flags[2] else w, 1 if flags[3] else c]
    same = layout.bhwc(cx.shape(y)) == tuple(kept)
    dst = cx.buffers.tensor(y) if same else cx.buffers.scratch(kept)
    cells = (b if flags[0] else 1) * (h if flags[1] else 1) * (w if flags[2] else 1)
    if work_groups(cx.device) and not flags[3]:  # the channels kept: one float4 per cell
        group = min(GROUP, 1 << max(cells - 1, 0).bit_length())
        args = [cx.buffers.tensor(x), dst, int4(layout.dims4(xs)), int4(layout.dims4(kept)), np.int32(c)]
        args += [int4(flags), np.int32(code), opencl().LocalMemory(16 * group)]
        kb, kh, kw, kc = kept
        size = (kw * group, kh, kb * layout.slices(kc))
        launches = [cx.launch(oi, "reduce_wg", args, size, local=(group, 1, 1))]
    else:
        args = [cx.buffers.tensor(x), dst, int4(layout.dims4(xs)), np.int32(c), int4(layout.dims4(kept))]
        args += [np.int32(kept[3]), int4(flags), np.int32(code)]
        launches = [cx.launch(oi, "reduce", args, grid(kept))]
    if not same:
        index = np.arange(int(np.prod(kept))).reshape(cx.shape(y))
        launches += copy_map(cx, oi, [(dst, kept)], cx.buffers.tensor(y), cx.shape(y), [index])
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

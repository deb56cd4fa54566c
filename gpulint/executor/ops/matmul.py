"""FULLY_CONNECTED (a 1x1 conv over rows, or with runtime weights the matmul kernel) and
BATCH_MATMUL (matmul.cl)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, int2, int4
from gpulint.executor.ops.conv import conv_launch
from gpulint.executor.ops.copy import copy_map, reshaped
from gpulint.executor.ops.weights import bias


def fully_connected(cx: LowerContext, op: OpView) -> list[Launch]:
    oi, x, y = op.index, op.inputs[0], op.outputs[0]
    w = cx.float_const(op.inputs[1])
    if w is None:
        return runtime_fully_connected(cx, op)
    o, i = w.shape
    rows = int(np.prod(cx.shape(x))) // i
    launches: list[Launch] = []
    src = cx.buffers.tensor(x)
    if cx.shape(x) != [rows, i]:
        src, launches = reshaped(cx, oi, x, [rows, i])
    dst_shape = [rows, o]
    dst = cx.buffers.tensor(y) if cx.shape(y) == dst_shape else cx.buffers.scratch(dst_shape)
    b = bias(cx, op.inputs[2] if len(op.inputs) > 2 else -1, o)
    shapes = ([rows, i], dst_shape)
    launches += conv_launch(cx, oi, src, w.reshape(o, 1, 1, i), b, dst, shapes, (1, 1, 1, 1, 1, 1), int2(0, 0), op.act)
    if cx.shape(y) != dst_shape:
        index = np.arange(rows * o).reshape(cx.shape(y))
        launches += copy_map(cx, oi, [(dst, dst_shape)], cx.buffers.tensor(y), cx.shape(y), [index])
    return launches


def runtime_fully_connected(cx: LowerContext, op: OpView) -> list[Launch]:
    """Weights that are an activation (onnx2tf's unfolded BATCH_MATMUL): the delegate makes
    it a CONVOLUTION_2D with runtime weights, then a RESHAPE to the output's shape
    (model_builder.cc, FullyConnectedOperationParser); here the matmul kernel with the
    weights read transposed, the same sums per output."""
    x, wt, y = op.inputs[0], op.inputs[1], op.outputs[0]
    if len(cx.shape(wt)) != 2:
        raise ExecutorError("runtime weights of rank other than 2")
    o, i = cx.shape(wt)
    rows = int(np.prod(cx.shape(x))) // i if i else 0
    b = bias(cx, op.inputs[2] if len(op.inputs) > 2 else -1, o)
    return matmul(cx, op.index, (x, [1, 1, rows, i]), (wt, [1, 1, o, i]), (y, [1, 1, rows, o]), (0, 1), b, op.act)


def matmul_shape(s: list[int]) -> list[int]:
    """[B0, B1, M, K] as BHWC: rank 3 [B, M, K] is stored as (B, 1, M, K), rank 2 needs a copy."""
    if len(s) == 4:
        return list(s)
    if len(s) == 3:
        return [s[0], 1, s[1], s[2]]
    return [1, 1, *s]


def batch_matmul(cx: LowerContext, op: OpView) -> list[Launch]:
    """Batch dims aligned as numpy aligns them (leading 1s to the output's rank), 1s broadcast."""
    a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
    rank = len(cx.shape(y))
    if any(len(cx.shape(t)) < 2 or len(cx.shape(t)) > rank for t in (a, b)) or rank > 4:
        raise ExecutorError("BATCH_MATMUL of rank other than 2-4")

    def canonical(t: int) -> list[int]:
        return matmul_shape([1] * (rank - len(cx.shape(t))) + list(cx.shape(t)))

    adj = (int(bool(op.opts.get("adj_x"))), int(bool(op.opts.get("adj_y"))))
    n = cx.shape(y)[-1]
    zeros = np.zeros(n, np.float32)
    return matmul(cx, op.index, (a, canonical(a)), (b, canonical(b)), (y, canonical(y)), adj, zeros, op.act)


def matmul(
    cx: LowerContext,
    oi: int,
    a: tuple[int, list[int]],
    b: tuple[int, list[int]],
    y: tuple[int, list[int]],
    adj: tuple[int, int],
    bias: np.ndarray,
    act: int,
) -> list[Launch]:
    """The batch_matmul kernel on tensors viewed as 4-D [B, H, M, K] (each `(tensor, view)`);
    a tensor whose layout is not its view's goes through a copy."""
    bufs, launches = [], []
    for t, view in (a, b):
        if layout.bhwc(cx.shape(t)) == tuple(view):
            bufs.append(cx.buffers.tensor(t))
        elif (value := cx.float_const(t)) is not None:
            bufs.append(cx.buffers.upload(layout.to_slices(value.reshape(view), view), writable=False))
        else:
            buf, copies = reshaped(cx, oi, t, view)
            bufs.append(buf)
            launches += copies
    t_y, ys = y
    direct = layout.bhwc(cx.shape(t_y)) == tuple(ys)
    dst = cx.buffers.tensor(t_y) if direct else cx.buffers.scratch(ys)
    padded = np.zeros(layout.slices(ys[3]) * 4, np.float32)
    padded[: bias.size] = bias.ravel()
    k = a[1][2] if adj[0] else a[1][3]
    args = [bufs[0], bufs[1], cx.buffers.upload(padded, writable=False), dst]
    args += [int4(layout.dims4(a[1])), int4(layout.dims4(b[1])), int4(layout.dims4(ys)), np.int32(ys[3])]
    args += [np.int32(k), np.int32(adj[0]), np.int32(adj[1]), np.int32(act)]
    launches.append(cx.launch(oi, "batch_matmul", args, (ys[2], ys[1], ys[0] * layout.slices(ys[3]))))
    if not direct:
        index = np.arange(int(np.prod(ys))).reshape(cx.shape(t_y))
        launches += copy_map(cx, oi, [(dst, ys)], cx.buffers.tensor(t_y), cx.shape(t_y), [index])
    return launches


LOWER = {"FULLY_CONNECTED": fully_connected, "BATCH_MATMUL": batch_matmul}

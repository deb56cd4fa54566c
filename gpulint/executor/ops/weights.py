"""Weights and biases in the order the kernels read them, from constants on the host, or
from a runtime tensor by a copy on the device each run (the delegate converts runtime
weights with a kernel too)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.launch import Launch
from gpulint.executor.ops.copy import copy_pairs


def conv_weights(w: np.ndarray, ob: int) -> np.ndarray:
    """[O, kh, kw, I] -> [G][kh][kw][Si * 4 inputs][ob * 4 outputs], G = ceil(So / ob)."""
    o, kh, kw, i = w.shape
    g, si = -(-layout.slices(o) // ob), layout.slices(i)
    p = np.zeros((g * ob * 4, kh, kw, si * 4), np.float32)
    p[:o, :, :, :i] = w
    return p.reshape(g, ob * 4, kh, kw, si * 4).transpose(0, 2, 3, 4, 1).ravel()


def bias(cx: LowerContext, t: int, channels: int) -> np.ndarray:
    """Constant tensor `t` (-1: none, zeros) padded to whole slices."""
    b = np.zeros(layout.slices(channels) * 4, np.float32)
    value = cx.float_const(t) if t >= 0 else None
    if t >= 0 and value is None:
        raise ExecutorError("a runtime bias")
    if value is not None:
        b[:channels] = value.ravel()
    return b


def runtime_conv_weights(cx: LowerContext, oi: int, t: int, ob: int) -> tuple[Any, list[Launch]]:
    """A buffer in conv_weights' order that a copy fills from runtime tensor `t` [O, kh, kw, I]."""
    shape = cx.shape(t)
    n = int(np.prod(shape))
    if n >= 1 << 24:  # conv_weights' float32 holds the element numbers exactly below 2^24
        raise ExecutorError("runtime weights of 2^24 elements or more")
    order = conv_weights(np.arange(1, n + 1, dtype=np.float32).reshape(shape), ob)  # 0: padding
    dst_off = np.flatnonzero(order)
    src_off = layout.offsets(shape)[order[dst_off].astype(np.int64) - 1]
    packed = cx.buffers.weights(size=order.size)
    return packed, [copy_pairs(cx, oi, cx.buffers.tensor(t), packed, dst_off, src_off, "copy_pairs_to_float")]


def depthwise_weights(cx: LowerContext, oi: int, w: np.ndarray | None, t: int) -> tuple[Any, list[Launch]]:
    """[1, kh, kw, C] filter values `w`, or runtime tensor `t` when `w` is None, as
    [kh][kw][Cp] (Cp: C padded to whole slices)."""
    if w is None:  # runtime weights, which the delegate takes (model_builder.cc): laid out by a copy
        shape = cx.shape(t)
        if len(shape) != 4 or shape[0] != 1:
            raise ExecutorError("runtime weights not of shape [1, kh, kw, C]")
        _, kh, kw, c = shape
        cp = layout.slices(c) * 4
        dst = (np.arange(kh * kw)[:, None] * cp + np.arange(c)[None, :]).ravel()
        wbuf = cx.buffers.weights(size=kh * kw * cp)
        return wbuf, [copy_pairs(cx, oi, cx.buffers.tensor(t), wbuf, dst, layout.offsets(shape), "copy_pairs_to_float")]
    _, kh, kw, c = w.shape
    wp = np.zeros((kh, kw, layout.slices(c) * 4), np.float32)
    wp[:, :, :c] = w[0]
    return cx.buffers.weights(wp.ravel()), []

"""Data-moving ops (RESHAPE, TRANSPOSE, PAD, SLICE, CONCATENATION, GATHER, ...) as copies:
movement.py says which source element each output element is, and the copy kernels (copy.cl)
move them, whole float4 slices where no lane changes its meaning. Other ops use the same
copies to lay a tensor out as they need it (reshaped, copy_map)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import layout, movement
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch


def move(cx: LowerContext, op: OpView) -> list[Launch]:
    if op.act:
        raise ExecutorError(f"{op.name} with a fused activation")
    data: list[np.ndarray | None] = []
    consts: list[np.ndarray | None] = []
    sources: list[tuple[Any, list[int]]] = []
    base = 0
    for i, t in enumerate(op.inputs):
        value = cx.const(t) if t >= 0 else None
        if t < 0 or i in movement.PARAMS.get(op.name, ()):
            data.append(None)
            consts.append(value)
            continue
        movement.check_moved(op.name, cx.shape(t))
        if any(int(d) < 0 for d in cx.shape(t)):  # a damaged file's shape: an op it cannot lower
            raise ExecutorError(f"{op.name}: input {i} has the shape {list(cx.shape(t))}")
        n = int(np.prod(cx.shape(t))) if cx.shape(t) else 1
        data.append(np.arange(base, base + n).reshape(cx.shape(t)))
        consts.append(value)
        sources.append((cx.buffers.tensor(t), cx.shape(t)))
        base += n
    results = movement.apply(op.name, data, consts, op.opts, [cx.shape(t) for t in op.outputs])
    fill = 0.0
    if op.name == "PADV2" and len(op.inputs) > 2 and (value := cx.const(op.inputs[2])) is not None:
        fill = float(value.ravel()[0])
    launches = []
    for t, res in zip(op.outputs, results, strict=True):
        launches += copy_map(cx, op.index, sources, cx.buffers.tensor(t), cx.shape(t), [res], fill)
    return launches


def reshaped(cx: LowerContext, oi: int, t: int, shape: list[int]) -> tuple[Any, list[Launch]]:
    """A copy of runtime tensor `t` laid out as `shape` (same elements, another rank), and
    the launches that make it."""
    movement.check_moved("RESHAPE", shape)
    movement.check_moved("RESHAPE", cx.shape(t))
    dst = cx.buffers.scratch(shape)
    n = int(np.prod(cx.shape(t))) if cx.shape(t) else 1
    return dst, copy_map(cx, oi, [(cx.buffers.tensor(t), cx.shape(t))], dst, shape, [np.arange(n).reshape(shape)])


def copy_map(
    cx: LowerContext,
    oi: int,
    sources: list[tuple[Any, list[int]]],
    dst: Any,
    dst_shape: list[int],
    results: list[np.ndarray],
    fill: float = 0.0,
) -> list[Launch]:
    """Copies so that element e of `dst` gets global source index results[0][e] (-1: `fill`)."""
    res = results[0].ravel().astype(np.int64)
    dst_off = layout.offsets(dst_shape)
    launches = []
    base = 0
    for buf, shape in sources:
        n = int(np.prod(shape)) if shape else 1
        mask = (res >= base) & (res < base + n)
        if mask.any():
            src_off = layout.offsets(shape)[res[mask] - base]
            whole = whole_slices(dst_off[mask], src_off, dst_shape, shape)
            if whole is not None:
                launches.append(copy_pairs(cx, oi, buf, dst, *whole, kernel="copy_slices"))
            else:
                launches.append(copy_pairs(cx, oi, buf, dst, dst_off[mask], src_off))
        base += n
    pad = res < 0
    if pad.any() and fill != 0.0:  # PADV2's constant: copied from a one-value buffer
        one = cx.buffers.upload(np.array([fill]), writable=False)
        launches.append(copy_pairs(cx, oi, one, dst, dst_off[pad], np.zeros(int(pad.sum()), np.int32)))
    return launches


def copy_pairs(
    cx: LowerContext, oi: int, src: Any, dst: Any, dst_off: np.ndarray, src_off: np.ndarray, kernel: str = "copy_pairs"
) -> Launch:
    """dst[dst_off[i]] = src[src_off[i]]: floats, or with `copy_slices` whole float4 slices."""
    n = len(dst_off)
    args = [src, dst, cx.buffers.index(dst_off), cx.buffers.index(src_off), np.int32(n)]
    return cx.launch(oi, kernel, args, (-(-n // 16),))


def whole_slices(
    dst_off: np.ndarray, src_off: np.ndarray, dst_shape: list[int], src_shape: list[int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """An element copy as float4 slice copies (dst slice, src slice), when every destination
    slice it touches takes its lanes in place from one source slice, and any lane the element
    copy leaves out is a padding lane on both sides (zero, so copying it changes nothing).
    Spatial PAD, SLICE, TRANSPOSE of H/W and channel-aligned CONCATENATION are such copies."""
    if not len(dst_off):
        return None
    source = np.full(layout.size(dst_shape), -1, np.int64)  # the source of each dst float
    source[dst_off] = src_off
    lanes = source.reshape(-1, 4)
    touched = np.flatnonzero((lanes >= 0).any(axis=1))
    lanes = lanes[touched]
    present = lanes >= 0
    if np.any(present & (lanes % 4 != np.arange(4))):
        return None
    slices = np.where(present, lanes // 4, -1).max(axis=1)
    if np.any(present & (lanes // 4 != slices[:, None])):
        return None
    if not present.all():
        dst_real = np.zeros(layout.size(dst_shape), bool)
        dst_real[layout.offsets(dst_shape)] = True
        src_real = np.zeros(layout.size(src_shape), bool)
        src_real[layout.offsets(src_shape)] = True
        g, missing_lane = np.nonzero(~present)
        if dst_real[touched[g] * 4 + missing_lane].any() or src_real[slices[g] * 4 + missing_lane].any():
            return None
    return touched, slices


LOWER = {name: move for name in movement.MOVEMENT_OPS}

"""The GPU delegate's tensor layout: BHWC with channels in slices of 4.

A TFLite tensor of rank 1-4 maps to BHWC as the delegate maps it (model_builder_helper.cc):
[C] -> (1,1,1,C), [B,C] -> (B,1,1,C), [B,W,C] -> (B,1,W,C), [B,H,W,C] as is; a scalar is
(1,1,1,1). In memory a tensor is B x S x H x W float4 slices, S = ceil(C/4), padding lanes 0.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from gpulint.executor.errors import ExecutorError


def bhwc(shape: list[int] | tuple[int, ...]) -> tuple[int, int, int, int]:
    dims = [max(int(d), 1) for d in shape]
    if len(dims) == 0:
        return (1, 1, 1, 1)
    if len(dims) == 1:
        return (1, 1, 1, dims[0])
    if len(dims) == 2:
        return (dims[0], 1, 1, dims[1])
    if len(dims) == 3:
        return (dims[0], 1, dims[1], dims[2])
    if len(dims) == 4:
        return (dims[0], dims[1], dims[2], dims[3])
    raise ExecutorError(f"a tensor of rank {len(dims)} has no GPU layout (the delegate handles rank 4 at most)")


def bhwc_axis(rank: int, axis: int) -> int:
    """Which of B, H, W, C (0-3) a TFLite axis of a rank-`rank` tensor is."""
    axes = {1: [3], 2: [0, 3], 3: [0, 2, 3], 4: [0, 1, 2, 3]}[max(1, min(rank, 4))]
    at = axis + rank if axis < 0 else axis
    if not 0 <= at < len(axes):  # a damaged file's axis: the op is one the executor cannot lower
        raise ExecutorError(f"axis {axis} is outside a rank-{rank} tensor")
    return axes[at]


def slices(c: int) -> int:
    return -(-c // 4)


def dims4(shape: list[int] | tuple[int, ...]) -> np.ndarray:
    """The (B, H, W, S) int4 kernels take."""
    b, h, w, c = bhwc(shape)
    return np.array([b, h, w, slices(c)], np.int32)


def size(shape: list[int] | tuple[int, ...]) -> int:
    """Floats a tensor takes in the sliced layout."""
    b, h, w, c = bhwc(shape)
    return b * slices(c) * h * w * 4


def to_slices(x: np.ndarray, shape: list[int] | tuple[int, ...]) -> np.ndarray:
    b, h, w, c = bhwc(shape)
    s = slices(c)
    out = np.zeros((b, h, w, s * 4), np.float32)
    out[..., :c] = np.asarray(x, np.float32).reshape(b, h, w, c)
    return np.ascontiguousarray(out.reshape(b, h, w, s, 4).transpose(0, 3, 1, 2, 4)).ravel()


def from_slices(flat: np.ndarray, shape: list[int] | tuple[int, ...]) -> np.ndarray:
    b, h, w, c = bhwc(shape)
    s = slices(c)
    arr = flat[: b * s * h * w * 4].reshape(b, s, h, w, 4).transpose(0, 2, 3, 1, 4).reshape(b, h, w, s * 4)
    return np.ascontiguousarray(arr[..., :c]).reshape([max(int(d), 1) for d in shape] if shape else [])


def offsets(shape: list[int] | tuple[int, ...]) -> np.ndarray:
    """For each element of a tensor in logical (row-major) order, its float offset in slices."""
    return _offsets(tuple(int(d) for d in shape))


@cache
def _offsets(shape: tuple[int, ...]) -> np.ndarray:  # lowering asks for the same shapes often
    b, h, w, c = bhwc(shape)
    s = slices(c)
    bi, hi, wi, ci = np.ix_(*(np.arange(n, dtype=np.int64) for n in (b, h, w, c)))  # broadcast, not meshgrid
    result = (((((bi * s + ci // 4) * h + hi) * w + wi) * 4) + ci % 4).astype(np.int32).ravel()
    result.flags.writeable = False  # shared by every caller
    return result

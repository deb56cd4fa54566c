"""Ops that only move data, as numpy programs on index arrays.

Each op is applied once, at lowering, to arrays that hold the index of every input element;
the result says which input element each output element is (-1: padding). The executor turns
that into (destination, source) offset pairs in the sliced layout, and a copy kernel does the
moving: RESHAPE, TRANSPOSE, PAD and the rest are real copies on a GPU, as in the delegate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpulint.executor.errors import ExecutorError

# The index arrays below take 8 bytes an element and the copy kernels' offsets are int32: a tensor
# of more elements than this (a 1 GiB float tensor) is refused before numpy is asked for its index
# array, whatever a damaged file's shape, a TILE's multiples or a PAD's paddings claim.
MAX_MOVED = 1 << 28

MOVEMENT_OPS = {
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "TRANSPOSE",
    "PAD",
    "PADV2",
    "MIRROR_PAD",
    "SLICE",
    "STRIDED_SLICE",
    "DEPTH_TO_SPACE",
    "SPACE_TO_DEPTH",
    "SPACE_TO_BATCH_ND",
    "BATCH_TO_SPACE_ND",
    "CONCATENATION",
    "GATHER",
    "TILE",
    "PACK",
    "UNPACK",
    "SPLIT",
    "SPLIT_V",
    "BROADCAST_TO",
}


# Inputs that are parameters (read as constants), not data to move, per op.
PARAMS: dict[str, tuple[int, ...]] = {
    "RESHAPE": (1,),
    "EXPAND_DIMS": (1,),
    "TRANSPOSE": (1,),
    "PAD": (1,),
    "PADV2": (1, 2),
    "MIRROR_PAD": (1,),
    "SLICE": (1, 2),
    "STRIDED_SLICE": (1, 2, 3),
    "SPACE_TO_BATCH_ND": (1, 2),
    "BATCH_TO_SPACE_ND": (1, 2),
    "GATHER": (1,),
    "TILE": (1,),
    "SPLIT": (0,),
    "SPLIT_V": (1, 2),
    "BROADCAST_TO": (1,),
}


class Unsupported(Exception):
    """The op's form is one the executor does not move (a runtime index, a mask it lacks)."""


def apply(
    op: str,
    data: list[np.ndarray | None],
    consts: list[np.ndarray | None],
    options: dict[str, Any],
    out_shapes: list[list[int]],
) -> list[np.ndarray]:
    """`data[i]` is the index array of runtime input i (None for constant operands, whose
    values are in `consts[i]`). Returns one index array per output."""
    fn = _OPS.get(op)
    if fn is None:
        raise Unsupported(op)
    for shape in out_shapes:
        check_moved(op, shape)
    result = [np.asarray(r) for r in fn(data, consts, options, out_shapes)]
    for r, s in zip(result, out_shapes, strict=True):
        declared = int(np.prod(s)) if len(s) else 1
        if r.size != declared:  # a damaged file: the inputs make another shape than it declares
            raise ExecutorError(f"{op}: its inputs make {r.size} elements, its output declares {declared}")
    return [r.reshape(s) for r, s in zip(result, out_shapes, strict=True)]


def check_moved(op: str, shape: Any) -> None:
    """Refuse a tensor `op` would move of more than MAX_MOVED elements (the product saturates:
    a damaged shape may be long)."""
    n = 1
    for d in shape:
        n = min(n * max(int(d), 1), MAX_MOVED + 1)
    if n > MAX_MOVED:
        dims = ", ".join(str(int(d)) for d in list(shape)[:8]) + (", ..." if len(shape) > 8 else "")
        raise ExecutorError(
            f"{op}: a tensor of shape [{dims}] is more than the {MAX_MOVED:,} elements the executor moves"
        )


def _padded(op: str, x: np.ndarray, pads: list[tuple[int, int]]) -> list[tuple[int, int]]:
    check_moved(op, [d + a + b for d, (a, b) in zip(x.shape, pads, strict=False)])
    return pads


def _const(consts: list[np.ndarray | None], i: int, what: str) -> np.ndarray:
    if i >= len(consts) or consts[i] is None:
        raise Unsupported(f"a runtime {what}")
    value = consts[i]
    assert value is not None
    return value


def _x(data: list[np.ndarray | None], i: int = 0) -> np.ndarray:
    x = data[i] if i < len(data) else None
    if x is None:
        raise Unsupported("a constant data input")
    return x


def _reshape(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    return [_x(data).ravel()]  # apply() lays it out as the output, once the sizes agree


def _transpose(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    return [_x(data).transpose([int(p) for p in _const(consts, 1, "perm").ravel()])]


def _pad(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    pads = [(int(a), int(b)) for a, b in _const(consts, 1, "paddings").reshape(-1, 2)]
    return [np.pad(_x(data), _padded("PAD", _x(data), pads), constant_values=-1)]


def _mirror_pad(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    pads = _padded("MIRROR_PAD", _x(data), [(int(a), int(b)) for a, b in _const(consts, 1, "paddings").reshape(-1, 2)])
    if options.get("mode") == "REFLECT":
        return [np.pad(_x(data), pads, mode="reflect")]
    return [np.pad(_x(data), pads, mode="symmetric")]


def _slice(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    begin, size = _const(consts, 1, "begin").ravel(), _const(consts, 2, "size").ravel()
    idx = tuple(slice(int(b), None if int(s) < 0 else int(b) + int(s)) for b, s in zip(begin, size, strict=True))
    return [x[idx]]


def _strided_slice(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    if options.get("ellipsis_mask", 0) or options.get("new_axis_mask", 0):
        raise Unsupported("STRIDED_SLICE with ellipsis or new-axis masks")
    begin, end = _const(consts, 1, "begin").ravel(), _const(consts, 2, "end").ravel()
    strides = _const(consts, 3, "strides").ravel()
    idx: list[Any] = []
    for i in range(len(begin)):
        if options.get("shrink_axis_mask", 0) >> i & 1:
            idx.append(int(begin[i]))
            continue
        start = None if options.get("begin_mask", 0) >> i & 1 else int(begin[i])
        stop = None if options.get("end_mask", 0) >> i & 1 else int(end[i])
        idx.append(slice(start, stop, int(strides[i])))
    return [x[tuple(idx)]]


def _depth_to_space(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    n, h, w, c = x.shape
    bs = int(options["block_size"])
    return [x.reshape(n, h, w, bs, bs, c // (bs * bs)).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * bs, w * bs, -1)]


def _space_to_depth(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    n, h, w, c = x.shape
    bs = int(options["block_size"])
    return [x.reshape(n, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, h // bs, w // bs, -1)]


def _space_to_batch(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    bh, bw = (int(v) for v in _const(consts, 1, "block shape").ravel())
    pads = [(0, 0), *[(int(a), int(b)) for a, b in _const(consts, 2, "paddings").reshape(-1, 2)], (0, 0)]
    p = np.pad(x, _padded("SPACE_TO_BATCH_ND", x, pads), constant_values=-1)
    n, hp, wp, c = p.shape
    return [
        p.reshape(n, hp // bh, bh, wp // bw, bw, c)
        .transpose(2, 4, 0, 1, 3, 5)
        .reshape(bh * bw * n, hp // bh, wp // bw, c)
    ]


def _batch_to_space(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    bh, bw = (int(v) for v in _const(consts, 1, "block shape").ravel())
    crops = _const(consts, 2, "crops").reshape(-1, 2)
    nb, h, w, c = x.shape
    n = nb // (bh * bw)
    y = x.reshape(bh, bw, n, h, w, c).transpose(2, 3, 0, 4, 1, 5).reshape(n, h * bh, w * bw, c)
    return [y[:, int(crops[0][0]) : h * bh - int(crops[0][1]), int(crops[1][0]) : w * bw - int(crops[1][1]), :]]


def _concatenation(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    return [np.concatenate([_x(data, i) for i in range(len(data))], axis=int(options.get("axis", 0)))]


def _gather(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    indices = _const(consts, 1, "indices").astype(np.int64)
    if options.get("batch_dims", 0):
        raise Unsupported("GATHER with batch_dims")
    return [np.take(_x(data), indices, axis=int(options.get("axis", 0)))]


def _tile(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x, multiples = _x(data), [int(m) for m in _const(consts, 1, "multiples").ravel()]
    dims = [1] * (len(multiples) - x.ndim) + list(x.shape)  # np.tile pads the shorter with 1s
    reps = [1] * (x.ndim - len(multiples)) + multiples
    check_moved("TILE", [d * r for d, r in zip(dims, reps, strict=True)])
    return [np.tile(x, multiples)]


def _pack(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    axis = int(options.get("axis", 0))
    element = list(outs[0])
    del element[axis if axis >= 0 else axis + len(element)]
    # Inputs of one element come as [] or [1] from converters; each is one slot of the output.
    return [np.stack([_x(data, i).reshape(element) for i in range(len(data))], axis=axis)]


def _unpack(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    axis = int(options.get("axis", 0))
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def _split(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    axis = int(_const(consts, 0, "axis").ravel()[0])
    return list(np.split(_x(data, 1), len(outs), axis=axis))


def _split_v(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    x = _x(data)
    axis = int(_const(consts, 2, "axis").ravel()[0])
    sizes = [s.shape[axis if axis >= 0 else axis + x.ndim] for s in (np.empty(o) for o in outs)]
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _broadcast_to(data: Any, consts: Any, options: Any, outs: Any) -> list[np.ndarray]:
    return [np.broadcast_to(_x(data), outs[0])]


_OPS: dict[str, Callable[..., list[np.ndarray]]] = {
    "RESHAPE": _reshape,
    "SQUEEZE": _reshape,
    "EXPAND_DIMS": _reshape,
    "TRANSPOSE": _transpose,
    "PAD": _pad,
    "PADV2": _pad,
    "MIRROR_PAD": _mirror_pad,
    "SLICE": _slice,
    "STRIDED_SLICE": _strided_slice,
    "DEPTH_TO_SPACE": _depth_to_space,
    "SPACE_TO_DEPTH": _space_to_depth,
    "SPACE_TO_BATCH_ND": _space_to_batch,
    "BATCH_TO_SPACE_ND": _batch_to_space,
    "CONCATENATION": _concatenation,
    "GATHER": _gather,
    "TILE": _tile,
    "PACK": _pack,
    "UNPACK": _unpack,
    "SPLIT": _split,
    "SPLIT_V": _split_v,
    "BROADCAST_TO": _broadcast_to,
}

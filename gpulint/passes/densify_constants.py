"""Fold DENSIFY of a sparse constant into a dense constant.

    DENSIFY(sparse const) -> dense const

The schema's sparsity format (schema.fbs SparsityParameters, as TFLite's FormatConverter
reads it): the dense shape is expanded with one extra dimension per entry of `block_map`
(original dim block_map[j] is cut into blocks of the size of expanded dim n+j);
`traversal_order` orders the n+k expanded dimensions, and `dim_metadata[l]` stores level l
either DENSE (every index 0..dense_size-1) or SPARSE_CSR (for each position of the level
above, the indices array_indices[segments[p]:segments[p+1]]). The values are stored in that
traversal order. Decoding walks the levels with numpy, one array per level, not per element.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import NUMPY_DTYPES, Model, Subgraph, Tensor
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import fold_constant_ops


class SparsityError(ValueError):
    """The sparsity parameters do not describe the tensor."""


def densify(values: np.ndarray, tensor: Tensor) -> np.ndarray:
    """The dense array a sparse constant encodes."""
    sp = tensor.sparsity
    if sp is None or sp.dim_metadata is None or sp.traversal_order is None:
        raise SparsityError("no sparsity parameters")
    shape = list(tensor.shape)
    n = len(shape)
    order = list(sp.traversal_order)
    block_map = list(sp.block_map or [])
    levels = sp.dim_metadata
    if len(order) != n + len(block_map) or len(levels) != len(order) or sorted(order) != list(range(len(order))):
        raise SparsityError("traversal order, block map and dimension metadata do not agree")

    prev = np.zeros(1, np.int64)  # position of each path at the level above
    coords: list[np.ndarray] = []  # per traversal level, the index of every path so far
    for level in levels:
        if level.format in ("DENSE", 0):
            size, count = level.dense_size, prev.size
            prev = (prev[:, None] * size + np.arange(size)).ravel()
            coords = [np.repeat(c, size) for c in coords]
            coords.append(np.tile(np.arange(size), count))
        else:
            if level.array_segments is None or level.array_indices is None:
                raise SparsityError("a SPARSE_CSR level without segments or indices")
            seg = np.asarray(level.array_segments.values, np.int64)
            idx = np.asarray(level.array_indices.values, np.int64)
            if prev.size and (prev.max() + 1 >= seg.size):
                raise SparsityError("segments shorter than the level above")
            starts, ends = seg[prev], seg[prev + 1]
            counts = ends - starts
            if np.any(counts < 0) or (ends.size and ends.max() > idx.size):
                raise SparsityError("segments out of order or past the indices")
            total = int(counts.sum())
            # Positions starts[p] .. ends[p]-1 for every path p, in order.
            first = np.cumsum(counts) - counts  # where each path's run begins in the output
            offsets = np.repeat(starts, counts) + np.arange(total) - np.repeat(first, counts)
            coords = [np.repeat(c, counts) for c in coords]
            coords.append(idx[offsets])
            prev = offsets
    if coords and coords[-1].size != values.size:
        raise SparsityError(f"the format describes {coords[-1].size} values, the buffer holds {values.size}")

    expanded = [np.empty(0, np.int64)] * len(order)
    for lvl, dim in enumerate(order):
        expanded[dim] = coords[lvl]
    original = []
    for d in range(n):
        c = expanded[d]
        if d in block_map:
            j = block_map.index(d)
            block = levels[order.index(n + j)].dense_size
            c = c * block + expanded[n + j]
        original.append(c)
    if any(c.size and (c.max() >= s or c.min() < 0) for c, s in zip(original, shape, strict=True)):
        raise SparsityError("an index falls outside the dense shape")
    dense = np.zeros(shape, values.dtype)
    dense[tuple(original)] = values
    return dense


def run(model: Model, options: PassOptions) -> PassResult:
    def fold(sg: Subgraph, src: Tensor, out: Tensor) -> np.ndarray | str | None:
        raw = model.buffers[src.buffer].data
        dtype = NUMPY_DTYPES.get(src.type) if isinstance(src.type, str) else None
        if src.sparsity is None or not len(raw):
            return None
        if dtype is None or len(raw) % dtype.itemsize:
            return f"DENSIFY of a {src.type} constant, which gpulint cannot decode"
        try:
            return densify(np.frombuffer(raw, dtype), src)
        except SparsityError as e:
            return f"DENSIFY of `{src.name}` left: {e}"

    return PassResult(*fold_constant_ops(model, "DENSIFY", fold))


PASS = Pass("densify-constants", True, "fold DENSIFY of sparse constants into dense constants", run)

"""Inputs for a model: seeded random values, integers inside the range the graph implies, and
inputs adapted to a candidate whose interface a rewrite changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpulint.model.ir import NUMPY_DTYPES, Model
from gpulint.reference.errors import ReferenceError
from gpulint.reference.interpreter import CHILD_MEMORY
from gpulint.text import clean


def random_inputs(model: Model, seed: int = 0, distribution: str = "uniform") -> list[np.ndarray]:
    """Seeded inputs for the main subgraph: uniform [-1, 1) or standard normal floats, quantized
    through the input's scale for quantized inputs, other integers inside the range the graph
    implies (integer_range)."""
    rng = np.random.default_rng(seed)
    sg = model.subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        shape = [d if d > 0 else 1 for d in t.shape]
        dtype = NUMPY_DTYPES.get(t.type) if isinstance(t.type, str) else None
        if dtype is None:
            raise ReferenceError(f"input {clean(t.name)!r} has type {t.type}, which gpulint cannot generate")
        # The interpreter's child could not hold a bigger input; an absurd shape (a damaged file)
        # would otherwise ask numpy here for terabytes. The product saturates: a shape may have
        # thousands of dims.
        nbytes = dtype.itemsize
        for d in shape:
            nbytes = min(nbytes * d, CHILD_MEMORY + 1)
        if nbytes > CHILD_MEMORY:
            raise ReferenceError(
                f"input {clean(t.name)!r} of shape {_shape_text(t.shape)} needs more than the "
                f"{CHILD_MEMORY >> 20} MiB the LiteRT interpreter's process may use"
            )
        if dtype.kind == "f":
            values = rng.standard_normal(shape) if distribution == "normal" else rng.uniform(-1, 1, shape)
            out.append(values.astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(dtype))
        elif t.quantization is not None and t.quantization.scale and len(t.quantization.scale) == 1:
            # A quantized input: the float distribution, quantized as the model's own quantizer
            # would, so activations stay inside the ranges it was calibrated for.
            q, info = t.quantization, np.iinfo(dtype)
            assert q.scale is not None
            values = rng.standard_normal(shape) if distribution == "normal" else rng.uniform(-1, 1, shape)
            zp = q.zero_point[0] if q.zero_point else 0
            out.append(np.clip(np.round(values / q.scale[0]) + zp, info.min, info.max).astype(dtype))
        else:
            r = integer_range(model, i)
            out.append(rng.integers(r.low, r.high + 1, shape).astype(dtype))
    return out


def _shape_text(shape: list[int]) -> str:
    """[1, 224, 224, 3]; a long shape cut short (a damaged file's may be thousands of dims long)."""
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:8]))}, ...] (rank {len(shape)})"


# -- integer inputs: the range the graph implies --------------------------------------------------

# Ops that hand an integer tensor on with its values unchanged: op -> the input slot that carries
# the values (None: every input, as CONCATENATION and PACK). A CAST keeps the values too.
PASS_THROUGH: dict[str, int | None] = {
    "RESHAPE": 0,
    "SQUEEZE": 0,
    "EXPAND_DIMS": 0,
    "CAST": 0,
    "TRANSPOSE": 0,
    "SLICE": 0,
    "STRIDED_SLICE": 0,
    "TILE": 0,
    "BROADCAST_TO": 0,
    "UNPACK": 0,
    "SPLIT": 1,
    "SPLIT_V": 0,
    "CONCATENATION": None,
    "PACK": None,
}
UNKNOWN_HIGH = 3  # an integer input no op bounds: small non-negative values, safe as indices and counts


@dataclass
class IntRange:
    low: int
    high: int  # inclusive
    source: str  # what implies the range; "" where nothing does


def integer_range(model: Model, input_tensor: int) -> IntRange:
    """The values an integer input of the main subgraph may take, from the ops that read it
    (through ops that pass values on unchanged): indices into a GATHER / GATHER_ND /
    EMBEDDING_LOOKUP table lie in [0, rows), ONE_HOT indices in [0, depth). The kernels reject
    an index out of range (gather.cc, embedding_lookup.cc in LiteRT's tflite/kernels), so random
    values outside it make the reference fail before anything is compared."""
    sg = model.subgraphs[0]
    readers: dict[int, list[tuple[int, int]]] = {}
    for oi, op in enumerate(sg.operators):
        for slot, t in enumerate(op.inputs):
            readers.setdefault(t, []).append((oi, slot))
    bounds: list[tuple[int, str]] = []
    seen, todo = {input_tensor}, [input_tensor]
    while todo:
        t = todo.pop()
        for oi, slot in readers.get(t, []):
            op = sg.operators[oi]
            name = model.op_name(op)
            if name in PASS_THROUGH and PASS_THROUGH[name] in (None, slot):
                for out in op.outputs:
                    if out >= 0 and out not in seen:
                        seen.add(out)
                        todo.append(out)
                continue
            bound = _index_bound(model, op, name, slot)
            if bound is not None:
                bounds.append((bound[0], f"{bound[1]} (op {oi})"))
    bounds = [b for b in bounds if b[0] > 0]
    if not bounds:
        return IntRange(0, UNKNOWN_HIGH, "")
    n, why = min(bounds)
    return IntRange(0, n - 1, why)


def _index_bound(model: Model, op: Any, name: str, slot: int) -> tuple[int, str] | None:
    """How many values an op's input `slot` may index, and what says so; None: not an index."""
    sg = model.subgraphs[0]

    def shape(k: int) -> list[int]:
        return sg.tensors[op.inputs[k]].shape if len(op.inputs) > k and op.inputs[k] >= 0 else []

    opts = op.builtin_options.values if op.builtin_options is not None else {}
    if name == "GATHER" and slot == 1 and shape(0):
        axis = int(opts.get("axis", 0) or 0)
        axis += len(shape(0)) if axis < 0 else 0
        if 0 <= axis < len(shape(0)):
            return shape(0)[axis], f"indices into GATHER's table of {shape(0)[axis]} along axis {axis}"
    if name == "EMBEDDING_LOOKUP" and slot == 0 and shape(1):
        return shape(1)[0], f"ids into EMBEDDING_LOOKUP's table of {shape(1)[0]} rows"
    if name == "GATHER_ND" and slot == 1 and shape(0) and shape(1) and shape(1)[-1] > 0:
        dims = shape(0)[: shape(1)[-1]]
        return min(dims), f"indices into GATHER_ND's table of shape {shape(0)}"
    if name == "ONE_HOT" and slot == 0 and len(op.inputs) > 1:
        depth = model.tensor_data(sg.tensors[op.inputs[1]])
        if depth is not None and np.asarray(depth).size == 1:
            return int(np.asarray(depth).ravel()[0]), f"ONE_HOT indices of depth {int(np.asarray(depth).ravel()[0])}"
    return None


def integer_inputs(model: Model) -> list[dict[str, Any]]:
    """For each integer input random_inputs draws (not quantized, not bool): its range and why,
    or a note that nothing in the graph says, pointing at --inputs."""
    sg = model.subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        dtype = NUMPY_DTYPES.get(t.type) if isinstance(t.type, str) else None
        if dtype is None or dtype.kind not in "iu":
            continue
        if t.quantization is not None and t.quantization.scale and len(t.quantization.scale) == 1:
            continue
        r = integer_range(model, i)
        note = r.source or "no op of the model says what range it takes; give real values with --inputs FILE.npz"
        out.append({"input": clean(t.name, 200), "low": r.low, "high": r.high, "source": r.source, "note": note})
    return out


def adapt_inputs(inputs: list[np.ndarray], model: Model, seed: int) -> list[np.ndarray]:
    """Inputs for a model whose inputs grew channels (rgba-input): the extra lanes are noise.
    Returns `inputs` itself when nothing grew."""
    rng = np.random.default_rng(seed + 1000)
    sg = model.subgraphs[0]
    out = []
    for x, t in zip(inputs, sg.inputs, strict=True):
        want = sg.tensors[t].shape
        if len(want) == x.ndim and want[-1] > x.shape[-1]:
            extra = rng.uniform(-1, 1, (*x.shape[:-1], want[-1] - x.shape[-1])).astype(x.dtype)
            x = np.concatenate([x, extra], axis=-1)
        out.append(x)
    return inputs if all(a is b for a, b in zip(out, inputs, strict=True)) else out

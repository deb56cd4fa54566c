"""TensorList writes: CONCATENATION(SLICE(x, 0, [i]), y, SLICE(x, [i + n], -1)), dynamic-sized
on every loop iteration, becomes DYNAMIC_UPDATE_SLICE(x, y, [.., i, ..]), static at Prepare."""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model, Subgraph, Tensor
from gpulint.passes.edit import add_const, const_value, consumers, new_op, producers, prune
from gpulint.passes.static_shapes.pin import dims
from gpulint.passes.static_shapes.shape_math import PURE, SHAPE_OPS

Sym = tuple[int, int]  # (tensor, offset) for tensor + offset; (-1, c) for the constant c


def _scalar(model: Model, sg: Subgraph, made_by: dict[int, int], t: int, depth: int = 0) -> Sym | None:
    v = const_value(model, sg, t)
    if v is not None:
        return (-1, int(v.ravel()[0])) if v.size == 1 else None
    if depth > 4 or sg.tensors[t].type not in ("INT32", "INT64") or sg.tensors[t].shape not in ([], [1]):
        return None
    p = made_by.get(t)
    if p is not None:
        op = sg.operators[p]
        name = model.op_name(op)
        if name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS") and op.inputs:
            return _scalar(model, sg, made_by, op.inputs[0], depth + 1)
        if name in ("ADD", "SUB") and len(op.inputs) == 2:
            a, b = (_scalar(model, sg, made_by, x, depth + 1) for x in op.inputs)
            if a is not None and b is not None and (a[0] < 0 or b[0] < 0):
                if name == "ADD":
                    return (max(a[0], b[0]), a[1] + b[1])
                if b[0] < 0:
                    return (a[0], a[1] - b[1])
    return (t, 0) if sg.tensors[t].shape == [] else None


def _vector(model: Model, sg: Subgraph, made_by: dict[int, int], t: int) -> list[Sym] | None:
    """A 1-D int vector as symbols: constants, a scalar tensor plus a constant."""
    v = const_value(model, sg, t)
    if v is not None:
        return [(-1, int(x)) for x in v.ravel()] if v.ndim <= 1 else None
    p = made_by.get(t)
    if p is None:
        return None
    op = sg.operators[p]
    name = model.op_name(op)
    opts = op.builtin_options.values if op.builtin_options is not None else {}
    if name == "CONCATENATION" and opts.get("axis", 0) in (0, -1):
        parts = [_vector(model, sg, made_by, x) for x in op.inputs]
        return None if any(x is None for x in parts) else [s for part in parts if part for s in part]
    if name == "PACK" and opts.get("axis", 0) == 0:
        syms = [_scalar(model, sg, made_by, x) for x in op.inputs]
        return None if any(s is None for s in syms) else [s for s in syms if s is not None]
    if name in ("RESHAPE", "EXPAND_DIMS") and op.inputs and sg.tensors[t].shape == [1]:
        s = _scalar(model, sg, made_by, op.inputs[0])
        return None if s is None else [s]
    return None


def _list_write(model: Model, sg: Subgraph, oi: int) -> tuple[int, int, int, Sym, list[int]] | str | None:
    """CONCATENATION(SLICE(x, 0, [i]), y, SLICE(x, [i + n], -1)) on axis a:
    (x, y, axis, (i, offset), slice ops), a reason it is not quite that, or None."""
    op = sg.operators[oi]
    if model.op_name(op) != "CONCATENATION" or len(op.inputs) != 3 or len(op.outputs) != 1:
        return None
    made_by = producers(sg)
    a_t, y, b_t = op.inputs
    pa, pb = made_by.get(a_t), made_by.get(b_t)
    if pa is None or pb is None:
        return None
    sa, sb = sg.operators[pa], sg.operators[pb]
    if model.op_name(sa) != "SLICE" or model.op_name(sb) != "SLICE" or sa.inputs[0] != sb.inputs[0]:
        return None
    x = sa.inputs[0]
    xs, ys = sg.tensors[x].shape, sg.tensors[y].shape
    rank = len(xs)
    opts = op.builtin_options.values if op.builtin_options is not None else {}
    axis = int(opts.get("axis", 0)) % max(rank, 1)
    where = f"CONCATENATION (op {oi}) of two SLICEs of `{sg.tensors[x].name}`"
    if opts.get("fused_activation_function", "NONE") not in ("NONE", 0):
        return f"{where}: it has a fused activation"
    fits = len(ys) == rank and all(ys[j] == xs[j] for j in range(rank) if j != axis)
    if not fits or sg.tensors[op.outputs[0]].shape != xs:
        return f"{where}: the update {ys} does not fit {xs} along axis {axis}"
    begin_a, size_a = (_vector(model, sg, made_by, t) for t in sa.inputs[1:3])
    begin_b, size_b = (_vector(model, sg, made_by, t) for t in sb.inputs[1:3])
    if begin_a is None or size_a is None or begin_b is None or size_b is None:
        return f"{where}: the slice bounds are not a loop index plus constants"
    if not len(begin_a) == len(size_a) == len(begin_b) == len(size_b) == rank:
        return None
    i = size_a[axis]
    if i[0] < 0 or begin_b[axis] != (i[0], i[1] + ys[axis]):
        return f"{where}: the second slice does not start where the update ends"
    for j in range(rank):
        if begin_a[j] != (-1, 0) or size_b[j] != (-1, -1):
            return f"{where}: the slices do not split `{sg.tensors[x].name}` around one index"
        if j != axis and (begin_b[j] != (-1, 0) or size_a[j] not in ((-1, -1), (-1, xs[j]))):
            return f"{where}: the slices do not keep the other dimensions whole"
    readers = consumers(sg)
    if len(readers.get(a_t, [])) != 1 or len(readers.get(b_t, [])) != 1 or a_t in sg.outputs or b_t in sg.outputs:
        return f"{where}: a slice has other readers"
    return x, y, axis, i, [pa, pb]


def _tensor(sg: Subgraph, name: str, shape: list[int], dtype: str) -> int:
    sg.tensors.append(Tensor(name, shape, dtype))
    return len(sg.tensors) - 1


def _dead_code(model: Model, sg: Subgraph) -> None:
    """Drop pure ops whose outputs nobody reads."""
    while True:
        readers = consumers(sg)
        dead = [
            oi
            for oi, op in enumerate(sg.operators)
            if (model.op_name(op) in PURE or model.op_name(op) in SHAPE_OPS)
            and not any(readers.get(t) or t in sg.outputs for t in op.outputs)
        ]
        if not dead:
            return
        sg.operators = [op for oi, op in enumerate(sg.operators) if oi not in dead]


def rewrite(model: Model) -> tuple[list[str], list[str]]:
    """Every TensorList write as DYNAMIC_UPDATE_SLICE: (changes, skipped)."""
    changes: list[str] = []
    skipped: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        oi = 0
        while oi < len(sg.operators):
            found = _list_write(model, sg, oi)
            if not isinstance(found, tuple):
                if found:
                    skipped.append(f"subgraph {si}: {found}")
                oi += 1
                continue
            x, y, axis, (index, offset), slices = found
            op = sg.operators[oi]
            xt = sg.tensors[x]
            itype = str(sg.tensors[index].type)
            dtype = np.int64 if itype == "INT64" else np.int32
            ops = []
            at = index
            if offset:
                at = _tensor(sg, f"{xt.name}/index", [], itype)
                shift = add_const(model, sg, f"{xt.name}/offset", np.array(offset, dtype))
                ops.append(new_op(model, "ADD", [index, shift], [at], {}, "AddOptions"))
            zero = add_const(model, sg, f"{xt.name}/zero", np.array(0, dtype))
            start = _tensor(sg, f"{xt.name}/start_indices", [len(xt.shape)], itype)
            parts = [at if j == axis else zero for j in range(len(xt.shape))]
            ops.append(new_op(model, "PACK", parts, [start], {"values_count": len(parts), "axis": 0}, "PackOptions"))
            ops.append(new_op(model, "DYNAMIC_UPDATE_SLICE", [x, y, start], list(op.outputs)))
            sg.operators[oi : oi + 1] = ops
            sg.operators = [o for k, o in enumerate(sg.operators) if k not in slices]
            _dead_code(model, sg)
            changes.append(
                f"subgraph {si}: a TensorList write into `{xt.name}` {dims(xt.shape)} (SLICE, SLICE, CONCATENATION "
                f"around index `{sg.tensors[index].name}`{f' + {offset}' if offset else ''} on axis {axis}) "
                f"-> DYNAMIC_UPDATE_SLICE, whose output has a static shape"
            )
            oi = 0
    if changes:
        prune(model)
    return changes, skipped

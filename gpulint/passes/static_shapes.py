"""Make a graph the interpreter refuses for the GPU delegate static: pin the inputs, fold the shape math.

A delegate that supports only static-sized tensors is refused for the whole graph when any op's
Prepare leaves a tensor dynamic-sized (gpulint/rules/prepare.py models which). Converter outputs
do that in two ways this pass undoes:

- A dynamic batch (shape_signature -1) with RESHAPE targets computed at run time:
  SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE (also through CONCATENATION, GATHER, CAST, arithmetic).
  The inputs are pinned (`--input-shape NAME=1,224,224,3`; by default every -1 becomes 1, and the
  pass says so), the graph runs once on the LiteRT interpreter at those shapes, and every tensor
  whose value follows from shapes alone (SHAPE/RANK of a tensor whose shape does not depend on
  data, and the pure ops over such values and constants) becomes a constant with the value the
  interpreter computed. Every tensor of the main subgraph gets the shape the interpreter gave it
  (shape and shape_signature).
- A TensorList write in a loop body, lowered by the converter to
  CONCATENATION(SLICE(x, 0, [i, -1..]), y, SLICE(x, [i + n, 0..], -1)): two slices whose sizes
  follow the loop counter, so dynamic-sized on every iteration. It becomes
  DYNAMIC_UPDATE_SLICE(x, y, [.., i, ..]), whose output has x's shape at Prepare. The two agree
  for every i the original accepts (0 <= i <= len - n); for any other i the original fails at
  run time (SLICE's bounds check) where DYNAMIC_UPDATE_SLICE clamps.

The result must leave the interpreter nothing to refuse (find_refusal is None); otherwise the
model is left as it was and the pass says which op still makes a dynamic-sized tensor and why.
Sizes that depend on data (UNIQUE, WHERE, a NON_MAX_SUPPRESSION whose max_output_size is computed)
cannot be pinned by any input shape, and are reported as such.

Called subgraphs (WHILE/IF bodies): the TensorList rewrite applies in any of them. Shape
arithmetic is folded in a subgraph the main subgraph calls (once): it runs alone on the interpreter,
as a model of its own, on the operands the main subgraph's run passed it (a loop body: its first
iteration). Only values that follow from those shapes are folded, and a loop body whose loop
variables change shape is refused anyway, so what the first iteration gave holds for every one.
A subgraph called from another called subgraph, or from two ops, keeps its shape arithmetic (the
interpreter's Python API shows only the main subgraph's tensors, so there would be no values to
fold to), and a model it leaves refused is left alone, saying so.

Safety: with every input shape static or pinned to the shape the model already declares, outputs
are the same bits; pinning a -1 changes the interface (the model then takes only that shape),
which is what the pass is for, and fix runs it by default only when the graph is refused.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from gpulint import reference
from gpulint.model.ir import Model, Subgraph, Tensor
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, new_op, producers, prune, set_const
from gpulint.rules.prepare import SIZED_BY, Refusal, find_refusal

# Ops whose outputs are a pure function of their inputs' values and shapes: when every input is
# constant or follows from shapes, so do the outputs, and the interpreter's value can be kept.
PURE = frozenset(
    """ABS ADD ARG_MAX ARG_MIN BROADCAST_ARGS BROADCAST_TO CAST CEIL CONCATENATION CUMSUM DIV EQUAL
    EXPAND_DIMS FILL FLOOR FLOOR_DIV FLOOR_MOD GATHER GATHER_ND GREATER GREATER_EQUAL LESS LESS_EQUAL
    LOGICAL_AND LOGICAL_NOT LOGICAL_OR MAXIMUM MINIMUM MUL NEG NOT_EQUAL ONES_LIKE PACK RANGE
    REDUCE_ANY REDUCE_ALL REDUCE_MAX REDUCE_MIN REDUCE_PROD RESHAPE REVERSE_V2 ROUND SELECT SELECT_V2
    SIGN SLICE SPLIT SPLIT_V SQUARE SQUEEZE STRIDED_SLICE SUB SUM TILE TRANSPOSE UNPACK WHERE
    ZEROS_LIKE""".split()  # noqa: SIM905 - a list of op names reads better as words
)
SHAPE_OPS = ("SHAPE", "RANK")
# Ops whose output sizes depend on the values of their input, whatever the input shapes.
DATA_DEPENDENT = {
    "UNIQUE": "its output's size is the number of distinct values in its input",
    "WHERE": "its output's size is the number of true elements of its input",
    "NON_MAX_SUPPRESSION_V4": "its outputs are as long as its max_output_size operand, computed here",
    "NON_MAX_SUPPRESSION_V5": "its outputs are as long as its max_output_size operand, computed here",
}
# Operands that size an op's outputs, besides prepare.SIZED_BY's.
SIZING = {"RESHAPE": (1,), "STRIDED_SLICE": (1, 2, 3), "SLICE": (1, 2), "TOPK_V2": (1,), "TRANSPOSE_CONV": (0,)}
MAX_FOLD = 4096  # elements: shape values are a handful; a bigger tensor is data, not shape math
FOLDABLE_TYPES = ("INT32", "INT64", "INT16", "UINT32", "UINT16", "BOOL", "FLOAT32")

InputShapes = tuple[tuple[str, tuple[int, ...]], ...]


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=1,224,224,3` (or `NAME=` for a scalar) -> (name, shape). ValueError says what is wrong."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise ValueError(f"--input-shape {text!r}: expected NAME=D1,D2,... (e.g. input=1,224,224,3)")
    try:
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise ValueError(f"--input-shape {text!r}: dimensions must be integers") from None
    if any(d < 1 for d in shape):
        raise ValueError(f"--input-shape {text!r}: every dimension must be at least 1")
    return name, shape


def bad_input_shapes(model: Model, shapes: InputShapes) -> str | None:
    """Why `shapes` do not fit the model's inputs (an unknown name, a wrong rank), or None."""
    sg = model.subgraphs[0] if model.subgraphs else Subgraph()
    by_name = {sg.tensors[i].name: sg.tensors[i] for i in sg.inputs}
    for name, shape in shapes:
        t = by_name.get(name)
        if t is None:
            return f"--input-shape: the model has no input `{name}` (inputs: {', '.join(map(str, by_name))})"
        declared = t.shape_signature if t.shape_signature is not None else t.shape
        if len(declared) != len(shape):
            return f"--input-shape: input `{name}` has rank {len(declared)} ({declared}), not {len(shape)}"
        fixed = [(i, d) for i, d in enumerate(declared) if d > 0 and d != shape[i]]
        if fixed:
            return f"--input-shape: input `{name}` is {declared}: dimension {fixed[0][0]} is fixed at {fixed[0][1]}"
    return None


def _dims(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _pin(model: Model, options: PassOptions) -> list[str]:
    """Set the main subgraph's input shapes and signatures; one line per input that changed."""
    given = dict(options.input_shapes)
    sg = model.subgraphs[0]
    lines = []
    for i in sg.inputs:
        t = sg.tensors[i]
        declared = list(t.shape_signature if t.shape_signature is not None else t.shape)
        if t.name in given:
            shape, how = list(given[t.name]), "--input-shape"
        else:
            shape = [d if d > 0 else 1 for d in declared]
            how = "by default every -1 becomes 1; choose with --input-shape"
        if shape == declared and shape == t.shape:
            continue
        t.shape = list(shape)
        t.shape_signature = list(shape)
        lines.append(f"pinned input `{t.name}` {_dims(declared)} -> {_dims(shape)} ({how})")
    return lines


def _known_values(model: Model, sg: Subgraph) -> tuple[set[int], set[int]]:
    """(the non-constant tensors whose values follow from the (pinned) input shapes alone,
    the tensors whose shapes may depend on data)."""
    known: set[int] = set()
    data_shaped: set[int] = set()  # tensors whose shape may depend on data

    def ok(t: int) -> bool:
        return t < 0 or t in known or model.tensor_data(sg.tensors[t]) is not None

    for op in sg.operators:
        name = model.op_name(op)
        ins, outs = list(op.inputs), list(op.outputs)
        if name in SHAPE_OPS:
            if ins and ins[0] not in data_shaped:
                known.update(outs)
            continue
        if name in PURE and all(ok(t) for t in ins) and any(t in known for t in ins):
            known.update(outs)
            continue
        sizing = SIZED_BY.get(name, ()) + SIZING.get(name, ())
        if (
            any(t in data_shaped for t in ins)
            or name in ("UNIQUE", "WHERE")
            or any(not ok(ins[i]) for i in sizing if i < len(ins))
            or model.opcode(op).is_custom
        ):
            data_shaped.update(outs)
    return known, data_shaped


def _probe(model: Model, si: int = 0, inputs: list[np.ndarray] | None = None) -> dict[int, np.ndarray]:
    """Every tensor's value in subgraph `si` after one run of the interpreter (seeded inputs at the
    model's input shapes, or `inputs`), by tensor index. A called subgraph runs as the model's main
    subgraph (the others renumbered). ReferenceError when the interpreter refuses it."""
    from gpulint.model.ir import clone
    from gpulint.model.write import write

    probe = _as_main(clone(model), si) if si else clone(model)
    for i, t in enumerate(probe.subgraphs[0].tensors):
        t.name = f"t{i}"  # names need not be unique in a file; these are
    with tempfile.TemporaryDirectory(prefix="gpulint-shapes-") as tmp:
        path = Path(tmp, "probe.tflite")
        write(probe, path)
        values = reference.run_all_tensors(path, inputs if inputs is not None else reference.random_inputs(probe))
    return {int(k[1:]): v for k, v in values.items() if k.startswith("t") and k[1:].isdigit()}


def _as_main(model: Model, si: int) -> Model:
    """`model` with subgraph `si` first, every subgraph index in op options renumbered to match."""
    order = [si] + [i for i in range(len(model.subgraphs)) if i != si]
    moved = {old: new for new, old in enumerate(order)}
    model.subgraphs = [model.subgraphs[i] for i in order]
    for sg in model.subgraphs:
        for op in sg.operators:
            opts = op.builtin_options.values if op.builtin_options is not None else {}
            for key, v in opts.items():
                if key.endswith("_subgraph_index") and isinstance(v, int) and v in moved:
                    opts[key] = moved[v]
    model.signature_defs = None
    return model


def _callees(model: Model) -> dict[int, list[int]]:
    """Subgraphs called once, by a WHILE or IF of the main subgraph -> the caller's operands they get."""
    calls: dict[int, list[list[int]]] = {}
    for op in model.subgraphs[0].operators:
        name = model.op_name(op)
        opts = op.builtin_options.values if op.builtin_options is not None else {}
        keys = {
            "WHILE": ("cond_subgraph_index", "body_subgraph_index"),
            "IF": ("then_subgraph_index", "else_subgraph_index"),
        }
        for key in keys.get(name, ()):
            k = opts.get(key)
            if isinstance(k, int) and 0 < k < len(model.subgraphs):
                calls.setdefault(k, []).append(list(op.inputs[1:] if name == "IF" else op.inputs))
    return {k: c[0] for k, c in calls.items() if len(c) == 1}


def _fold_callees(model: Model, main: dict[int, np.ndarray]) -> tuple[list[str], list[str]]:
    """Shape arithmetic folded inside the subgraphs the main subgraph calls, each run once as a model
    of its own on the operands its caller gives it (a loop body: its first iteration). Only values
    that follow from shapes are kept, and a loop body must keep its loop variables' shapes (else
    the interpreter refuses it anyway), so the first iteration's shape values hold for every one."""
    changes: list[str] = []
    skipped: list[str] = []
    for k, operands in sorted(_callees(model).items()):
        sg = model.subgraphs[k]
        if not _has_shape_work(model, k):
            continue
        if len(operands) != len(sg.inputs) or any(t < 0 or t not in main for t in operands):
            skipped.append(f"subgraph {k}: its caller's operands are not all known; its shape arithmetic is not folded")
            continue
        feed = [main[t] for t in operands]
        for t, v in zip(sg.inputs, feed, strict=True):
            sg.tensors[t].shape = list(v.shape)
            if sg.tensors[t].shape_signature is not None:
                sg.tensors[t].shape_signature = list(v.shape)
        try:
            values = _probe(model, k, feed)
        except reference.ReferenceError as e:
            skipped.append(
                f"subgraph {k}: the interpreter cannot run it alone ({e}); its shape arithmetic is not folded"
            )
            continue
        changes += _fold(model, values, k)
    return changes, skipped


def _has_shape_work(model: Model, si: int) -> bool:
    sg = model.subgraphs[si]
    return any(model.op_name(op) in SHAPE_OPS for op in sg.operators) or any(t.is_dynamic for t in sg.tensors)


def _fold(model: Model, values: dict[int, np.ndarray], si: int = 0) -> list[str]:
    """Fold subgraph `si`'s shape arithmetic into constants and give every tensor the shape the
    interpreter gave it. One line per op that now reads constants instead of shape math."""
    sg = model.subgraphs[si]
    known, data_shaped = _known_values(model, sg)
    folded: list[int] = []
    for oi, op in enumerate(sg.operators):
        outs = list(op.outputs)
        if not outs or not all(t in known and t in values and t not in sg.outputs for t in outs):
            continue
        tensors = [sg.tensors[t] for t in outs]
        if any(t.type not in FOLDABLE_TYPES or (t.quantization is not None and t.quantization.scale) for t in tensors):
            continue
        if any(values[t].size > MAX_FOLD for t in outs):
            continue
        folded.append(oi)
    for oi in folded:
        for t in sg.operators[oi].outputs:
            set_const(model, sg, t, values[t])
    for t, v in values.items():
        tensor = sg.tensors[t]
        if t in data_shaped or (tensor.buffer and model.tensor_data(tensor) is not None):
            continue  # a shape this run happened to give, or a constant's
        tensor.shape = list(v.shape)
        if tensor.shape_signature is not None:
            tensor.shape_signature = list(v.shape)
    if not folded:
        return []
    gone = set(folded)
    names = sorted({model.op_name(sg.operators[oi]) for oi in folded})
    new_consts = {t for oi in folded for t in sg.operators[oi].outputs}
    sg.operators = [op for oi, op in enumerate(sg.operators) if oi not in gone]
    readers = []
    for oi, op in enumerate(sg.operators):  # numbered as in the rewritten model
        took = [t for t in op.inputs if t in new_consts]
        if took:
            shown = ", ".join(f"{_dims(values[t].ravel().tolist())}" for t in took)
            readers.append(f"{model.op_name(op)} (op {oi}) now reads constant {shown}")
    lines = [f"subgraph {si}: folded {len(folded)} shape op(s) ({', '.join(names)}) into constants"]
    return lines + [f"subgraph {si}: {r}" for r in readers]


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


def _list_writes(model: Model) -> tuple[list[str], list[str]]:
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
                f"subgraph {si}: a TensorList write into `{xt.name}` {_dims(xt.shape)} (SLICE, SLICE, CONCATENATION "
                f"around index `{sg.tensors[index].name}`{f' + {offset}' if offset else ''} on axis {axis}) "
                f"-> DYNAMIC_UPDATE_SLICE, whose output has a static shape"
            )
            oi = 0
    if changes:
        prune(model)
    return changes, skipped


def _why_left(refusal: Refusal) -> str:
    """What still makes the interpreter refuse the delegate, and whether pinning could ever help."""
    text = (
        f"{refusal.op} (op {refusal.op_index} of subgraph {refusal.subgraph}) still makes `{refusal.tensor}` "
        f"dynamic-sized: {refusal.why}"
    )
    culprits = [refusal.op] + [dd for dd in DATA_DEPENDENT if f"by {dd} " in refusal.why]
    for dd in culprits:
        if dd in DATA_DEPENDENT:
            return f"{text}; {dd}: {DATA_DEPENDENT[dd]}, which depends on the data, so no input shape makes it static"
    if refusal.subgraph != 0 or "subgraph" in refusal.why:
        return (
            f"{text}; in called subgraphs only shape arithmetic that follows from the shapes the main "
            "subgraph passes in is folded (not in a subgraph called from another one, or called twice)"
        )
    return text


def run(model: Model, options: PassOptions) -> PassResult:
    from gpulint.model.ir import clone

    if not model.subgraphs:
        return PassResult()
    refusal = find_refusal(model)
    if refusal is None and not options.pin_shapes and not options.input_shapes:
        return PassResult()  # not refused: the interface stays as it is unless asked
    candidate = clone(model)
    changes = [f"subgraph 0: {line}" for line in _pin(candidate, options)]
    if refusal is None and not changes and not options.pin_shapes:
        return PassResult()
    callees = [k for k in _callees(candidate) if _has_shape_work(candidate, k)]
    skipped: list[str] = []
    if changes or callees or _has_shape_work(candidate, 0):
        try:
            values = _probe(candidate)
        except reference.ReferenceError as e:
            why = f"left the model as it is: the interpreter cannot run it at the pinned shapes ({e})"
            return PassResult([], [why])
        changes += _fold(candidate, values)
        if callees:
            folded, skipped = _fold_callees(candidate, values)
            changes += folded
    written, not_written = _list_writes(candidate)
    changes += written
    skipped += not_written
    after = find_refusal(candidate)
    if after is not None:
        return PassResult([], [f"left the model as it is: {_why_left(after)}", *skipped])
    if not changes:
        return PassResult([], skipped)
    for f in dataclasses.fields(Model):
        setattr(model, f.name, getattr(candidate, f.name))
    return PassResult(changes, skipped)


PASS = Pass(
    "static-shapes",
    True,
    "pin dynamic input dims (--input-shape), fold shape arithmetic into constants, TensorList writes -> "
    "DYNAMIC_UPDATE_SLICE, so the interpreter does not refuse the delegate",
    run,
)

"""Shape arithmetic folded into constants: the graph run once on the interpreter at its pinned
shapes, and every value that follows from shapes alone kept as the constant the interpreter
computed (in the main subgraph, and in a subgraph it calls once, run alone on the operands it
gets); every tensor given the shape the interpreter gave it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from gpulint import reference
from gpulint.model.ir import Model, Subgraph
from gpulint.passes.edit import set_const
from gpulint.passes.static_shapes.pin import dims
from gpulint.rules.prepare import SIZED_BY

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
# Operands that size an op's outputs, besides prepare.SIZED_BY's.
SIZING = {"RESHAPE": (1,), "STRIDED_SLICE": (1, 2, 3), "SLICE": (1, 2), "TOPK_V2": (1,), "TRANSPOSE_CONV": (0,)}
MAX_FOLD = 4096  # elements: shape values are a handful; a bigger tensor is data, not shape math
FOLDABLE_TYPES = ("INT32", "INT64", "INT16", "UINT32", "UINT16", "BOOL", "FLOAT32")


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


def probe(model: Model, si: int = 0, inputs: list[np.ndarray] | None = None) -> dict[int, np.ndarray]:
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


def callees(model: Model) -> dict[int, list[int]]:
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


def fold_callees(model: Model, main: dict[int, np.ndarray]) -> tuple[list[str], list[str]]:
    """Shape arithmetic folded inside the subgraphs the main subgraph calls, each run once as a model
    of its own on the operands its caller gives it (a loop body: its first iteration). Only values
    that follow from shapes are kept, and a loop body must keep its loop variables' shapes (else
    the interpreter refuses it anyway), so the first iteration's shape values hold for every one."""
    changes: list[str] = []
    skipped: list[str] = []
    for k, operands in sorted(callees(model).items()):
        sg = model.subgraphs[k]
        if not has_shape_work(model, k):
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
            values = probe(model, k, feed)
        except reference.ReferenceError as e:
            skipped.append(
                f"subgraph {k}: the interpreter cannot run it alone ({e}); its shape arithmetic is not folded"
            )
            continue
        changes += fold(model, values, k)
    return changes, skipped


def has_shape_work(model: Model, si: int) -> bool:
    sg = model.subgraphs[si]
    return any(model.op_name(op) in SHAPE_OPS for op in sg.operators) or any(t.is_dynamic for t in sg.tensors)


def fold(model: Model, values: dict[int, np.ndarray], si: int = 0) -> list[str]:
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
            shown = ", ".join(f"{dims(values[t].ravel().tolist())}" for t in took)
            readers.append(f"{model.op_name(op)} (op {oi}) now reads constant {shown}")
    lines = [f"subgraph {si}: folded {len(folded)} shape op(s) ({', '.join(names)}) into constants"]
    return lines + [f"subgraph {si}: {r}" for r in readers]

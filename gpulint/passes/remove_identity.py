"""Drop ops that do nothing, and collapse RESHAPE chains.

    RESHAPE(x) -> x                    when the output shape is the input shape
    TRANSPOSE(x, perm=0..n-1) -> x
    CAST(x: T) -> x                    when the output type is T
    PAD/PADV2/MIRROR_PAD(x, 0) -> x    when every padding is 0
    RESHAPE(RESHAPE(x)) -> RESHAPE(x)  when the inner result has no other reader

An op whose output is a model output is left alone: removing it would rename the output.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import const_value, consumers, only_reader, prune, replace_uses

PADS = ("PAD", "PADV2", "MIRROR_PAD")


def _is_identity(model: Model, sg: Subgraph, oi: int) -> str | None:
    op = sg.operators[oi]
    name = model.op_name(op)
    if not op.inputs or op.inputs[0] < 0 or len(op.outputs) != 1:
        return None
    x, y = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
    if x.is_dynamic or y.is_dynamic:
        return None
    if name == "RESHAPE" and x.shape == y.shape and x.type == y.type:
        return f"RESHAPE to the same shape {x.shape}"
    if name == "TRANSPOSE" and len(op.inputs) > 1:
        perm = const_value(model, sg, op.inputs[1])
        if perm is not None and list(perm.ravel()) == list(range(perm.size)):
            return f"TRANSPOSE with identity perm {list(perm.ravel())}"
    if name == "CAST" and x.type == y.type:
        return f"CAST from {x.type} to {y.type}"
    if name in PADS and len(op.inputs) > 1:
        pads = const_value(model, sg, op.inputs[1])
        if pads is not None and not np.any(pads):
            return f"{name} with all-zero paddings"
    return None


def _one(model: Model, sg: Subgraph) -> tuple[int, str] | None:
    """Apply the first rewrite found; (dropped op, what was done)."""
    readers = consumers(sg)
    for oi, op in enumerate(sg.operators):
        out = op.outputs[0] if op.outputs else -1
        if out < 0 or out in sg.outputs:
            continue
        why = _is_identity(model, sg, oi)
        if why is not None:
            replace_uses(sg, out, op.inputs[0])
            return oi, f"removed {why}"
        if model.op_name(op) == "RESHAPE" and op.inputs and op.inputs[0] >= 0:
            # An outer RESHAPE reading this one's result can read this one's input instead.
            reader = only_reader(sg, out, readers)
            if reader is not None and model.op_name(sg.operators[reader]) == "RESHAPE":
                sg.operators[reader].inputs[0] = op.inputs[0]
                return oi, "collapsed a RESHAPE chain"
    return None


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        while (done := _one(model, sg)) is not None:
            oi, what = done
            name = model.op_name(sg.operators[oi])
            del sg.operators[oi]
            changes.append(f"subgraph {si}: {what} ({name}, op {oi})")
    if changes:
        prune(model)
    return PassResult(changes)


PASS = Pass("remove-identity", True, "drop no-op RESHAPE/TRANSPOSE/CAST/PAD and collapse RESHAPE chains", run)

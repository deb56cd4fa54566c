"""Give the ops LiteRT's GPU accelerator lays out wrong below rank 4 a 4-D form, with RESHAPEs
around them (GPU802, GPU803, GPU804, GPU808):

    PAD(x: [16, 32, 8], outer axes)       =>  RESHAPE [1, 16, 32, 8] -> PAD -> RESHAPE [20, 32, 8]
    ADD(a: [20, 128, 128], b: [1, 1, 128, 128])  =>  ADD(RESHAPE(a) [1, 20, 128, 128], b)
    BATCH_MATMUL(q: [8, N, d], k: [8, d, M])  =>  RESHAPE [1, 8, ...] each -> BATCH_MATMUL -> RESHAPE
    ADD(x: [1, 8, 16] int32, c: [16] int32)   =>  the constant's shape [1, 1, 16] (no op added)

A leading 1 is how TFLite broadcasts (right-aligned), so each rewrite computes the same values
with the same arithmetic; RESHAPE moves nothing on a CPU and is a copy at most on a GPU. ML
Drift maps each tensor of rank < 4 to BHWC on its own (dim 0 to the batch), so these forms are
laid out wrong there (google-ai-edge/LiteRT#9272, #8980, #8619, PR #9664); at rank 4 its BHWC is
the tensor's own shape. Opt-in: only LiteRT's accelerator needs it, and the defects were seen on
phones and Macs, not here, where both runtimes compute the original forms right.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import const_value, set_const
from gpulint.passes.layout import lifted, place, reshape_input, reshape_output

MIXED_RANK_OPS = ("ADD", "MUL")
CONST_LAYOUT_OPS = (
    *("ADD", "MUL", "SUB", "DIV", "MINIMUM", "MAXIMUM", "SQUARED_DIFFERENCE", "POW"),
    *("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "FLOOR_DIV", "FLOOR_MOD"),
)


def bhwc(dims: list[int]) -> list[int]:
    """The BHWC a GPU delegate gives a shape on its own: B, BC, BWC, BHWC (dim 0 on the batch)."""
    if len(dims) == 1:
        return [dims[0], 1, 1, 1]
    if len(dims) == 2:
        return [dims[0], 1, 1, dims[1]]
    return [dims[0], 1, *dims[1:]] if len(dims) == 3 else list(dims)


def misread_constant(dims: list[int], rank: int) -> bool:
    """Whether a constant of `dims` beside a runtime operand of `rank` lands elsewhere when laid out
    on its own than right-aligned, as TFLite broadcasts it (PR #9664: [16] as 16x1x1x1)."""
    if not 1 <= len(dims) < rank <= 4 or int(np.prod(dims)) < 2:
        return False
    return bhwc(dims) != bhwc(lifted(dims, rank))


def shape(sg: Subgraph, t: int) -> list[int]:
    return list(sg.tensors[t].shape)


def static(sg: Subgraph, *tensors: int) -> bool:
    return all(-1 not in (sg.tensors[t].shape_signature or []) for t in tensors)


def to_rank4(model: Model, sg: Subgraph, op: Operator, slots: list[int], why: str) -> str:
    """RESHAPE inputs `slots` (and the output, where it is below rank 4) to rank 4 with leading 1s."""
    before = [reshape_input(model, sg, op, s, lifted(shape(sg, op.inputs[s]), 4), "rank4") for s in slots]
    out = op.outputs[0]
    after = [reshape_output(model, sg, op, lifted(shape(sg, out), 4), "rank4")] if len(shape(sg, out)) < 4 else []
    place(sg, op, before, after)
    return f"`{sg.tensors[out].name}`: {model.op_name(op)} at rank 4 ({why})"


def padded_outer(model: Model, sg: Subgraph, op: Operator) -> bool:
    """A rank-3 PAD with constant paddings whose input or output has a dim 0 above 1 (GPU802)."""
    pads = const_value(model, sg, op.inputs[1]) if len(op.inputs) > 1 else None
    x = shape(sg, op.inputs[0])
    if len(x) != 3 or pads is None or pads.size != 6 or not np.any(pads):
        return False
    return x[0] > 1 or bool(np.any(pads.reshape(3, 2)[0]))


def rewrite(model: Model, sg: Subgraph, op: Operator) -> str | None:
    name = model.op_name(op)
    ins = [t for t in op.inputs if t >= 0]
    if not op.outputs or not static(sg, *ins, op.outputs[0]):
        return None
    if name in ("PAD", "PADV2") and padded_outer(model, sg, op):
        pads = const_value(model, sg, op.inputs[1])
        assert pads is not None
        set_const(model, sg, op.inputs[1], np.concatenate([np.zeros((1, 2), pads.dtype), pads.reshape(3, 2)]))
        return to_rank4(model, sg, op, [0], "a rank-3 PAD with dim 0 above 1: LiteRT#9272")
    consts = [t for t in ins if const_value(model, sg, t) is not None]
    if name in MIXED_RANK_OPS and len(ins) == 2 and not consts:
        ranks = [len(shape(sg, t)) for t in ins]
        low = ins[ranks.index(min(ranks))]
        if ranks[0] != ranks[1] and max(ranks) <= 4 and int(np.prod(shape(sg, low))) > 1:
            slots = [s for s, t in enumerate(op.inputs) if t >= 0 and len(shape(sg, t)) < 4]
            return to_rank4(model, sg, op, slots, "two runtime operands of ranks " + " and ".join(map(str, ranks)))
    if name == "BATCH_MATMUL" and len(ins) == 2 and not consts:
        a, b = (shape(sg, t) for t in ins)
        if len(a) == 3 and len(b) == 3 and max(a[0], b[0]) >= 2:
            return to_rank4(model, sg, op, [0, 1], f"a rank-3 batch of {max(a[0], b[0])}: LiteRT#8619")
    if name in CONST_LAYOUT_OPS and len(ins) == 2 and len(consts) == 1:
        c, x = consts[0], next(t for t in ins if t not in consts)
        value = const_value(model, sg, c)
        assert value is not None
        rank = len(shape(sg, x))
        if value.dtype.kind != "f" and misread_constant(list(value.shape), rank):
            set_const(model, sg, c, value.reshape(lifted(list(value.shape), rank)))
            return f"`{sg.tensors[c].name}`: {value.dtype} constant lifted to rank {rank} (PR #9664)"
    return None


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        for op in list(sg.operators):
            if (change := rewrite(model, sg, op)) is not None:
                result.changes.append(f"subgraph {si}: {change}")
    return result


PASS = Pass(
    "rank4",
    True,
    "give PAD, mixed-rank ADD/MUL, BATCH_MATMUL and low-rank integer constants that LiteRT's GPU "
    "accelerator lays out wrong below rank 4 a 4-D form with RESHAPEs around them (GPU802-804, GPU808)",
    run,
    opt_in=True,
    preserves="the interface; every output exactly (RESHAPEs and leading 1s)",
)

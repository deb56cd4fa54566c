"""stable-softmax: subtract the maximum before a softmax or log-sum-exp the graph spells out.

    e = EXP(x); s = SUM(e, axes)            ->  m = REDUCE_MAX(x, axes, keep_dims)
    DIV(e, s)                                    e = EXP(x - m); s = SUM(e, axes)
    LOG(s)                                       DIV(e, s);  LOG(s) + m

(MEAN in place of SUM too.) exp(x) overflows half precision above ln(65504) = 11.09 (GPU702):
the delegate computes EXP in half, so logits of 20 give Inf and the softmax NaN. With the maximum
subtracted every exp is at most 1 and the sum at most the number of values. In exact arithmetic
nothing changes: e and s are both scaled by exp(-m), which cancels in DIV and comes back as + m
after LOG. In float they differ by the rounding of x - m (proven on the CPU interpreter to fp32
rounding); where the original overflowed even in float (logits above 88) the rewrite gives the
softmax the model meant instead of NaN.

Only where every reader of EXP's result is the one reduction or a DIV by it, and every reader of
the reduction a DIV (of EXP's result) or a LOG: any other reader would see the scale. The
model's outputs keep their tensors and names.
"""

from __future__ import annotations

from gpulint.model.ir import Model, Operator, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import consumers, producers, prune
from gpulint.passes.half import axes_of, binary, insert_after, insert_before, is_float, keeps_dims, new_tensor, reducer

REDUCERS = ("SUM", "MEAN")


def _shifted(model: Model, sg: Subgraph, x: int, made_by: dict[int, int]) -> bool:
    """x = SUB(a, REDUCE_MAX(a)): the maximum is subtracted already."""
    p = made_by.get(x)
    if p is None or model.op_name(sg.operators[p]) != "SUB":
        return False
    a, m = sg.operators[p].inputs[:2]
    q = made_by.get(m)
    return q is not None and model.op_name(sg.operators[q]) == "REDUCE_MAX" and sg.operators[q].inputs[0] == a


def _plan(model: Model, sg: Subgraph, ei: int) -> tuple[Operator, list[Operator]] | str | None:
    """(the reduction, its LOG readers) for EXP op `ei`, a reason to leave it, or None (not a softmax)."""
    exp = sg.operators[ei]
    readers = consumers(sg)
    x, e = exp.inputs[0], exp.outputs[0]
    reds = [sg.operators[r] for r in readers.get(e, []) if model.op_name(sg.operators[r]) in REDUCERS]
    if len(reds) != 1 or reds[0].inputs[0] != e:
        return None  # no softmax: an EXP with no sum of it (or sums over several axes)
    red = reds[0]
    s = red.outputs[0]
    name = f"EXP `{sg.tensors[e].name}`"
    if not is_float(sg, x, e, s):
        return f"{name}: not float32"
    axes = axes_of(model, sg, red)
    if axes is None:
        return f"{name}: the {model.op_name(red)}'s axes are not a constant"
    if e in sg.outputs or s in sg.outputs:
        return f"{name}: the exp or its sum is a model output, which the shift would change"
    x_shape, s_shape = sg.tensors[x].shape, sg.tensors[s].shape
    kept = [1 if i in axes else d for i, d in enumerate(x_shape)]
    for r in readers.get(e, []):
        op = sg.operators[r]
        if op is red:
            continue
        if model.op_name(op) != "DIV" or op.inputs[:2] != [e, s] or s_shape != kept:
            return f"{name}: read by {model.op_name(op)} (op {r}), which would see exp(x - max) for exp(x)"
    logs = []
    for r in readers.get(s, []):
        op = sg.operators[r]
        if model.op_name(op) == "DIV" and op.inputs[:2] == [e, s]:
            continue
        if model.op_name(op) == "LOG" and len(op.outputs) == 1:
            logs.append(op)
            continue
        return f"{name}: its {model.op_name(red)} is read by {model.op_name(op)} (op {r}), which would see the shift"
    return red, logs


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    skipped: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        for exp in [op for op in sg.operators if model.op_name(op) == "EXP"]:
            if len(exp.inputs) != 1 or exp.inputs[0] < 0 or len(exp.outputs) != 1:
                continue
            if _shifted(model, sg, exp.inputs[0], producers(sg)):
                continue
            plan = _plan(model, sg, sg.operators.index(exp))
            if plan is None:
                continue
            if isinstance(plan, str):
                skipped.append(f"subgraph {si}: {plan}")
                continue
            red, logs = plan
            changes.append(_rewrite(model, sg, si, exp, red, logs))
    if changes:
        prune(model)
    return PassResult(changes, skipped)


def _rewrite(model: Model, sg: Subgraph, si: int, exp: Operator, red: Operator, logs: list[Operator]) -> str:
    x = exp.inputs[0]
    axes_t = red.inputs[1]
    like = sg.tensors[x]
    kept = [1 if i in (axes_of(model, sg, red) or []) else d for i, d in enumerate(like.shape)]
    m = new_tensor(sg, like, "max", kept)
    shifted = new_tensor(sg, like, "minus_max")
    ops = [reducer(model, "REDUCE_MAX", x, axes_t, m, True), binary(model, "SUB", x, m, shifted)]
    m_sum = m
    if logs and not keeps_dims(red):  # LOG(s) is shaped as the sum without the reduced axes
        m_sum = new_tensor(sg, like, "max_squeezed", list(sg.tensors[red.outputs[0]].shape))
        ops.append(reducer(model, "REDUCE_MAX", x, axes_t, m_sum, False))
    insert_before(sg, exp, ops)
    exp.inputs = [shifted]
    for log in logs:
        out = log.outputs[0]
        inner = new_tensor(sg, sg.tensors[out], "shifted")
        log.outputs = [inner]
        insert_after(sg, log, [binary(model, "ADD", inner, m_sum, out)])
    oi = sg.operators.index(exp)
    what = " and adds it back after LOG" if logs else ""
    return (
        f"subgraph {si}: EXP (op {oi}) of `{like.name}` now reads it minus its REDUCE_MAX over the "
        f"{model.op_name(red)}'s axes{what}: every exp at most 1 in half"
    )


PASS = Pass(
    "stable-softmax",
    True,
    "subtract REDUCE_MAX before a softmax / log-sum-exp spelled out as EXP -> SUM -> DIV / LOG (GPU702)",
    run,
    opt_in=True,
    preserves="the interface; every output within fp32 rounding (exact in exact arithmetic)",
)

"""Inline STABLEHLO_COMPOSITE ops: each composite becomes the ops of its decomposition subgraph, in its
place, and the decompositions nothing calls any more are dropped.

A composite (litert-torch's `odml.rms_norm`, `odml.scaled_dot_product_attention`, ...) computes
exactly its decomposition: the interpreter's kernel runs that subgraph. Inlined, the same ops run in the
caller: the same arithmetic, within fp32 rounding (the interpreter's XNNPACK may group the inlined ops
otherwise: 2.7e-6 on SmolLM's KV cache). Why: LiteRT 2.3's GPU accelerator takes the composites
it knows whole and its process dies compiling them (checks/composite.py); inlined, it sees plain ops
and partitions them as any other. Opt-in: a runtime whose fused composite kernels work (a phone's
accelerator build may) loses them, which only a device can weigh.
"""

from __future__ import annotations

import copy

from gpulint.model.ir import Model, Subgraph
from gpulint.model.signatures import drop_subgraphs
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import prune
from gpulint.text import clean

COMPOSITE = "STABLEHLO_COMPOSITE"


def _inline_one(model: Model, sg: Subgraph, oi: int) -> str | None:
    """Replace composite op `oi` of `sg` by its decomposition's ops; why not, where it cannot."""
    op = sg.operators[oi]
    opts = op.builtin_options_2.values if op.builtin_options_2 is not None else {}
    d = opts.get("decomposition_subgraph_index")
    if not isinstance(d, int) or not 0 <= d < len(model.subgraphs) or model.subgraphs[d] is sg:
        return f"its decomposition subgraph {d} is not one of the model's"
    body = model.subgraphs[d]
    if len(body.inputs) != len(op.inputs) or len(body.outputs) != len(op.outputs):
        return "its operands do not match its decomposition's inputs and outputs"
    if set(body.inputs) & set(body.outputs) or len(set(body.outputs)) != len(body.outputs):
        return "its decomposition hands an input straight back"
    where = {b: p for b, p in zip(body.inputs, op.inputs, strict=True)}
    where |= {b: p for b, p in zip(body.outputs, op.outputs, strict=True)}
    for t in range(len(body.tensors)):
        if t not in where and any(t in (*o.inputs, *o.outputs) for o in body.operators):
            sg.tensors.append(copy.deepcopy(body.tensors[t]))
            where[t] = len(sg.tensors) - 1
    inlined = []
    for body_op in body.operators:
        new = copy.deepcopy(body_op)
        new.inputs = [where[t] if t >= 0 else t for t in body_op.inputs]
        new.outputs = [where[t] for t in body_op.outputs]
        new.intermediates = None if body_op.intermediates is None else [where[t] for t in body_op.intermediates]
        inlined.append(new)
    sg.operators[oi : oi + 1] = inlined
    return None


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        oi, left = 0, set()
        while oi < len(sg.operators):
            op = sg.operators[oi]
            if model.op_name(op) != COMPOSITE or oi in left:
                oi += 1
                continue
            name = clean(str((op.builtin_options_2.values if op.builtin_options_2 else {}).get("name")), 80)
            before = len(sg.operators)
            why = _inline_one(model, sg, oi)
            if why is not None:
                result.skipped.append(f"subgraph {si} op {oi} `{name}`: {why}")
                left.add(oi)
                oi += 1
                continue
            # the inlined ops are looked at again: a decomposition may hold composites of its own
            result.changes.append(f"subgraph {si}: inlined `{name}` (op {oi}, {len(sg.operators) - before + 1} ops)")
    if result.changes:
        dropped = drop_subgraphs(model)
        if dropped:
            result.changes.append(f"dropped {dropped} decomposition subgraph(s) nothing calls any more")
        prune(model)
    return result


PASS = Pass(
    "inline-composites",
    True,
    "STABLEHLO_COMPOSITE ops become their decompositions' ops (LiteRT 2.3's accelerator dies on the ones it takes)",
    run,
    opt_in=True,
)

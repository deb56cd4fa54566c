"""scaled-variance: compute a sum of squares or a variance on values scaled by a power of two.

    q = RSQRT(MEAN(SQUARE(d)) + eps)        ->  ds = d * 2^-k
    y = MUL(d, q)                                q' = RSQRT(MEAN(SQUARE(ds)) + eps * 2^-2k)   (= q * 2^k)
                                                 y = MUL(ds, q')                              (= d * q)

The squares are SQUARE(d), MUL(d, d), POW(d, 2) or SQUARED_DIFFERENCE(a, b) (both operands
scaled), reduced by SUM or MEAN, through ops that only move values, as GPU701 and GPU703 find them:
LayerNorm, RMSNorm, L2 norm, instance norm. The delegate computes the squares in half and stores
the reduction in half, so |d| above 255.9 (or a SUM of squares above 65504) is Inf (GPU701); with
the scale the squares stay below 2^12. The scale is undone where the value is back in range:
the RSQRT's (SQRT's) reader MUL (DIV) gets its other operand scaled by the same 2^-k (it already
is, when it is d), which needs no division at all; any other reader gets q' * 2^-k (q' * 2^k
after SQRT); with no root after it the sum itself is multiplied by 2^2k, where it fits half.

k comes from how large the values get: measured on calibration inputs (`gpulint fix --inputs
X.npz`) or bounded by the graph itself (bounded activations, constants); a variance nothing
bounds is left alone with the reason. Where eps is below half's smallest normal (GPU703: a
near-constant row's variance is 0 in half and RSQRT(0) Inf) and the values leave room, k is
negative instead: the values are scaled up until eps * 2^-2k is a normal half.

A power of two is exact in float and half alike (barring underflow), so in float the rewrite
is exact but for the root's own rounding: proven on the CPU interpreter to fp32 rounding.
"""

from __future__ import annotations

import math

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, only_reader, producers, prune
from gpulint.passes.half import (
    HALF_TARGET,
    MOVES,
    Magnitudes,
    axes_of,
    binary,
    insert_after,
    insert_before,
    is_float,
    new_tensor,
    reduced_count,
)
from gpulint.rules.numerics import HALF_MAX, HALF_MIN_NORMAL, fused_layernorms
from gpulint.rules.signature import Graph

SCALE = "half_scale"  # the name the pass gives its scale constants: a square of a scaled value is done


def _operands(model: Model, sg: Subgraph, op: Operator) -> list[int] | None:
    """The tensors a square op squares, or None when it is not one."""
    name, ins = model.op_name(op), op.inputs
    if name == "SQUARE" and len(ins) == 1:
        return [ins[0]]
    if name == "MUL" and len(ins) == 2 and ins[0] == ins[1] >= 0:
        return [ins[0]]
    if name == "SQUARED_DIFFERENCE" and len(ins) == 2:
        return list(ins)
    if name == "POW" and len(ins) == 2:
        exponent = const_value(model, sg, ins[1])
        if exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0:
            return [ins[0]]
    return None


def _scaled_already(model: Model, sg: Subgraph, t: int, made_by: dict[int, int]) -> bool:
    p = made_by.get(t)
    if p is None or model.op_name(sg.operators[p]) != "MUL":
        return False
    return any((sg.tensors[i].name or "").endswith(SCALE) for i in sg.operators[p].inputs if i >= 0)


class Chain:
    """A square op, the reduction of its squares, and what follows: + eps, then RSQRT or SQRT."""

    def __init__(self, square: Operator, operands: list[int], reduce: Operator) -> None:
        self.square, self.operands, self.reduce = square, operands, reduce
        self.eps: Operator | None = None
        self.eps_input = -1
        self.root: Operator | None = None

    @property
    def last(self) -> Operator:
        return self.root or self.eps or self.reduce


def _chain(model: Model, sg: Subgraph, op: Operator) -> Chain | None:
    operands = _operands(model, sg, op)
    if operands is None or len(op.outputs) != 1:
        return None
    readers = consumers(sg)
    t = op.outputs[0]
    for _ in range(8):  # to the reduction, through ops that only move values
        r = only_reader(sg, t, readers)
        if r is None:
            return None
        nxt = sg.operators[r]
        if model.op_name(nxt) in ("SUM", "MEAN") and nxt.inputs[0] == t:
            chain = Chain(op, operands, nxt)
            break
        if model.op_name(nxt) not in MOVES or len(nxt.outputs) != 1:
            return None
        t = nxt.outputs[0]
    else:
        return None
    t = chain.reduce.outputs[0]
    r = only_reader(sg, t, readers)
    if r is not None and model.op_name(sg.operators[r]) == "ADD":
        add = sg.operators[r]
        other = [i for i in add.inputs if i != t]
        value = const_value(model, sg, other[0]) if len(other) == 1 else None
        if value is not None and value.size == 1 and value.dtype == np.float32:
            chain.eps, chain.eps_input = add, other[0]
            t = add.outputs[0]
            r = only_reader(sg, t, readers)
    if r is not None and model.op_name(sg.operators[r]) in ("RSQRT", "SQRT"):
        chain.root = sg.operators[r]
    return chain


def _magnitude(mags: Magnitudes, chain: Chain) -> tuple[float, float, str] | None:
    """(largest square, largest reduction, whence) or None when nothing bounds the squares."""
    sq = mags.of(chain.square.outputs[0])
    if sq is None:
        ops = [mags.of(t) for t in chain.operands]
        if any(o is None for o in ops):
            return None
        largest = sum(o[0] for o in ops if o is not None) ** 2  # |a - b| <= |a| + |b|
        sq = (largest, next(o[1] for o in ops if o is not None))
    red = mags.of(chain.reduce.outputs[0])
    n = reduced_count(mags.sg, chain.reduce, axes_of(mags.model, mags.sg, chain.reduce) or [])
    total = red[0] if red is not None else sq[0] * (n if mags.model.op_name(chain.reduce) == "SUM" else 1)
    return sq[0], total, sq[1]


def _choose(largest: float, eps: float | None) -> int:
    """k: the squares (and their sum) below HALF_TARGET after 2^-2k; where eps is below half's
    smallest normal and the values leave room, the values scaled up until eps * 2^-2k is normal."""
    k_over = math.ceil(0.5 * math.log2(largest / HALF_TARGET)) if largest > 0 else 0
    k_eps = math.floor(0.5 * math.log2(eps / HALF_MIN_NORMAL)) if eps is not None and eps > 0 else 0
    return max(k_over, min(0, k_eps))


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    skipped: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        graph = Graph.of(model, si)
        fused = {id(sg.operators[i]) for i in fused_layernorms(graph.signatures())}
        mags = Magnitudes(model, si, options)
        for op in [o for o in sg.operators if id(o) not in fused]:
            chain = _chain(model, sg, op)
            if chain is None or any(_scaled_already(model, sg, t, producers(sg)) for t in chain.operands):
                continue
            done, line = _one(model, sg, si, chain, mags)
            (changes if done else skipped).append(f"subgraph {si}: {line}")
    if changes:
        prune(model)
    return PassResult(changes, skipped)


def _one(model: Model, sg: Subgraph, si: int, chain: Chain, mags: Magnitudes) -> tuple[bool, str]:
    """Rewrite one chain: (True, the change made) or (False, why it was left)."""
    sq_op = model.op_name(chain.square)
    red_op = model.op_name(chain.reduce)
    d = sg.tensors[chain.operands[0]].name
    what = f"{sq_op} of `{d}` for the {red_op} (op {sg.operators.index(chain.reduce)})"
    ends = [t for o in (chain.square, chain.reduce, chain.eps, chain.root) if o is not None for t in o.outputs]
    if not is_float(sg, *chain.operands, *ends):
        return False, f"{what}: not float32"
    found = _magnitude(mags, chain)
    if found is None:
        return False, f"{what}: nothing bounds `{d}`; give calibration inputs (gpulint fix --inputs X.npz)"
    square, total, whence = found
    eps = None
    if chain.eps is not None:
        value = const_value(model, sg, chain.eps_input)
        eps = float(np.asarray(value).ravel()[0]) if value is not None else None
    k = _choose(max(square, total), eps)
    if k == 0:
        fits = f"squares up to {square:.3g} and their {red_op} up to {total:.3g} ({whence})"
        return False, f"{what}: {fits} fit half as they are"
    if chain.root is None and total * 4 > HALF_MAX:
        past = f"the {red_op} itself reaches {total:.3g} ({whence}), past half's range"
        return False, f"{what}: {past}, and no root follows to take the scale back"
    back = _apply(model, sg, chain, k)
    eps_note = f", eps x2^{-2 * k}" if chain.eps is not None else ""
    return True, (
        f"{what} computed on `{d}` x2^{-k}{eps_note}, {back} (squares up to {square:.3g}, "
        f"{red_op} up to {total:.3g} {whence}; now below {HALF_TARGET:.0f})"
    )


def _apply(model: Model, sg: Subgraph, chain: Chain, k: int) -> str:
    """Rewrite the chain with the scale 2^-k; where the scale is undone, in words."""
    s = 2.0**-k
    name = sg.tensors[chain.operands[0]].name or "x"
    scale = add_const(model, sg, f"{name}/{SCALE}", np.array([s], np.float32))
    scaled: dict[int, int] = {}

    def times_s(t: int, before: Operator) -> int:
        """`t` * 2^-k, made once, before `before`."""
        if t not in scaled:
            scaled[t] = new_tensor(sg, sg.tensors[t], "scaled")
            insert_before(sg, before, [binary(model, "MUL", t, scale, scaled[t])])
        return scaled[t]

    chain.square.inputs = [times_s(t, chain.square) if t in chain.operands else t for t in chain.square.inputs]
    if chain.eps is not None:
        eps = np.asarray(const_value(model, sg, chain.eps_input), np.float32) * np.float32(s * s)
        new_eps = add_const(model, sg, f"{sg.tensors[chain.eps_input].name}/{SCALE}2", eps)
        chain.eps.inputs = [new_eps if t == chain.eps_input else t for t in chain.eps.inputs]
    last = chain.last
    out = last.outputs[0]
    inner = new_tensor(sg, sg.tensors[out], "scaled")
    last.outputs = [inner]
    root = model.op_name(chain.root) if chain.root is not None else None
    readers = consumers(sg).get(out, [])
    rest = []
    absorbed = []
    for r in readers:
        op = sg.operators[r]
        name_r = model.op_name(op)
        rsqrt_mul = root == "RSQRT" and name_r == "MUL" and op.inputs.count(out) == 1
        sqrt_div = root == "SQRT" and name_r == "DIV" and op.inputs[1:2] == [out] and op.inputs[0] != out
        if not (rsqrt_mul or sqrt_div):
            rest.append(op)
            continue
        # other * q = (other * 2^-k) * q' and other / q = (other * 2^-k) / q': undone without a division
        op.inputs = [inner if t == out else times_s(t, op) for t in op.inputs]
        absorbed.append(f"{name_r} (op {sg.operators.index(op)})")
    if rest or out in sg.outputs:
        back = {"RSQRT": s, "SQRT": 1.0 / s, None: 1.0 / (s * s)}[root]
        const = add_const(model, sg, f"{name}/{SCALE}_back", np.array([back], np.float32))
        insert_after(sg, last, [binary(model, "MUL", inner, const, out)])
    undone = [f"the {root}'s reader {', '.join(absorbed)} takes its other operand x2^{-k}"] if absorbed else []
    if rest or out in sg.outputs:
        undone.append(f"x{back:g} after {root or model.op_name(last)}")
    return " and ".join(undone)


PASS = Pass(
    "scaled-variance",
    True,
    "compute a sum of squares / variance (LayerNorm, RMSNorm, L2 norm) on values scaled by 2^-k "
    "from calibration inputs or the graph's bounds, and undo it after the root (GPU701, GPU703)",
    run,
    opt_in=True,
    preserves="the interface; every output within fp32 rounding (a power-of-two scale: exact but for the root)",
)

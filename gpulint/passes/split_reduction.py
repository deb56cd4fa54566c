"""split-reduction: a SUM or MEAN over thousands of values as two levels whose partial results
stay in half's range.

    y = MUL(SUM(x, axes), c)       ->  x4 = RESHAPE(x, [P, G, n/G, Q])
      (or DIV(SUM(x, axes), c))        y = RESHAPE(SUM(MUL(SUM(x4, 2), c), 1), shape of y)
    y = DIV(SUM(x, axes), d)       ->  y = RESHAPE(SUM(DIV(SUM(x4, 2), RESHAPE(d)), 1), shape of y)
    y = MEAN(x, axes)              ->  y = RESHAPE(MEAN(MEAN(x4, 2), 1), shape of y)

(d a run-time divisor, one value or one per output: a masked mean, (x * mask).sum / mask.sum, as
litert-torch writes it.)

A mean written out as a SUM and a scale (a hand-written global pool, a masked average, an
EfficientNet head) stores the whole sum in half before it scales it: above 65504 it is Inf,
though the mean is small. Split, each partial sum covers n/G values and is scaled before the
outer sum adds them up, so every stored value is a scaled partial mean. A MEAN already divides
before it stores; split, its accumulation covers n/G values at a time, for a runtime that
accumulates in half (the executor and LiteRT's accelerator accumulate reductions in float, so
they show no change on it). The reduced axes must be consecutive, the shapes static.

In exact arithmetic the two levels are the same sum (the same mean: groups of equal size); in
float they reorder the additions, proven on the CPU interpreter to fp32 rounding. G is the
divisor of n closest to sqrt(n) whose partial sums stay below 2^12 on the calibration inputs
(`fix --inputs`) or the graph's bounds, a larger one where they would not.
"""

from __future__ import annotations

import math

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, new_op, only_reader, prune
from gpulint.passes.half import (
    HALF_TARGET,
    Magnitudes,
    axes_of,
    binary,
    is_float,
    new_tensor,
    reducer,
)
from gpulint.rules.numerics import HALF_MAX

MIN_SPLIT = 1024  # "thousands": below it a sum of values that fit half rarely leaves it
INT32_MAX = 2**31 - 1


def _divisors(n: int) -> list[int]:
    return sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0 for d in (i, n // i)})


def groups(n: int, total: float | None) -> int | None:
    """G for n values whose |sum| reaches `total` (None: unknown): the divisor nearest sqrt(n)
    from above whose partial sums total / G stay below HALF_TARGET; None when n has no divisor
    between 2 and n / 2."""
    options = [d for d in _divisors(n) if 2 <= d <= n // 2]
    if not options:
        return None
    root = math.sqrt(n)
    above = [d for d in options if d >= root] or options
    for d in above:
        if total is None or total / d <= HALF_TARGET:
            return d
    return above[-1]


Scale = tuple[Operator, float | None, int | None]  # the MUL / DIV, its constant factor or its run-time divisor


def _scale(model: Model, sg: Subgraph, red: Operator) -> Scale | None:
    """The MUL or DIV by a scalar constant, or the DIV by a run-time divisor of one value or of the
    SUM's shape, that alone reads a SUM's result."""
    r = only_reader(sg, red.outputs[0], consumers(sg))
    if r is None:
        return None
    op = sg.operators[r]
    name = model.op_name(op)
    opts = op.builtin_options
    if name not in ("MUL", "DIV") or len(op.inputs) != 2 or len(op.outputs) != 1:
        return None
    if opts is not None and opts.values.get("fused_activation_function") not in (None, "NONE"):
        return None
    other = [t for t in op.inputs if t != red.outputs[0]]
    if len(other) != 1 or (name == "DIV" and op.inputs[0] != red.outputs[0]):
        return None
    value = const_value(model, sg, other[0])
    if value is None:
        d, s, y = (sg.tensors[t] for t in (other[0], red.outputs[0], op.outputs[0]))
        fits = math.prod(d.shape) == 1 or list(d.shape) == list(s.shape)
        if name == "DIV" and is_float(sg, other[0]) and not d.is_dynamic and fits and list(y.shape) == list(s.shape):
            return op, None, other[0]
        return None
    if value.size != 1 or value.dtype != np.float32 or float(value.ravel()[0]) == 0.0:
        return None
    c = float(value.ravel()[0])
    return op, (c if name == "MUL" else 1.0 / c), None


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    skipped: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        mags = Magnitudes(model, si, options)
        for red in [op for op in sg.operators if model.op_name(op) in ("SUM", "MEAN")]:
            line = _one(model, sg, red, mags)
            if line is not None:
                (changes if line[0] else skipped).append(f"subgraph {si}: {line[1]}")
    if changes:
        prune(model)
    return PassResult(changes, skipped)


def _one(model: Model, sg: Subgraph, red: Operator, mags: Magnitudes) -> tuple[bool, str] | None:
    if len(red.inputs) != 2 or red.inputs[0] < 0 or len(red.outputs) != 1:
        return None
    x, out = red.inputs[0], red.outputs[0]
    shape = sg.tensors[x].shape
    axes = axes_of(model, sg, red)
    if axes is None or any(d <= 0 for d in shape):
        return None
    n = math.prod(shape[a] for a in axes)
    if n < MIN_SPLIT:
        return None
    kind = model.op_name(red)
    if n > INT32_MAX:  # an absurd shape (a damaged file): no RESHAPE dim holds it, and its divisors take forever
        return (
            False,
            f"{kind} of `{sg.tensors[x].name}` (op {sg.operators.index(red)}): more values than an int32 holds",
        )
    what = f"{kind} of {n} values of `{sg.tensors[x].name}` (op {sg.operators.index(red)})"
    if not is_float(sg, x, out) or sg.tensors[x].is_dynamic:
        return False, f"{what}: not a static float32 tensor"
    if axes != list(range(axes[0], axes[-1] + 1)):
        return False, f"{what}: its axes {axes} are not consecutive"
    seen = mags.of(out)
    total = None
    if seen is not None:
        total = seen[0] * (n if kind == "MEAN" else 1)
    elif (bound := mags.of(x)) is not None:
        total = bound[0] * n
    scale = None
    if kind == "SUM":
        scale = _scale(model, sg, red)
        if scale is None:
            if seen is not None and seen[0] * 4 > HALF_MAX:
                return False, f"{what}: the sum itself reaches {seen[0]:.3g}, past half's range; keep it in float"
            return None  # a plain SUM: the split stores the same total
    elif total is not None and total <= HALF_TARGET:
        return None  # a MEAN whose sums stay small
    g = groups(n, total)
    if g is None:
        return False, f"{what}: {n} has no divisor to split it by"
    _apply(model, sg, red, axes, g, scale)
    partial = f", partial sums up to {total / g:.3g}" if total is not None else ""
    scaled = ""
    if scale is not None and scale[1] is not None:
        scaled = f", each scaled by {scale[1]:.3g} before the outer SUM"
    elif scale is not None and scale[2] is not None:
        scaled = f", each divided by `{sg.tensors[scale[2]].name}` before the outer SUM"
    return True, f"{what} split into {g} groups of {n // g}{scaled}{partial}"


def _apply(model: Model, sg: Subgraph, red: Operator, axes: list[int], g: int, scale: Scale | None) -> None:
    x = red.inputs[0]
    like = sg.tensors[x]
    shape = like.shape
    p, q = math.prod(shape[: axes[0]]), math.prod(shape[axes[-1] + 1 :])
    n = math.prod(shape[a] for a in axes)
    kind = model.op_name(red)
    final_op = scale[0] if scale is not None else red
    final = final_op.outputs[0]
    four = [p, g, n // g, q]

    def reshape(src: int, dims: list[int], dst: int) -> Operator:
        target = add_const(model, sg, f"{like.name}/split_shape", np.array(dims, np.int32))
        return new_op(model, "RESHAPE", [src, target], [dst], {"new_shape": dims}, "ReshapeOptions")

    def axis(a: int) -> int:
        return add_const(model, sg, f"{like.name}/split_axis", np.array([a], np.int32))

    x4 = new_tensor(sg, like, "split", four)
    inner = new_tensor(sg, like, "partial", [p, g, 1, q])
    ops = [reshape(x, four, x4), reducer(model, kind, x4, axis(2), inner, True)]
    if scale is not None:
        scaled = new_tensor(sg, like, "partial_scaled", [p, g, 1, q])
        if scale[1] is not None:
            c = add_const(model, sg, f"{like.name}/split_scale", np.array([scale[1]], np.float32))
            ops.append(binary(model, "MUL", inner, c, scaled))
        elif scale[2] is not None:  # the divisor, one value or one per output, laid out as [P, 1, 1, Q]
            d = scale[2]
            dims = [1, 1, 1, 1] if math.prod(sg.tensors[d].shape) == 1 else [p, 1, 1, q]
            d4 = new_tensor(sg, sg.tensors[d], "split_divisor", dims)
            ops += [reshape(d, dims, d4), binary(model, "DIV", inner, d4, scaled)]
        inner = scaled
    outer = new_tensor(sg, like, "total", [p, 1, 1, q])
    ops += [reducer(model, kind, inner, axis(1), outer, True), reshape(outer, list(sg.tensors[final].shape), final)]
    # in the place of the last op replaced (the scale's: a run-time divisor may be computed after the SUM)
    i = sg.operators.index(final_op)
    sg.operators[i : i + 1] = ops
    if scale is not None:
        sg.operators.remove(red)


PASS = Pass(
    "split-reduction",
    True,
    "split a SUM (read by a scale) or MEAN over thousands of values into two levels whose partial "
    "results stay in half's range",
    run,
    opt_in=True,
    preserves="the interface; every output within fp32 rounding (the same sum, reordered)",
)

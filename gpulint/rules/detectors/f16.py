"""Rules about one op the delegate computes in half precision (scope `f16-op`): GPU7xx.

The analysis they read (each tensor's interval of values, what a reduction folds, which ops
square) is numerics.py; the scope leaves out the ops the delegate never computes in half.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from gpulint.rules.detectors.registry import Hit, SubgraphView, detector, f16_ops
from gpulint.rules.numerics import (
    EXP_LIMIT,
    F16_WORDS,
    HALF_MAX,
    HALF_MIN_NORMAL,
    HALF_MIN_SUBNORMAL,
    INF,
    MIN_REDUCED,
    REDUCERS,
    SQUARE_LIMIT,
    Interval,
    Ranges,
    reduced_count,
    square_of,
)
from gpulint.rules.signature import OpSignature


def ranges(v: SubgraphView) -> Ranges:
    """The subgraph's intervals, computed once and only where a detector needs one."""
    return Ranges(v.graph, v.sigs)


def _shown(v: Interval) -> str:
    if v[0] == -INF or v[1] == INF:
        return "nothing bounds it"
    return f"within [{v[0]:.4g}, {v[1]:.4g}]"


@detector("GPU701", "f16-op")
def half_overflow_sum_of_squares(v: SubgraphView, s: OpSignature) -> Iterator[Hit]:
    x = square_of(s)
    if x is None:
        return
    r = v.memo(ranges)
    if s.op == "SQUARED_DIFFERENCE":
        a, b = r.get(s, s.input(0)), r.get(s, s.input(1))
        bound = (a[0] - b[1], a[1] - b[0])
    else:
        bound = r.get(s, x)
    limit = max(bound[0] ** 2, bound[1] ** 2)  # inf where nothing bounds x
    t = s.outputs[0]
    for _ in range(8):  # to the reduction, through ops that only move values
        readers = s.consumers(t)
        if len(readers) != 1:
            return
        reducer = readers[0]
        if reducer.op in REDUCERS:
            break
        if reducer.op not in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE") or not reducer.outputs:
            return
        t = reducer.outputs[0]
    else:
        return
    n = reduced_count(reducer)
    if reducer.index not in v.memo(f16_ops) or n is None or n < MIN_REDUCED:
        return
    if limit * (n if reducer.op == "SUM" else 1) <= HALF_MAX:
        return
    why = (
        f"the square overflows above {SQUARE_LIMIT:.1f} and the sum above {HALF_MAX:.0f} "
        f"(an RMS above {math.sqrt(HALF_MAX / n):.3g})"
        if reducer.op == "SUM"
        else f"the square overflows above {SQUARE_LIMIT:.1f}, before the mean divides"
    )
    values = {
        "op": s.op,
        "tensor": x.name,
        "bound": _shown(bound),
        "reducer": reducer.op,
        "count": n,
        "reducer_index": reducer.index,
        "why": why,
        "f16": F16_WORDS,
    }
    yield Hit(values, s.index, s.op, [x.name])


@detector("GPU702", "f16-op")
def half_overflow_exp(v: SubgraphView, s: OpSignature) -> Iterator[Hit]:
    if s.op != "EXP" or s.input(0) is None:
        return
    bound = v.memo(ranges).get(s, s.inputs[0])
    if bound[1] > EXP_LIMIT:
        values = {"op": s.op, "tensor": s.inputs[0].name, "bound": _shown(bound), "f16": F16_WORDS}
        yield Hit(values, s.index, s.op, [s.inputs[0].name])


@detector("GPU703", "f16-op")
def half_zero_variance(v: SubgraphView, s: OpSignature) -> Iterator[Hit]:
    if s.op not in ("RSQRT", "SQRT"):
        return
    r = v.memo(ranges)
    x = s.input(0)
    src = r.source(x)
    eps: float | None = None
    if src is not None and src.op == "ADD":
        for var, c in ((src.input(0), src.input(1)), (src.input(1), src.input(0))):
            const = s.const_values(c) if c is not None and c.elements == 1 else None
            if const:
                eps, src = float(const[0]), r.source(var)
                break
    squared = r.source(src.input(0)) if src is not None else None
    if src is None or src.op not in REDUCERS or squared is None or square_of(squared) is None:
        return  # not a variance (a reduction of squares)
    if eps is not None and abs(eps) >= HALF_MIN_NORMAL:
        return  # rsqrt(eps) <= 128: finite even when the variance rounds to 0
    if eps is None or eps == 0:
        shown = "no eps"
    elif abs(eps) < HALF_MIN_SUBNORMAL / 2:
        shown = f"eps {eps:.3g} (0 in half)"
    else:
        shown = f"eps {eps:.3g} (a subnormal in half, below {HALF_MIN_NORMAL:.2g})"
    values = {"op": s.op, "tensor": x.name if x else "", "reducer": src.op, "eps": shown, "f16": F16_WORDS}
    yield Hit(values, s.index, s.op, [x.name] if x else [])

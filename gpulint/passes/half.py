"""What the half-precision passes share (stable-softmax, scaled-variance, split-reduction): new
float tensors and ops placed in topological order, the reduction axes of an op, and the values a
tensor reaches (calibration inputs first, then the interval the GPU7xx rules compute).

Each pass rewrites what overflows or drifts when the GPU delegate computes in half (F16, the
Android default: precision loss allowed) into an equivalent graph that stays in half's range. In
exact arithmetic each rewrite computes the same function; in float they differ by rounding only,
which `gpulint fix` proves on the LiteRT CPU interpreter (compare.REWRITE_PROOF). They are opt-in:
they add ops, and what they buy shows only where a runtime computes in half.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph, Tensor
from gpulint.passes import PassOptions
from gpulint.passes.edit import add_const, const_value, new_op
from gpulint.rules.numerics import Ranges
from gpulint.rules.signature import Graph

# Ops that only move values: a chain may pass through them between a square and its reduction.
MOVES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE")
# What a half tensor should stay below after a rewrite: 2^12 leaves 16x (4x for a value that is
# squared) between the largest value seen and half's 65504 for inputs beyond the ones measured.
HALF_TARGET = 4096.0


def new_tensor(sg: Subgraph, like: Tensor, name: str, shape: list[int] | None = None) -> int:
    """A float32 runtime tensor shaped as `like` (or `shape`), named after it."""
    dims = list(like.shape if shape is None else shape)
    signature = list(like.shape_signature) if shape is None and like.shape_signature is not None else None
    base = like.name or "t"
    sg.tensors.append(Tensor(f"{base}/{name}", dims, "FLOAT32", 0, shape_signature=signature))
    return len(sg.tensors) - 1


def scalar(model: Model, sg: Subgraph, name: str, value: float) -> int:
    return add_const(model, sg, name, np.array([value], np.float32))


def binary(model: Model, op: str, a: int, b: int, out: int) -> Operator:
    """ADD / SUB / MUL / DIV with no fused activation."""
    table = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions"}[op]
    return new_op(model, op, [a, b], [out], {"fused_activation_function": "NONE"}, table)


def reducer(model: Model, op: str, x: int, axes: int, out: int, keep_dims: bool) -> Operator:
    return new_op(model, op, [x, axes], [out], {"keep_dims": keep_dims}, "ReducerOptions")


def insert_before(sg: Subgraph, anchor: Operator, ops: list[Operator]) -> None:
    i = next(i for i, op in enumerate(sg.operators) if op is anchor)
    sg.operators[i:i] = ops


def insert_after(sg: Subgraph, anchor: Operator, ops: list[Operator]) -> None:
    i = next(i for i, op in enumerate(sg.operators) if op is anchor)
    sg.operators[i + 1 : i + 1] = ops


def is_float(sg: Subgraph, *tensors: int) -> bool:
    def plain(t: int) -> bool:
        q = sg.tensors[t].quantization
        return sg.tensors[t].type == "FLOAT32" and (q is None or not q.scale)

    return all(t >= 0 and plain(t) for t in tensors)


def axes_of(model: Model, sg: Subgraph, op: Operator) -> list[int] | None:
    """A reduction's axes, non-negative and sorted, or None when they are not a constant."""
    if len(op.inputs) < 2 or op.inputs[0] < 0:
        return None
    values = const_value(model, sg, op.inputs[1])
    rank = len(sg.tensors[op.inputs[0]].shape)
    if values is None or rank == 0:
        return None
    return sorted({int(a) % rank for a in np.asarray(values).ravel()})


def keeps_dims(op: Operator) -> bool:
    opts = op.builtin_options
    return bool(opts is not None and opts.values.get("keep_dims"))


def reduced_count(sg: Subgraph, op: Operator, axes: list[int]) -> int:
    shape = sg.tensors[op.inputs[0]].shape
    return math.prod(max(shape[a], 1) for a in axes)


class Magnitudes:
    """How large a tensor's values get: the largest |value| on the calibration inputs
    (`fix --inputs`, measured on the CPU interpreter), else the bound of the interval the GPU7xx
    rules compute from the graph (bounded activations, constants, z-scores), else unknown."""

    def __init__(self, model: Model, si: int, options: PassOptions) -> None:
        self.measured = dict(options.calibration)
        self.ranges = Ranges(*_graph(model, si))
        self.model = model
        self.sg = model.subgraphs[si]

    def of(self, t: int) -> tuple[float, str] | None:
        """(the largest |value|, where it comes from), or None when nothing bounds it."""
        name = self.sg.tensors[t].name
        if name is not None and name in self.measured:
            return self.measured[name], "on the calibration inputs"
        lo, hi = self.ranges.of.get(t, (-math.inf, math.inf))
        bound = max(abs(lo), abs(hi))
        return (bound, "from the graph's own bounds") if math.isfinite(bound) else None


def _graph(model: Model, si: int) -> tuple[Graph, Any]:
    graph = Graph.of(model, si)
    return graph, graph.signatures()


def power_of_two_above(value: float) -> int:
    """The smallest k with 2^k >= value (value > 0)."""
    return math.ceil(math.log2(value)) if value > 0 else 0

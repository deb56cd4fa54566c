"""Graph edits the layout passes share: a RESHAPE or a TILE put in front of an op's operand,
or behind its output, each writing a new tensor of the shape asked for.

RESHAPE and TILE move values and compute nothing, so a rewrite made of them is exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph, Tensor
from gpulint.passes.edit import add_const, new_op


def like(sg: Subgraph, t: int, shape: list[int], suffix: str, signature: list[int] | None = None) -> int:
    """A new runtime tensor of `t`'s type and quantization with the given shape (and shape
    signature, where a dim is only known at run time)."""
    src = sg.tensors[t]
    new = Tensor(f"{src.name or 't'}/{suffix}", list(shape), src.type, 0, src.quantization, shape_signature=signature)
    sg.tensors.append(new)
    return len(sg.tensors) - 1


def reshape_op(model: Model, sg: Subgraph, x: int, out: int) -> Operator:
    shape = list(sg.tensors[out].shape)
    target = add_const(model, sg, f"{sg.tensors[out].name}/shape", np.array(shape, np.int32))
    return new_op(model, "RESHAPE", [x, target], [out], {"new_shape": shape}, "ReshapeOptions")


def tile_op(model: Model, sg: Subgraph, x: int, out: int) -> Operator:
    src, dst = sg.tensors[x].shape, sg.tensors[out].shape
    multiples = np.array([d // s for s, d in zip(src, dst, strict=True)], np.int32)
    version = 2 if sg.tensors[x].type == "INT8" else 1  # TILE v2 is int8's (op_version.cc)
    inputs = [x, add_const(model, sg, f"{sg.tensors[out].name}/multiples", multiples)]
    return new_op(model, "TILE", inputs, [out], version=version)


def reshape_input(model: Model, sg: Subgraph, op: Operator, slot: int, shape: list[int], suffix: str) -> Operator:
    """Point input `slot` of `op` at a RESHAPE of it to `shape`; returns the RESHAPE to insert before `op`."""
    x = op.inputs[slot]
    y = like(sg, x, shape, suffix)
    op.inputs[slot] = y
    return reshape_op(model, sg, x, y)


def reshape_output(model: Model, sg: Subgraph, op: Operator, shape: list[int], suffix: str) -> Operator:
    """Make `op` write a new tensor of `shape` and RESHAPE it into its old output; returns the
    RESHAPE to insert after `op`. The old output keeps its index, so readers and graph outputs
    stay as they were."""
    out = op.outputs[0]
    y = like(sg, out, shape, suffix)
    op.outputs[0] = y
    return reshape_op(model, sg, y, out)


def lifted(shape: list[int], rank: int) -> list[int]:
    """`shape` with leading 1s up to `rank` (numpy's broadcast alignment)."""
    return [1] * (rank - len(shape)) + list(shape)


def place(sg: Subgraph, op: Operator, before: Sequence[Operator], after: Sequence[Operator] = ()) -> None:
    i = next(i for i, o in enumerate(sg.operators) if o is op)
    sg.operators[i : i + 1] = [*before, op, *after]

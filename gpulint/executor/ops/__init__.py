"""One lowering per op family, and the one table from op name to lowering function.

A lowering takes the LowerContext (graph view, fusion plan, buffers, device) and the op, and
returns the op's launches in order; it raises ExecutorError (or movement.Unsupported) for a
form it cannot run. Adding an op is a function in its family's module and a row in that
module's LOWER.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpulint.executor.context import LowerContext
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch
from gpulint.executor.ops import (
    conv,
    copy,
    depthwise,
    elementwise,
    lstm,
    matmul,
    quantize,
    reduce,
    resize,
    transpose_conv,
)

Lowering = Callable[[LowerContext, OpView], list[Launch]]


def _merge(*tables: Mapping[str, Lowering]) -> dict[str, Lowering]:
    merged: dict[str, Lowering] = {}
    for table in tables:
        twice = set(merged) & set(table)
        assert not twice, f"ops lowered twice: {sorted(twice)}"
        merged.update(table)
    return merged


LOWER = _merge(
    conv.LOWER,
    depthwise.LOWER,
    transpose_conv.LOWER,
    matmul.LOWER,
    lstm.LOWER,
    elementwise.LOWER,
    quantize.LOWER,
    reduce.LOWER,
    resize.LOWER,
    copy.LOWER,
)

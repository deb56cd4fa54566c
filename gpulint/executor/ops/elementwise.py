"""Unary ops, CAST and binary ops (with numpy broadcasting) as the elementwise kernels
(elementwise.cl), their op compiled in as a #define, and the elementwise ops the fusion plan
puts after them in their kernel (the rounding of an int8 result, a PRELU after an ADD)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, grid, int4
from gpulint.executor.opcodes import ACTIVATION, BINARY, CAST, UNARY, unary_code
from gpulint.executor.ops.copy import reshaped


def unary(cx: LowerContext, op: OpView) -> list[Launch]:
    return [unary_launch(cx, op, unary_code(op.name, op.opts), float(op.opts.get("alpha", 0.0)))]


def cast(cx: LowerContext, op: OpView) -> list[Launch]:
    target = cx.view.type(op.outputs[0])
    if target not in CAST or cx.view.type(op.inputs[0]) not in CAST:
        raise ExecutorError("CAST other than between FLOAT32, INT32 and BOOL")
    return [unary_launch(cx, op, CAST[target], 0.0)]


def same_shape_args(cx: LowerContext, x: int, y: int, what: str) -> list[Any]:
    """The leading arguments of a kernel that maps x to a y of its shape, value by value
    (unary, quantize_dequantize): the two buffers, y's dims and channel count."""
    if layout.bhwc(cx.shape(x)) != layout.bhwc(cx.shape(y)):
        raise ExecutorError(f"{what} whose output shape differs from its input")
    ys = cx.shape(y)
    return [cx.buffers.tensor(x), cx.buffers.tensor(y), int4(layout.dims4(ys)), np.int32(ys[-1] if ys else 1)]


def unary_launch(cx: LowerContext, op: OpView, code: int, param: float) -> Launch:
    x, (y, steps) = op.inputs[0], cx.epilogue(op.index, plain=False)
    assert steps is not None
    args = [*same_shape_args(cx, x, y, "an elementwise op"), np.float32(param), *steps.args]
    defines = f"#define OP {code}\n{steps.defines(ACTIVATION['NONE'])}"
    return cx.launch(op.index, "unary", args, grid(cx.shape(y), 8), defines)


def operand(cx: LowerContext, oi: int, t: int, rank: int) -> tuple[Any, list[int], list[Launch]]:
    """A binary op's input in the layout of the output's rank (numpy's leading-1 alignment),
    its aligned shape, and the copy that lays it out, if one must."""
    s = cx.shape(t)
    aligned = [1] * (rank - len(s)) + list(s)
    if layout.bhwc(aligned) == layout.bhwc(s) or not s:
        return cx.buffers.tensor(t), aligned, []
    value = cx.float_const(t)
    if value is not None:
        return cx.buffers.upload(layout.to_slices(value.reshape(aligned), aligned)), aligned, []
    buf, launches = reshaped(cx, oi, t, aligned)
    return buf, aligned, launches


def binary(cx: LowerContext, op: OpView) -> list[Launch]:
    y, steps = cx.epilogue(op.index, plain=False)
    assert steps is not None
    ys = cx.shape(y)
    (ab, a_s, a_copies), (bb, b_s, b_copies) = (operand(cx, op.index, t, len(ys)) for t in op.inputs[:2])
    ad, bd = layout.bhwc(a_s), layout.bhwc(b_s)
    args = [
        ab,
        bb,
        cx.buffers.tensor(y),
        int4(layout.dims4(a_s)),
        np.int32(ad[3]),
        int4(layout.dims4(b_s)),
        np.int32(bd[3]),
        int4(layout.dims4(ys)),
        np.int32(layout.bhwc(ys)[3]),
        *steps.args,
    ]
    defines = f"#define OP {BINARY[op.name]}\n{steps.defines(op.act)}"
    return [*a_copies, *b_copies, cx.launch(op.index, "binary", args, grid(ys, 8), defines)]


LOWER = {"CAST": cast, **{name: unary for name in UNARY}, **{name: binary for name in BINARY}}

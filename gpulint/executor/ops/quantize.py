"""QUANTIZE_AND_DEQUANTIZE, the rounding of a float value to an int8 tensor's grid that the
delegate puts after every int8 op (prepare.add_quant_adjustments), as its own launch: after an
op whose kernel has no epilogue to run it in (fusion.py fuses it into a conv's)."""

from __future__ import annotations

from gpulint.executor.context import LowerContext
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, grid
from gpulint.executor.ops.elementwise import same_shape_args
from gpulint.executor.prepare import QUANTIZE_AND_DEQUANTIZE, adjustment


def quantize_and_dequantize(cx: LowerContext, op: OpView) -> list[Launch]:
    x, y = op.inputs[0], op.outputs[0]
    args = same_shape_args(cx, x, y, "a QUANTIZE_AND_DEQUANTIZE")
    args.append(cx.buffers.upload(adjustment(op.op), writable=False))  # the grid: min, max, scale
    return [cx.launch(op.index, "quantize_dequantize", args, grid(cx.shape(y), 8))]


LOWER = {QUANTIZE_AND_DEQUANTIZE: quantize_and_dequantize}

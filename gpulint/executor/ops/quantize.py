"""QUANTIZE_AND_DEQUANTIZE, the rounding of a float value to an int8 tensor's grid that the
delegate puts after every int8 op (prepare.add_quant_adjustments), as its own launch: after an
op whose kernel has no epilogue to run it in (fusion.py fuses it into a conv's)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, grid, int4
from gpulint.executor.prepare import QUANTIZE_AND_DEQUANTIZE, adjustment


def quantize_and_dequantize(cx: LowerContext, op: OpView) -> list[Launch]:
    x, y = op.inputs[0], op.outputs[0]
    if layout.bhwc(cx.shape(x)) != layout.bhwc(cx.shape(y)):
        raise ExecutorError("a QUANTIZE_AND_DEQUANTIZE whose output shape differs from its input")
    args = [
        cx.buffers.tensor(x),
        cx.buffers.tensor(y),
        int4(layout.dims4(cx.shape(y))),
        np.int32(cx.shape(y)[-1] if cx.shape(y) else 1),
        cx.buffers.upload(adjustment(op.op), writable=False),
    ]
    return [cx.launch(op.index, "quantize_dequantize", args, grid(cx.shape(y), 8))]


LOWER = {QUANTIZE_AND_DEQUANTIZE: quantize_and_dequantize}

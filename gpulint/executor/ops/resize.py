"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (resize.cl)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, float2, int4


def resize(cx: LowerContext, op: OpView) -> list[Launch]:
    x, y = op.inputs[0], op.outputs[0]
    xs, ys = cx.shape(x), cx.shape(y)
    align, half = bool(op.opts.get("align_corners")), bool(op.opts.get("half_pixel_centers"))

    def scale(i: int, o: int) -> float:
        return (i - 1) / (o - 1) if align and o > 1 else i / o

    args = [
        cx.buffers.tensor(x),
        cx.buffers.tensor(y),
        int4(layout.dims4(xs)),
        int4(layout.dims4(ys)),
        np.int32(ys[-1]),
        float2(scale(xs[2], ys[2]), scale(xs[1], ys[1])),
        np.int32(op.name == "RESIZE_BILINEAR"),
        np.int32(align),
        np.int32(half),
    ]
    b, h, w, _ = layout.bhwc(ys)
    size = (-(-w // 8), h, b * -(-layout.slices(ys[-1]) // 4))  # 8 columns of 4 slices per work item
    return [cx.launch(op.index, "resize", args, size)]


LOWER = {"RESIZE_BILINEAR": resize, "RESIZE_NEAREST_NEIGHBOR": resize}

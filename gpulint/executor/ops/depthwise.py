"""DEPTHWISE_CONV_2D, and a CONV_2D with one input channel per group (depthwise.cl.j2)."""

from __future__ import annotations

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, grid, int2, int4
from gpulint.executor.ops.weights import bias, depthwise_weights


def depthwise(cx: LowerContext, op: OpView) -> list[Launch]:
    return depthwise_with(cx, op, cx.float_const(op.inputs[1]))


def depthwise_with(cx: LowerContext, op: OpView, w: np.ndarray | None) -> list[Launch]:
    """Depthwise `op` with filter `w` ([1, kh, kw, O]; None: the op's runtime weights). Multiplier
    1 runs blocked over 8 output columns and 1 or 2 rows, with the fused ops of the plan; a
    larger one, one output slice per work item."""
    oi, opts, act, y = op.index, op.opts, op.act, op.outputs[0]
    wbuf, launches = depthwise_weights(cx, oi, w, op.inputs[1])
    _, kh, kw, c = w.shape if w is not None else cx.shape(op.inputs[1])
    sh, sw, dh, dw = opts["stride_h"], opts["stride_w"], opts["dilation_h_factor"], opts["dilation_w_factor"]
    x, pad = cx.window_input(oi, (kh, kw), (sh, sw), (dh, dw), opts["padding"])
    xs, ys = cx.shape(x), cx.shape(y)
    b = bias(cx, op.inputs[2] if len(op.inputs) > 2 else -1, c)
    head = [cx.buffers.tensor(x), wbuf, cx.buffers.upload(b, writable=False)]
    window = [int2(kw, kh), int2(sw, sh), int2(dw, dh), pad]
    if xs[-1] == ys[-1]:  # multiplier 1
        out, epilogue = cx.epilogue(oi)
        epilogue = epilogue or cx.steps([], [])
        dims = [int4(layout.dims4(xs)), int4(layout.dims4(ys)), np.int32(ys[-1])]
        tail = epilogue.args if epilogue else []
        args = [*head, cx.buffers.tensor(out), *dims, *window, np.int32(act), *tail]
        rows = 2 if (sh, dh) == (1, 1) else 1  # two rows share input rows
        columns, height, planes = grid(ys, 8)
        registers = f"_k{kw}s{sw}" if kw in (1, 3, 5) and sw in (1, 2) and dw == 1 else ""  # see depthwise.cl.j2
        kernel = f"depthwise_x8_r{rows}{registers}" + ("_fused" if epilogue else "")
        defines = epilogue.defines(act) if epilogue else ""
        return [*launches, cx.launch(oi, kernel, args, (columns, -(-height // rows), planes), defines)]
    multiplier = ys[-1] // xs[-1]  # as the delegate reads it: from the shapes, not the option
    dims = [int4(layout.dims4(xs)), np.int32(xs[-1]), int4(layout.dims4(ys)), np.int32(ys[-1])]
    args = [*head, cx.buffers.tensor(y), *dims, *window, np.int32(multiplier), np.int32(act)]
    return [*launches, cx.launch(oi, "depthwise_conv2d", args, grid(ys))]


LOWER = {"DEPTHWISE_CONV_2D": depthwise}

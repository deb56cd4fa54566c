"""TRANSPOSE_CONV and MediaPipe's Convolution2DTransposeBias (transpose_conv.cl), with the
fused ops of the plan."""

from __future__ import annotations

import struct

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import ExecutorError
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, grid, int2, int4
from gpulint.executor.ops.weights import bias, conv_weights


def transpose_conv(cx: LowerContext, op: OpView) -> list[Launch]:
    opts = op.opts
    if op.name == "TRANSPOSE_CONV":
        w_t, x, bias_t = op.inputs[1], op.inputs[2], (op.inputs[3] if len(op.inputs) > 3 else -1)
        sh, sw, padding = opts["stride_h"], opts["stride_w"], opts["padding"]
    else:  # Convolution2DTransposeBias: [input, weights, bias], TfLiteTransposeConvParams in custom options
        x, w_t, bias_t = op.inputs[0], op.inputs[1], op.inputs[2]
        raw = bytes(op.op.custom_options or b"")
        if len(raw) < 12:
            raise ExecutorError("Convolution2DTransposeBias without its parameters")
        pad_code, sw, sh = struct.unpack_from("<3i", raw)
        padding = "SAME" if pad_code == 1 else "VALID"
    w = cx.float_const(w_t)
    if w is None:
        raise ExecutorError("runtime weights")
    y = op.outputs[0]
    xs, ys = cx.shape(x), cx.shape(y)
    out, epilogue = cx.epilogue(op.index)
    epilogue = epilogue or cx.steps([], [], plain=False)  # one kernel, with steps or none
    assert epilogue is not None
    o, kh, kw, i = w.shape
    pad_h = max((xs[1] - 1) * sh + kh - ys[1], 0) // 2 if padding == "SAME" else 0
    pad_w = max((xs[2] - 1) * sw + kw - ys[2], 0) // 2 if padding == "SAME" else 0
    args = [
        cx.buffers.tensor(x),
        cx.buffers.weights(conv_weights(w, 1)),  # as CONV_2D's, one output slice
        cx.buffers.upload(bias(cx, bias_t, o), writable=False),
        cx.buffers.tensor(out),
        int4(layout.dims4(xs)),
        np.int32(i),
        int4(layout.dims4(ys)),
        np.int32(o),
        int2(kw, kh),
        int2(sw, sh),
        int2(pad_w, pad_h),
        *epilogue.args,
    ]
    return [cx.launch(op.index, "transpose_conv", args, grid(ys, 8), epilogue.defines(act=op.act))]


LOWER = {"TRANSPOSE_CONV": transpose_conv, "Convolution2DTransposeBias": transpose_conv}

"""Make grouped convolutions dense: the same CONV_2D with block-diagonal weights.

    CONV_2D(x: C channels, w: [O, kh, kw, C/g])  =>  CONV_2D(x, w': [O, kh, kw, C])

where output channel o of group o // (O/g) keeps its weights on that group's input channels and
gets zeros on the others. In exact arithmetic it is the same convolution; in float the extra
products are exact zeros (unless the input holds Inf or NaN). Why: the classic delegate's OpenGL
backend fails to initialize on a grouped convolution, and its 1x1 shader takes a grouped 1x1 one
and computes it as a dense one, wrong (GPU806). A dense convolution builds and computes right on
every backend. Opt-in: it multiplies the weights and the MACs by the group count, which costs the
OpenCL backend, where the grouped form is right. A conv with one input channel per group and as
many outputs as inputs is a depthwise conv to the delegate, and is left alone, as are weights that
are not float32 constants.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value


def dense_weights(w: np.ndarray, channels: int) -> np.ndarray:
    """[O, kh, kw, C/g] grouped weights as [O, kh, kw, C], zero outside each output's group."""
    out_c, per_group = w.shape[0], w.shape[3]
    groups = channels // per_group
    dense = np.zeros((*w.shape[:3], channels), w.dtype)
    for o in range(out_c):
        g = o // (out_c // groups)
        dense[o, :, :, g * per_group : (g + 1) * per_group] = w[o]
    return dense


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    for sg in model.subgraphs:
        for op in sg.operators:
            if model.op_name(op) != "CONV_2D" or len(op.inputs) < 2 or not op.outputs:
                continue
            x, w_index = sg.tensors[op.inputs[0]], op.inputs[1]
            w = const_value(model, sg, w_index)
            if w is None or w.ndim != 4 or len(x.shape) != 4 or not w.shape[3]:
                continue
            channels, per_group, out_c = x.shape[3], w.shape[3], w.shape[0]
            groups = channels // per_group
            if channels == per_group or channels % per_group or out_c % groups:
                continue
            name = sg.tensors[w_index].name
            if per_group == 1 and out_c == channels:
                result.skipped.append(f"`{name}`: one input channel per group, a depthwise conv to the delegate")
                continue
            if w.dtype != np.float32:
                result.skipped.append(f"`{name}`: {w.dtype} weights (dequantize them first)")
                continue
            op.inputs[1] = add_const(model, sg, f"{name}/dense", dense_weights(w, channels))
            result.changes.append(
                f"`{name}`: {groups} groups of {per_group} channels -> dense [{out_c}, {w.shape[1]}, "
                f"{w.shape[2]}, {channels}] ({groups}x the weights and MACs)"
            )
    return result


PASS = Pass(
    "dense-grouped-conv",
    True,
    "give a grouped CONV_2D block-diagonal dense weights, which every GPU backend builds and computes "
    "right (GPU806; the OpenGL backend fails on other grouped convs)",
    run,
    opt_in=True,
    preserves="the interface; every output within fp32 rounding (the added products are zeros)",
)

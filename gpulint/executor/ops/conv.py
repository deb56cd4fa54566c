"""CONV_2D (grouped too), and the CONV_2D-shaped launch FULLY_CONNECTED and LSTM's gates use
(conv.cl.j2)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import layout
from gpulint.executor.context import LowerContext
from gpulint.executor.device import Device, opencl
from gpulint.executor.errors import ExecutorError
from gpulint.executor.fusion import Epilogue
from gpulint.executor.graph import OpView
from gpulint.executor.launch import Launch, int2, int4
from gpulint.executor.ops.depthwise import depthwise_with
from gpulint.executor.ops.weights import bias, conv_weights, runtime_conv_weights


def conv_blocking(cpu: bool, out_slices: int, positions: int, work: int) -> tuple[int, int]:
    """Output slices and (for 1x1 convs) positions per work item. On a CPU device, as many as
    fill its vector registers without spilling: 4 slices (a float16, two AVX2 registers) for 6
    positions is 12 accumulators, 2 registers of weights and a broadcast input, 15 of AVX2's
    16. 8 positions spilled accumulators in every multiply-add loop: pose_detection's 1x1 convs
    took 1.56x the time (10.1 against 6.5 ms), 4 positions 1.03x; 8 slices measured no faster
    on AVX-512. 6 positions only where there are 6 (conv.cl.j2's conv1x1 reads whole items
    inside the plane). A narrow output (1-3 slices) takes 4 slices too, its empty lanes
    computed for nothing, unless that waste is much work (`work`: the multiply-adds of one
    output channel, NARROW_WORK): then 1 or 2, which leave none. The narrow layers of the
    MediaPipe models are their small heads, where a kernel of their own was a variant more to
    compile at a cold start for no time saved. On a GPU one of each, so that a small layer
    still has work items for every core: with the CPU's blocking a 64x64x48 layer was 1536
    items on an H100 that runs 270,000 threads at once."""
    if not cpu:
        return 1, 1
    px = PX if positions >= PX else 1
    if out_slices >= 4 or (4 - out_slices) * 4 * work <= NARROW_WORK:
        return 4, px
    return (2 if out_slices >= 2 else 1), px


PX = 6  # positions per 1x1-conv work item on a CPU device (conv.cl.j2's conv1x1_o*_p6)
# The most multiply-adds a narrow output may waste in empty lanes to share the 4-slice kernel:
# about 0.05 ms on PoCL on a 2-core machine (three narrow convs over 96x96 blocked 4 wasted 39M
# in 0.9 ms), where a kernel variant more takes 0.2-0.4 s to compile at a cold start.
NARROW_WORK = 2_000_000

# The most items in a split conv's work group (conv1x1_split, conv_split), and the fewest input
# slices times window taps each item sums: below that the halving in local memory costs more
# than the sum it splits.
GROUP = 256
SPLIT_WORK = 4


def gpu_splits(device: Device, outputs: int, in_slices: int, taps: int, lanes: int = 1) -> int:
    """How many items share each output's sum over `in_slices` input slices (at `taps` window
    taps each) in a conv of `outputs` output items, in work groups of `lanes` outputs x splits;
    1: one item per output, the plain kernels. On a GPU a sum is split until the layer has about
    512 items per compute unit (an H100's 132 units run 2,048 each), so that a small plane with
    many channels is not a few thousand items each making hundreds of dependent loads: pose_detection's
    7x7 1x1 convs of 1,152 channels took 105 us as 2,352 items, iris_landmark's 2x2 3x3 convs 50 us
    as 32. A CPU device never splits: its items already loop over blocks on every core."""
    if device.cpu:
        return 1
    target = 512 * int(device.device.max_compute_units)
    splits = 1
    while (
        lanes * splits * 2 <= GROUP
        and splits * 2 <= in_slices  # the split is over slices: every item sums one at least
        and in_slices * taps >= SPLIT_WORK * splits * 2
        and outputs * splits < target
    ):
        splits *= 2
    return splits


def conv2d(cx: LowerContext, op: OpView) -> list[Launch]:
    c = (cx.shape(op.inputs[0]) or [1])[-1]
    value = cx.float_const(op.inputs[1])
    if value is None:  # runtime weights: the delegate takes them when they are not grouped (model_builder.cc)
        shape = cx.shape(op.inputs[1])
        if len(shape) != 4 or shape[3] != c:
            raise ExecutorError("runtime weights of a grouped conv")
        return conv_with(cx, op, op.inputs[1], (shape[0], shape[1], shape[2], shape[3]), None)
    w: np.ndarray = value
    o, kh, kw, i = w.shape
    groups = c // i if i and c % i == 0 else 0
    if not groups or o % groups:
        raise ExecutorError(f"a filter of {i} input channels on {c} channels")
    if groups > 1 and i == 1:
        # The delegate runs it as DEPTHWISE_CONVOLUTION where out channels = in channels
        # (model_builder.cc, Conv2DOperationParser); with more outputs it splits the conv
        # into one per group, which adds up the same products as a depthwise multiplier.
        return depthwise_with(cx, op, w.transpose(3, 1, 2, 0))
    group_slices = None
    if groups > 1 and i % 4 == 0 and (o // groups) % 4 == 0:
        group_slices = (i // 4, o // groups // 4)  # ConvGeneric's groups_support (conv_generic.cc)
    elif groups > 1:
        # Groups that do not fill whole slices: the delegate runs one conv per group
        # (ResolveGroupedConvolution); here one conv over block-diagonal weights, same sums.
        dense = np.zeros((o, kh, kw, c), np.float32)
        per = o // groups
        for g in range(groups):
            dense[g * per : (g + 1) * per, :, :, g * i : (g + 1) * i] = w[g * per : (g + 1) * per]
        w = dense
    return conv_with(cx, op, w, (o, kh, kw, int(w.shape[3])), group_slices)


def conv_with(
    cx: LowerContext,
    op: OpView,
    w: np.ndarray | int,
    w_shape: tuple[int, int, int, int],
    group_slices: tuple[int, int] | None,
) -> list[Launch]:
    """CONV_2D `op` with weights `w`: constant values, or a runtime tensor's index."""
    o, kh, kw, _ = w_shape
    opts = op.opts
    sh, sw, dh, dw = opts["stride_h"], opts["stride_w"], opts["dilation_h_factor"], opts["dilation_w_factor"]
    x, pad = cx.window_input(op.index, (kh, kw), (sh, sw), (dh, dw), opts["padding"])
    xs, ys = cx.shape(x), cx.shape(op.outputs[0])
    b = bias(cx, op.inputs[2] if len(op.inputs) > 2 else -1, o)
    out, epilogue = cx.epilogue(op.index)
    geometry = (kw, kh, sw, sh, dw, dh)
    dst = cx.buffers.tensor(out)
    one_window = tuple(pad.tolist()) == (0, 0) and layout.bhwc(ys)[1:3] == (1, 1) and layout.bhwc(xs)[1:3] == (kh, kw)
    if isinstance(w, np.ndarray) and group_slices is None and one_window:
        w, xs = window_as_channels(w), [layout.bhwc(xs)[0], 1, 1, layout.size(xs) // layout.bhwc(xs)[0]]
        geometry = (1, 1, 1, 1, 1, 1)
    src = x if x in cx.given else cx.buffers.tensor(x)  # a graph input as given: its index (conv_launch)
    return conv_launch(cx, op.index, src, w, b, dst, (xs, ys), geometry, pad, op.act, epilogue, group_slices)


def window_as_channels(w: np.ndarray) -> np.ndarray:
    """A conv whose window is its whole input (one output position: a model's last layers) as a
    1x1 conv over a 1x1 input of S*kh*kw slices, which is the same buffer read in its own order
    ([slice][y][x][lane]): the weights [O, kh, kw, C] rearranged to [O, 1, 1, S*kh*kw*4]. As a
    windowed conv its 4 columns per item computed 3 that do not exist: face_landmark's
    [1,1,1,1404] layer took 0.12-0.17 ms, as a 1x1 0.08."""
    o, kh, kw, c = w.shape
    s = layout.slices(c)
    padded = np.zeros((o, kh, kw, s * 4), np.float32)
    padded[..., :c] = w
    return padded.reshape(o, kh, kw, s, 4).transpose(0, 3, 1, 2, 4).reshape(o, 1, 1, s * kh * kw * 4)


def conv_launch(
    cx: LowerContext,
    oi: int,
    src: Any | int,
    w: np.ndarray | int,
    bias: np.ndarray,
    dst: Any,
    shapes: tuple[list[int], list[int]],
    geometry: tuple[int, ...],
    pad: Any,
    act: int,
    epilogue: Epilogue | None = None,
    group_slices: tuple[int, int] | None = None,
) -> list[Launch]:
    """A CONV_2D-shaped launch (conv.cl.j2): each work item holds `ob` output slices, and a
    1x1 conv with stride 1 and no padding runs as a matrix product over the H*W plane.
    `group_slices`: a grouped conv's (input, output) slices per group; `w` then holds one
    group's input channels. `w` as a tensor index: runtime weights, put in the kernel's
    order by a copy on the device each run (the delegate converts them with a kernel too).
    `src` as a tensor index: a graph input as the caller gives it (LowerContext.given), read so
    by conv_o's `_raw` kernels, else put in slices by a launch of its own first."""
    xs, ys = shapes
    kw, kh, sw, sh, dw, dh = geometry
    b, h, wd, c = layout.bhwc(ys)
    so = layout.slices(c)
    pointwise = (kw, kh, sw, sh) == (1, 1, 1, 1) and tuple(pad.tolist()) == (0, 0)
    pointwise = pointwise and layout.bhwc(xs)[1:3] == (h, wd)
    gs = group_slices or (layout.slices(layout.bhwc(xs)[3]), so)  # ungrouped: one group, ob as blocked
    ob, px = conv_blocking(cx.device.cpu, so, h * wd, b * h * wd * kw * kh * 4 * gs[0])
    while group_slices and gs[1] % ob:  # an item's output slices stay in one conv group
        ob //= 2
    groups = -(-so // ob)
    padded = np.zeros(groups * ob * 4, np.float32)
    padded[: len(bias)] = bias
    launches: list[Launch] = []
    windowed = (-(-wd // 4), h, b * groups)  # conv_o's items: 4 columns of one row, a block of slices
    lanes = min(32, 1 << max(h * wd - 1, 0).bit_length())  # a split 1x1's positions per group, adjacent in memory
    # The split kernels hold one output slice and position (1x1) or 4 columns (windowed) per
    # item; F16's sums keep the delegate's order, never split.
    splits = 1
    if ob == 1 and (px == 1 or not pointwise) and not cx.half_accum:
        if pointwise:
            splits = gpu_splits(cx.device, b * so * h * wd, gs[0], 1, lanes)
        else:
            splits = gpu_splits(cx.device, windowed[0] * h * b * groups, gs[0], kh * kw)
    raw = ""
    if isinstance(src, int):
        t, src = src, cx.given[src]
        if pointwise or splits > 1:
            launches.append(cx.input_slices(t, src))  # only conv_o has a `_raw` kernel
            src = cx.buffers.tensor(t)
        else:
            raw = f"#define RAW_C {layout.bhwc(xs)[3]}\n"
    if isinstance(w, int):
        weights, more = runtime_conv_weights(cx, oi, w, ob)
        launches += more
    else:
        weights = cx.buffers.weights(conv_weights(w, ob))
    bias_buffer = cx.buffers.upload(padded, writable=False)
    head = [src, weights, bias_buffer, dst, int4(layout.dims4(xs)), int4(layout.dims4(ys))]
    epilogue = epilogue or cx.steps([], [])
    tail, suffix = (epilogue.args, "_fused") if epilogue else ([], "")
    defines = epilogue.defines(act) if epilogue else ""
    if pointwise:
        args = [*head, np.int32(c), int2(*gs), np.int32(act)]
        if splits > 1:
            size = (-(-h * wd // lanes) * lanes, splits, b * groups)
            args += [opencl().LocalMemory(16 * lanes * splits), *tail]
            local = (lanes, splits, 1)
            return [*launches, cx.launch(oi, f"conv1x1_split{suffix}", args, size, defines, local)]
        grid = (-(-h * wd // px), b * groups)
        return [*launches, cx.launch(oi, f"conv1x1_o{ob}_p{px}{suffix}", args + tail, grid, defines)]
    zeros = cx.buffers.placeholder()  # four zeros: what a column outside the input reads
    shape_args = [np.int32(c), int2(*gs), int2(kw, kh), int2(sw, sh), int2(dw, dh), pad, np.int32(act), zeros]
    if splits > 1:
        args = [*head, *shape_args, opencl().LocalMemory(16 * 4 * splits), *tail]
        size, local = (windowed[0] * splits, h, b * groups), (splits, 1, 1)
        return [*launches, cx.launch(oi, f"conv_split{suffix}", args, size, defines, local)]
    name = f"conv_o{ob}{'_raw' if raw else ''}{suffix}"
    return [*launches, cx.launch(oi, name, head + shape_args + tail, windowed, raw + defines)]


LOWER = {"CONV_2D": conv2d}

"""Run a model's main subgraph on OpenCL the way the GPU delegate lays it out.

Lowering happens once: constants are folded or rearranged into kernel weights, data-moving
ops become copy maps, every tensor gets a device buffer in the sliced layout, and each op
becomes one kernel launch with its arguments bound. A run uploads the inputs, enqueues every
launch with no host round trip in between, and waits once. Quantized models run as the
delegate runs them: in float, with weights dequantized once and the int8 interface converted
at the edges (the quantized-to-float pass prepares the model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulint.executor import fusion, launch, layout, movement, program
from gpulint.executor.buffers import BufferPool, Buffers
from gpulint.executor.device import Device, select_device
from gpulint.executor.errors import DeviceError, ExecutorError, Unlowered
from gpulint.executor.fusion import Epilogue, FusionPlan
from gpulint.executor.graph import GraphView
from gpulint.executor.launch import Launch, Timing, float2, int2, int4
from gpulint.executor.opcodes import BINARY, CAST, REDUCE, UNARY, unary_code
from gpulint.executor.prepare import INT_TYPES, NUMPY, prepare
from gpulint.model import schema
from gpulint.model.ir import Model, Operator


@dataclass
class Executor:
    """`Executor(model).run(inputs)` -> outputs, in the order of the main subgraph's outputs."""

    source: Model
    device: Device | None = None
    precision: str = "fp32"
    keep_intermediates: bool = False  # one buffer per tensor, so `intermediates()` can read them all
    launches: list[Launch] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "fp16"):
            raise ExecutorError(f"precision must be fp32 or fp16, not {self.precision}")
        self.device = self.device or select_device()
        self.dtype = np.dtype(np.float16 if self.precision == "fp16" else np.float32)
        prepared = prepare(self.source, fusing=not self.keep_intermediates)
        self.model = prepared.model
        self.sg = self.model.subgraphs[0]
        self.edges_in = prepared.edges_in  # graph input -> (float tensor, quantization)
        self.edges_out = prepared.edges_out
        view = GraphView(self.model)
        plan = fusion.plan(view) if not self.keep_intermediates else FusionPlan()
        self.pool = None  # buffers reused by lifetime; with keep_intermediates one per tensor
        if not self.keep_intermediates:
            self.pool = BufferPool(view, prepared.host_side)
            for oi, (pad, _, _) in plan.pad_merges.items():  # the PAD's input is now read by the conv, later
                self.pool.reads_later(self.sg.operators[pad].inputs[0], oi)
        self.buffers = Buffers(self.device, self.dtype, view, self.pool)
        self.raw_inputs: dict[int, Any] = {}  # graph input -> its buffer as given (float, BHWC)
        self.input_launches: list[Launch] = []  # raw input -> slices, before `launches`
        _Lowering(self, view, plan).lower()

    # -- running ------------------------------------------------------------------------------

    def run(self, inputs: list[np.ndarray], profile: bool = False) -> list[np.ndarray]:
        """One inference. A device failure (out of memory, a lost device) is an ExecutorError
        that names the device and, for a kernel launch, the op."""
        import pyopencl as cl

        assert self.device is not None
        try:
            return self._run(inputs, profile)
        except cl.Error as e:
            raise ExecutorError(f"{self.device.describe()}: {e}") from None

    def _run(self, inputs: list[np.ndarray], profile: bool) -> list[np.ndarray]:
        import pyopencl as cl

        assert self.device is not None
        queue = self.device.queue
        if len(inputs) != len(self.sg.inputs):
            raise ExecutorError(f"the model takes {len(self.sg.inputs)} inputs, got {len(inputs)}")
        for t, x in zip(self.sg.inputs, inputs, strict=True):
            target, q = self.edges_in.get(t, (t, None))
            value = np.asarray(x, np.float32)
            if q is not None:  # an int8 interface: dequantized here, as the delegate does at the edge
                value = (value - q.zero_point[0]) * q.scale[0]
            shape = self.sg.tensors[target].shape
            if value.size != int(np.prod(shape)):
                raise ExecutorError(f"input {self.sg.tensors[t].name} has {value.size} values, not shape {shape}")
            cl.enqueue_copy(queue, self.raw_inputs[target], np.ascontiguousarray(value, np.float32))
        events = launch.enqueue(self.device, self.input_launches + self.launches)
        outputs = []
        for t in self.sg.outputs:
            source, q = self.edges_out.get(t, (t, None))
            shape = self.sg.tensors[source].shape
            host = np.empty(layout.size(shape), self.dtype)
            cl.enqueue_copy(queue, host, self.buffers.tensor(source))
            value = layout.from_slices(host.astype(np.float32), shape)
            kind = str(self.sg.tensors[t].type)
            if kind == "BOOL":
                value = value != 0
            elif kind in ("INT32", "INT64"):
                value = np.rint(value).astype(NUMPY[kind])
            if q is not None:
                int_type = INT_TYPES[str(self.sg.tensors[t].type)]
                info = np.iinfo(int_type)
                value = np.clip(np.round(value / q.scale[0]) + q.zero_point[0], info.min, info.max)
                value = value.astype(int_type)
            outputs.append(value)
        queue.finish()
        if profile:
            self.timings = launch.timings(self.input_launches + self.launches, events)
        return outputs

    def intermediates(self) -> dict[str, np.ndarray]:
        """After a run: every tensor an op wrote, by name, as float. Needs keep_intermediates
        (each tensor a buffer of its own, nothing overwritten). For finding the first op that diverges."""
        import pyopencl as cl

        assert self.device is not None
        if not self.keep_intermediates:
            raise ExecutorError("intermediates() needs an Executor made with keep_intermediates=True")
        out: dict[str, np.ndarray] = {}
        for op in self.sg.operators:
            for t in op.outputs:
                name = self.sg.tensors[t].name or f"tensor {t}"
                if t not in self.buffers.tensors or name in out:
                    continue
                shape = self.sg.tensors[t].shape
                host = np.empty(layout.size(shape), self.dtype)
                cl.enqueue_copy(self.device.queue, host, self.buffers.tensors[t])
                out[name] = layout.from_slices(host.astype(np.float32), shape)
        return out


def _whole_slices(
    dst_off: np.ndarray, src_off: np.ndarray, dst_shape: list[int], src_shape: list[int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """An element copy as float4 slice copies (dst slice, src slice), when every destination
    slice it touches takes its lanes in place from one source slice, and any lane the element
    copy leaves out is a padding lane on both sides (zero, so copying it changes nothing).
    Spatial PAD, SLICE, TRANSPOSE of H/W and channel-aligned CONCATENATION are such copies."""
    if not len(dst_off):
        return None
    source = np.full(layout.size(dst_shape), -1, np.int64)  # the source of each dst float
    source[dst_off] = src_off
    lanes = source.reshape(-1, 4)
    touched = np.flatnonzero((lanes >= 0).any(axis=1))
    lanes = lanes[touched]
    present = lanes >= 0
    if np.any(present & (lanes % 4 != np.arange(4))):
        return None
    slices = np.where(present, lanes // 4, -1).max(axis=1)
    if np.any(present & (lanes // 4 != slices[:, None])):
        return None
    if not present.all():
        dst_real = np.zeros(layout.size(dst_shape), bool)
        dst_real[layout.offsets(dst_shape)] = True
        src_real = np.zeros(layout.size(src_shape), bool)
        src_real[layout.offsets(src_shape)] = True
        g, missing_lane = np.nonzero(~present)
        if dst_real[touched[g] * 4 + missing_lane].any() or src_real[slices[g] * 4 + missing_lane].any():
            return None
    return touched, slices


def _matmul_shape(s: list[int]) -> list[int]:
    """[B0, B1, M, K] as BHWC: rank 3 [B, M, K] is stored as (B, 1, M, K), rank 2 needs a copy."""
    if len(s) == 4:
        return list(s)
    if len(s) == 3:
        return [s[0], 1, s[1], s[2]]
    return [1, 1, *s]


def _same_pad(in_size: int, out_size: int, kernel: int, stride: int, dilation: int, padding: str) -> int:
    if padding != "SAME":
        return 0
    effective = (kernel - 1) * dilation + 1
    return max((out_size - 1) * stride + effective - in_size, 0) // 2


def _pads(
    xs: list[int],
    ys: list[int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    padding: str,
) -> Any:
    """The (x, y) leading padding of a windowed op on NHWC shapes, as an int2 argument.
    `kernel`, `stride` and `dilation` are (h, w), as TFLite's options give them."""
    return int2(
        _same_pad(xs[2], ys[2], kernel[1], stride[1], dilation[1], padding),
        _same_pad(xs[1], ys[1], kernel[0], stride[0], dilation[0], padding),
    )


def conv_blocking(cpu: bool, out_slices: int, positions: int) -> tuple[int, int]:
    """Output slices and (for 1x1 convs) positions per work item. On a CPU device, as many as
    fill its vector registers: fewer slices on narrow outputs, which would waste lanes; 8 slices
    (two float16 accumulators per position) measured no faster on AVX-512. On a GPU one of
    each, so that a small layer still has work items for every core: with the CPU's blocking a
    64x64x48 layer was 1536 items on an H100 that runs 270,000 threads at once."""
    if not cpu:
        return 1, 1
    return (4 if out_slices >= 4 else 2 if out_slices >= 2 else 1), (8 if positions > 1 else 1)


class _Lowering:
    def __init__(self, ex: Executor, view: GraphView, plan: FusionPlan) -> None:
        self.ex = ex
        self.model, self.sg = ex.model, ex.sg
        self.view, self.plan, self.buffers = view, plan, ex.buffers
        assert ex.device is not None
        self.device, self.half = ex.device, ex.precision == "fp16"
        self.missing: dict[str, str] = {}
        self.unlowered: list[tuple[list[str], str, str]] = []  # (output names, op, reason) per op

    def name(self, op: Operator) -> str:
        return self.view.name(op)

    def shape(self, t: int) -> list[int]:
        return self.view.shape(t)

    def const(self, t: int) -> np.ndarray | None:
        return self.view.const(t)

    def float_const(self, t: int) -> np.ndarray | None:
        return self.view.float_const(t)

    def launch(self, oi: int, kernel: str, args: list[Any], size: tuple[int, ...], defines: str = "") -> None:
        name = "+".join(self.name(self.sg.operators[i]) for i in [oi, *self.plan.chains.get(oi, [])])  # CONV_2D+ADD
        self.ex.launches.append(launch.bind(self.device, self.half, oi, name, kernel, args, size, defines))

    def window_input(
        self, oi: int, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int], padding: str
    ) -> tuple[int, Any]:
        """The input tensor of windowed op `oi` and its leading (x, y) padding: a merged
        PAD's input, with the PAD's padding added, when plan_pad_merges merged one."""
        op = self.sg.operators[oi]
        x = op.inputs[0]
        pad = _pads(self.shape(x), self.shape(op.outputs[0]), kernel, stride, dilation, padding)
        if oi in self.plan.pad_merges:
            pad_op, top, left = self.plan.pad_merges[oi]
            x = self.sg.operators[pad_op].inputs[0]
            pad = int2(int(pad["x"]) + left, int(pad["y"]) + top)
        return x, pad

    def epilogue(self, oi: int) -> tuple[int, Epilogue | None]:
        """The tensor op `oi`'s kernel writes (the last fused op's output) and the steps its
        `_fused` kernel runs (`steps`); an unused step points at a placeholder buffer it never
        reads."""
        out, steps = fusion.fused_steps(self.view, self.plan, oi)
        args: list[Any] = []
        for step in steps:
            if step.operand is None:
                operand = self.buffers.placeholder()
            elif isinstance(step.operand, int):
                operand = self.buffers.tensor(step.operand)
            else:
                operand = self.buffers.upload(step.operand, writable=False)
            args += [np.float32(step.param), operand]
        return out, self.steps([step.code for step in steps], args)

    def steps(self, codes: list[tuple[int, int, int, int]], args: list[Any], plain: bool = True) -> Epilogue | None:
        """A `_fused` kernel's steps, unused ones padded. On a CPU device every conv runs its
        `_fused` kernel, with its activation compiled in: plain kernels, which take it as an
        argument, measured slower there (see conv.cl.j2). On a GPU, None when nothing is fused
        and the kernel has a `plain` form: a `_fused` one would add a pass over the output."""
        if not codes and plain and program.epilogue_loop(self.device):
            return None
        while len(args) < 4:
            args += [np.float32(0.0), self.buffers.placeholder()]
        return Epilogue(codes, args)

    def input_launch(self, t: int) -> None:
        """Graph input `t` arrives as the caller gives it (float, BHWC) in a buffer of its own,
        and a kernel puts it in slices, as the delegate converts its inputs on the GPU. On the
        host (pad, transpose, convert, copy) that took 0.3 ms of a 1.9 ms hand_recrop run. Its
        launch is op -1 in the timings."""
        shape = self.shape(t)
        try:
            raw = self.ex.raw_inputs[t] = self.buffers.raw(4 * int(np.prod(shape)))
            args = [raw, self.buffers.tensor(t), int4(layout.dims4(shape)), np.int32(layout.bhwc(shape)[3])]
        except DeviceError as e:
            raise DeviceError(f"input {self.sg.tensors[t].name}: {e}") from None
        grid = launch.grid(shape, 8)
        ln = launch.bind(self.device, self.half, -1, "input to slices", "input_to_slices", args, grid)
        self.ex.input_launches.append(ln)

    def lower(self) -> None:
        for t in self.sg.inputs:
            self.input_launch(self.ex.edges_in.get(t, (t, None))[0])
        absorbed = self.plan.absorbed
        for oi, op in enumerate(self.sg.operators):
            name = self.name(op)
            if name == "DEQUANTIZE" and op.inputs[0] in self.ex.edges_in:
                continue
            if name == "QUANTIZE" and op.outputs and op.outputs[0] in self.ex.edges_out:
                continue
            if oi in absorbed:  # runs inside its producer's kernel
                self.buffers.release_after(oi)
                continue
            try:
                self.lower_op(oi, op, name)
            except DeviceError as e:  # not a gap in the executor: the device refused
                raise DeviceError(f"op {oi} {name}: {e}") from None
            except (movement.Unsupported, ExecutorError) as e:
                self.missing.setdefault(name, str(e))
                self.unlowered.append(([self.sg.tensors[t].name or "" for t in op.outputs], name, str(e)))
            self.buffers.release_after(oi)
        if self.missing:
            items = "; ".join(f"{k} ({v})" if v != k else k for k, v in sorted(self.missing.items()))
            raise Unlowered(f"the executor cannot run: {items}", self.unlowered)

    def lower_op(self, oi: int, op: Operator, name: str) -> None:
        opts = op.builtin_options.values if op.builtin_options is not None else {}
        act = schema.enum_value("ActivationFunctionType", opts.get("fused_activation_function", "NONE"))
        handler: Callable[..., None] | None = {
            "CONV_2D": self.conv2d,
            "FULLY_CONNECTED": self.fully_connected,
            "DEPTHWISE_CONV_2D": self.depthwise,
            "AVERAGE_POOL_2D": self.pool,
            "MAX_POOL_2D": self.pool,
            "SOFTMAX": self.softmax,
            "RESIZE_BILINEAR": self.resize,
            "RESIZE_NEAREST_NEIGHBOR": self.resize,
            "TRANSPOSE_CONV": self.transpose_conv,
            "Convolution2DTransposeBias": self.transpose_conv,
            "BATCH_MATMUL": self.batch_matmul,
            "CUMSUM": self.cumsum,
            "LSTM": self.lstm,
        }.get(name)
        if handler is not None:
            handler(oi, op, opts, act)
        elif name == "CAST":
            self.cast(oi, op)
        elif name in UNARY:
            self.unary(oi, op, unary_code(name, opts), float(opts.get("alpha", 0.0)))
        elif name in BINARY:
            self.binary(oi, op, BINARY[name], act)
        elif name in REDUCE:
            self.reduce(oi, op, REDUCE[name], bool(opts.get("keep_dims", False)))
        elif name in movement.MOVEMENT_OPS:
            if act:
                raise ExecutorError(f"{name} with a fused activation")
            self.move(oi, op, name, opts)
        else:
            raise ExecutorError(name)

    # -- compute ops --------------------------------------------------------------------------

    def conv_weights(self, w: np.ndarray, ob: int) -> np.ndarray:
        """[O, kh, kw, I] -> [G][kh][kw][Si * 4 inputs][ob * 4 outputs], G = ceil(So / ob)."""
        o, kh, kw, i = w.shape
        g, si = -(-layout.slices(o) // ob), layout.slices(i)
        p = np.zeros((g * ob * 4, kh, kw, si * 4), np.float32)
        p[:o, :, :, :i] = w
        return p.reshape(g, ob * 4, kh, kw, si * 4).transpose(0, 2, 3, 4, 1).ravel()

    def bias(self, t: int, channels: int) -> np.ndarray:
        b = np.zeros(layout.slices(channels) * 4, np.float32)
        value = self.float_const(t) if t >= 0 else None
        if t >= 0 and value is None:
            raise ExecutorError("a runtime bias")
        if value is not None:
            b[:channels] = value.ravel()
        return b

    def conv2d(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        c = (self.shape(op.inputs[0]) or [1])[-1]
        value = self.float_const(op.inputs[1])
        if value is None:  # runtime weights: the delegate takes them when they are not grouped (model_builder.cc)
            shape = self.shape(op.inputs[1])
            if len(shape) != 4 or shape[3] != c:
                raise ExecutorError("runtime weights of a grouped conv")
            self.conv_with(oi, op, opts, act, op.inputs[1], (shape[0], shape[1], shape[2], shape[3]), None)
            return
        w: np.ndarray = value
        o, kh, kw, i = w.shape
        groups = c // i if i and c % i == 0 else 0
        if not groups or o % groups:
            raise ExecutorError(f"a filter of {i} input channels on {c} channels")
        if groups > 1 and i == 1:
            # The delegate runs it as DEPTHWISE_CONVOLUTION where out channels = in channels
            # (model_builder.cc, Conv2DOperationParser); with more outputs it splits the conv
            # into one per group, which adds up the same products as a depthwise multiplier.
            self.depthwise(oi, op, opts, act, w.transpose(3, 1, 2, 0))
            return
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
        self.conv_with(oi, op, opts, act, w, (o, kh, kw, int(w.shape[3])), group_slices)

    def conv_with(
        self,
        oi: int,
        op: Operator,
        opts: dict[str, Any],
        act: int,
        w: np.ndarray | int,
        w_shape: tuple[int, int, int, int],
        group_slices: tuple[int, int] | None,
    ) -> None:
        """CONV_2D `op` with weights `w`: constant values, or a runtime tensor's index."""
        o, kh, kw, _ = w_shape
        sh, sw, dh, dw = opts["stride_h"], opts["stride_w"], opts["dilation_h_factor"], opts["dilation_w_factor"]
        x, pad = self.window_input(oi, (kh, kw), (sh, sw), (dh, dw), opts["padding"])
        xs, ys = self.shape(x), self.shape(op.outputs[0])
        bias = self.bias(op.inputs[2] if len(op.inputs) > 2 else -1, o)
        out, epilogue = self.epilogue(oi)
        geometry = (kw, kh, sw, sh, dw, dh)
        dst = self.buffers.tensor(out)
        self.conv_launch(oi, self.buffers.tensor(x), w, bias, dst, (xs, ys), geometry, pad, act, epilogue, group_slices)

    def conv_launch(
        self,
        oi: int,
        src: Any,
        w: np.ndarray | int,
        bias: np.ndarray,
        dst: Any,
        shapes: tuple[list[int], list[int]],
        geometry: tuple[int, ...],
        pad: Any,
        act: int,
        epilogue: Epilogue | None = None,
        group_slices: tuple[int, int] | None = None,
    ) -> None:
        """A CONV_2D-shaped launch (conv.cl.j2): each work item holds `ob` output slices, and a
        1x1 conv with stride 1 and no padding runs as a matrix product over the H*W plane.
        `group_slices`: a grouped conv's (input, output) slices per group; `w` then holds one
        group's input channels. `w` as a tensor index: runtime weights, put in the kernel's
        order by a copy on the device each run (the delegate converts them with a kernel too)."""
        xs, ys = shapes
        kw, kh, sw, sh, dw, dh = geometry
        b, h, wd, c = layout.bhwc(ys)
        so = layout.slices(c)
        pointwise = (kw, kh, sw, sh) == (1, 1, 1, 1) and tuple(pad.tolist()) == (0, 0)
        pointwise = pointwise and layout.bhwc(xs)[1:3] == (h, wd)
        ob, px = conv_blocking(self.device.cpu, so, h * wd)
        gs = group_slices or (layout.slices(layout.bhwc(xs)[3]), so)  # ungrouped: one group, ob as blocked
        while group_slices and gs[1] % ob:  # an item's output slices stay in one conv group
            ob //= 2
        groups = -(-so // ob)
        padded = np.zeros(groups * ob * 4, np.float32)
        padded[: len(bias)] = bias
        if isinstance(w, int):
            weights = self.runtime_weights(oi, w, ob)
        else:
            weights = self.buffers.upload(self.conv_weights(w, ob), writable=False)
        head = [
            src,
            weights,
            self.buffers.upload(padded, writable=False),
            dst,
            int4(layout.dims4(xs)),
            int4(layout.dims4(ys)),
        ]
        epilogue = epilogue or self.steps([], [])
        tail, suffix = (epilogue.args, "_fused") if epilogue else ([], "")
        defines = epilogue.defines(act) if epilogue else ""
        if pointwise:
            grid = (-(-h * wd // px), b * groups)
            args = [*head, np.int32(c), int2(*gs), np.int32(act), *tail]
            self.launch(oi, f"conv1x1_o{ob}_p{px}{suffix}", args, grid, defines)
            return
        shape_args = [np.int32(c), int2(*gs), int2(kw, kh), int2(sw, sh), int2(dw, dh), pad, np.int32(act)]
        self.launch(oi, f"conv_o{ob}{suffix}", head + shape_args + tail, (-(-wd // 4), h, b * groups), defines)

    def runtime_weights(self, oi: int, t: int, ob: int) -> Any:
        """A buffer in conv_weights' order that a copy fills from runtime tensor `t` [O, kh, kw, I]."""
        shape = self.shape(t)
        n = int(np.prod(shape))
        if n >= 1 << 24:  # conv_weights' float32 holds the element numbers exactly below 2^24
            raise ExecutorError("runtime weights of 2^24 elements or more")
        order = self.conv_weights(np.arange(1, n + 1, dtype=np.float32).reshape(shape), ob)  # 0: padding
        dst_off = np.flatnonzero(order)
        src_off = layout.offsets(shape)[order[dst_off].astype(np.int64) - 1]
        packed = self.buffers.upload(np.zeros(order.size), writable=True)
        self.copy_pairs(oi, self.buffers.tensor(t), packed, dst_off, src_off)
        return packed

    def fully_connected(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        x, y = op.inputs[0], op.outputs[0]
        w = self.float_const(op.inputs[1])
        if w is None:
            self.runtime_fully_connected(oi, op, act)
            return
        o, i = w.shape
        rows = int(np.prod(self.shape(x))) // i
        src = self.buffers.tensor(x)
        if self.shape(x) != [rows, i]:
            src = self.reshaped(oi, x, [rows, i])
        dst_shape = [rows, o]
        dst = self.buffers.tensor(y) if self.shape(y) == dst_shape else self.buffers.scratch(dst_shape)
        bias = self.bias(op.inputs[2] if len(op.inputs) > 2 else -1, o)
        shapes = ([rows, i], dst_shape)
        self.conv_launch(oi, src, w.reshape(o, 1, 1, i), bias, dst, shapes, (1, 1, 1, 1, 1, 1), int2(0, 0), act)
        if self.shape(y) != dst_shape:
            self.copy_map(
                oi,
                [(dst, dst_shape)],
                self.buffers.tensor(y),
                self.shape(y),
                [np.arange(rows * o).reshape(self.shape(y))],
            )

    def runtime_fully_connected(self, oi: int, op: Operator, act: int) -> None:
        """Weights that are an activation (onnx2tf's unfolded BATCH_MATMUL): the delegate makes
        it a CONVOLUTION_2D with runtime weights, then a RESHAPE to the output's shape
        (model_builder.cc, FullyConnectedOperationParser); here the matmul kernel with the
        weights read transposed, the same sums per output."""
        x, wt, y = op.inputs[0], op.inputs[1], op.outputs[0]
        if len(self.shape(wt)) != 2:
            raise ExecutorError("runtime weights of rank other than 2")
        o, i = self.shape(wt)
        rows = int(np.prod(self.shape(x))) // i if i else 0
        bias = self.bias(op.inputs[2] if len(op.inputs) > 2 else -1, o)
        self.matmul(oi, (x, [1, 1, rows, i]), (wt, [1, 1, o, i]), (y, [1, 1, rows, o]), (0, 1), bias, act)

    def depthwise(
        self, oi: int, op: Operator, opts: dict[str, Any], act: int, weights: np.ndarray | None = None
    ) -> None:
        """DEPTHWISE_CONV_2D, or a CONV_2D with one input channel per group (`weights` then
        its filter as a depthwise one, [1, kh, kw, O])."""
        y = op.outputs[0]
        w = self.float_const(op.inputs[1]) if weights is None else weights
        if w is None:  # runtime weights, which the delegate takes (model_builder.cc): laid out by a copy
            shape = self.shape(op.inputs[1])
            if len(shape) != 4 or shape[0] != 1:
                raise ExecutorError("runtime weights not of shape [1, kh, kw, C]")
            _, kh, kw, c = shape
            cp = layout.slices(c) * 4
            dst = (np.arange(kh * kw)[:, None] * cp + np.arange(c)[None, :]).ravel()
            wbuf = self.buffers.upload(np.zeros(kh * kw * cp))
            self.copy_pairs(oi, self.buffers.tensor(op.inputs[1]), wbuf, dst, layout.offsets(shape))
        else:
            _, kh, kw, c = w.shape
            wp = np.zeros((kh, kw, layout.slices(c) * 4), np.float32)
            wp[:, :, :c] = w[0]
            wbuf = self.buffers.upload(wp.ravel(), writable=False)
        sh, sw, dh, dw = opts["stride_h"], opts["stride_w"], opts["dilation_h_factor"], opts["dilation_w_factor"]
        x, pad = self.window_input(oi, (kh, kw), (sh, sw), (dh, dw), opts["padding"])
        xs, ys = self.shape(x), self.shape(y)
        bias = self.bias(op.inputs[2] if len(op.inputs) > 2 else -1, c)
        head = [self.buffers.tensor(x), wbuf, self.buffers.upload(bias, writable=False)]
        window = [int2(kw, kh), int2(sw, sh), int2(dw, dh), pad]
        if xs[-1] == ys[-1]:  # multiplier 1: blocked over 8 output columns and 1 or 2 rows
            out, epilogue = self.epilogue(oi)
            epilogue = epilogue or self.steps([], [])
            dims = [int4(layout.dims4(xs)), int4(layout.dims4(ys)), np.int32(ys[-1])]
            args = [
                *head,
                self.buffers.tensor(out),
                *dims,
                *window,
                np.int32(act),
                *(epilogue.args if epilogue else []),
            ]
            rows = 2 if (sh, dh) == (1, 1) else 1  # two rows share input rows
            columns, height, planes = launch.grid(ys, 8)
            registers = f"_k{kw}s{sw}" if kw in (3, 5) and sw in (1, 2) and dw == 1 else ""  # see depthwise.cl.j2
            kernel = f"depthwise_x8_r{rows}{registers}" + ("_fused" if epilogue else "")
            defines = epilogue.defines(act) if epilogue else ""
            self.launch(oi, kernel, args, (columns, -(-height // rows), planes), defines)
            return
        multiplier = ys[-1] // xs[-1]  # as the delegate reads it: from the shapes, not the option
        dims = [int4(layout.dims4(xs)), np.int32(xs[-1]), int4(layout.dims4(ys)), np.int32(ys[-1])]
        args = [*head, self.buffers.tensor(y), *dims, *window, np.int32(multiplier), np.int32(act)]
        self.launch(oi, "depthwise_conv2d", args, launch.grid(ys))

    def transpose_conv(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        if self.name(op) == "TRANSPOSE_CONV":
            w_t, x, bias_t = op.inputs[1], op.inputs[2], (op.inputs[3] if len(op.inputs) > 3 else -1)
            sh, sw, padding = opts["stride_h"], opts["stride_w"], opts["padding"]
        else:  # Convolution2DTransposeBias: [input, weights, bias], TfLiteTransposeConvParams in custom options
            import struct

            x, w_t, bias_t = op.inputs[0], op.inputs[1], op.inputs[2]
            raw = bytes(op.custom_options or b"")
            if len(raw) < 12:
                raise ExecutorError("Convolution2DTransposeBias without its parameters")
            pad_code, sw, sh = struct.unpack_from("<3i", raw)
            padding = "SAME" if pad_code == 1 else "VALID"
        w = self.float_const(w_t)
        if w is None:
            raise ExecutorError("runtime weights")
        y = op.outputs[0]
        xs, ys = self.shape(x), self.shape(y)
        out, epilogue = self.epilogue(oi)
        epilogue = epilogue or self.steps([], [], plain=False)  # one kernel, with steps or none
        assert epilogue is not None
        o, kh, kw, i = w.shape
        pad_h = max((xs[1] - 1) * sh + kh - ys[1], 0) // 2 if padding == "SAME" else 0
        pad_w = max((xs[2] - 1) * sw + kw - ys[2], 0) // 2 if padding == "SAME" else 0
        self.launch(
            oi,
            "transpose_conv",
            [
                self.buffers.tensor(x),
                self.buffers.upload(self.conv_weights(w, 1), writable=False),  # as CONV_2D's, one output slice
                self.buffers.upload(self.bias(bias_t, o), writable=False),
                self.buffers.tensor(out),
                int4(layout.dims4(xs)),
                np.int32(i),
                int4(layout.dims4(ys)),
                np.int32(o),
                int2(kw, kh),
                int2(sw, sh),
                int2(pad_w, pad_h),
                *epilogue.args,
            ],
            launch.grid(ys, 8),
            epilogue.defines(act),
        )

    def batch_matmul(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        """Batch dims aligned as numpy aligns them (leading 1s to the output's rank), 1s broadcast."""
        a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
        rank = len(self.shape(y))
        if any(len(self.shape(t)) < 2 or len(self.shape(t)) > rank for t in (a, b)) or rank > 4:
            raise ExecutorError("BATCH_MATMUL of rank other than 2-4")

        def canonical(t: int) -> list[int]:
            return _matmul_shape([1] * (rank - len(self.shape(t))) + list(self.shape(t)))

        adj = (int(bool(opts.get("adj_x"))), int(bool(opts.get("adj_y"))))
        n = self.shape(y)[-1]
        self.matmul(oi, (a, canonical(a)), (b, canonical(b)), (y, canonical(y)), adj, np.zeros(n, np.float32), act)

    def matmul(
        self,
        oi: int,
        a: tuple[int, list[int]],
        b: tuple[int, list[int]],
        y: tuple[int, list[int]],
        adj: tuple[int, int],
        bias: np.ndarray,
        act: int,
    ) -> None:
        """The batch_matmul kernel on tensors viewed as 4-D [B, H, M, K] (each `(tensor, view)`);
        a tensor whose layout is not its view's goes through a copy."""
        bufs = []
        for t, view in (a, b):
            if layout.bhwc(self.shape(t)) == tuple(view):
                bufs.append(self.buffers.tensor(t))
            elif (value := self.float_const(t)) is not None:
                bufs.append(self.buffers.upload(layout.to_slices(value.reshape(view), view), writable=False))
            else:
                bufs.append(self.reshaped(oi, t, view))
        t_y, ys = y
        direct = layout.bhwc(self.shape(t_y)) == tuple(ys)
        dst = self.buffers.tensor(t_y) if direct else self.buffers.scratch(ys)
        padded = np.zeros(layout.slices(ys[3]) * 4, np.float32)
        padded[: bias.size] = bias.ravel()
        k = a[1][2] if adj[0] else a[1][3]
        args = [bufs[0], bufs[1], self.buffers.upload(padded, writable=False), dst]
        args += [int4(layout.dims4(a[1])), int4(layout.dims4(b[1])), int4(layout.dims4(ys)), np.int32(ys[3])]
        args += [np.int32(k), np.int32(adj[0]), np.int32(adj[1]), np.int32(act)]
        self.launch(oi, "batch_matmul", args, (ys[2], ys[1], ys[0] * layout.slices(ys[3])))
        if not direct:
            n = int(np.prod(ys))
            self.copy_map(
                oi, [(dst, ys)], self.buffers.tensor(t_y), self.shape(t_y), [np.arange(n).reshape(self.shape(t_y))]
            )

    def unary(self, oi: int, op: Operator, code: int, param: float) -> None:
        x, y = op.inputs[0], op.outputs[0]
        if layout.bhwc(self.shape(x)) != layout.bhwc(self.shape(y)):
            raise ExecutorError("an elementwise op whose output shape differs from its input")
        self.launch(
            oi,
            "unary",
            [
                self.buffers.tensor(x),
                self.buffers.tensor(y),
                int4(layout.dims4(self.shape(y))),
                np.int32(self.shape(y)[-1] if self.shape(y) else 1),
                np.float32(param),
            ],
            launch.grid(self.shape(y), 8),
            f"#define OP {code}\n",
        )

    def lstm(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        """LSTM with the basic kernel (the one the delegate runs): the gates are a
        FULLY_CONNECTED over [input, previous activation], then one kernel for the cell."""
        if opts.get("kernel_type") != "BASIC" or len(op.inputs) != 5 or len(op.outputs) < 2:
            raise ExecutorError("LSTM other than the basic kernel (5 inputs)")
        if opts.get("cell_clip") or opts.get("proj_clip") or opts.get("fused_activation_function") != "TANH":
            raise ExecutorError("LSTM with clipping or an activation other than TANH")
        x, h, wt, bias_t, c = op.inputs
        w = self.float_const(wt)
        if w is None:
            raise ExecutorError("runtime weights")
        rows, i = layout.bhwc(self.shape(x))[0], self.shape(x)[-1]
        units = self.shape(h)[-1]
        # [input, previous activation] side by side: output 2 when the model has it
        joined_shape = [rows, i + units]
        joined = self.buffers.tensor(op.outputs[2]) if len(op.outputs) > 2 else self.buffers.scratch(joined_shape)
        b, j = np.meshgrid(np.arange(rows), np.arange(i + units), indexing="ij")
        index = np.where(j < i, b * i + j, rows * i + b * units + (j - i))
        self.copy_map(
            oi,
            [(self.buffers.tensor(x), self.shape(x)), (self.buffers.tensor(h), self.shape(h))],
            joined,
            joined_shape,
            [index],
        )
        gates_shape = [rows, 4 * units]
        gates = self.buffers.tensor(op.outputs[3]) if len(op.outputs) > 3 else self.buffers.scratch(gates_shape)
        bias = self.bias(bias_t, 4 * units)
        geometry = (1, 1, 1, 1, 1, 1)
        self.conv_launch(
            oi,
            joined,
            w.reshape(4 * units, 1, 1, i + units),
            bias,
            gates,
            (joined_shape, gates_shape),
            geometry,
            int2(0, 0),
            0,
        )
        state_shape = [rows, units]
        args = [gates, self.buffers.tensor(c), self.buffers.tensor(op.outputs[0]), self.buffers.tensor(op.outputs[1])]
        args += [int4(layout.dims4(gates_shape)), int4(layout.dims4(state_shape)), np.int32(units)]
        self.launch(oi, "lstm_cell", args, (layout.slices(units), rows))

    def cast(self, oi: int, op: Operator) -> None:
        target = str(self.sg.tensors[op.outputs[0]].type)
        if target not in CAST or str(self.sg.tensors[op.inputs[0]].type) not in CAST:
            raise ExecutorError("CAST other than between FLOAT32, INT32 and BOOL")
        self.unary(oi, op, CAST[target], 0.0)  # -1: FLOAT32 holds any value as it is

    def operand(self, oi: int, t: int, rank: int) -> tuple[Any, list[int]]:
        """A binary op's input in the layout of the output's rank (numpy's leading-1 alignment)."""
        s = self.shape(t)
        aligned = [1] * (rank - len(s)) + list(s)
        if layout.bhwc(aligned) == layout.bhwc(s) or not s:
            return self.buffers.tensor(t), aligned
        value = self.float_const(t)
        if value is not None:
            return self.buffers.upload(layout.to_slices(value.reshape(aligned), aligned)), aligned
        return self.reshaped(oi, t, aligned), aligned

    def binary(self, oi: int, op: Operator, code: int, act: int) -> None:
        y = op.outputs[0]
        ys = self.shape(y)
        (ab, a_s), (bb, b_s) = (self.operand(oi, t, len(ys)) for t in op.inputs[:2])
        ad, bd = layout.bhwc(a_s), layout.bhwc(b_s)
        self.launch(
            oi,
            "binary",
            [
                ab,
                bb,
                self.buffers.tensor(y),
                int4(layout.dims4(a_s)),
                np.int32(ad[3]),
                int4(layout.dims4(b_s)),
                np.int32(bd[3]),
                int4(layout.dims4(ys)),
                np.int32(layout.bhwc(ys)[3]),
            ],
            launch.grid(ys, 8),
            f"#define OP {code}\n#define ACT {act}\n",
        )

    def pool(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        x, y = op.inputs[0], op.outputs[0]
        xs, ys = self.shape(x), self.shape(y)
        kh, kw, sh, sw = opts["filter_height"], opts["filter_width"], opts["stride_h"], opts["stride_w"]
        pad = _pads(xs, ys, (kh, kw), (sh, sw), (1, 1), opts["padding"])
        self.launch(
            oi,
            "pool2d",
            [
                self.buffers.tensor(x),
                self.buffers.tensor(y),
                int4(layout.dims4(xs)),
                int4(layout.dims4(ys)),
                np.int32(ys[-1]),
                int2(kw, kh),
                int2(sw, sh),
                pad,
                np.int32(self.name(op) == "MAX_POOL_2D"),
                np.int32(act),
            ],
            launch.grid(ys, 8),
        )

    def reduce(self, oi: int, op: Operator, code: int, keep_dims: bool) -> None:
        x, y = op.inputs[0], op.outputs[0]
        xs = self.shape(x)
        axes_value = self.const(op.inputs[1])
        if axes_value is None:
            raise ExecutorError("runtime axes")
        flags = [0, 0, 0, 0]
        for a in axes_value.ravel():
            flags[layout.bhwc_axis(len(xs), int(a))] = 1
        b, h, w, c = layout.bhwc(xs)
        kept = [1 if flags[0] else b, 1 if flags[1] else h, 1 if flags[2] else w, 1 if flags[3] else c]
        same = layout.bhwc(self.shape(y)) == tuple(kept)
        dst = self.buffers.tensor(y) if same else self.buffers.scratch(kept)
        self.launch(
            oi,
            "reduce",
            [
                self.buffers.tensor(x),
                dst,
                int4(layout.dims4(xs)),
                np.int32(c),
                int4(layout.dims4(kept)),
                np.int32(kept[3]),
                int4(flags),
                np.int32(code),
            ],
            launch.grid(kept),
        )
        if not same:
            n = int(np.prod(kept))
            self.copy_map(
                oi, [(dst, kept)], self.buffers.tensor(y), self.shape(y), [np.arange(n).reshape(self.shape(y))]
            )

    def cumsum(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        x, y = op.inputs[0], op.outputs[0]
        axis = self.const(op.inputs[1])
        if axis is None:
            raise ExecutorError("CUMSUM with a runtime axis")
        xs = self.shape(x)
        args = [
            self.buffers.tensor(x),
            self.buffers.tensor(y),
            int4(layout.dims4(xs)),
            np.int32(layout.bhwc(xs)[3]),
            np.int32(layout.bhwc_axis(len(xs), int(axis.ravel()[0]))),
            np.int32(bool(opts.get("exclusive", False))),
            np.int32(bool(opts.get("reverse", False))),
        ]
        self.launch(oi, "cumsum", args, launch.grid(xs))

    def softmax(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        x, y = op.inputs[0], op.outputs[0]
        b, h, w, c = layout.bhwc(self.shape(x))
        self.launch(
            oi,
            "softmax",
            [
                self.buffers.tensor(x),
                self.buffers.tensor(y),
                int4(layout.dims4(self.shape(x))),
                np.int32(c),
                np.float32(opts.get("beta", 1.0)),
            ],
            (w, h, b),
        )

    def resize(self, oi: int, op: Operator, opts: dict[str, Any], act: int) -> None:
        x, y = op.inputs[0], op.outputs[0]
        xs, ys = self.shape(x), self.shape(y)
        align, half = bool(opts.get("align_corners")), bool(opts.get("half_pixel_centers"))

        def scale(i: int, o: int) -> float:
            return (i - 1) / (o - 1) if align and o > 1 else i / o

        self.launch(
            oi,
            "resize",
            [
                self.buffers.tensor(x),
                self.buffers.tensor(y),
                int4(layout.dims4(xs)),
                int4(layout.dims4(ys)),
                np.int32(ys[-1]),
                float2(scale(xs[2], ys[2]), scale(xs[1], ys[1])),
                np.int32(self.name(op) == "RESIZE_BILINEAR"),
                np.int32(align),
                np.int32(half),
            ],
            (-(-layout.bhwc(ys)[2] // 8), layout.bhwc(ys)[1], layout.bhwc(ys)[0] * -(-layout.slices(ys[-1]) // 4)),
        )

    # -- data movement -----------------------------------------------------------------------

    def move(self, oi: int, op: Operator, name: str, opts: dict[str, Any]) -> None:
        data: list[np.ndarray | None] = []
        consts: list[np.ndarray | None] = []
        sources: list[tuple[Any, list[int]]] = []
        base = 0
        for i, t in enumerate(op.inputs):
            value = self.const(t) if t >= 0 else None
            if t < 0 or i in movement.PARAMS.get(name, ()):
                data.append(None)
                consts.append(value)
                continue
            n = int(np.prod(self.shape(t))) if self.shape(t) else 1
            data.append(np.arange(base, base + n).reshape(self.shape(t)))
            consts.append(value)
            sources.append((self.buffers.tensor(t), self.shape(t)))
            base += n
        results = movement.apply(name, data, consts, opts, [self.shape(t) for t in op.outputs])
        fill = 0.0
        if name == "PADV2" and len(op.inputs) > 2 and (value := self.const(op.inputs[2])) is not None:
            fill = float(value.ravel()[0])
        for t, res in zip(op.outputs, results, strict=True):
            self.copy_map(oi, sources, self.buffers.tensor(t), self.shape(t), [res], fill)

    def reshaped(self, oi: int, t: int, shape: list[int]) -> Any:
        """A copy of runtime tensor `t` laid out as `shape` (same elements, another rank)."""
        dst = self.buffers.scratch(shape)
        n = int(np.prod(self.shape(t))) if self.shape(t) else 1
        self.copy_map(oi, [(self.buffers.tensor(t), self.shape(t))], dst, shape, [np.arange(n).reshape(shape)])
        return dst

    def copy_map(
        self,
        oi: int,
        sources: list[tuple[Any, list[int]]],
        dst: Any,
        dst_shape: list[int],
        results: list[np.ndarray],
        fill: float = 0.0,
    ) -> None:
        """Launch copies so that element e of `dst` gets global source index results[0][e]."""
        res = results[0].ravel().astype(np.int64)
        dst_off = layout.offsets(dst_shape)
        base = 0
        for buf, shape in sources:
            n = int(np.prod(shape)) if shape else 1
            mask = (res >= base) & (res < base + n)
            if mask.any():
                src_off = layout.offsets(shape)[res[mask] - base]
                whole = _whole_slices(dst_off[mask], src_off, dst_shape, shape)
                if whole is not None:
                    self.copy_pairs(oi, buf, dst, *whole, kernel="copy_slices")
                else:
                    self.copy_pairs(oi, buf, dst, dst_off[mask], src_off)
            base += n
        pad = res < 0
        if pad.any() and fill != 0.0:  # PADV2's constant: copied from a one-value buffer
            one = self.buffers.upload(np.array([fill]), writable=False)
            self.copy_pairs(oi, one, dst, dst_off[pad], np.zeros(int(pad.sum()), np.int32))

    def copy_pairs(
        self, oi: int, src: Any, dst: Any, dst_off: np.ndarray, src_off: np.ndarray, kernel: str = "copy_pairs"
    ) -> None:
        n = len(dst_off)
        self.launch(
            oi,
            kernel,
            [src, dst, self.buffers.index(dst_off), self.buffers.index(src_off), np.int32(n)],
            (-(-n // 16),),
        )

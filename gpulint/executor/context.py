"""What an op's lowering is handed: the graph view, the fusion plan, the buffers and the
device. An op lowering reads these and returns its launches; it never reaches the Executor."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulint.executor import fusion, layout, program
from gpulint.executor.buffers import Buffers
from gpulint.executor.device import Device
from gpulint.executor.errors import ExecutorError
from gpulint.executor.fusion import Epilogue, FusionPlan
from gpulint.executor.graph import GraphView
from gpulint.executor.launch import Launch, grid, int2, int4, new_launch


@dataclass
class LowerContext:
    view: GraphView
    plan: FusionPlan
    buffers: Buffers
    device: Device
    half: bool  # tensors stored as half
    half_accum: bool = False  # conv sums rounded to half at each step (F16): their order is the delegate's
    # Graph inputs a conv may read as the caller gives them (float BHWC, at most 4 channels),
    # each in its own buffer: the conv takes it as is, or converts it first (input_slices).
    given: dict[int, Any] = field(default_factory=dict)

    def shape(self, t: int) -> list[int]:
        return self.view.shape(t)

    def const(self, t: int) -> np.ndarray | None:
        return self.view.const(t)

    def float_const(self, t: int) -> np.ndarray | None:
        return self.view.float_const(t)

    def input_slices(self, t: int, raw: Any) -> Launch:
        """The launch that puts graph input `t`, as given in buffer `raw`, into its sliced buffer,
        as the delegate converts its inputs on the GPU (op -1 in the timings)."""
        shape = self.shape(t)
        args = [raw, self.buffers.tensor(t), int4(layout.dims4(shape)), np.int32(layout.bhwc(shape)[3])]
        return new_launch(self.device, -1, "input to slices", "input_to_slices", args, grid(shape, 8))

    def launch(
        self,
        oi: int,
        kernel: str,
        args: list[Any],
        size: tuple[int, ...],
        defines: str = "",
        local: tuple[int, ...] | None = None,
    ) -> Launch:
        """Kernel `kernel` bound for op `oi`, named for the op and the ops fused into it (CONV_2D+ADD)."""
        ops = self.view.sg.operators
        name = "+".join(self.view.name(ops[i]) for i in [oi, *self.plan.chains.get(oi, [])])
        return new_launch(self.device, oi, name, kernel, args, size, defines, local)

    def window_input(
        self, oi: int, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int], padding: str
    ) -> tuple[int, Any]:
        """The input tensor of windowed op `oi` and its leading (x, y) padding: a merged
        PAD's input, with the PAD's padding added, when the fusion plan merged one."""
        op = self.view.sg.operators[oi]
        x = op.inputs[0]
        pad = pads(self.shape(x), self.shape(op.outputs[0]), kernel, stride, dilation, padding)
        if oi in self.plan.pad_merges:
            pad_op, top, left = self.plan.pad_merges[oi]
            x = self.view.sg.operators[pad_op].inputs[0]
            pad = int2(int(pad["x"]) + left, int(pad["y"]) + top)
        return x, pad

    def epilogue(self, oi: int, plain: bool = True) -> tuple[int, Epilogue | None]:
        """The tensor op `oi`'s kernel writes (the last fused op's output) and the steps its
        `_fused` kernel runs (`steps`; `plain`: the kernel has a form without them); an unused
        step points at a placeholder buffer it never reads."""
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
        return out, self.steps([step.code for step in steps], args, plain)

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


def same_pad(in_size: int, out_size: int, kernel: int, stride: int, dilation: int, padding: str) -> int:
    if padding != "SAME":
        return 0
    effective = (kernel - 1) * dilation + 1
    return max((out_size - 1) * stride + effective - in_size, 0) // 2


def check_window(
    xs: list[int],
    ys: list[int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    padding: str,
) -> None:
    """Refuse a window whose output is not the size TFLite computes from its input and options
    (ComputeOutSize): the kernels index the input from the output, so a damaged file's stride of
    1868783461 beside the output it had before read far outside the input (a crash under a memory
    limit, garbage without one). The op then runs on the CPU, as any op the executor refuses."""
    if len(xs) != 4 or len(ys) != 4:
        raise ExecutorError(f"a window from rank {len(xs)} to rank {len(ys)}: NHWC (rank 4) both")
    for axis, name in ((1, "height"), (2, "width")):
        size, out, k, s, d = xs[axis], ys[axis], kernel[axis - 1], stride[axis - 1], dilation[axis - 1]
        if s < 1 or d < 1 or (k - 1) * d >= 2**31 - size:
            raise ExecutorError(f"a window of stride {s} and dilation {d} over a kernel of {k}")
        effective = (k - 1) * d + 1
        want = -(-size // s) if padding == "SAME" else -(-(size - effective + 1) // s)
        if out != want:
            raise ExecutorError(
                f"an output {name} of {out} where {padding} padding with stride {s} and dilation {d} gives {want}"
            )


def pads(
    xs: list[int],
    ys: list[int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int],
    padding: str,
) -> Any:
    """The (x, y) leading padding of a windowed op on NHWC shapes, as an int2 argument.
    `kernel`, `stride` and `dilation` are (h, w), as TFLite's options give them."""
    check_window(xs, ys, kernel, stride, dilation, padding)
    return int2(
        same_pad(xs[2], ys[2], kernel[1], stride[1], dilation[1], padding),
        same_pad(xs[1], ys[1], kernel[0], stride[0], dilation[0], padding),
    )

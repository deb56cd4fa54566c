"""Kernel launches: a Launch is one kernel with its arguments bound, made once at lowering; a
run enqueues them all with no host round trip in between (as tinygrad's program call and the
delegate's queue do), and reads their profiling events back as timings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpulint.executor import guard, layout, program, warmup
from gpulint.executor.device import Device, opencl
from gpulint.executor.errors import DeviceError, ExecutorError
from gpulint.executor.precision import Precision


@dataclass
class Launch:
    op_index: int  # -1: a graph input's conversion
    op: str  # the op's name; a fused group's names joined by + (CONV_2D+ADD)
    kernel: str
    args: list[Any]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None = None  # None: the driver picks
    defines: str = ""  # compiled in ahead of the kernel: a fused conv's steps, an elementwise op
    bound: Any = None  # a cl.Kernel of its own with the arguments set (bind_all), so a run only enqueues


@dataclass
class Timing:
    op_index: int
    op: str
    seconds: float


def int2(a: int, b: int) -> Any:
    from pyopencl import cltypes

    return cltypes.make_int2(a, b)  # type: ignore[attr-defined]  # generated at import


def int4(v: Any) -> Any:
    from pyopencl import cltypes

    return cltypes.make_int4(*[int(x) for x in v])  # type: ignore[attr-defined]


def float2(a: float, b: float) -> Any:
    from pyopencl import cltypes

    return cltypes.make_float2(a, b)  # type: ignore[attr-defined]


def new_launch(
    device: Device,
    op_index: int,
    op: str,
    kernel: str,
    args: list[Any],
    size: tuple[int, ...],
    defines: str = "",
    local: tuple[int, ...] | None = None,
) -> Launch:
    """A launch, bound later with all the others (bind_all). On a CPU device, work groups of
    one item: every kernel already does a block of outputs per item, and PoCL compiles a kernel
    once per work-group size, so letting it choose sizes by grid compiled each kernel several
    times: pose_detection's cold start was 19-20 s against 9-10 s this way, for the same warm
    latency (within 5% on every MediaPipe model). A GPU needs many items per group: its driver
    chooses, unless the kernel needs a group of its own (`local`: a work-group reduction)."""
    if local is None and device.cpu:
        local = (1,) * len(size)
    return Launch(op_index, op, kernel, args, size, local, defines)


def bind_all(device: Device, mode: Precision, launches: list[Launch], early: warmup.Early | None = None) -> None:
    """Each launch's kernel, built with all the others the model needs at once (program.kernels),
    with its arguments set. On PoCL a larger model's kernels are compiled first, in two processes
    at once (warmup.py; `early`: what warmup.early_start started)."""
    while True:
        try:
            warmup.compile_ahead(device, mode, launches, early)
            break
        except guard.Crash as crash:  # kept as known bad: the next try takes another flavour, or says none is left
            guard.record(device, crash.flavour, program.kernel_source(crash.flavour), False, crash.reason)
            guard.note_fallback(device, crash)
            early = None
    makers = program.kernels(device, mode, [(ln.kernel, ln.defines) for ln in launches])
    cl = opencl()
    for ln in launches:
        try:
            ln.bound = makers[(ln.kernel, ln.defines)]()
        except cl.Error as e:  # a driver that builds a program without all its kernels: the device's fault, not an op's
            raise DeviceError(f"{device.describe()}: the built program has no kernel {ln.kernel} ({e})") from None
        ln.bound.set_args(*ln.args)


def grid(shape: list[int], columns: int = 1) -> tuple[int, int, int]:
    """One work item per `columns` adjacent output columns of one slice."""
    b, h, w, c = layout.bhwc(shape)
    return (-(-w // columns), h, b * layout.slices(c))


def enqueue(device: Device, launches: list[Launch], queue: Any) -> list[Any]:
    """Every launch, in order, on `queue` (the device's plain or profiling queue); their events. A
    launch the driver refuses is an ExecutorError naming its op and kernel."""
    cl = opencl()
    events = []
    for ln in launches:
        try:
            events.append(cl.enqueue_nd_range_kernel(queue, ln.bound, ln.global_size, ln.local_size))
        except cl.Error as e:
            where = f"op {ln.op_index} {ln.op}" if ln.op_index >= 0 else ln.op  # -1: an input's conversion
            where += f" (kernel {ln.kernel})"
            raise ExecutorError(f"{device.describe()}: {where} failed to launch: {e}") from None
    return events


def timings(launches: list[Launch], events: list[Any]) -> list[Timing]:
    """Each launch's time on the device, from its profiling event (after the queue finished)."""
    return [
        Timing(ln.op_index, ln.op, (e.profile.end - e.profile.start) * 1e-9)
        for ln, e in zip(launches, events, strict=True)
    ]

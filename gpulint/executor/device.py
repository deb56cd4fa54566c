"""Which OpenCL device to use, and what it is.

The default is the first GPU of any platform, else the first device at all, which on a
machine without a GPU is PoCL from `pocl-binary-distribution`. `GPULINT_CL_DEVICE` (or the
`device` argument) picks another: `platform:device` indices (`0:1`) or a case-insensitive
substring of the device or platform name (`nvidia`, `pthread`). Building gpulint's kernels
for the device is program.py's part.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpulint.executor.errors import ExecutorError


@dataclass
class Device:
    context: Any
    queue: Any
    device: Any
    # A second queue that records each launch's start and end, for the per-op times only: NVIDIA's
    # driver takes 5-10 us more per launch on it (H100: face_detection_short_range 1.37 ms a run
    # on a profiling queue, 0.98 ms on a plain one), so a plain run never uses it.
    profiling: Any

    @property
    def name(self) -> str:
        return str(self.device.name).strip()

    @property
    def driver(self) -> str:
        return f"{str(self.device.platform.name).strip()} {str(self.device.driver_version).strip()}"

    @property
    def cpu(self) -> bool:
        """A CPU device (PoCL's pthread), where each work item already loops over a block."""
        return bool(self.device.type & opencl().device_type.CPU)

    @property
    def fp16(self) -> bool:
        return "cl_khr_fp16" in self.device.extensions

    @property
    def converts_half(self) -> bool:
        """A CPU device whose compiler turns half <-> float vector conversions into the CPU's own
        instructions (F16C on x86, any 64-bit ARM) instead of library calls. PoCL compiles for the
        host's CPU, so the host's flags are the device's."""
        return self.cpu and host_converts_half()

    def describe(self) -> str:
        return f"{self.name} ({self.driver})"


@cache
def host_converts_half() -> bool:
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags"))
    except (OSError, StopIteration):
        return False  # not Linux, or no flags: the integer conversions, which work everywhere
    return "f16c" in flags.split()


def opencl() -> Any:
    """The pyopencl module, or an ExecutorError saying why it cannot be had."""
    try:
        import pyopencl
    except Exception as e:  # a broken install: an error message, not a traceback
        raise ExecutorError(f"OpenCL is not usable here: pyopencl failed to load ({e})") from None
    return pyopencl


def cache_dir() -> Path:
    """Where compiled kernels are kept between processes: gpulint's program binaries, and PoCL's
    own cache under pocl/. One folder a CI job can keep (README: "Kernel cache")."""
    return Path(os.environ.get("GPULINT_CACHE_DIR", Path.home() / ".cache" / "gpulint" / "kernels")).expanduser()


def select_device(spec: str | None = None) -> Device:
    # PoCL reads POCL_CACHE_DIR when it first lists its devices, so this goes before that.
    os.environ.setdefault("POCL_CACHE_DIR", str(cache_dir() / "pocl"))
    cl = opencl()
    spec = spec if spec is not None else os.environ.get("GPULINT_CL_DEVICE")
    try:
        platforms = cl.get_platforms()
        candidates = [(pi, di, p, d) for pi, p in enumerate(platforms) for di, d in enumerate(p.get_devices())]
    except Exception as e:
        raise ExecutorError(f"no OpenCL platform could be listed: {e}") from None
    if not candidates:
        raise ExecutorError("no OpenCL device found (install pocl-binary-distribution for a CPU device)")
    chosen = None
    if spec:
        if ":" in spec and all(part.isdigit() for part in spec.split(":", 1)):
            want = tuple(int(v) for v in spec.split(":", 1))
            chosen = next((c for c in candidates if (c[0], c[1]) == want), None)
        else:
            chosen = next((c for c in candidates if spec.lower() in f"{c[3].name} {c[2].name}".lower()), None)
        if chosen is None:
            names = "; ".join(f"{pi}:{di} {d.name.strip()} ({p.name.strip()})" for pi, di, p, d in candidates)
            raise ExecutorError(f"no OpenCL device matches `{spec}`; devices: {names}")
    else:
        gpus = [c for c in candidates if c[3].type & cl.device_type.GPU]
        chosen = gpus[0] if gpus else candidates[0]
    return _open(chosen[3])


_OPENED: dict[Any, Device] = {}


def _open(device: Any) -> Device:
    """One context and queue per device per process, reused by every later select_device: NVIDIA's
    OpenCL refuses a process its 102nd context (OUT_OF_HOST_MEMORY, measured on an H100), built
    programs hold their context, and a `report --verify` over many models asked for one each."""
    if device not in _OPENED:
        cl = opencl()
        try:
            context = cl.Context([device])
            queue = cl.CommandQueue(context)
            profiling = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        except Exception as e:
            raise ExecutorError(f"cannot open {device.name.strip()}: {e}") from None
        _OPENED[device] = Device(context, queue, device, profiling)
    return _OPENED[device]

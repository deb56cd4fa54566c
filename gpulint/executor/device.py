"""Which OpenCL device to use, and what it is.

The default choice, said out loud in `Device.why`: the first GPU of any platform; else, among
CPU devices, the newest PoCL (the pip `pocl-binary-distribution`, Debian's `pocl-opencl-icd`,
...: a newer PoCL brings a newer LLVM, which knows this CPU better); ties by listing order. A
device this machine has recorded as failing (`mark_failed`, by `gpulint doctor`'s self-test)
is passed over while another exists. `GPULINT_CL_DEVICE` (or the `device` argument) picks
another: `platform:device` indices (`0:1`) or a case-insensitive substring of the device or
platform name (`nvidia`, `pthread`). Building gpulint's kernels for the device is program.py's
part.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpulint.atomic import write_atomic
from gpulint.cache import cache_dir
from gpulint.executor.errors import ExecutorError

# OpenCL's CL_DEVICE_TYPE bits (cl.h), so that choosing needs no pyopencl (and takes fake devices).
GPU, CPU = 1 << 2, 1 << 1

# (platform index, device index, platform, device), as pyopencl lists them
Candidate = tuple[int, int, Any, Any]


@dataclass
class Device:
    context: Any
    queue: Any
    device: Any
    # A second queue that records each launch's start and end, for the per-op times only: NVIDIA's
    # driver takes 5-10 us more per launch on it (H100: face_detection_short_range 1.37 ms a run
    # on a profiling queue, 0.98 ms on a plain one), so a plain run never uses it.
    profiling: Any
    why: str = ""  # why this device: the default choice's reason, or the spec that asked for it

    @property
    def name(self) -> str:
        return str(self.device.name).strip()

    @property
    def driver(self) -> str:
        return f"{str(self.device.platform.name).strip()} {str(self.device.driver_version).strip()}"

    @property
    def llvm(self) -> str | None:
        return llvm_version(str(self.device.platform.version))

    @property
    def llvm_target(self) -> str | None:
        return llvm_target(str(self.device.version))

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

    def info(self) -> dict[str, str]:
        """What a result says of the device it ran on (verify's JSON)."""
        return {"name": self.name, "driver": self.driver, "why": self.why}


@cache
def host_converts_half() -> bool:
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return True
    return "f16c" in host_cpu()[1]


@cache
def host_cpu() -> tuple[str, set[str]]:
    """This machine's CPU model name and flags from /proc/cpuinfo; ("", set()) where there is
    none (not Linux)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "", set()
    fields: dict[str, str] = {}
    for line in lines:  # the first core's: every core says the same
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields.get("model name", ""), set(fields.get("flags", fields.get("Features", "")).split())


def pocl_version(platform_version: str) -> tuple[int, ...] | None:
    """PoCL's version from its platform version ("OpenCL 3.0 PoCL 3.0-rc2  Linux, ...": (3, 0, 0, 0)),
    a release above its release candidates (3.1 > 3.1-rc2); None for another platform."""
    m = re.search(r"\bPoCL (\d+(?:\.\d+)*)(-rc\d*)?", platform_version)
    if m is None:
        return None
    numbers = [int(v) for v in m.group(1).split(".")][:3]
    return (*numbers, *[0] * (3 - len(numbers)), 0 if m.group(2) else 1)


def llvm_version(platform_version: str) -> str | None:
    """The LLVM a platform compiles with, where its version says ("..., LLVM 15.0.6, ...")."""
    m = re.search(r"\bLLVM (\d+(?:\.\d+)*)", platform_version)
    return m.group(1) if m else None


def llvm_target(device_version: str) -> str | None:
    """The CPU that LLVM compiles for, where the device version says: PoCL's "HSTR:
    pthread-x86_64-unknown-linux-gnu-znver3" -> znver3 (the whole HSTR where the triple is not
    a familiar one)."""
    m = re.search(r"HSTR:\s*(\S+)", device_version)
    if m is None:
        return None
    cpu = re.search(r"-(?:linux-gnu\w*|linux-android\w*|linux|darwin[\d.]*|windows-\w+)-(\S+)$", m.group(1))
    return cpu.group(1) if cpu else m.group(1)


def opencl() -> Any:
    """The pyopencl module, or an ExecutorError saying why it cannot be had."""
    try:
        import pyopencl
    except Exception as e:  # a broken install: an error message, not a traceback
        raise ExecutorError(f"OpenCL is not usable here: pyopencl failed to load ({e})") from None
    return pyopencl


def devices() -> list[Candidate]:
    """Every OpenCL device of every platform, as listed; an ExecutorError where there is none."""
    # PoCL reads POCL_CACHE_DIR when it first lists its devices, so this goes before that.
    os.environ.setdefault("POCL_CACHE_DIR", str(cache_dir() / "pocl"))
    cl = opencl()
    try:
        found = [(pi, di, p, d) for pi, p in enumerate(cl.get_platforms()) for di, d in enumerate(p.get_devices())]
    except Exception as e:
        raise ExecutorError(f"no OpenCL platform could be listed: {e}") from None
    if not found:
        raise ExecutorError("no OpenCL device found (install pocl-binary-distribution for a CPU device)")
    return found


def index(candidate: Candidate) -> str:
    return f"{candidate[0]}:{candidate[1]}"


def match(candidates: list[Candidate], spec: str) -> Candidate:
    """The device `spec` names: `platform:device`, or part of the device or platform name."""
    if ":" in spec and all(part.isdigit() for part in spec.split(":", 1)):
        want = tuple(int(v) for v in spec.split(":", 1))
        chosen = next((c for c in candidates if (c[0], c[1]) == want), None)
    else:
        chosen = next((c for c in candidates if spec.lower() in f"{c[3].name} {c[2].name}".lower()), None)
    if chosen is None:
        names = "; ".join(f"{index(c)} {c[3].name.strip()} ({c[2].name.strip()})" for c in candidates)
        raise ExecutorError(f"no OpenCL device matches `{spec}`; devices: {names}")
    return chosen


def choose(candidates: list[Candidate]) -> tuple[Candidate, str]:
    """The default device and why: a GPU first; else the newest PoCL among CPU devices (then
    other CPU devices, then the rest); ties by listing order. Devices recorded as failing here
    are passed over while another remains."""
    failing = [c for c in candidates if failed(c[3]) is not None]
    usable = [c for c in candidates if c not in failing] or candidates
    skipped = ""
    if failing and len(usable) < len(candidates):
        skipped = f"; passed over {', '.join(index(c) for c in failing)}, recorded failing here"
    elif failing:
        skipped = "; every device is recorded failing here"
    if len(candidates) == 1:
        return candidates[0], "the only OpenCL device" + skipped
    gpus = [c for c in usable if c[3].type & GPU]
    if gpus:
        return gpus[0], f"a GPU, first of {len(gpus)}" + skipped
    cpus = [c for c in usable if c[3].type & CPU]
    if not cpus:
        return usable[0], f"the first of {len(usable)} devices, none a GPU or CPU" + skipped
    # max() keeps the first of equals, so ties go by listing order; a PoCL before any other CPU runtime.
    best = max(cpus, key=lambda c: (1, *version) if (version := pocl_version(str(c[2].version))) else (0,))
    m = re.search(r"\bPoCL (\d+(?:\.\d+)*(?:-rc\d*)?)", str(best[2].version))
    if m is None:
        return best, f"the first of {len(cpus)} CPU devices" + skipped
    llvm = llvm_version(str(best[2].version))
    said = f"{m.group(1)}, LLVM {llvm.split('.')[0]}" if llvm else m.group(1)
    if len(cpus) == 1:
        return best, f"PoCL ({said}), the only CPU device" + skipped
    return best, f"the newest PoCL ({said}) of {len(cpus)} CPU devices" + skipped


def select_device(spec: str | None = None) -> Device:
    from_env = spec is None and bool(os.environ.get("GPULINT_CL_DEVICE"))
    spec = spec if spec is not None else os.environ.get("GPULINT_CL_DEVICE")
    candidates = devices()
    if spec:
        chosen, why = match(candidates, spec), f"GPULINT_CL_DEVICE={spec}" if from_env else f"asked for `{spec}`"
    else:
        chosen, why = choose(candidates)
    opened = _open(chosen[3])
    # One Device per device per process (below), so its `why` is the latest selection's.
    opened.why = why
    return opened


# -- devices that failed here ---------------------------------------------------------------------


def _failure_path(device: Any) -> Path:
    """A device's record: one file per platform, device, driver and host CPU, so that a new
    driver or a machine with the same cache folder and another CPU starts without one."""
    p = device.platform
    key = "\0".join(str(v).strip() for v in (p.name, p.version, device.name, device.driver_version, host_cpu()[0]))
    return cache_dir() / "failed-devices" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def mark_failed(device: Any, reason: str) -> None:
    """Record that the (pyopencl) `device` failed here, and why (best effort: a cache folder
    that cannot be written only loses the record)."""
    record = {"device": str(device.name).strip(), "driver": str(device.driver_version).strip(), "reason": reason}
    with contextlib.suppress(OSError):
        path = _failure_path(device)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, [json.dumps(record).encode()])


def clear_failed(device: Any) -> None:
    with contextlib.suppress(OSError):
        _failure_path(device).unlink()


def failed(device: Any) -> str | None:
    """Why `device` was recorded failing here, or None."""
    try:
        return str(json.loads(_failure_path(device).read_text())["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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

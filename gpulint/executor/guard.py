"""Which kernel flavour a device compiles without crashing, learnt once per machine and kept.

PoCL runs LLVM inside the process that builds a program, so a compiler crash (an LLVM ERROR's
abort, a segmentation fault) would end gpulint with a signal. The pip PoCL 3.0 (LLVM 14) did
exactly that on AVX-512 hosts it does not know by name, and a program it compiled could load back
from its cache without its kernels (issue #36). So the first time a flavour (program.Flavour) is
used with a driver, a CPU and a kernel source, its programs are compiled in child processes and
loaded back in another (warmup.compile_ahead); the outcome is kept in the cache folder
(`flavours/`), good or bad. A flavour known bad is not used again: `choose` takes the next of
`candidates`, and when none is left the error names the device, its driver and the way out.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from gpulint.atomic import write_atomic
from gpulint.cache import cache_dir
from gpulint.executor.device import Device, host_cpu, mark_failed
from gpulint.executor.errors import DeviceError, ExecutorError
from gpulint.executor.flavour import Flavour


class Crash(ExecutorError):
    """Compiling or loading back `flavour`'s programs failed in a child process: `reason` says how."""

    def __init__(self, flavour: Flavour, reason: str) -> None:
        super().__init__(reason)
        self.flavour = flavour
        self.reason = reason


def candidates(base: Flavour) -> list[Flavour]:
    """`base`, then what a CPU device can fall back to, each with less of its own code: half
    vectors converted by integer arithmetic instead of F16C's instructions, then the GPU's form
    (vload_half, fused steps in a loop). All compute the same values (tests/test_kernels.py)."""
    ordered = [base, base._replace(f16c=False), base._replace(f16c=False, epilogue_loop=True)]
    return [f for i, f in enumerate(ordered) if f not in ordered[:i]]


def _record(device: Device, flavour: Flavour, source: str) -> Path:
    """The record of `flavour` (its kernel `source`, as program.kernel_source renders it) on this
    device, driver and host CPU: a new gpulint, driver or machine learns again."""
    platform = device.device.platform
    name, flags = host_cpu()
    key = "\0".join(
        [
            str(platform.name),
            str(platform.version),
            device.name,
            device.driver,
            name,
            " ".join(sorted(flags)),
            repr(flavour),
            source,
        ]
    )
    return cache_dir() / "flavours" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def known(device: Device, flavour: Flavour, source: str) -> bool | None:
    """True: this flavour's programs compiled and loaded back on this device before; False: they
    crashed or came back without their kernels; None: not tried yet."""
    try:
        return bool(json.loads(_record(device, flavour, source).read_text())["ok"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def reason(device: Device, flavour: Flavour, source: str) -> str:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return str(json.loads(_record(device, flavour, source).read_text())["reason"])
    return ""


def record(device: Device, flavour: Flavour, source: str, ok: bool, why: str = "") -> None:
    """Keep the outcome; a record that cannot be written is learnt again next time."""
    path = _record(device, flavour, source)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, [json.dumps({"ok": ok, "reason": why, "flavour": repr(flavour)}).encode()])


def choose(device: Device, base: Flavour, source: Callable[[Flavour], str]) -> Flavour:
    """The first of `base`'s candidates not known bad on this device (`source`: a flavour's kernel
    source, program.kernel_source)."""
    options = candidates(base)
    for flavour in options:
        if known(device, flavour, source(flavour)) is not False:
            return flavour
    message = no_flavour_left(device, reason(device, options[0], source(options[0])))
    mark_failed(device.device, message)  # the default choice passes it over from now on, while another is present
    raise DeviceError(message)  # the device's, not an op's: verify stops


def no_flavour_left(device: Device, why: str) -> str:
    platform = " ".join(str(device.device.platform.version).split())
    return (
        f"gpulint's kernels crash the OpenCL compiler of {device.name} ({platform}) in every form it has: "
        f"{why}. Way out: another driver (Debian's PoCL: `apt-get install pocl-opencl-icd`; `gpulint doctor` "
        "lists the devices, GPULINT_CL_DEVICE or --device picks one), or --precision fp32; remove "
        f"{cache_dir() / 'flavours'} to try this one again"
    )


def note_fallback(device: Device, crash: Crash) -> None:
    """One line on stderr: the user sees that a fallback happened and why, not a traceback."""
    print(f"gpulint: note: {device.name}: {crash.reason}; trying another kernel form", file=sys.stderr)

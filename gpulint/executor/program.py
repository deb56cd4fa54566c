"""gpulint's kernels as programs for one device: the source (prelude with opcodes.py's
numbers as #defines, then kernels/*.cl*), one program per kernel, built once and kept on disk.

The kernels are shape-agnostic (shapes are arguments), so one source serves every model. It
is built per device, driver, precision and source; each binary is kept in `GPULINT_CACHE_DIR`
(default ~/.cache/gpulint/kernels), keyed by all of those, so a second process loads it
instead of compiling.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from gpulint.atomic import write_atomic
from gpulint.executor import opcodes
from gpulint.executor.device import Device, opencl
from gpulint.executor.errors import ExecutorError

PRELUDE = "prelude.cl.j2"


def kernel_files() -> list[str]:
    """The kernel files, by name: each op family's kernels in a file of its own (conv.cl.j2,
    depthwise.cl.j2, elementwise.cl, ...). Every program holds the helpers of all of them (see
    kernel_sources), so their order does not matter."""
    folder = resources.files("gpulint").joinpath("kernels")
    names = [f.name for f in folder.iterdir() if f.name.endswith((".cl", ".cl.j2")) and f.name != PRELUDE]
    return sorted(names)


@cache
def kernel_source(half: bool, fp16_extension: bool = False, epilogue_loop: bool = False) -> str:
    """All kernels, tensors stored as half or float. Half storage needs no cl_khr_fp16: OpenCL C
    lets any device read and write half buffers with vload_half/vstore_half, and the kernels
    compute in float either way. `epilogue_loop`: fused conv kernels run their fused steps in
    one loop after the stores instead of at each unrolled store (see conv.cl.j2)."""
    folder = resources.files("gpulint").joinpath("kernels")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    prelude = env.from_string(folder.joinpath(PRELUDE).read_text("utf-8"))
    header = prelude.render(
        half=half, fp16_extension=half and fp16_extension, epilogue_loop=epilogue_loop, opcodes=opcodes.defines()
    )
    parts = [header]
    for name in kernel_files():  # templates unroll kernel variants (conv.cl.j2: blockings)
        text = folder.joinpath(name).read_text("utf-8")
        parts.append(env.from_string(text).render(epilogue_loop=epilogue_loop) if name.endswith(".j2") else text)
    return "\n".join(parts)


def epilogue_loop(device: Device) -> bool:
    """Fused steps in a loop on GPUs, inline on CPU devices: inline runs faster on PoCL, and
    compiles 20-50x slower on NVIDIA's OpenCL (conv.cl.j2 has the numbers)."""
    return not device.cpu


def cache_dir() -> Path:
    return Path(os.environ.get("GPULINT_CACHE_DIR", Path.home() / ".cache" / "gpulint" / "kernels"))


_KERNEL = re.compile(r"^__kernel void (\w+)\(", re.MULTILINE)


@cache
def kernel_sources(half: bool, fp16_extension: bool = False, epilogue_loop: bool = False) -> dict[str, str]:
    """One program source per kernel: everything that is not a kernel (prelude, helper
    functions, macros) and that kernel. Built as one program, the 35 kernels of the time took
    PoCL 9.4 s to compile; a model uses a handful, and only those are built."""
    source = kernel_source(half, fp16_extension, epilogue_loop)
    spans = []
    for match in _KERNEL.finditer(source):
        end = source.index("\n}\n", match.start()) + 3
        spans.append((match.group(1), match.start(), end))
    shared, last = [], 0
    for _, start, end in spans:
        shared.append(source[last:start])
        last = end
    shared.append(source[last:])
    common = "".join(shared)
    return {name: common + "\n" + source[start:end] for name, start, end in spans}


_PROGRAMS: dict[tuple[int, bool, bool, str, str], Any] = {}


def kernel(device: Device, half: bool, name: str, defines: str = "") -> Any:
    """A cl.Kernel of gpulint's kernel `name` built for `device`, with `defines` (a fused
    kernel's steps) ahead of its source: from memory, else from the on-disk cache of program
    binaries (keyed by device, driver, source and build options), else compiled."""
    looped = epilogue_loop(device)
    key = (id(device.context), half, looped, name, defines)
    if key not in _PROGRAMS:
        sources = kernel_sources(half, device.fp16, looped)
        if name not in sources:
            raise ExecutorError(f"no kernel named {name}")
        _PROGRAMS[key] = _build(device, defines + sources[name])
    return opencl().Kernel(_PROGRAMS[key], name)


def _build(device: Device, source: str) -> Any:
    cl = opencl()
    options = "-cl-std=CL1.2"
    digest = hashlib.sha256(
        "\0".join([device.name, device.driver, str(device.device.version), source, options]).encode()
    ).hexdigest()[:32]
    path = cache_dir() / f"{digest}.bin"
    if path.exists():
        try:
            return cl.Program(device.context, [device.device], [path.read_bytes()]).build(options)
        except Exception:
            pass  # a stale or foreign binary: build from source below
    try:
        built = cl.Program(device.context, source).build(options)
    except Exception as e:
        raise ExecutorError(f"the kernels failed to build on {device.describe()}: {str(e)[-2000:]}") from None
    with contextlib.suppress(Exception):  # a binary we cannot save is compiled again next time
        binary = built.get_info(cl.program_info.BINARIES)[0]
        if binary:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, [binary])
    return built

"""gpulint's kernels as programs for one device: the source (prelude with opcodes.py's
numbers as #defines, then kernels/*.cl*), rendered once and kept on disk, and the programs
built from it, once per process.

The kernels are shape-agnostic (shapes are arguments), so one source serves every model. It
is built per device, driver, precision and source; each binary is kept in `GPULINT_CACHE_DIR`
(default ~/.cache/gpulint/kernels), keyed by all of those, so a second process loads it
instead of compiling; the rendered sources are kept there too (sources/). PoCL keeps its own
cache, in GPULINT_CACHE_DIR/pocl unless POCL_CACHE_DIR says otherwise, and is not asked for
binaries (keeps_own_cache)."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Iterable
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

from gpulint.atomic import write_atomic
from gpulint.cache import cache_dir
from gpulint.executor import guard, opcodes
from gpulint.executor.device import Device, opencl
from gpulint.executor.errors import ExecutorError
from gpulint.executor.flavour import Flavour
from gpulint.executor.precision import Precision

PRELUDE = "prelude.cl.j2"


def kernel_files() -> list[str]:
    """The kernel files, by name: each op family's kernels in a file of its own (conv.cl.j2,
    depthwise.cl.j2, elementwise.cl, ...). Every program holds the helpers of all of them (see
    kernel_sources), so their order does not matter."""
    folder = resources.files("gpulint").joinpath("kernels")
    names = [f.name for f in folder.iterdir() if f.name.endswith((".cl", ".cl.j2")) and f.name != PRELUDE]
    return sorted(names)


@cache
def _templates() -> dict[str, str]:
    """The prelude's and every kernel file's text, by name: what kernel_source's key and the
    rendering both read, read once."""
    folder = resources.files("gpulint").joinpath("kernels")
    return {name: folder.joinpath(name).read_text("utf-8") for name in (PRELUDE, *kernel_files())}


@cache
def kernel_source(flavour: Flavour) -> str:
    """All kernels, as `flavour` says; arithmetic in float but where it rounds to half. Rendered
    from the templates once and then kept in the cache folder, by a digest of all that rendering
    reads (the templates, the op codes, this file): jinja's parsing and rendering took 0.15-0.25
    s of every process's start, a quarter of pose_detection's start with its kernels cached."""
    key = "\0".join([repr(flavour), opcodes.defines(), Path(__file__).read_text("utf-8"), *_templates().values()])
    path = cache_dir() / "sources" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.cl"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return path.read_text("utf-8")
    source = _render(flavour)
    with contextlib.suppress(OSError):  # a source we cannot keep is rendered again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, [source.encode()])
    return source


def _render(flavour: Flavour) -> str:
    """kernel_source rendered from the templates."""
    import jinja2  # only when a source is not in the cache folder

    templates = _templates()
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    prelude = env.from_string(templates[PRELUDE])
    half = flavour.half
    # Half storage converts in integer arithmetic on a CPU device (the one without epilogue_loop),
    # where vload_half/vstore_half are library calls; a GPU converts in hardware (prelude.cl.j2).
    integer_half = half and not flavour.fp16_extension and not flavour.epilogue_loop
    half_math = half and flavour.half_math  # no half arithmetic without half storage,
    arithmetic = dict(half_math=half_math, half_accum=half_math and flavour.half_accum)  # no half sums without it
    header = prelude.render(
        half=half,
        fp16_extension=half and flavour.fp16_extension,
        epilogue_loop=flavour.epilogue_loop,
        integer_half=integer_half,
        f16c=integer_half and flavour.f16c,
        opcodes=opcodes.defines(),
        **arithmetic,
    )
    parts = [header]
    for name in kernel_files():  # templates unroll kernel variants (conv.cl.j2: blockings)
        text = templates[name]
        if name.endswith(".j2"):
            text = env.from_string(text).render(epilogue_loop=flavour.epilogue_loop, half=half, **arithmetic)
        parts.append(text)
    return "\n".join(parts)


def epilogue_loop(device: Device) -> bool:
    """Fused steps in a loop on GPUs, inline on CPU devices: inline runs faster on PoCL, and
    compiles 20-50x slower on NVIDIA's OpenCL (conv.cl.j2 has the numbers)."""
    return not device.cpu


_KERNEL = re.compile(r"^__kernel void (\w+)\(", re.MULTILINE)


@cache
def kernel_parts(flavour: Flavour) -> tuple[str, dict[str, str]]:
    """The source cut in two: everything that is not a kernel (prelude, helper functions,
    macros), and each kernel's own text by name."""
    source = kernel_source(flavour)
    spans = []
    for match in _KERNEL.finditer(source):
        end = source.index("\n}\n", match.start()) + 3
        spans.append((match.group(1), match.start(), end))
    shared, last = [], 0
    for _, start, end in spans:
        shared.append(source[last:start])
        last = end
    shared.append(source[last:])
    return "".join(shared), {name: source[start:end] for name, start, end in spans}


@cache
def kernel_sources(flavour: Flavour) -> dict[str, str]:
    """One program source per kernel: everything that is not a kernel and that kernel. Built as
    one program, the 35 kernels of the time took PoCL 9.4 s to compile; a model uses a handful,
    and only those are built."""
    common, bodies = kernel_parts(flavour)
    return {name: common + "\n" + body for name, body in bodies.items()}


def one_program(common: str, bodies: dict[str, str], variants: list[tuple[int, tuple[str, str]]]) -> str:
    """One source holding the (kernel, defines) variants given with their numbers, the shared
    part once: each variant's #defines (a fused conv's steps, an elementwise op) stand before its
    kernel and are undone after it, and the kernel is renamed `name__i`. Macros expand where they
    are used, so the shared FINISH/epilogue macros take each kernel's own values."""
    parts = [common]
    for i, (name, defines) in variants:
        parts += [f"\n{defines}#define {name} {name}__{i}\n", bodies[name], f"\n#undef {name}\n"]
        parts += [f"#undef {macro}\n" for macro in _DEFINE.findall(defines)]
    return "".join(parts)


_DEFINE = re.compile(r"^#define (\w+)", re.MULTILINE)
_PROGRAMS: dict[tuple[Any, ...], Any] = {}
# From this many variants a model's PoCL program is cut in two, so that two processes can compile
# it at a cold start (warmup.py); below it, one program (a second costs PoCL ~0.15 s of parsing
# its OpenCL headers again). Two, not one per core: the cut decides the programs' sources and so
# PoCL's cache keys, which must not depend on the machine a cache was made on.
SPLIT_AT = 8


def pocl_programs(device: Device, mode: Precision, variants: list[tuple[str, str]]) -> list[tuple[str, list[int]]]:
    """The programs (source, the indices of `variants` it holds) that hold a model's sorted
    variants on PoCL: one, or two of about equal compile work (its kernels' length as the
    measure) from SPLIT_AT variants on. Variant i is the kernel `name__i` in its program."""
    common, bodies = kernel_parts(_flavour(device, mode))
    if len(variants) < SPLIT_AT:
        groups = [list(range(len(variants)))]
    else:
        groups, loads = [[], []], [0, 0]
        weights = [len(bodies[name]) + len(defines) for name, defines in variants]
        for i in sorted(range(len(variants)), key=lambda i: (-weights[i], i)):
            lighter = loads.index(min(loads))
            groups[lighter].append(i)
            loads[lighter] += weights[i]
    return [(one_program(common, bodies, [(i, variants[i]) for i in sorted(g)]), sorted(g)) for g in groups]


def built_once(device: Device, source: str) -> Any:
    """The program of `source` built for `device`, once per process."""
    key = (id(device.context), source)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _build(device, source)
    return _PROGRAMS[key]


def _flavour(device: Device, mode: Precision) -> Flavour:
    """The kernel source for `device` at `mode`: on PoCL, whose compiler runs in this process,
    the first form of it not known to crash there (guard.py)."""
    base = Flavour(
        half=mode.half_storage,
        fp16_extension=device.fp16,
        epilogue_loop=epilogue_loop(device),
        half_math=mode.half_math,
        f16c=device.converts_half,
        half_accum=mode.half_accum,
    )
    return guard.choose(device, base, kernel_source) if compiles_in_process(device) else base


def compiles_in_process(device: Device) -> bool:
    """PoCL on a CPU: LLVM compiles in the process that builds (a crash there is this process's)."""
    return device.cpu and keeps_own_cache(device)


def kernels(
    device: Device, mode: Precision, wanted: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], Callable[[], Any]]:
    """For each (kernel, defines) a model launches, a maker of fresh cl.Kernels (one per launch,
    each with its own arguments). On PoCL, which keeps its own cache, the variants are in one
    program (two for larger models, pocl_programs): PoCL parses the OpenCL headers and the shared
    helpers once per program, so pose_detection's 18 variants build in 1.05 s against 3.55 s as
    18 programs, and load from PoCL's cache in 0.07 s against 0.58 s. Elsewhere a program per
    variant, each binary on disk, so models that launch the same kernels share them."""
    cl = opencl()
    variants = sorted(set(wanted))
    _, bodies = kernel_parts(_flavour(device, mode))
    for name, _ in variants:
        if name not in bodies:
            raise ExecutorError(f"no kernel named {name}")
    if not variants:
        return {}
    makers: dict[tuple[str, str], Callable[[], Any]] = {}
    if keeps_own_cache(device):
        for source, members in pocl_programs(device, mode, variants):
            built = built_once(device, source)
            for i in members:
                makers[variants[i]] = partial(cl.Kernel, built, f"{variants[i][0]}__{i}")
        return makers
    for name, defines in variants:
        built = built_once(device, defines + kernel_sources(_flavour(device, mode))[name])
        makers[(name, defines)] = partial(cl.Kernel, built, name)
    return makers


def kernel(device: Device, mode: Precision, name: str, defines: str = "") -> Any:
    """One cl.Kernel of gpulint's kernel `name` with `defines` ahead of it (see `kernels`)."""
    return kernels(device, mode, [(name, defines)])[(name, defines)]()


# -w: the kernels' warnings are ours to read, not the user's. PoCL's clang prints "N warnings
# generated." straight to stderr (AVX ABI notes on float16 returns), past any Python filter.
BUILD_OPTIONS = "-cl-std=CL1.2 -w"


def keeps_own_cache(device: Device) -> bool:
    """PoCL keeps what it compiles in its own cache (POCL_CACHE_DIR, which select_device points
    into GPULINT_CACHE_DIR), and asking it for a program's binary makes it compile the kernel once
    more for any work-group size: 0.28 s a program, 4.3 of pose_detection's 11.6 s cold start.
    pyopencl skips its own binary cache on PoCL for the same reason (inducer/pyopencl#738)."""
    return "Portable Computing Language" in str(device.device.platform.name)


def _build(device: Device, source: str) -> Any:
    cl = opencl()
    if keeps_own_cache(device):
        return _compile(device, source)
    digest = hashlib.sha256(
        "\0".join([device.name, device.driver, str(device.device.version), source, BUILD_OPTIONS]).encode()
    ).hexdigest()[:32]
    path = cache_dir() / f"{digest}.bin"
    if path.exists():
        try:
            return cl.Program(device.context, [device.device], [path.read_bytes()]).build(BUILD_OPTIONS)
        except Exception:
            pass  # a stale or foreign binary: build from source below
    built = _compile(device, source)
    with contextlib.suppress(Exception):  # a binary we cannot save is compiled again next time
        binary = built.get_info(cl.program_info.BINARIES)[0]
        if binary:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, [binary])
    return built


def _compile(device: Device, source: str) -> Any:
    try:
        return opencl().Program(device.context, source).build(BUILD_OPTIONS)
    except Exception as e:
        raise ExecutorError(f"the kernels failed to build on {device.describe()}: {str(e)[-2000:]}") from None

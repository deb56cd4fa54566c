"""A model's kernels compiled before its first run, in two processes at once, on PoCL.

PoCL compiles each kernel when it is first launched (for its work-group size), 0.1-0.5 s a
kernel, and holds one lock around all of its LLVM work, so threads of one process compile one
after the other. At a cold start (nothing in PoCL's cache) that was 3.5 s of pose_detection's
5.1 s. Here the model's programs (two from program.SPLIT_AT variants on) are built and their
kernels launched once, one program in this process and the other in a child process: both
compile at the same time, and what the child compiled reaches this process through PoCL's disk
cache. The launches run on zero-filled scratch buffers of the real ones' sizes, with the real
scalars and grids, so PoCL compiles the variants the model's run will ask for, and nothing of
the model's own buffers is touched. A marker in PoCL's cache folder says a model's programs
were compiled this way; a later process skips all of it, and its first run loads the kernels
from the cache.

When anything here fails (no second core, a child that dies or hangs) nothing is lost: the
first run compiles whatever is missing, as it always did.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD_TIMEOUT_S = 300


def compile_ahead(device: Any, mode: Any, launches: list[Any]) -> None:
    """Compile the kernels of `launches` (launch.Launch) in two processes when PoCL's cache does
    not have them yet; see the module's note. Returns once both halves are in the cache."""
    from gpulint.executor import program

    if not (device.cpu and program.keeps_own_cache(device)) or _cores() < 2:
        return
    variants = sorted({(ln.kernel, ln.defines) for ln in launches})
    programs = program.pocl_programs(device, mode, variants)
    if len(programs) < 2:
        return
    marker = _marker(device, [source for source, _ in programs])
    if marker is None or marker.exists():
        return
    specs = [_specs(launches, {variants[i]: f"{variants[i][0]}__{i}" for i in members}) for _, members in programs]
    (own_source, _), (child_source, _) = programs
    child = _spawn(device, child_source, specs[1])
    ok = child is not None
    try:
        try:
            run_specs(device.context, device.queue, program.built_once(device, own_source), specs[0])
        except Exception:
            ok = False  # the first run compiles it instead
        if child is not None:
            ok = child.wait(CHILD_TIMEOUT_S) == 0 and ok
    except subprocess.TimeoutExpired:
        ok = False
    finally:  # a hung child, or this process interrupted: the child goes too
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
    if ok:
        with contextlib.suppress(OSError):
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _marker(device: Any, sources: list[str]) -> Path | None:
    from gpulint.executor import program

    folder = os.environ.get("POCL_CACHE_DIR")
    if not folder:
        return None
    digest = hashlib.sha256("\0".join([device.name, program.BUILD_OPTIONS, *sources]).encode()).hexdigest()[:32]
    return Path(folder) / "gpulint-compiled" / digest


def _specs(launches: list[Any], names: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """One launch per kernel variant and work-group size of `names` (variant -> its name in the
    program), as JSON: its grid and its arguments, each buffer as an id and its size, other
    arguments as their bytes."""
    import pyopencl as cl

    ids: dict[int, int] = {}
    seen: set[tuple[str, Any]] = set()
    specs = []
    for ln in launches:
        name = names.get((ln.kernel, ln.defines))
        if name is None or (name, ln.local_size) in seen:
            continue
        seen.add((name, ln.local_size))
        args: list[list[Any]] = []
        for a in ln.args:
            if isinstance(a, cl.MemoryObjectHolder):
                args.append(["buffer", ids.setdefault(a.int_ptr, len(ids)), int(a.size)])
            elif isinstance(a, cl.LocalMemory):
                args.append(["local", int(a.size)])
            elif a is None:
                args.append(["null"])
            else:
                args.append(["bytes", _bytes(a).hex()])
        specs.append({"kernel": name, "global": list(ln.global_size), "local": ln.local_size, "args": args})
    return specs


def _bytes(value: Any) -> bytes:
    import numpy as np

    return np.asarray(value).tobytes()


def run_specs(context: Any, queue: Any, built: Any, specs: list[dict[str, Any]]) -> None:
    """Launch each spec's kernel of `built` once, on zero-filled scratch buffers of its own: a
    launch reads zeros, never what another launch wrote (a NaN made into an index or a size)."""
    import numpy as np
    import pyopencl as cl

    for spec in specs:
        scratch: dict[int, Any] = {}
        args: list[Any] = []
        for kind, *rest in spec["args"]:
            if kind == "buffer":
                ident, size = rest
                if ident not in scratch:  # the same buffer twice in one launch: one scratch
                    scratch[ident] = cl.Buffer(context, cl.mem_flags.READ_WRITE, size)
                    cl.enqueue_fill_buffer(queue, scratch[ident], np.zeros(1, np.uint8), 0, size)
                args.append(scratch[ident])
            elif kind == "local":
                args.append(cl.LocalMemory(rest[0]))
            elif kind == "null":
                args.append(None)
            else:
                args.append(bytes.fromhex(rest[0]))
        kernel = cl.Kernel(built, spec["kernel"])
        kernel.set_args(*args)
        local = tuple(spec["local"]) if spec["local"] is not None else None
        cl.enqueue_nd_range_kernel(queue, kernel, tuple(spec["global"]), local)
    queue.finish()


def _spawn(device: Any, source: str, specs: list[dict[str, Any]]) -> subprocess.Popen[bytes] | None:
    from gpulint.executor import program

    job = {
        "platform": str(device.device.platform.name),
        "device": str(device.device.name),
        "source": source,
        "options": program.BUILD_OPTIONS,
        "specs": specs,
    }
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "gpulint.executor.warmup"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    assert child.stdin is not None
    try:
        child.stdin.write(json.dumps(job).encode())
        child.stdin.close()
    except OSError:
        child.kill()
        child.wait()
        return None
    return child


def _child() -> None:
    """The child's side: the same device, the program built from the same source and options
    (so PoCL's cache keys are the ones the parent will look up), each spec launched once."""
    import pyopencl as cl

    job = json.loads(sys.stdin.buffer.read())
    device = next(
        d
        for p in cl.get_platforms()
        if str(p.name) == job["platform"]
        for d in p.get_devices()
        if str(d.name) == job["device"]
    )
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    built = cl.Program(context, job["source"]).build(job["options"])
    run_specs(context, queue, built, job["specs"])


if __name__ == "__main__":
    _child()

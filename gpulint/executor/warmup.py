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

At a cold start with an empty cache (the first model on a machine, a CI job that keeps no
cache) both processes get ready while the model is lowered (early_start): the child is started
then, and this process makes its first build in a thread. A process's first build loads PoCL's
compiler and kernel library (0.7 s of a trivial program's 1.0 s, measured on a loaded 2-core
machine; the next build 0.27 s), and pyopencl lets other threads run during a build. Started
after lowering, the child took as long again as lowering pose_detection to be ready.

When anything here fails (no second core, a child that dies or hangs) nothing is lost: the
first run compiles whatever is missing, as it always did.

The first time a kernel flavour is used on a device (guard.py), nothing is compiled in this
process: every program is compiled in a child, on any number of cores, and each child then loads
the other's programs back from PoCL's cache and makes their kernels. A child that crashes, hangs
or finds a kernel missing is a guard.Crash, which launch.bind_all answers with another flavour.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

CHILD_TIMEOUT_S = 300


class Early(NamedTuple):
    """What early_start started: the child (None when it could not start), and the thread making
    this process's first build."""

    child: subprocess.Popen[bytes] | None
    first_build: threading.Thread


def early_start(device: Any) -> Early | None:
    """When compiling ahead is possible here and PoCL's cache holds nothing yet (no folder in it:
    PoCL keeps a program per folder, the markers in one): the child, waiting for its half
    (compile_ahead) or to be told none is coming (dismiss), and this process's first build."""
    if not _possible(device):
        return None
    folder = os.environ.get("POCL_CACHE_DIR")
    with contextlib.suppress(OSError):
        if folder and any(p.is_dir() for p in Path(folder).iterdir()):
            return None
    from gpulint.executor import program

    first_build = threading.Thread(target=_first_build, args=(device.context, program.BUILD_OPTIONS), daemon=True)
    first_build.start()
    return Early(_spawn(device), first_build)


# A process's first build: what it loads is then loaded for the builds that matter.
READY = "__kernel void ready(__global int* x) { x[0] = 1; }"


def _first_build(context: Any, options: str) -> None:
    import pyopencl as cl

    with contextlib.suppress(Exception):  # the real build reports what is wrong
        cl.Program(context, READY).build(options)


def compile_ahead(device: Any, mode: Any, launches: list[Any], early: Early | None = None) -> None:
    """Compile the kernels of `launches` (launch.Launch) in two processes when PoCL's cache does
    not have them yet; see the module's note. Returns once both halves are in the cache. `early`:
    what early_start started, which this takes over (and dismisses when it has nothing for it)."""
    from gpulint.executor import guard, program

    variants = sorted({(ln.kernel, ln.defines) for ln in launches})
    if variants and program.compiles_in_process(device):
        flavour = program._flavour(device, mode)
        if guard.known(device, flavour, program.kernel_source(flavour)) is None:
            return _compile_guarded(device, mode, flavour, launches, variants, early)
    if not _possible(device):
        return dismiss(early)
    programs = program.pocl_programs(device, mode, variants)
    if len(programs) < 2:
        return dismiss(early)
    marker = _marker(device, [source for source, _ in programs])
    if marker is None or marker.exists():
        return dismiss(early)
    specs = [_specs(launches, _names(variants, members)) for _, members in programs]
    # This process takes the longer source: its half starts at once, the child's once sent
    halves = sorted(zip(programs, specs, strict=True), key=lambda half: -len(half[0][0]))
    ((own_source, _), own), ((child_source, _), theirs) = halves
    child = early.child if early is not None else _spawn(device)
    ok = child is not None and _send(child, child_source, theirs)
    try:
        try:
            run_specs(device.context, device.queue, program.built_once(device, own_source), own)
        except Exception:
            ok = False  # the first run compiles it instead
        if child is not None:
            ok = child.wait(CHILD_TIMEOUT_S) == 0 and ok
    except subprocess.TimeoutExpired:
        ok = False
    finally:  # a hung child, or this process interrupted: the child goes too
        dismiss(early)
        _stop(child)
    if ok:
        _touch(marker)


def _compile_guarded(
    device: Any, mode: Any, flavour: Any, launches: list[Any], variants: list[tuple[str, str]], early: Early | None
) -> None:
    """`flavour`'s first use on this device: the model's programs compiled in two children (one
    program: the second compiles nothing), then each child loads the other's back. Records the
    flavour good, or raises guard.Crash. A child that cannot be started: the build stays in this
    process, unguarded, as before."""
    from gpulint.executor import guard, program

    programs = program.pocl_programs(device, mode, variants)
    named = [_names(variants, members) for _, members in programs]
    jobs = [{"source": source, "specs": _specs(launches, n)} for (source, _), n in zip(programs, named, strict=True)]
    checks = [[[source, list(n.values())]] for (source, _), n in zip(programs, named, strict=True)]
    if len(jobs) == 1:
        jobs.append({})
        checks.append([])
    first = early.child if early is not None else None
    children = [first if first is not None else _spawn(device), _spawn(device)]
    try:
        if any(child is None for child in children):
            return
        live = [child for child in children if child is not None]
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        _ask(live, jobs, deadline, flavour)  # both compile at once
        _ask(live, [{"check": check} for check in reversed(checks)], deadline, flavour)  # each the other's
    finally:
        dismiss(early)
        for started in children:
            _stop(started)
    guard.record(device, flavour, program.kernel_source(flavour), True)
    marker = _marker(device, [source for source, _ in programs])
    if marker is not None:
        _touch(marker)


def _names(variants: list[tuple[str, str]], members: list[int]) -> dict[tuple[str, str], str]:
    """Each of a program's variants (indices `members` of `variants`) by its kernel's name there."""
    return {variants[i]: f"{variants[i][0]}__{i}" for i in members}


def _touch(marker: Path) -> None:
    """The marker that says a model's programs are compiled (one that cannot be written: they
    are compiled ahead again next time)."""
    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


def _ask(children: list[subprocess.Popen[bytes]], jobs: list[dict[str, Any]], deadline: float, flavour: Any) -> None:
    """Send each child its job, then wait for each one's "done"; a child that dies, hangs past
    `deadline` or says anything else is a guard.Crash with its reason."""
    from gpulint.executor import guard

    for child, job in zip(children, jobs, strict=True):
        _write_line(child, json.dumps(job).encode() + b"\n")
    for child in children:
        assert child.stdout is not None
        try:
            ready, _, _ = select.select([child.stdout], [], [], max(deadline - time.monotonic(), 0))
            answer = child.stdout.readline() if ready else None
        except OSError:
            answer = b""
        if answer is None:
            raise guard.Crash(flavour, f"the compiler hung (no answer in {CHILD_TIMEOUT_S} s)")
        if answer != b"done\n":
            raise guard.Crash(flavour, _death(child))


def _write_line(child: subprocess.Popen[bytes], line: bytes, close: bool = False) -> None:
    """`line` to the child's stdin (closed after it with `close`), by a thread of its own: the pipe
    holds 64 KiB, and the child reads only once it is ready, so writing here would hold this
    process up to half a second. A child gone: its exit or its answer says so."""
    stdin = child.stdin

    def write() -> None:
        with contextlib.suppress(OSError, ValueError):
            assert stdin is not None
            stdin.write(line)
            stdin.flush()
            if close:
                stdin.close()

    threading.Thread(target=write, daemon=True).start()


def _death(child: subprocess.Popen[bytes]) -> str:
    """How a child ended, and the last line it wrote (LLVM's error, a missing kernel)."""
    try:
        code = child.wait(10)
    except subprocess.TimeoutExpired:
        _stop(child)
        code = child.returncode
    how = f"exit status {code}"
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            how = f"killed by {signal.Signals(-code).name}"
    last = ""
    err = child.stderr
    if err is not None:
        with contextlib.suppress(OSError, ValueError):
            err.seek(0)
            lines = [ln.strip() for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
            last = lines[-1] if lines else ""
    return f"the compiler {how}" + (f" ({last[:300]})" if last else "")


def dismiss(early: Early | None) -> None:
    """What early_start started, ended: the child stopped if still running (it has no half to
    compile, or is past its time), the first build waited for (it is not left in PoCL as this
    process exits)."""
    if early is not None:
        _stop(early.child)
        early.first_build.join()


def _stop(child: subprocess.Popen[bytes] | None) -> None:
    if child is not None and child.poll() is None:
        child.kill()
        child.wait()


def _possible(device: Any) -> bool:
    from gpulint.executor import program

    return bool(device.cpu and program.keeps_own_cache(device)) and _cores() >= 2


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


def _spawn(device: Any) -> subprocess.Popen[bytes] | None:
    """The child for `device` (named by its platform and device): it gets ready to compile, then
    reads its half from stdin (_send)."""
    from gpulint.executor import program

    # This file as a script, not `-m gpulint.executor.warmup`: importing the package (the
    # executor, numpy, jinja2) took the child 0.35 s before it could start. -P: this folder's
    # modules (program.py, device.py, ...) are not importable by their bare names there.
    names = [str(device.device.platform.name), str(device.device.name), program.BUILD_OPTIONS]
    try:  # stderr in a file: the compiler's last words, when it crashes, are the reason given
        errors = tempfile.TemporaryFile()  # noqa: SIM115  # outlives this call: closed with the Popen
        child = subprocess.Popen(
            [sys.executable, "-P", __file__, *names], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors
        )
    except OSError:
        return None
    child.stderr = errors  # read by _death; closed with the Popen
    return child


def _send(child: subprocess.Popen[bytes], source: str, specs: list[dict[str, Any]]) -> bool:
    """The child's half (its program's source and launches), its only job (stdin closed after
    it). False when there is no pipe."""
    if child.stdin is None:
        return False
    _write_line(child, json.dumps({"source": source, "specs": specs}).encode() + b"\n", close=True)
    return True


def _child(platform: str, name: str, options: str) -> None:
    """The child's side: the same device; a first build, which loads PoCL's compiler and its
    kernel library; then the program built from the source it is sent with the parent's options
    (so PoCL's cache keys are the ones the parent will look up), each spec launched once.
    Nothing sent (stdin closed): nothing to do."""
    import pyopencl as cl

    devices = [d for p in cl.get_platforms() if str(p.name) == platform for d in p.get_devices()]
    device = next(d for d in devices if str(d.name) == name)
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    _first_build(context, options)
    for line in sys.stdin.buffer:  # one job a line; "done" on stdout after each
        job = json.loads(line)
        if job.get("source"):
            built = cl.Program(context, job["source"]).build(options)
            run_specs(context, queue, built, job["specs"])
        for source, names in job.get("check", []):  # programs another process compiled, loaded back
            loaded = cl.Program(context, source).build(options)
            for name in names:
                try:
                    cl.Kernel(loaded, name)
                except cl.Error:
                    print(
                        f"a program PoCL compiled loads back from its cache without its kernel {name}", file=sys.stderr
                    )
                    sys.stderr.flush()
                    os._exit(3)
        sys.stdout.buffer.write(b"done\n")
        sys.stdout.flush()
    # Done: what PoCL compiled is in its cache. Exit without PoCL's and Python's teardown, which
    # the parent waited for (0.1-0.2 s of pose_detection's cold start), and which aborts after a
    # program came back empty.
    os._exit(0)


if __name__ == "__main__":
    _child(*sys.argv[1:4])

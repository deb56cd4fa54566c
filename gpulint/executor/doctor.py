"""`gpulint doctor`: what OpenCL this machine has, which device gpulint picks and why, and
whether each device really runs gpulint's kernels.

The self-test runs a small model on every device at every precision, each run in a child
process (`python -m gpulint.executor.doctor --selftest INDEX PRECISION`): a compiler that
crashes (issue #36: the pip PoCL's LLVM 14 on an AVX-512 host) or hangs is then a FAIL line
with its reason, not the end of doctor. A device that fails is recorded (device.mark_failed), so
the default choice passes over it from then on; one that passes has its record cleared.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import __version__
from gpulint.cache import cache_dir
from gpulint.executor import device as dev
from gpulint.text import clean

PRECISIONS = ("fp32", "fp32-fp16", "fp16")
# Of the largest reference value: fp32 sums in another order than the interpreter (1e-6 seen);
# half rounds every step to 11 bits (2^-11 = 5e-4 each, a few dozen steps deep here).
TOLERANCE = {"fp32": 1e-4, "fp32-fp16": 2e-2, "fp16": 2e-2}
# A self-test takes 2-4 s on PoCL here, its kernels' cold build included; a slow GPU compiler gets
# far more, and a compiler in a loop is stopped.
TIMEOUT_S = 300.0
FLAGS = ("avx2", "avx512f", "f16c")


def host() -> dict[str, Any]:
    """The host CPU as the compilers see it: model name and the flags that change PoCL's code."""
    model, flags = dev.host_cpu()
    known = bool(flags)  # no /proc/cpuinfo (not Linux): unknown, not "no"
    return {
        "gpulint": __version__,
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "pyopencl": str(dev.opencl().VERSION_TEXT),
        "cpu": model or "unknown",
        "flags": {f: (f in flags) if known else None for f in FLAGS},
    }


def cache() -> dict[str, str]:
    # What select_device would set POCL_CACHE_DIR to, where the environment does not.
    return {"dir": str(cache_dir()), "pocl": os.environ.get("POCL_CACHE_DIR", str(cache_dir() / "pocl"))}


def describe(c: dev.Candidate) -> dict[str, Any]:
    _, _, p, d = c
    kinds = [name for bit, name in ((dev.GPU, "GPU"), (dev.CPU, "CPU")) if d.type & bit]
    return {
        "index": dev.index(c),
        "platform": str(p.name).strip(),
        "platform_version": str(p.version).strip(),
        "name": str(d.name).strip(),
        "type": kinds[0] if kinds else "other",
        "driver_version": str(d.driver_version).strip(),
        "llvm": dev.llvm_version(str(p.version)),
        "llvm_target": dev.llvm_target(str(d.version)),
        "fp16": "cl_khr_fp16" in str(d.extensions),
        "failed_here": dev.failed(d),
    }


def selftest_command(index: str, precision: str) -> list[str]:
    """The child's command line (a test puts a crashing one in its place)."""
    return [sys.executable, "-m", "gpulint.executor.doctor", "--selftest", index, precision]


def run_selftest(c: dev.Candidate, precision: str, timeout: float | None = None) -> dict[str, Any]:
    """One self-test in a child process: pass, or fail with the reason (a signal, a timeout, a
    mismatch, an exception: the child's last lines)."""
    timeout = timeout or TIMEOUT_S
    env = dict(os.environ, GPULINT_CL_DEVICE=dev.index(c))
    env.setdefault("POCL_CACHE_DIR", cache()["pocl"])
    clock = time.perf_counter()
    try:
        done = subprocess.run(
            selftest_command(dev.index(c), precision), env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        result, reason = "fail", f"no answer in {timeout:g} s (a compiler or kernel that hangs); stopped"
    else:
        last = _last_lines(done.stderr) or _last_lines(done.stdout)
        if done.returncode == 0:
            result, reason = "pass", _last_lines(done.stdout, 1)
        elif done.returncode < 0:
            result, reason = "fail", f"killed by {_signal_name(-done.returncode)}" + (f": {last}" if last else "")
        else:
            result, reason = "fail", f"exit {done.returncode}" + (f": {last}" if last else "")
    return {
        "device": dev.index(c),
        "precision": precision,
        "result": result,
        "seconds": round(time.perf_counter() - clock, 2),
        "reason": reason,
    }


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return clean(" | ".join(lines[-n:]), 600) or ""


def doctor(spec: str | None = None, selftest: bool = True) -> dict[str, Any]:
    """The whole report (the JSON doctor prints). `spec`: only that device. An ExecutorError
    where OpenCL cannot be listed or `spec` matches no device."""
    candidates = dev.devices()
    tested = [dev.match(candidates, spec)] if spec else candidates
    jobs = [(c, p) for c in tested for p in PRECISIONS] if selftest else []
    # Two children at once: on this 2-core machine that halves the wall time, and compiling
    # (single-threaded) is most of each child's time.
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda job: run_selftest(*job), jobs))
    for c in tested if selftest else []:
        failures = [r for r in results if r["device"] == dev.index(c) and r["result"] == "fail"]
        if failures:
            f = failures[0]
            dev.mark_failed(c[3], f"gpulint doctor: self-test at {f['precision']}: {f['reason']}")
        else:
            dev.clear_failed(c[3])
    chosen, why = dev.choose(candidates)  # after the records: what gpulint will use from now on
    judged = dev.index(tested[0]) if spec else dev.index(chosen)
    return {
        "host": host(),
        "cache": cache(),
        "devices": [describe(c) for c in candidates],
        "chosen": {"index": dev.index(chosen), "name": str(chosen[3].name).strip(), "why": why},
        "selftest": results,
        "passed": all(r["result"] == "pass" for r in results if r["device"] == judged),
    }


def render(report: dict[str, Any]) -> str:
    """The report as text: what a user pastes into a bug report."""
    h = report["host"]
    flags = ", ".join(f"{f} {'unknown' if v is None else 'yes' if v else 'no'}" for f, v in h["flags"].items())
    lines = [
        f"gpulint {h['gpulint']}, pyopencl {h['pyopencl']}, Python {h['python']}, {h['system']}",
        f"host CPU: {h['cpu']} ({flags})",
        f"cache: {report['cache']['dir']} (POCL_CACHE_DIR {report['cache']['pocl']})",
    ]
    platform_seen = None
    for d in report["devices"]:
        platform_index = d["index"].split(":")[0]
        if platform_index != platform_seen:
            platform_seen = platform_index
            lines.append(f"platform {platform_index}: {d['platform']}, {d['platform_version']}")
        llvm = f", LLVM {d['llvm']}" if d["llvm"] else ""
        llvm += f" for {d['llvm_target']}" if d["llvm_target"] else ""
        fp16 = "yes" if d["fp16"] else "no"
        lines.append(f"  {d['index']} {d['name']}: {d['type']}, driver {d['driver_version']}{llvm}, cl_khr_fp16 {fp16}")
        if d["failed_here"]:
            lines.append(f"      recorded failing here: {d['failed_here']}")
    if report["selftest"]:
        lines.append("self-test (a small model in a child process per run, against the LiteRT CPU interpreter):")
        for r in report["selftest"]:
            result = r["result"].upper()
            lines.append(f"  {r['device']} {r['precision']:9} {result} {r['seconds']:6.1f} s  {r['reason']}")
    c = report["chosen"]
    lines.append(f"default device: {c['index']} {c['name']}: {c['why']}")
    return "\n".join(lines)


# -- the child: one self-test ----------------------------------------------------------------------


def selftest_model() -> Any:
    """A small model that reaches the main kernel families: a 3x3 conv, a depthwise conv, a 1x1
    conv, a residual ADD, a pool, RESHAPE, FULLY_CONNECTED and SOFTMAX; 16 and 24 channels, so
    that the 16-wide loads and stores of the conv kernels run (issue #36 crashed in those)."""
    from gpulint.model.build import ModelBuilder

    rng = np.random.default_rng(0)

    def w(*shape: int) -> int:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        names.append(f"w{len(names)}")
        return g.const(names[-1], (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    names: list[str] = []
    mb = ModelBuilder(description="gpulint doctor self-test")
    g = mb.subgraph("main")
    x = g.input("image", [1, 12, 12, 16])
    same = dict(padding="SAME", stride_w=1, stride_h=1)
    y = g.op(
        "CONV_2D", [x, w(24, 3, 3, 16), w(24)], [1, 12, 12, 24], options=same | {"fused_activation_function": "RELU"}
    )
    y = g.op("DEPTHWISE_CONV_2D", [y, w(1, 3, 3, 24), w(24)], [1, 12, 12, 24], options=same | {"depth_multiplier": 1})
    y = g.op("CONV_2D", [y, w(16, 1, 1, 24), w(16)], [1, 12, 12, 16], options=same)
    y = g.op("ADD", [y, x], [1, 12, 12, 16])
    pool = dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    y = g.op("AVERAGE_POOL_2D", [y], [1, 6, 6, 16], options=pool)
    g.output(y)
    flat = g.op("RESHAPE", [y, g.const("shape", np.array([1, 576], np.int32))], [1, 576])
    logits = g.op("FULLY_CONNECTED", [flat, w(10, 576), w(10)], [1, 10])
    g.output(g.op("SOFTMAX", [logits], [1, 10], options=dict(beta=1.0)))
    return mb.build()


def selftest(precision: str) -> int:
    """Run the self-test model on the device GPULINT_CL_DEVICE names at `precision` and compare
    with the LiteRT CPU interpreter: exit 0 pass, 1 mismatch. Crashes and exceptions stay what
    they are, for the parent to report."""
    from gpulint.executor import Executor, select_device
    from gpulint.model import write
    from gpulint.reference.interpreter import run

    model = selftest_model()
    x = np.random.default_rng(1).uniform(-1, 1, (1, 12, 12, 16)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="gpulint-doctor-") as tmp:
        path = Path(tmp, "selftest.tflite")
        write(model, path)
        want = run(path, [x])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyopencl's notes on non-empty build logs
        got = Executor(model, select_device(), precision).run([x])
    # Each output's error over its largest value, so one tolerance fits features and probabilities.
    errors = [
        float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-6)) for g, r in zip(got, want, strict=True)
    ]
    worst = max(errors) if all(np.isfinite(errors)) else float("inf")
    tolerance = TOLERANCE[precision]
    print(f"max error {worst:.2g} of the output's largest value (tolerance {tolerance:g})")
    return 0 if worst <= tolerance else 1


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "--selftest" or sys.argv[3] not in PRECISIONS:
        sys.exit(f"usage: python -m gpulint.executor.doctor --selftest PLATFORM:DEVICE {{{','.join(PRECISIONS)}}}")
    sys.exit(selftest(sys.argv[3]))

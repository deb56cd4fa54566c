"""`gpulint bench`: warm latency of the LiteRT CPU interpreter and of the OpenCL executor on the
same inputs and in the same run (a ratio survives a noisy machine better than a time), the
executor's cold and cached start, and its per-op times from OpenCL events.

The interpreter is timed in a child process, as everywhere in gpulint; the executor in this
one. Start times are measured in fresh processes: cold with empty kernel caches (gpulint's,
PoCL's and NVIDIA's compute cache), cached with the caches the cold run left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import reference
from gpulint.executor import Device, Executor, ExecutorError
from gpulint.model import Model, read
from gpulint.text import clean

ROUNDS = 5
# Both sides run untimed this long before each round of timed runs: idle through the other
# side's round, the executor's first runs were up to 1.7x slower than back to back (PoCL's
# threads sleep, the 2-core VM slows down), and one warm-up invoke left the interpreter up to
# 2x slower than it runs warm.
WARM_S = reference.WARM_S


@dataclass
class BenchResult:
    model: str
    device: str
    precision: str
    runs: int
    threads: int
    cpu_ms: float
    executor_ms: float
    cold_start_s: float | None = None
    cached_start_s: float | None = None
    ops: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.executor_ms / self.cpu_ms if self.cpu_ms else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "precision": self.precision,
            "runs": self.runs,
            "cpu_threads": self.threads,
            "cpu_interpreter_ms": round(self.cpu_ms, 4),
            "executor_ms": round(self.executor_ms, 4),
            "ratio": round(self.ratio, 3),
            "cold_start_s": self.cold_start_s,
            "cached_start_s": self.cached_start_s,
            "ops": self.ops,
            "warnings": self.warnings,
        }


def bench(
    path: Path, device: Device, runs: int = 20, threads: int | None = None, precision: str = "fp32", start: bool = True
) -> BenchResult:
    model = read(path)
    inputs = reference.random_inputs(model, 0)
    threads = threads or os.cpu_count() or 1
    ex = Executor(model, device, precision)
    outputs = ex.run(inputs)  # warm-up: the first launch of each kernel may compile it
    cpu: list[float] = []
    times: list[float] = []
    # Interleaved rounds: a shared machine's speed drifts over seconds (on the 2-core VM the
    # same run took 10 or 15 ms for minutes at a time), and both sides should see the drift.
    for share in np.array_split(np.arange(runs), min(ROUNDS, runs)):
        cpu += reference.time_invoke(path, inputs, len(share), threads)
        warm = time.perf_counter() + WARM_S
        while time.perf_counter() < warm:
            ex.run(inputs)
        for _ in share:
            clock = time.perf_counter()
            ex.run(inputs)
            times.append(time.perf_counter() - clock)
    ex.run(inputs, profile=True)
    result = BenchResult(
        str(path),
        device.describe(),
        precision,
        runs,
        threads,
        float(np.median(cpu)) * 1e3,
        float(np.median(times)) * 1e3,
        ops=_op_table(ex),
        warnings=nonfinite_warnings(model, outputs),
    )
    if start:
        result.cold_start_s, result.cached_start_s = start_times(path, device, precision)
    return result


def nonfinite_warnings(model: Model, outputs: list[np.ndarray]) -> list[str]:
    """A time is only worth reading for a run whose results are usable: say which outputs came
    out NaN or Inf (all of them, or how many)."""
    sg = model.subgraphs[0]
    warnings = []
    for t, value in zip(sg.outputs, outputs, strict=True):
        value = np.asarray(value)
        if not np.issubdtype(value.dtype, np.floating) or value.size == 0:
            continue
        bad = int(np.count_nonzero(~np.isfinite(value)))
        if bad:
            name = clean(sg.tensors[t].name, 100) or f"tensor {t}"
            amount = "is all NaN/Inf" if bad == value.size else f"has {bad} NaN/Inf values of {value.size}"
            warnings.append(
                f"output {name} {amount} on the executor: these times are of a run whose results are unusable "
                "(`gpulint verify --bisect` names the op that made the first NaN/Inf)"
            )
    return warnings


def _op_table(ex: Executor) -> list[dict[str, Any]]:
    """Kernel time per op (an op may launch several kernels), slowest first."""
    per_op: dict[int, float] = defaultdict(float)
    names: dict[int, str] = {}
    for t in ex.timings:
        per_op[t.op_index] += t.seconds
        names[t.op_index] = t.op
    total = sum(per_op.values()) or 1.0
    rows = [
        {"op_index": i, "op": names[i], "ms": round(s * 1e3, 4), "share": round(s / total, 4)}
        for i, s in per_op.items()
    ]
    return sorted(rows, key=lambda r: -r["ms"])


def cache_env(tmp: str) -> dict[str, str]:
    """Kernel caches moved into `tmp`, so a first process there compiles everything: gpulint's
    binaries, PoCL's, and the NVIDIA driver's compute cache (which keeps what it compiled from
    PTX)."""
    return {
        "GPULINT_CACHE_DIR": str(Path(tmp, "gpulint")),
        "POCL_CACHE_DIR": str(Path(tmp, "pocl")),
        "CUDA_CACHE_PATH": str(Path(tmp, "nv")),
    }


def start_times(path: Path, device: Device, precision: str) -> tuple[float, float]:
    spec = device.name
    with tempfile.TemporaryDirectory(prefix="gpulint-bench-") as tmp:
        env = os.environ | cache_env(tmp)
        return _start_child(path, spec, precision, env), _start_child(path, spec, precision, env)


def _start_child(path: Path, spec: str, precision: str, env: dict[str, str]) -> float:
    cmd = [sys.executable, "-m", "gpulint.bench", str(path), spec, precision]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise ExecutorError(f"the start-time child failed: {lines[-1] if lines else '?'}")
    return float(json.loads(proc.stdout)["seconds"])


def _start(path: str, spec: str, precision: str) -> None:
    """Child: read, build (program from cache or compiled) and run once; print the seconds."""
    from gpulint.executor import select_device

    clock = time.perf_counter()
    model = read(path)
    ex = Executor(model, select_device(spec), precision)
    ex.run(reference.random_inputs(model, 0))
    print(json.dumps({"seconds": round(time.perf_counter() - clock, 4)}))


if __name__ == "__main__":
    _start(*sys.argv[1:4])

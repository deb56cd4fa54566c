"""`gpulint bench`: warm latency of the LiteRT CPU interpreter and of the OpenCL executor on the
same inputs and in the same run (a ratio survives a noisy machine better than a time), the
executor's cold and cached start, and its per-op times from OpenCL events.

The executor side is what the delegate would run: its GPU partitions on the executor (each
run uploads its inputs and reads its outputs back, the transfers between partitions), and the
ops check leaves on the CPU (or the executor cannot lower) on the LiteRT interpreter, each
such partition timed as a model of its own. A run's time is the sum over its partitions.

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
from gpulint.compare import PRECISION_WORDS
from gpulint.executor import Device, Executor, ExecutorError
from gpulint.model import Model, read
from gpulint.partitioned import PartitionedRunner
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
    partitions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    load: dict[str, float] = field(default_factory=dict)  # what it measured under: load average before, after, cores

    @property
    def ratio(self) -> float:
        return self.executor_ms / self.cpu_ms if self.cpu_ms else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "precision": self.precision,
            "precision_means": PRECISION_WORDS.get(self.precision, ""),
            "runs": self.runs,
            "cpu_threads": self.threads,
            "cpu_interpreter_ms": round(self.cpu_ms, 4),
            "executor_ms": round(self.executor_ms, 4),
            "ratio": round(self.ratio, 3),
            "cold_start_s": self.cold_start_s,
            "cached_start_s": self.cached_start_s,
            "ops": self.ops,
            "partitions": self.partitions,
            "warnings": self.warnings,
            "load": self.load,
        }


def bench(
    path: Path, device: Device, runs: int = 20, threads: int | None = None, precision: str = "fp32", start: bool = True
) -> BenchResult:
    model = read(path)
    inputs = reference.random_inputs(model, 0)
    threads = threads or os.cpu_count() or 1
    load_before = _load()
    runner = PartitionedRunner(model, device, precision)
    try:
        values = runner.tensors(inputs)  # warm-up: the first launch of each kernel may compile it
        feeds = [[values[t] for t in part.inputs] for part in runner.parts]
        cpu: list[float] = []
        times: list[list[float]] = [[] for _ in runner.parts]
        # Interleaved rounds: a shared machine's speed drifts over seconds (on the 2-core VM the
        # same run took 10 or 15 ms for minutes at a time), and both sides should see the drift.
        for share in np.array_split(np.arange(runs), min(ROUNDS, runs)):
            cpu += reference.time_invoke(path, inputs, len(share), threads)
            for k, part in enumerate(runner.parts):
                if part.path is not None:
                    times[k] += reference.time_invoke(part.path, feeds[k], len(share), threads)
            gpu = [(k, part.executor, feeds[k]) for k, part in enumerate(runner.parts) if part.executor is not None]
            warm = time.perf_counter() + WARM_S
            while gpu and time.perf_counter() < warm:
                for _, ex, feed in gpu:
                    ex.run(feed)
            for _ in share:
                for k, ex, feed in gpu:
                    clock = time.perf_counter()
                    ex.run(feed)
                    times[k].append(time.perf_counter() - clock)
        ops: list[dict[str, Any]] = []
        for part, feed in zip(runner.parts, feeds, strict=True):
            if part.executor is not None:
                part.executor.run(feed, profile=True)
                ops += _op_table(part.executor, model)
        total = sum(row["ms"] for row in ops) or 1.0
        for row in ops:
            row["share"] = round(row["ms"] / total, 4)
        ops.sort(key=lambda r: -r["ms"])
        result = BenchResult(
            str(path),
            device.describe(),
            precision,
            runs,
            threads,
            float(np.median(cpu)) * 1e3,
            float(np.median(np.sum(times, axis=0))) * 1e3,
            ops=ops,
            partitions=[
                {
                    "kind": part.kind,
                    "ran_on": device.describe() if part.kind == "gpu" else "LiteRT CPU interpreter",
                    "summary": part.describe(model),
                    "ms": round(float(np.median(t)) * 1e3, 4),
                }
                for part, t in zip(runner.parts, times, strict=True)
            ],
            warnings=runner.warnings + nonfinite_warnings(model, runner.outputs(values)),
        )
    finally:
        runner.close()
    if start:
        result.cold_start_s, result.cached_start_s = start_times(path, device, precision)
    result.load = {"before": load_before, "after": _load(), "cores": os.cpu_count() or 1}
    return result


def bench_signature(
    path: Path,
    key: str,
    device: Device,
    runs: int = 20,
    threads: int | None = None,
    precision: str = "fp32",
    start: bool = True,
) -> BenchResult:
    """bench of one signature of the model (an LLM's prefill or decode step), named by the model's path."""
    from gpulint.model import write
    from gpulint.model.signatures import as_main

    with tempfile.TemporaryDirectory(prefix="gpulint-bench-") as tmp:
        copy = Path(tmp, "signature.tflite")
        write(as_main(read(path), key), copy)  # never a copy that drops what the schema does not know
        result = bench(copy, device, runs, threads, precision, start)
    result.model = f"{path} ({key})"
    return result


@dataclass
class GenerationBench:
    """A decoder's prefill and decode steps timed: prefill tokens/s and decode ms/token on each side."""

    prefill: BenchResult
    decode: BenchResult
    prefill_tokens: int

    def rates(self) -> dict[str, dict[str, float]]:
        def per_s(ms: float) -> float:
            return round(self.prefill_tokens / (ms / 1e3), 1) if ms else float("inf")

        return {
            "prefill_tokens_per_s": {"cpu": per_s(self.prefill.cpu_ms), "executor": per_s(self.prefill.executor_ms)},
            "decode_ms_per_token": {"cpu": round(self.decode.cpu_ms, 3), "executor": round(self.decode.executor_ms, 3)},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "prefill_tokens": self.prefill_tokens,
            **self.rates(),
            "prefill": self.prefill.to_json(),
            "decode": self.decode.to_json(),
        }


def bench_generation(
    path: Path, device: Device, runs: int = 20, threads: int | None = None, precision: str = "fp32", start: bool = True
) -> GenerationBench:
    """Both steps of a decoder (its prefill and decode signatures, as verify --generate picks them)."""
    from gpulint.verify.generate import Interface, pick_signatures

    model = read(path)
    prefill, decode = pick_signatures(model)
    sig = Interface.of(model, prefill)
    tokens = next((sig.shapes[n][-1] for n in sig.inputs if sig.role(n) == "tokens"), 1)
    return GenerationBench(
        bench_signature(path, prefill, device, runs, threads, precision, start),
        bench_signature(path, decode, device, runs, threads, precision, start=False),
        tokens,
    )


BUSY = 0.5  # a load average above this share of the cores is a busy machine


def busy(load: dict[str, float]) -> bool:
    """bench runs nothing beside itself (no --jobs), but it cannot stop others: where the machine
    was busy its times are under that sharing, and it says so."""
    return bool(load) and max(load["before"], load["after"]) > BUSY * load["cores"]


def _load() -> float:
    """The 1-minute load average (0 where the system has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return 0.0


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


def _op_table(ex: Executor, model: Model) -> list[dict[str, Any]]:
    """Kernel time per op (an op may launch several kernels), numbered as in `model`: the
    executor's ops are matched by an output's name (its own numbering is that of the partition
    after the preparing passes; a fused op carries the name of its group's last output). A
    kernel that matches no op of `model` gets -1, never the partition's own number."""
    numbers: dict[str, int] = {}
    for i, op in enumerate(model.subgraphs[0].operators):
        for out in op.outputs:
            if out >= 0:
                numbers.setdefault(model.subgraphs[0].tensors[out].name or "", i)
    per_op: dict[int, float] = defaultdict(float)
    names: dict[int, str] = {}
    for t in ex.timings:
        index = t.op_index
        if index >= 0:
            outputs = [ex.sg.tensors[o].name or "" for o in ex.sg.operators[index].outputs if o >= 0]
            index = next((numbers[n] for n in outputs if n in numbers), -1)
        per_op[index] += t.seconds
        names[index] = t.op
    return [{"op_index": i, "op": names[i], "ms": round(s * 1e3, 4)} for i, s in per_op.items()]


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
    """Child: read, partition, build (program from cache or compiled) and run once; print the seconds."""
    from gpulint.executor import select_device

    clock = time.perf_counter()
    model = read(path)
    runner = PartitionedRunner(model, select_device(spec), precision)
    runner.run(reference.random_inputs(model, 0))
    runner.close()
    print(json.dumps({"seconds": round(time.perf_counter() - clock, 4)}))


if __name__ == "__main__":
    _start(*sys.argv[1:4])

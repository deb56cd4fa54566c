"""Model-zoo scale (#41): models per second for check (cold and from the result cache), verify in one
process and in --jobs processes, on a local two-node Ray cluster, and Ray's per-task overhead.

    .venv/bin/python bench/bench_zoo.py [--models 60] [--jobs 2,4] [--ray] [--json out.json]

Builds a zoo with the project's builder (conv stacks, depthwise blocks and dense heads of varied
depth, width and resolution), then times whole `gpulint` commands on it, as a user runs them: each
in a fresh cache folder unless it measures the cache. The kernel cache is warmed first (verify's
cold compile is another question: bench_executor). --ray starts a head and a second node (one CPU
each) on 127.0.0.1, as tests/test_ray.py does, and stops them after (`ray stop`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpulint.model import write
from gpulint.model.build import ModelBuilder

BIN = Path(sys.executable).parent


def zoo_model(i: int) -> Any:
    """Model i of the zoo: one of three families, its depth, width and size from i."""
    rng = np.random.default_rng(i)
    size, width, depth = (8, 16, 24, 32)[i % 4], (4, 8, 12, 16, 32)[i % 5], 1 + i % 4
    mb = ModelBuilder()
    g = mb.subgraph("main")
    y = g.input("image", [1, size, size, 3])
    c = 3
    for d in range(depth):
        family = i % 3
        if family == 1 and d:  # depthwise block
            w = g.const(f"dw{d}", rng.standard_normal((1, 3, 3, c)).astype(np.float32) * 0.3)
            b = g.const(f"dwb{d}", np.zeros(c, np.float32))
            opts = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function="RELU6")
            y = g.op("DEPTHWISE_CONV_2D", [y, w, b], [1, size, size, c], options=opts)
        w = g.const(f"w{d}", rng.standard_normal((width, 3, 3, c)).astype(np.float32) * 0.3)
        b = g.const(f"b{d}", rng.standard_normal(width).astype(np.float32))
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
        y = g.op("CONV_2D", [y, w, b], [1, size, size, width], options=opts)
        c = width
    if i % 3 == 2:  # dense head
        flat = g.op("RESHAPE", [y, g.const("shape", np.array([1, size * size * c], np.int32))], [1, size * size * c])
        w = g.const("fc", rng.standard_normal((10, size * size * c)).astype(np.float32) * 0.05)
        y = g.op("FULLY_CONNECTED", [flat, w, g.const("fcb", np.zeros(10, np.float32))], [1, 10])
    g.output(y)
    return mb.build()


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gpulint", *args], capture_output=True, text=True, env=env)
    if r.returncode not in (0, 1):
        raise SystemExit(f"gpulint {' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
    return time.perf_counter() - start


def ray_overhead(address: str, n: int = 200) -> float:
    """Seconds per trivial task, submitted all at once on the cluster, after a warm-up."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)

    @ray.remote(num_cpus=1)
    def nothing(x: bytes) -> int:
        return len(x)

    ray.get([nothing.remote(b"x") for _ in range(20)])
    start = time.perf_counter()
    ray.get([nothing.remote(b"x" * 100_000) for _ in range(n)])
    seconds = (time.perf_counter() - start) / n
    ray.shutdown()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=60)
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--jobs", default="2", help="Comma-separated --jobs to time verify at, beside 1.")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gpulint-zoo-"))
    zoo = work / "zoo"
    zoo.mkdir()
    for i in range(a.models):
        write(zoo_model(i), zoo / f"m{i:04d}.tflite")
    base = os.environ | {"GPULINT_CACHE_DIR": str(work / "kernels")}
    base.pop("GPULINT_NO_CACHE", None)
    n = a.models
    rows: dict[str, float] = {}
    timed(["verify", str(zoo), "--no-cache", "--jobs", "2"], base)  # the kernel cache, warm
    rows["check, no cache"] = timed(["check", str(zoo), "--no-cache"], base)
    rows["check, cold cache (writes it)"] = timed(["check", str(zoo)], base)
    rows["check, from the cache"] = timed(["check", str(zoo)], base)
    rows["verify --jobs 1, no cache"] = timed(["verify", str(zoo), "--no-cache"], base)
    for jobs in sorted({int(j) for j in a.jobs.split(",")} - {1}):
        rows[f"verify --jobs {jobs}, no cache"] = timed(["verify", str(zoo), "--no-cache", "--jobs", str(jobs)], base)
    timed(["verify", str(zoo)], base)
    rows["verify, from the cache"] = timed(["verify", str(zoo)], base)
    overhead = None
    if a.ray:
        ray = str(BIN / "ray")
        address = "127.0.0.1:6391"
        temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
        common = ["--num-cpus", "1", "--temp-dir", temp, "--disable-usage-stats", "--node-ip-address", "127.0.0.1"]
        subprocess.run(
            [ray, "start", "--head", "--port", "6391", "--include-dashboard=false", *common],
            check=True,
            capture_output=True,
            env=base,
        )
        subprocess.run([ray, "start", "--address", address, *common], check=True, capture_output=True, env=base)
        try:
            rows["verify --ray (2 nodes x 1 CPU), no cache"] = timed(
                ["verify", str(zoo), "--no-cache", "--ray", address], base
            )
            overhead = ray_overhead(address)
        finally:
            subprocess.run([ray, "stop", "--force"], capture_output=True)
            shutil.rmtree(temp, ignore_errors=True)
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    print(f"{n} models, {os.cpu_count()} cores, {cpu}")
    print(f"| {'run':45} | seconds | models/s | vs first |")
    print(f"|{'-' * 47}|--------:|---------:|---------:|")
    firsts = {"check": rows["check, no cache"], "verify": rows["verify --jobs 1, no cache"]}
    for name, seconds in rows.items():
        first = firsts[name.split()[0].rstrip(",")]
        print(f"| {name:45} | {seconds:7.2f} | {n / seconds:8.1f} | {seconds / first:8.2f} |")
    if overhead is not None:
        print(f"Ray: {overhead * 1000:.2f} ms a trivial task with 100 kB of bytes (200 tasks, 2 workers)")
    if a.json:
        a.json.write_text(json.dumps({"models": n, "cpu": cpu, "seconds": rows, "ray_task_s": overhead}, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Timing helpers the benchmarks share."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `fn` over `repeat` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def median_wall(argv: list[str], runs: int) -> float:
    """Median wall time of running `argv` as a process `runs` times (it must exit 0)."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)

"""Warm invoke times of the interpreter, measured in a child (for bench)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from gpulint.reference.child import fed, interpreter, load_inputs
from gpulint.reference.interpreter import spawn, time_limit


def time_invoke(model_path: str | os.PathLike[str], inputs: list[np.ndarray], runs: int, threads: int) -> list[float]:
    """Seconds per warm `invoke()` of the interpreter (after WARM_S of untimed runs), in a child."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        src, dst = Path(tmp, "in.npz"), Path(tmp, "times.npy")
        np.savez(src, *inputs)
        limit = time_limit([model_path]) * (runs + 1)
        spawn([TIME, str(runs), str(threads), str(src), str(model_path), str(dst)], limit, str(model_path))
        return [float(t) for t in np.load(dst)]


TIME = "--time"
WARM_S = 0.3  # seconds of untimed invokes before timing


def time_child(runs: int, threads: int, src: str, model_path: str, dst: str) -> None:
    import time

    it = fed(interpreter(model_path, num_threads=threads), load_inputs(src))
    warm = time.perf_counter() + WARM_S  # as long as the executor's warm-up in gpulint.bench
    it.invoke()
    while time.perf_counter() < warm:
        it.invoke()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - start)
    np.save(dst, np.array(times))

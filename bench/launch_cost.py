"""Where a run's time goes when launches are many and kernels small (a GPU's driver): per model, in
one process, a whole run, the enqueue loop alone (pyopencl, an Event object per launch; and
clEnqueueNDRangeKernel through ctypes with no event), and the kernels' own time by their events.

    python bench/launch_cost.py RUNS MODEL...

The ctypes call is the experiment README reports as not kept; it needs the OpenCL loader that
pyopencl's wheel carries (pyopencl/.libs) or a system libOpenCL.so.1.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import time
from typing import Any

import numpy as np
import pyopencl as cl

from gpulint import reference
from gpulint.executor import Executor, launch, select_device
from gpulint.model import read


def opencl_library() -> Any:
    for path in [*glob.glob(os.path.join(os.path.dirname(cl.__file__), ".libs", "libOpenCL*")), "libOpenCL.so.1"]:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        lib.clEnqueueNDRangeKernel.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_uint] + [ctypes.c_void_p] * 3
        lib.clEnqueueNDRangeKernel.argtypes += [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.clEnqueueNDRangeKernel.restype = ctypes.c_int
        return lib
    sys.exit("no OpenCL library for ctypes")


def measure(path: str, runs: int, device: Any, enqueue_nd_range: Any) -> str:
    model = read(path)
    x = reference.random_inputs(model, 0)
    ex = Executor(model, device)
    launches = ex.input_launches + ex.launches
    prepared = []
    for ln in launches:
        n = len(ln.global_size)
        local = (ctypes.c_size_t * n)(*ln.local_size) if ln.local_size else None
        prepared.append((ln.bound.int_ptr, n, (ctypes.c_size_t * n)(*ln.global_size), local))
    queue = device.queue

    def without_events() -> None:
        for kernel, n, size, local in prepared:
            if enqueue_nd_range(queue.int_ptr, kernel, n, None, size, local, 0, None, None):
                raise RuntimeError("clEnqueueNDRangeKernel failed")

    def best_ms(step: Any) -> float:
        for _ in range(20):
            step()
        queue.finish()
        times = []
        for _ in range(3):
            clock = time.perf_counter()
            for _ in range(runs):
                step()
            queue.finish()
            times.append((time.perf_counter() - clock) / runs * 1e3)
        return min(times)

    expected = ex.run(x)
    run = best_ms(lambda: ex.run(x))
    loop = best_ms(lambda: launch.enqueue(device, launches, queue))
    loop_ctypes = best_ms(without_events)
    original = launch.enqueue
    launch.enqueue = lambda d, ls, q: (without_events(), [])[1]  # type: ignore[assignment]
    same = all(np.array_equal(a, b) for a, b in zip(expected, ex.run(x), strict=True))
    run_ctypes = best_ms(lambda: ex.run(x))
    launch.enqueue = original  # type: ignore[assignment]
    ex.run(x, profile=True)
    kernels = sum(t.seconds for t in ex.timings) * 1e3
    return (
        f"{os.path.basename(path)}: {len(launches)} launches, run {run:.3f} ms (ctypes {run_ctypes:.3f}), "
        f"enqueue loop {loop:.3f} ms (ctypes {loop_ctypes:.3f}), kernels {kernels:.3f} ms, same outputs {same}"
    )


def main() -> None:
    runs, paths = int(sys.argv[1]), sys.argv[2:]
    enqueue_nd_range = opencl_library().clEnqueueNDRangeKernel
    device = select_device()
    print(f"device: {device.describe()}")
    for path in paths:
        print(measure(path, runs, device, enqueue_nd_range))


if __name__ == "__main__":
    main()

"""Half precision against fp32 on this machine's OpenCL device, and what half storage's integer
conversions (prelude.cl.j2, on a CPU device) buy over vload_half/vstore_half, in one process.

    .venv/bin/python bench/half_storage.py MODEL.tflite [...]

On a GPU, which keeps vload_half, the last two columns are the same code.

Per model: four executors built side by side (fp32; fp32-fp16, half storage with float
arithmetic, as shipped; fp32-fp16 with the vload_half/vstore_half macros put back into the kernel
source; fp16, half storage and half arithmetic as phones run it) and timed alternately, 15 rounds,
medians. The two fp32-fp16 outputs must be identical: the conversions are exact either way.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from gpulint import reference
from gpulint.executor import Executor, program
from gpulint.model import read

VLOAD = """#define LOAD4(i, p) vload_half4((i), (__global const half*)(p))
#define LOAD8(i, p) vload_half8((i), (__global const half*)(p))
#define LOAD16(i, p) vload_half16((i), (__global const half*)(p))
#define STORE4(v, i, p) vstore_half4((v), (i), (__global half*)(p))
#define LOAD1(i, p) vload_half((i), (__global const half*)(p))
#define STORE1(v, i, p) vstore_half((v), (i), (__global half*)(p))
"""
SHIPPED = program.kernel_source


def with_vload_half(
    half: bool, fp16_extension: bool = False, epilogue_loop: bool = False, half_math: bool = False
) -> str:
    source = SHIPPED(half, fp16_extension, epilogue_loop, half_math)
    if half and "#define LOAD4(i, p) half_to_float4" in source:  # a CPU device's integer conversions
        start = source.index("#define LOAD4(i, p) half_to_float4")
        end = source.index("\n", source.index("#define STORE1(v, i, p)")) + 1
        source = source[:start] + VLOAD + source[end:]
    return source


def build(model: object, precision: str, source: object) -> Executor:
    program.kernel_source = source  # type: ignore[assignment]
    for cached in (program.kernel_parts, program.kernel_sources):
        cached.cache_clear()
    program._PROGRAMS.clear()
    return Executor(model, precision=precision)  # type: ignore[arg-type]


def main() -> None:
    for path in sys.argv[1:]:
        model = read(path)
        x = reference.random_inputs(model, 0)
        runs = {
            "fp32": build(model, "fp32", SHIPPED),
            "fp32-fp16": build(model, "fp32-fp16", SHIPPED),
            "fp32-fp16 vload_half": build(model, "fp32-fp16", with_vload_half),
            "fp16": build(model, "fp16", SHIPPED),
        }
        program.kernel_source = SHIPPED
        np.testing.assert_array_equal(runs["fp32-fp16"].run(x)[0], runs["fp32-fp16 vload_half"].run(x)[0])
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(15):
            for k, ex in runs.items():
                clock = time.perf_counter()
                ex.run(x)
                times[k].append(time.perf_counter() - clock)
        ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        print(
            f"{path.split('/')[-1]}: "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items())
            + f"; fp32-fp16/fp32 {ms['fp32-fp16'] / ms['fp32']:.2f}, "
            + f"with vload_half {ms['fp32-fp16 vload_half'] / ms['fp32']:.2f}; fp16/fp32 {ms['fp16'] / ms['fp32']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Half precision against fp32 on this machine's OpenCL device, and what a CPU device's ways of
converting half storage (prelude.cl.j2) cost against each other, in one process.

    .venv/bin/python bench/half_storage.py MODEL.tflite [...]

Per model, executors built side by side and timed alternately, 15 rounds, medians: fp32;
fp32-fp16 (F32_F16: half storage and arithmetic, float sums in convs) as shipped (F16C where the
CPU has it), with the integer conversions, and with vload_half/vstore_half put back into the
kernel source; fp32-fp16 with its arithmetic in float ("storage only": what the emulation of its
half arithmetic costs); fp16 (F16, half sums too, as most phones run it) as shipped and with the
integer conversions and rounding. The fp32-fp16 outputs must be identical but for storage only's,
and so must the fp16 ones: every conversion is exact. On a GPU, which keeps vload_half, the
conversion columns are the same code.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

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
Source = Callable[..., str]


def variant(**fixed: bool) -> Source:
    """program.kernel_source with some of the flavour's fields fixed."""
    return lambda flavour: SHIPPED(flavour._replace(**fixed))


integer = variant(f16c=False)  # a CPU device's integer conversions, not F16C
storage_only = variant(half_math=False, half_accum=False)  # fp32-fp16 with its arithmetic in float


def with_vload_half(flavour: program.Flavour) -> str:
    source = integer(flavour)
    if flavour.half and "#define LOAD4(i, p) half_to_float4" in source:  # a CPU device's integer conversions
        start = source.index("#define LOAD4(i, p) half_to_float4")
        end = source.index("\n", source.index("#define STORE1(v, i, p)")) + 1
        source = source[:start] + VLOAD + source[end:]
    return source


def build(model: object, precision: str, source: Source) -> Executor:
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
            "fp32-fp16 integer": build(model, "fp32-fp16", integer),
            "fp32-fp16 vload_half": build(model, "fp32-fp16", with_vload_half),
            "fp32-fp16 storage only": build(model, "fp32-fp16", storage_only),
            "fp16": build(model, "fp16", SHIPPED),
            "fp16 integer": build(model, "fp16", integer),
        }
        program.kernel_source = SHIPPED
        same = [("fp32-fp16", "fp32-fp16 integer"), ("fp32-fp16", "fp32-fp16 vload_half"), ("fp16", "fp16 integer")]
        for a, b in same:
            for u, v in zip(runs[a].run(x), runs[b].run(x), strict=True):
                np.testing.assert_array_equal(u, v)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(15):
            for k, ex in runs.items():
                clock = time.perf_counter()
                ex.run(x)
                times[k].append(time.perf_counter() - clock)
        ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        print(
            f"{path.split('/')[-1]}: " + ", ".join(f"{k} {v:.2f} ms ({v / ms['fp32']:.2f})" for k, v in ms.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()

"""The executor's precisions, named as the GPU delegate's CalculationsPrecision
(tflite/delegates/gpu/common/precision.h; the OpenCL defines in cl/cl_operation.cc):

- fp32 (F32): tensors stored in float, every step in float.
- fp32-fp16 (F32_F16): tensors stored in half, arithmetic in float. The delegate computes its
  elementwise code in half here too (FLT4 is half4); the executor does for an int8 result's
  rounding (quantize4), and otherwise in float: a step's result becomes a half when it is stored.
- fp16 (F16): half storage and half arithmetic, what most phones run (precision loss allowed):
  every step's result rounded to half, accumulations included (ACCUM_FLT4 is half4). Emulated on
  a device without cl_khr_fp16 (all of ours): each result computed in float, then rounded to the
  nearest half (ties to even, overflow to Inf); see kernels/prelude.cl.j2.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulint.executor.errors import ExecutorError


@dataclass(frozen=True)
class Precision:
    name: str
    half_storage: bool  # tensors (and conv weights' values) in half
    half_math: bool  # every arithmetic result rounded to half, accumulators included


PRECISIONS = {
    "fp32": Precision("fp32", False, False),
    "fp32-fp16": Precision("fp32-fp16", True, False),
    "fp16": Precision("fp16", True, True),
}


def precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise ExecutorError(f"precision must be one of {', '.join(PRECISIONS)}, not {name}")
    return PRECISIONS[name]

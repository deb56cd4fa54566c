"""The executor's precisions, named as the GPU delegate's CalculationsPrecision
(tflite/delegates/gpu/common/precision.h; the OpenCL defines in cl/cl_operation.cc,
GetCommonOpenCLDefines):

- fp32 (F32): tensors stored in float, every step in float.
- fp32-fp16 (F32_F16): tensors stored in half; FLT4 is half4 and ACCUM_FLT4 float4 there, so
  every step on values is a half (elementwise ops, fused steps, a conv's products and its
  four-product partial sums) and only the conv-family accumulators are float.
- fp16 (F16): half storage and half arithmetic, what most phones run (precision loss allowed):
  every step's result rounded to half, accumulations included (ACCUM_FLT4 is half4 too).
Half arithmetic is emulated on a device without cl_khr_fp16 (all of ours): each result computed
in float, then rounded to the nearest half (ties to even, overflow to Inf); see
kernels/prelude.cl.j2. Ops whose sums the delegate keeps in float at every precision (reduce,
pools, softmax) are float at both.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulint.executor.errors import ExecutorError


@dataclass(frozen=True)
class Precision:
    name: str
    half_storage: bool  # tensors (and conv weights' values) in half
    half_math: bool  # a step's result on values (the delegate's FLT4) rounded to half
    half_accum: bool  # conv-family accumulators (ACCUM_FLT4) rounded to half at each step too


PRECISIONS = {
    "fp32": Precision("fp32", False, False, False),
    "fp32-fp16": Precision("fp32-fp16", True, True, False),
    "fp16": Precision("fp16", True, True, True),
}


def precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise ExecutorError(f"precision must be one of {', '.join(PRECISIONS)}, not {name}")
    return PRECISIONS[name]

"""What a kernel source is made for (program.py renders it, guard.py keeps which ones compile)."""

from __future__ import annotations

from typing import NamedTuple


class Flavour(NamedTuple):
    """What a kernel source is made for. `half`: tensors stored as half. Half storage needs no
    cl_khr_fp16: OpenCL C lets any device read and write half buffers with vload_half/vstore_half;
    `fp16_extension` (a device that has it) turns cl_khr_fp16 on. `epilogue_loop`: fused conv
    kernels run their fused steps in one loop after the stores instead of at each unrolled store
    (see conv.cl.j2). `half_math` (F32_F16 and F16, precision.py): each step on values rounded to
    half (the kernels' RH macros); `half_accum` (F16): the conv-family sums too (RA). `f16c`: on a
    CPU device, half vectors convert in the CPU's own instructions (Device.converts_half)."""

    half: bool
    fp16_extension: bool = False
    epilogue_loop: bool = False
    half_math: bool = False
    f16c: bool = False
    half_accum: bool = False

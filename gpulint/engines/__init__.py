"""Engines: what runs the candidate model on the GPU side of a verification.

- `opencl` (OpenClEngine): gpulint's OpenCL executor emulating the classic delegate, at fp32,
  fp32-fp16 (F32_F16) and fp16 (F16), any OpenCL device (PoCL on a CPU).
- `litert-gpu` (LiteRtGpuEngine): LiteRT's real GPU accelerator (ML Drift on WebGPU), fp32
  (enforce_f32) and fp16 (its default), on any machine with a Vulkan driver.
- `gl` (GlEngine): the classic delegate itself, its OpenGL ES backend from the mediapipe wheel
  (gpulint[gl]), fp32 and fp16 (precision loss allowed), on the machine's GL (Mesa llvmpipe
  without a GPU). The real runtime that the opencl engine models.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpulint.engines.base import Engine, EngineError, EngineUnavailable, gpu_op_count

if TYPE_CHECKING:
    from gpulint.executor import Device
    from gpulint.model.ir import Model

ENGINES = ("opencl", "litert-gpu", "gl")


def open_engine(name: str, model: Model, path: Path, precision: str, target: str, device: Device | None) -> Engine:
    """Engine `name` on `model` (read from `path`), at `precision`; `device`: the OpenCL device
    of the opencl engine. `target`: the built-in target whose plan the opencl engine follows."""
    if name == "litert-gpu":
        from gpulint.engines.litert_gpu import LiteRtGpuEngine

        return LiteRtGpuEngine(model, path, precision)
    if name == "gl":
        from gpulint.engines.gl import GlEngine

        return GlEngine(model, path, precision, target)
    from gpulint.engines.opencl import OpenClEngine

    if device is None:
        raise EngineError("the opencl engine needs an OpenCL device")
    return OpenClEngine(model, device, precision, target)


__all__ = ["ENGINES", "Engine", "EngineError", "EngineUnavailable", "gpu_op_count", "open_engine"]

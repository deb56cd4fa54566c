"""The OpenCL executor: gpulint's kernels (gpulint/kernels/*.cl) run through pyopencl, with
tensors laid out as the GPU delegate lays them out."""

from gpulint.executor.device import Device, ExecutorError, select_device
from gpulint.executor.executor import Executor, Unlowered

__all__ = ["Device", "Executor", "ExecutorError", "Unlowered", "select_device"]

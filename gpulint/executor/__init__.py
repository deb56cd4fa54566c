"""The OpenCL executor: gpulint's kernels (gpulint/kernels/*.cl) run through pyopencl, with
tensors laid out as the GPU delegate lays them out."""

from gpulint.executor.device import Device, select_device
from gpulint.executor.errors import DeviceError, ExecutorError, Unlowered
from gpulint.executor.executor import Executor

__all__ = ["Device", "DeviceError", "Executor", "ExecutorError", "Unlowered", "select_device"]

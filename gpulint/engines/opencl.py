"""The opencl engine: gpulint's own executor (gpulint/kernels/*.cl on an OpenCL device) for the
delegated partitions, the LiteRT CPU interpreter for the rest, as the classic delegate splits
the graph (partitioned.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import Device
from gpulint.model.ir import Model
from gpulint.partitioned import PartitionedRunner

NAME = "opencl"


class OpenClEngine:
    name = NAME

    def __init__(self, model: Model, device: Device, precision: str, target: str) -> None:
        self.model, self.device, self.precision = model, device, precision
        self.runner = PartitionedRunner(model, device, precision, target)
        self.warnings = list(self.runner.warnings)
        self.gpu_ops = {i for p in self.runner.parts if p.kind == "gpu" for i in p.ops}
        self.parts: list[dict[str, Any]] = [
            {
                "kind": p.kind,
                "ran_on": device.describe() if p.kind == "gpu" else "LiteRT CPU interpreter",
                "ops": p.ops,
                "summary": p.describe(model),
            }
            for p in self.runner.parts
        ]

    def info(self) -> dict[str, str]:
        return self.device.info()

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.runner.run(inputs)

    def close(self) -> None:
        self.runner.close()

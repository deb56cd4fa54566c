"""Every tensor of one executor run, by name, for the diagnoses that look inside the model."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint.executor import Device
from gpulint.model.ir import Model
from gpulint.partitioned import PartitionedRunner
from gpulint.verify.request import Request


def executor_tensors(model: Model, device: Device, req: Request, feed: Any) -> dict[str, np.ndarray]:
    """Every tensor the executor wrote in one partitioned run, by name (one buffer per tensor),
    and the graph inputs. Tensors made by CPU partitions are not kept."""
    runner = PartitionedRunner(model, device, req.precision, req.target, keep_intermediates=True)
    try:
        sg = model.subgraphs[0]
        tensors = {sg.tensors[t].name or "": np.asarray(x) for t, x in zip(sg.inputs, feed, strict=True)}
        runner.run(feed)
        for part in runner.parts:
            if part.executor is not None:
                tensors |= part.executor.intermediates()
        return tensors
    finally:
        runner.close()

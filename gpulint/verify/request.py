"""What a verification is asked to do, and the error when it cannot run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpulint.compare import Tolerance


class VerifyError(RuntimeError):
    """Verification could not run (bad inputs file, interface mismatch)."""


@dataclass
class Request:
    model_path: Path
    candidate_path: Path | None = None
    runs: int = 1
    seed: int = 0
    distribution: str = "uniform"
    inputs: Path | None = None
    precision: str = "fp32"
    target: str = "classic"
    engine: str = "opencl"  # what runs the candidate's GPU side (gpulint.engines)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # by output name, or "*" for all
    bisect: bool = False
    save_reference: Path | None = None
    reference: Path | None = None
    export_repro: Path | None = None  # with bisect: the smallest failing sub-model, its inputs and CPU outputs
    signature: str | None = None  # run this signature's subgraph (default: subgraph 0)

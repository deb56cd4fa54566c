"""A verification's results: each output's two verdicts, and the whole run (its JSON shape)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpulint.compare import PRECISION_WORDS, Tolerance, Verdict
from gpulint.engines import gpu_op_count

# An output's comparisons, best first: the worst decides.
OUTPUT_RANK = ["PASS", "INCONCLUSIVE", "FAIL"]


@dataclass
class OutputResult:
    """One output: the rewrite comparison and the executor comparison."""

    name: str
    shape: list[int]
    dtype: str
    rewrite: Verdict
    executor: Verdict
    first_nonfinite: dict[str, Any] | None = None  # the op that first made a NaN/Inf
    hybrid_gap: dict[str, Any] | None = None  # the CPU's hybrid kernels against float (information)
    int8_gap: dict[str, Any] | None = None  # the CPU's int8 kernels against float + rounding (information)

    @property
    def passed(self) -> bool:
        return self.rewrite.passed and self.executor.passed

    @property
    def status(self) -> str:
        """FAIL where either comparison fails, else INCONCLUSIVE where either could not have failed
        (its tolerance covers the output's range), else PASS."""
        return max(self.rewrite.status, self.executor.status, key=OUTPUT_RANK.index)

    @property
    def decidable(self) -> str:
        return "; ".join(f"{k}: {v.decidable}" for k, v in self.comparisons().items() if v.decidable)

    # The executor comparison is the one most readers look for: its numbers stand at the top.
    @property
    def metrics(self) -> dict[str, Any]:
        return self.executor.metrics

    @property
    def tolerance(self) -> Tolerance:
        return self.executor.tolerance

    @property
    def reason(self) -> str:
        return "; ".join(f"{k}: {v.reason}" for k, v in self.comparisons().items() if v.reason)

    def comparisons(self) -> dict[str, Verdict]:
        return {"rewrite": self.rewrite, "executor": self.executor}

    def to_json(self) -> dict[str, Any]:
        ex = self.executor.to_json()
        return {
            **ex,
            "status": self.status,
            "reason": self.reason,
            "decidable": self.decidable or None,
            "rewrite": self.rewrite.to_json(),
            "executor": ex,
            "first_nonfinite": self.first_nonfinite,
            "hybrid_gap": self.hybrid_gap,
            "int8_gap": self.int8_gap,
        }


@dataclass
class VerifyResult:
    model: str
    candidate: str
    device: dict[str, str]  # name, driver, and why it was chosen (Device.info)
    precision: str
    runs: int
    partitions: list[dict[str, Any]]
    outputs: list[OutputResult] = field(default_factory=list)
    noise_probe: str = ""
    integer_inputs: list[dict[str, Any]] = field(default_factory=list)  # random ints: their range, and why
    cpu_reference: str = ""  # what the CPU side ran, where it is not the model as given
    attribution: str = ""
    bisect: dict[str, Any] | None = None
    half_loss: dict[str, Any] | None = None  # on an executor FAIL in half: where it overflowed or lost digits
    seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the engine's: ops run elsewhere than planned, and why
    engine: str = "opencl"  # what ran the GPU side (gpulint.engines)
    repro: dict[str, Any] | None = None  # --export-repro: what was written

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    @property
    def executor_ops(self) -> int:
        """How many of the candidate's ops ran on the GPU side (the executor's partitions, or the ops
        LiteRT's accelerator took)."""
        return gpu_op_count(self.partitions)

    @property
    def status(self) -> str:
        """FAIL where an output fails; else CPU-ONLY where no op ran on the GPU side (a graph the
        delegate refuses, or one with no op it takes), so the comparison set the CPU against itself
        and showed nothing about the GPU (`gpulint verify` exits 3); else INCONCLUSIVE where an
        output's comparison could not have failed (exit 4); else PASS."""
        if not self.passed:
            return "FAIL"
        if not self.executor_ops:
            return "CPU-ONLY"
        return "INCONCLUSIVE" if any(o.status == "INCONCLUSIVE" for o in self.outputs) else "PASS"

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "candidate": self.candidate,
            "status": self.status,
            "engine": self.engine,
            "executor_ops": self.executor_ops,
            "device": self.device,
            "precision": self.precision,
            "precision_means": PRECISION_WORDS.get(self.precision, ""),
            "runs": self.runs,
            "partitions": self.partitions,
            "noise_probe": self.noise_probe,
            "integer_inputs": self.integer_inputs,
            "cpu_reference": self.cpu_reference,
            "outputs": [o.to_json() for o in self.outputs],
            "attribution": self.attribution,
            "bisect": self.bisect,
            "repro": self.repro,
            "half_precision": self.half_loss,
            "seconds": self.seconds,
            "warnings": self.warnings,
        }

"""The verdicts: every output judged twice (rewrite and executor), each against the CPU's own
noise, measured by running the CPU side twice."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpulint import compare, reference
from gpulint.compare import Tolerance
from gpulint.model.ir import Model
from gpulint.text import clean
from gpulint.verify.request import Request, VerifyError
from gpulint.verify.result import OutputResult


@dataclass
class Cpu:
    """Per run: a model's outputs on the CPU interpreter, and the second CPU opinion."""

    outputs: list[list[np.ndarray]]
    second: list[list[np.ndarray]] | None  # None: not measured (a saved reference)
    probe: str = ""


def cpu_runs(path: Path, inputs: list[list[np.ndarray]]) -> Cpu:
    noisy = [reference.run_with_noise([path], x)[0] for x in inputs]
    return Cpu([n.outputs for n in noisy], [n.second for n in noisy], noisy[0].probe if noisy else "")


REWRITE_FAULT = "the candidate differs from the original on the CPU interpreter"
EXECUTOR_FAULT = "the executor differs from the candidate on the CPU interpreter"


def _precision_dropped(original: Model, candidate: Model) -> bool:
    """Whether the candidate has fewer quantized tensors than the original: a precision rewrite
    (quantized -> float), which cannot keep the quantized model's rounding."""

    def quantized(m: Model) -> int:
        return sum(t.type in ("INT8", "UINT8", "INT16") for t in m.subgraphs[0].tensors)

    return quantized(candidate) < quantized(original)


def judge_all(
    req: Request,
    original: Model,
    candidate: Model,
    orig: Cpu,
    cand: Cpu,
    all_gots: list[list[np.ndarray]],
    same_model: bool,
    half_steps: list[float] | None = None,
) -> list[OutputResult]:
    """Every output judged twice. `half_steps`: per output, the quantization steps half
    precision's rounding flips move it by on the CPU (twins.half_probe_steps), in half only."""
    sg = original.subgraphs[0]
    for outs, what in ((cand.outputs, "the candidate on the CPU"), (all_gots, "the candidate on the executor")):
        if any(len(o) != len(sg.outputs) for o in outs):
            raise VerifyError(f"{what} has {len(outs[0])} outputs, the original {len(sg.outputs)}")
    dropped = _precision_dropped(original, candidate)
    rewrite_policy = compare.PRECISION_REWRITE if dropped else compare.REWRITE_PROOF
    out = []
    for i, t in enumerate(sg.outputs):
        name = clean(sg.tensors[t].name, 200) or f"output {i}"  # model text: printable, bounded
        user = req.tolerances.get(name) or req.tolerances.get("*")
        refs = [r[i] for r in orig.outputs]
        cpu = [c[i] for c in cand.outputs]
        gots = [np.asarray(g[i]) for g in all_gots]
        cand_noise = _noise(cand, i)
        if same_model:
            rewrite = compare.judge(name, refs, cpu, rewrite_policy, "fp32", 0.0, None, Tolerance(0.0))
            rewrite.tolerance.source = "the candidate is the original: identical by construction"
        else:
            step = compare.quant_step(original, i) if dropped or refs[0].dtype.kind in "iu" else None
            rewrite = compare.judge(
                name, refs, cpu, rewrite_policy, "fp32", compare.Noise.larger(cand_noise, _noise(orig, i)), step,
                sides=("original on the CPU", "candidate on the CPU"),
            )  # fmt: skip
        step = compare.quant_step(candidate, i)
        flips = half_steps[i] if half_steps is not None and step is not None else 0.0
        executor = compare.judge(
            name, cpu, gots, compare.EXECUTOR_VS_CPU, req.precision, cand_noise, step, user,
            sides=("CPU interpreter", "executor"), half_steps=flips,
        )  # fmt: skip
        if half_steps is not None and step is not None:
            executor.metrics["half_flip_steps"] = flips
        _error_over_noise(executor, cand_noise, step)
        out.append(OutputResult(name, list(refs[0].shape), str(refs[0].dtype), rewrite, executor))
    return out


def _noise(cpu: Cpu, i: int) -> compare.Noise | None:
    """Output i's CPU noise, element by element (None: not measured, a saved reference)."""
    if cpu.second is None:
        return None
    gap = 1.0 if cpu.probe == reference.BUILTIN_PROBE else compare.LOCAL_SCALE_GAP  # see compare.Noise
    return compare.noise_map([o[i] for o in cpu.outputs], [s[i] for s in cpu.second], gap)


def _error_over_noise(v: compare.Verdict, noise: compare.Noise | None, step: float | None) -> None:
    """The executor's error at the chosen precision over the CPU's own noise (float outputs with
    measured noise): the number the policy's noise multiple is calibrated on (compare.py)."""
    m = v.metrics
    if step is not None or noise is None or m.get("max_abs_error") is None:
        return
    m["cpu_noise"] = noise.total
    m["error_over_noise"] = m["max_abs_error"] / noise.total if noise.total > 0 else None

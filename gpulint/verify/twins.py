"""The CPU side as the delegate computes the GPU side: which ops of the original and the
candidate the delegate runs, their twins (hybrid weights dequantized, int8 ops in float and
rounded), what the reference then is, and how far LiteRT's own kernels are from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import compare, reference
from gpulint.model.ir import Model
from gpulint.partitioned import PartitionedRunner, main_plan
from gpulint.verify.request import Request

HYBRID_NOTE = (
    "LiteRT's hybrid kernels quantize each activation to int8 on the fly; the GPU delegate "
    "dequantizes the int8 weights once and computes in float"
)
INT8_NOTE = (
    "LiteRT's int8 kernels requantize in fixed point; the delegate computes in float and rounds to "
    "the int8 grid after each op"
)


@dataclass
class Twins:
    """The original and the candidate as the delegate computes their GPU side (hybrid weights
    dequantized, int8 ops in float with each int8 result rounded to its grid), where they have
    such ops there: files in a temporary folder, or None."""

    original: Path | None
    candidate: Path | None
    hybrid: int  # the candidate's hybrid ops on the GPU side (the original's when the candidate has none)
    int8: int  # the same for int8 ops


def make_twins(req: Request, original: Model, candidate: Model, tmp: str, gpu_ops: tuple[set[int], set[int]]) -> Twins:
    """Only ops on the GPU side are changed: a hybrid or int8 op in a CPU partition runs its
    LiteRT kernel on the device too (and in the candidate's CPU part here), so the reference
    keeps it. `gpu_ops`: the original's and the candidate's ops on the GPU side."""
    from gpulint.model import read, write

    cand_path = req.candidate_path or req.model_path
    paths: list[Path | None] = []
    counts = []
    for name, model, path, on_gpu in (
        ("original", original, req.model_path, gpu_ops[0]),
        ("candidate", candidate, cand_path, gpu_ops[1]),
    ):
        hybrid = [i for i in reference.hybrid_ops(model) if i in on_gpu]
        int8 = [i for i in reference.int8_ops(model) if i in on_gpu]
        counts.append((len(hybrid), len(int8)))
        if not hybrid and not int8:
            paths.append(None)
            continue
        twin = Path(tmp, f"{name}.float.tflite")
        # Op indices stay valid through float_twin (it only adds constants); fake_quant_twin adds ops.
        write(reference.fake_quant_twin(reference.float_twin(read(path), hybrid), int8), twin, allow_loss=True)
        paths.append(twin)
    hybrid_count = counts[1][0] or counts[0][0]
    int8_count = counts[1][1] or counts[0][1]
    return Twins(paths[0], paths[1], hybrid_count, int8_count)


def gpu_side(runner: PartitionedRunner) -> set[int]:
    """The ops the runner runs on the executor (the delegated ones it could lower)."""
    return {i for p in runner.parts if p.kind == "gpu" for i in p.ops}


def delegated_ops(model: Model, target: str) -> set[int]:
    """The ops of the main subgraph that check's plan delegates (for the original of a rewrite)."""
    return {i for p in main_plan(model, target).partitions if p.delegated for i in p.ops}


def cpu_reference_text(twins: Twins) -> str:
    """What the CPU side ran instead of the model as given, and why ("" where it ran the model)."""
    if twins.original is None and twins.candidate is None:
        return ""
    parts = []
    if twins.hybrid:
        parts.append(
            f"{twins.hybrid} hybrid (dynamic-range) op(s): the CPU interpreter runs them with their int8 "
            f"weights dequantized to float32, as the GPU delegate computes them ({HYBRID_NOTE}); the hybrid "
            "kernels' gap to that is reported per output, as information"
        )
    if twins.int8:
        parts.append(
            f"{twins.int8} int8 op(s): the CPU interpreter runs them in float on dequantized weights, each int8 "
            "result rounded to its tensor's grid (QUANTIZE -> DEQUANTIZE), as the GPU delegate computes them "
            f"({INT8_NOTE}: add_quant_adjustments)"
        )
    return "; ".join(parts)


def kernels_gap(twin: list[np.ndarray], kernels: list[np.ndarray], step: float | None) -> dict[str, Any]:
    """How far LiteRT's own kernels are from the delegate's computation on one output (in
    quantization steps too, for a quantized output)."""
    m = compare.metrics(np.stack(twin), np.stack(kernels))
    keep = ("max_abs_error", "mean_abs_error", "max_rel_error", "cosine_similarity")
    gap = {k: m[k] for k in keep}
    if step is not None and m["max_abs_error"] is not None:
        gap["max_abs_error_steps"] = m["max_abs_error"] / step
        gap["mean_abs_error_steps"] = m["mean_abs_error"] / step
    return gap


def gap_text(gap: dict[str, Any]) -> str:
    if gap["max_abs_error"] is None:
        return "no value is a number on both sides"
    if "max_abs_error_steps" in gap:
        return f"{gap['max_abs_error_steps']:.3g} quantization steps (mean {gap['mean_abs_error_steps']:.3g})"
    return f"max abs {gap['max_abs_error']:.3g}, max rel {gap['max_rel_error']:.3g}"

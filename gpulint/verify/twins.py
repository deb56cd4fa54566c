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
from gpulint.partitioned import main_plan
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


# One half rounding's relative error, at most: the nudge half_probe_twins gives each value an
# int8 rounding reads.
HALF_PROBE = 2.0**-11


def half_probe_twins(twin: Path, tmp: str) -> list[Path]:
    """The int8 twin twice more, every value a QUANTIZE rounds to an int8 grid first multiplied by
    1 + HALF_PROBE, then by 1 - HALF_PROBE. In half precision (fp32-fp16 and fp16 alike: the
    delegate's elementwise code, the int8 rounding included, runs on half4) a value within half's
    rounding of a grid midpoint lands one step off; what such flips at every int8 op add up to at
    an output, carried by the ops after them, is this model's own: the probes measure it on the
    CPU, on the same inputs, as the second CPU opinion measures float noise."""
    from gpulint.model import read, write
    from gpulint.model.ir import Tensor
    from gpulint.passes.edit import add_const, new_op

    paths = []
    for name, factor in (("up", 1 + HALF_PROBE), ("down", 1 - HALF_PROBE)):
        model = read(twin)
        sg = model.subgraphs[0]
        nudge = add_const(model, sg, "gpulint/half_probe", np.array([factor], np.float32))
        order = []
        for op in sg.operators:
            x = op.inputs[0] if op.inputs else -1
            if model.op_name(op) == "QUANTIZE" and x >= 0 and sg.tensors[x].type == "FLOAT32":
                old = sg.tensors[x]
                sg.tensors.append(Tensor(f"{old.name}/half_probe", list(old.shape), "FLOAT32"))
                nudged = len(sg.tensors) - 1
                order.append(new_op(model, "MUL", [x, nudge], [nudged], {}, "MulOptions"))
                op.inputs[0] = nudged
            order.append(op)
        sg.operators = order
        path = Path(tmp, f"{twin.stem}.half_{name}.tflite")
        write(model, path, allow_loss=True)
        paths.append(path)
    return paths


def half_probe_steps(twin: Path, tmp: str, model: Model, inputs: list[list[np.ndarray]]) -> list[float]:
    """Per output of `model` (0 for a float one), the most quantization steps the half probes
    (half_probe_twins) move it by from the twin, over every run. Calibrated on the corpus's 29
    int8 models (docs/how-we-know/precision.md): the executor in half was never more than 0.04 steps beyond it."""
    probes = half_probe_twins(twin, tmp)
    steps = [compare.quant_step(model, i) for i in range(len(model.subgraphs[0].outputs))]
    worst = [0.0] * len(steps)
    for x in inputs:
        base, *moved = reference.run_models([twin, *probes], x)
        for i, step in enumerate(steps):
            if step is None:
                continue
            for m in moved:
                d = np.abs(m[i].astype(np.float64) - base[i].astype(np.float64))
                worst[i] = max(worst[i], float(d[np.isfinite(d)].max(initial=0.0)) / step)
    return worst

"""One verification from start to end: the runner built, the twins made, the CPU and the
executor run on the same inputs, every output judged, and on a FAIL the diagnoses."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from gpulint import compare, reference
from gpulint.engines import Engine, open_engine
from gpulint.executor import Device
from gpulint.model.ir import Model
from gpulint.verify.divergence import bisect
from gpulint.verify.half import locate_half_loss
from gpulint.verify.judge import EXECUTOR_FAULT, REWRITE_FAULT, Cpu, cpu_runs, judge_all
from gpulint.verify.nonfinite import find_nonfinite
from gpulint.verify.npz import load_inputs, load_reference, save_reference
from gpulint.verify.prefix import bisect_prefixes, repro_at
from gpulint.verify.request import Request
from gpulint.verify.result import VerifyResult
from gpulint.verify.twins import (
    HYBRID_NOTE,
    INT8_NOTE,
    cpu_reference_text,
    delegated_ops,
    gap_text,
    half_probe_steps,
    kernels_gap,
    make_twins,
)


def verify(req: Request, original: Model, candidate: Model, device: Device | None) -> VerifyResult:
    with tempfile.TemporaryDirectory(prefix="gpulint-verify-") as tmp:
        try:
            return _verify(req, original, candidate, device, tmp)
        except reference.ReferenceError as e:  # the float twins are gpulint's files: name the user's
            text = str(e)
            for name, path in (("original", req.model_path), ("candidate", req.candidate_path or req.model_path)):
                text = text.replace(str(Path(tmp, f"{name}.float.tflite")), f"{path} (as float)")
            raise reference.ReferenceError(text) from None


def _verify(req: Request, original: Model, candidate: Model, device: Device | None, tmp: str) -> VerifyResult:
    clock = time.perf_counter()
    seconds: dict[str, float] = {}
    # The engine first: which hybrid ops the reference computes in float depends on where it runs them.
    cand_path = req.candidate_path or req.model_path
    engine = open_engine(req.engine, candidate, cand_path, req.precision, req.target, device)
    seconds["build"] = time.perf_counter() - clock
    try:
        return _verify_with(req, original, candidate, device, tmp, engine, seconds)
    finally:
        engine.close()


def _verify_with(
    req: Request,
    original: Model,
    candidate: Model,
    device: Device | None,
    tmp: str,
    engine: Engine,
    seconds: dict[str, float],
) -> VerifyResult:
    clock = time.perf_counter()
    same_model = req.candidate_path is None and req.reference is None
    cand_gpu = engine.gpu_ops
    orig_gpu = cand_gpu if req.candidate_path is None else delegated_ops(original, req.target)
    twins = make_twins(req, original, candidate, tmp, (orig_gpu, cand_gpu))
    # The original on the CPU interpreter (or a saved run of it), then the candidate there. A
    # model with hybrid or int8 ops on the GPU side runs as its twin; the run on LiteRT's own
    # kernels is kept for the gap.
    if req.reference is not None:
        all_inputs, saved = load_reference(req.reference)
        orig = Cpu(saved, None)
    else:
        if req.inputs is not None:
            all_inputs = [load_inputs(req.inputs, original)]
        else:
            all_inputs = [reference.random_inputs(original, req.seed + r, req.distribution) for r in range(req.runs)]
        orig = cpu_runs(twins.original or req.model_path, all_inputs)
    if req.save_reference is not None:
        save_reference(req.save_reference, all_inputs, orig.outputs)
    cand_inputs = [reference.adapt_inputs(x, candidate, req.seed + r) for r, x in enumerate(all_inputs)]
    cand_path = req.candidate_path or req.model_path
    cand = orig if same_model and req.reference is None else cpu_runs(twins.candidate or cand_path, cand_inputs)
    kernels = None
    if twins.candidate is not None:  # the candidate on LiteRT's own kernels, for the gap alone
        kernels = [reference.run(cand_path, x) for x in cand_inputs]
    half_steps = None
    if req.precision != "fp32" and twins.int8 and twins.candidate is not None:  # half's int8 rounding flips
        half_steps = half_probe_steps(twins.candidate, tmp, candidate, cand_inputs)
    seconds["reference"] = time.perf_counter() - clock

    clock = time.perf_counter()
    all_gots = [engine.run(x) for x in cand_inputs]
    seconds["run"] = time.perf_counter() - clock
    result = VerifyResult(
        str(req.model_path),
        str(req.candidate_path or req.model_path),
        engine.info(),
        req.precision,
        len(all_inputs),
        engine.parts,
        noise_probe=cand.probe,
        warnings=list(engine.warnings),
        engine=engine.name,
    )
    if req.inputs is None and req.reference is None:
        result.integer_inputs = reference.integer_inputs(original)
    result.cpu_reference = cpu_reference_text(twins)
    result.outputs = judge_all(req, original, candidate, orig, cand, all_gots, same_model, half_steps)
    if kernels is not None:
        for i, o in enumerate(result.outputs):
            gap = kernels_gap([c[i] for c in cand.outputs], [k[i] for k in kernels], compare.quant_step(candidate, i))
            if twins.hybrid:
                o.hybrid_gap = {**gap, "reason": HYBRID_NOTE}
            if twins.int8:
                o.int8_gap = {**gap, "reason": INT8_NOTE}
        if twins.int8:  # the text output shows each hybrid gap under its output; the int8 ones stand here
            gaps = ", ".join(f"{o.name} {gap_text(o.int8_gap)}" for o in result.outputs if o.int8_gap)
            result.cpu_reference += f"; LiteRT's int8 kernels against that (information): {gaps}"
    if not result.passed:
        clock = time.perf_counter()
        rewrite = any(not o.rewrite.passed for o in result.outputs)
        executor = any(not o.executor.passed for o in result.outputs)
        result.attribution = (
            " and ".join([w for w, bad in (("rewrite", rewrite), ("executor", executor)) if bad])
            + ": "
            + "; ".join([t for t, bad in ((REWRITE_FAULT, rewrite), (EXECUTOR_FAULT, executor)) if bad])
        )
        if device is not None:  # the executor keeps every tensor: the diagnoses read inside one run
            find_nonfinite(req, original, candidate, device, result, all_inputs[0], cand_inputs[0], twins)
            if executor and req.precision != "fp32":  # where the half path overflowed or lost its digits
                run = _failing_run(result, cand.outputs, all_gots)
                cpu_path = twins.candidate or req.candidate_path or req.model_path
                result.half_loss = locate_half_loss(req, candidate, device, cpu_path, cand_inputs[run])
                result.half_loss["run"] = run
        cpu_path = twins.candidate or req.candidate_path or req.model_path
        if req.bisect and (rewrite or device is not None):
            result.bisect = bisect(
                req, original, candidate, device, all_inputs[0], cand_inputs[0], rewrite, twins, result
            )
            at = result.bisect.get("op_index")
            if req.export_repro is not None and not rewrite and at is not None:
                result.repro = repro_at(req, candidate, cpu_path, cand_inputs[0], tmp, device, at)
        elif req.bisect:  # an engine that keeps no intermediates: prefixes of the graph, each run whole
            result.bisect, result.repro = bisect_prefixes(req, candidate, cpu_path, cand_inputs[0], tmp)
        seconds["diagnose"] = time.perf_counter() - clock
    result.seconds = {k: round(v, 3) for k, v in seconds.items()}
    return result


def _failing_run(result: VerifyResult, cpu: list[list[np.ndarray]], gots: list[list[np.ndarray]]) -> int:
    """The run to look inside: the first with a NaN/Inf on the executor where the CPU has a
    number, else the run of the worst element of the first output the executor FAILs."""
    for r, (c, g) in enumerate(zip(cpu, gots, strict=True)):
        for ref, got in zip(c, g, strict=True):
            a, b = np.asarray(ref), np.asarray(got)
            if a.dtype.kind == "f" and b.dtype.kind == "f" and np.any(np.isfinite(a) & ~np.isfinite(b)):
                return r
    for o in result.outputs:
        worst = o.executor.metrics.get("worst")
        if not o.executor.passed and worst and worst["index"]:
            return int(worst["index"][0])
    return 0

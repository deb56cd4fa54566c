"""--bisect: the first op whose output diverges, read from every tensor of one run on each side."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpulint import compare, reference
from gpulint.compare import Verdict
from gpulint.executor import Device
from gpulint.model.ir import Model
from gpulint.text import clean
from gpulint.verify.half import HALF_MAX, as_float
from gpulint.verify.intermediates import executor_tensors
from gpulint.verify.request import Request
from gpulint.verify.result import VerifyResult
from gpulint.verify.twins import Twins


def bisect(
    req: Request,
    original: Model,
    candidate: Model,
    device: Device | None,
    ref_in: Any,
    cand_in: Any,
    rewrite: bool,
    twins: Twins,
    result: VerifyResult,
) -> dict[str, Any]:
    """The first op, in the candidate's execution order, whose output differs from the tensor of
    the same name: the candidate's on the CPU against the original's there when the rewrite
    FAILs, else the executor's against the candidate's on the CPU.

    Each tensor is judged as the outputs are, against its own CPU noise (the reference side run
    again on inputs one ulp away: the interpreter keeps intermediates only on its builtin
    kernels, so XNNPACK cannot be the second opinion here), so accumulation-order noise grown
    through the network is not blamed on the op where it crosses a floor. The first op whose
    output has a NaN/Inf where the reference has a number comes before any drift: it is named,
    not an earlier op whose finite values drift (a dynamic-range gap; kept as `drift_before`)."""
    cand_path = twins.candidate or req.candidate_path or req.model_path
    nonfinite = any(v.metrics.get("nonfinite_mismatch") for o in result.outputs for v in o.comparisons().values())
    kind = "rewrite" if rewrite else "executor"
    if rewrite:
        expected, second = reference.run_all_tensors_with_noise(twins.original or req.model_path, ref_in)
        got = reference.run_all_tensors(cand_path, cand_in)
        quant = {t.name: t.quantization for t in original.subgraphs[0].tensors}
        policy, precision = compare.REWRITE_PROOF, "fp32"
    else:
        expected, second = reference.run_all_tensors_with_noise(cand_path, cand_in)
        assert device is not None, "the executor's comparison is bisected on the executor"
        got = executor_tensors(candidate, device, req, cand_in)
        quant = {t.name: t.quantization for t in candidate.subgraphs[0].tensors}
        policy, precision = compare.EXECUTOR_VS_CPU, req.precision
    sg = candidate.subgraphs[0]
    compared = 0
    drift: dict[str, Any] | None = None  # the first op whose finite values leave their noise
    for index, op in enumerate(sg.operators):
        for t in op.outputs:
            name = sg.tensors[t].name
            if name not in expected or name not in got:
                continue
            res = judge_tensor(name, expected[name], second.get(name), got[name], quant.get(name), policy, precision)
            if res is None:
                continue
            compared += 1
            if res.metrics.get("nonfinite_in_candidate"):  # NaN/Inf where the reference has numbers
                found = _divergence(kind, candidate, op, index, name, res, compared)
                found["first_nonfinite"] = res.metrics["nonfinite_in_candidate"]
                found["reason"] = (
                    f"the first op whose output has NaN/Inf where the {'original' if rewrite else 'CPU'} has "
                    f"numbers ({res.metrics['nonfinite_in_candidate']} of {res.metrics['values']} values)"
                )
                if not rewrite and precision != "fp32":  # in half: the value that left half's range
                    found.update(half_range(expected[name], quant.get(name)))
                    found["reason"] += f"; {found['range']}"
                if drift is not None:
                    found["drift_before"] = drift
                return found
            if not res.passed and drift is None:  # kept while a later op may still make a NaN
                drift = _divergence(kind, candidate, op, index, name, res, compared)
    if drift is not None and not nonfinite:
        return drift
    first = next((o.first_nonfinite for o in result.outputs if o.first_nonfinite and o.first_nonfinite.get("op")), None)
    if nonfinite and first is not None:  # the NaN is seen on one side only (the executor's run)
        return {
            "comparison": kind,
            **{k: first[k] for k in ("op", "op_index", "tensor")},
            "reason": f"first NaN/Inf, seen on the {first.get('found_on', first['side'])}",
            "compared": compared,
            **({"drift_before": drift} if drift is not None else {}),
        }
    if drift is not None:  # a NaN only in the reference, or one no kept tensor shows
        return drift
    return {
        "comparison": kind,
        "op": None,
        "compared": compared,
        "note": "no intermediate tensor diverges beyond its CPU noise; the outputs' tolerance is tighter",
    }


def half_range(expected: np.ndarray, q: Any) -> dict[str, Any]:
    """Where a half result's NaN/Inf comes from: the CPU's largest |value| of the tensor, past half's
    65504 (the stored result overflowed) or within it (a step inside the op did)."""
    ref = as_float(expected, q)
    top = float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0)) if ref is not None else 0.0
    if top > HALF_MAX:
        words = f"the CPU's values reach {top:.3g}, past half's largest {HALF_MAX:.0f}"
    else:
        words = f"the CPU's values stay within {top:.3g}: a step inside the op went past half's largest {HALF_MAX:.0f}"
    return {"cpu_max_abs": top, "range": words}


def _divergence(kind: str, model: Model, op: Any, index: int, name: str, res: Verdict, compared: int) -> dict[str, Any]:
    return {
        "comparison": kind,
        "op": clean(model.op_name(op), 60),
        "op_index": index,
        "tensor": clean(name, 200),
        "max_abs_error": res.metrics.get("max_abs_error"),
        "tolerance": res.tolerance.atol,
        "rtol": res.tolerance.rtol,
        "tolerance_source": res.tolerance.source,
        "reason": res.reason,
        "compared": compared,
    }


def judge_tensor(
    name: str,
    expected: np.ndarray,
    second: np.ndarray | None,
    got: np.ndarray,
    q: Any,
    policy: compare.Policy,
    precision: str,
) -> Verdict | None:
    """One intermediate tensor judged as the outputs are, against its own CPU noise (`second`: the
    reference's tensor from a run on inputs one ulp away, or None): float tensors by that noise,
    int8 ones in quantization steps of the tensor. None where either side is not a float or
    quantized tensor, or the shapes differ: nothing to compare element by element."""
    ref, value = as_float(expected, q), as_float(np.asarray(got), q)
    if ref is None or value is None or ref.shape != value.shape:
        return None
    step = float(q.scale[0]) if expected.dtype.kind in "iu" and q is not None and q.scale else None
    nudged = as_float(second, q) if second is not None else None
    noise = compare.noise_map([ref], [nudged]) if nudged is not None and nudged.shape == ref.shape else None
    return compare.judge(name, [ref], [value], policy, precision, noise, step)

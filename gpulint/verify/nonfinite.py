"""Diagnosis of a NaN/Inf on one side only: the first op that made it, on that side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpulint import reference
from gpulint.executor import Device
from gpulint.model.ir import Model
from gpulint.text import clean
from gpulint.verify.intermediates import executor_tensors
from gpulint.verify.request import Request
from gpulint.verify.result import VerifyResult
from gpulint.verify.twins import Twins


def _first_nonfinite_op(model: Model, tensors: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The first op, in execution order, with a NaN/Inf in an output while the tensors other ops
    made for it have none. A constant input that holds NaN/Inf (a corrupted weight) is named."""
    sg = model.subgraphs[0]

    def bad(x: np.ndarray | None) -> bool:
        return x is not None and x.dtype.kind == "f" and not np.isfinite(x).all()

    for index, op in enumerate(sg.operators):
        made = [t for t in op.inputs if t >= 0 and model.tensor_data(sg.tensors[t]) is None]
        if any(bad(tensors.get(sg.tensors[t].name or "")) for t in made):
            continue
        for t in op.outputs:
            value = tensors.get(sg.tensors[t].name or "")
            if bad(value):
                assert value is not None
                found = {
                    "op": clean(model.op_name(op), 60),
                    "op_index": index,
                    "tensor": clean(sg.tensors[t].name, 200),
                    "nonfinite": int(np.sum(~np.isfinite(value))),
                }
                consts = [sg.tensors[c] for c in op.inputs if c >= 0 and c not in made]
                poisoned = [c.name for c in consts if bad(_const(model, c))]
                if poisoned:
                    found["constant"] = clean(poisoned[0], 200)
                return found
    return None


def _const(model: Model, t: Any) -> np.ndarray | None:
    value = model.tensor_data(t)
    return None if value is None else np.asarray(value)


def find_nonfinite(
    req: Request,
    original: Model,
    candidate: Model,
    device: Device,
    result: VerifyResult,
    ref_in: Any,
    cand_in: Any,
    twins: Twins,
) -> None:
    """For each output with a NaN/Inf on one side only: where it came from, on that side."""
    cand_cpu = twins.candidate or req.candidate_path or req.model_path
    for o in result.outputs:
        for verdict, (which, path, model, feed) in (
            (o.rewrite, ("candidate on the CPU", cand_cpu, candidate, cand_in)),
            (o.executor, ("executor", None, candidate, cand_in)),
        ):
            m = verdict.metrics
            if o.first_nonfinite is not None or not m.get("nonfinite_mismatch"):
                continue
            if m["nonfinite_in_candidate"]:
                o.first_nonfinite = _locate(path, model, feed, device, req, which)
            elif m["nonfinite_in_reference"]:
                ref_path = (twins.original or req.model_path) if verdict is o.rewrite else cand_cpu
                ref_model = original if verdict is o.rewrite else candidate
                feed = ref_in if verdict is o.rewrite else cand_in
                o.first_nonfinite = _locate(ref_path, ref_model, feed, device, req, "CPU interpreter")


def _locate(path: Path | None, model: Model, feed: Any, device: Device, req: Request, side: str) -> dict[str, Any]:
    """Run `model` again keeping every tensor and name the first op that made a NaN/Inf: on the
    CPU interpreter for its side (`path`), else on the executor. The interpreter keeps tensors
    only on its builtin kernels, which can drop a NaN that XNNPACK kept (its RELU gives 0), so
    the executor, whose kernels keep NaN, is asked next."""
    found = None
    note = "no intermediate tensor holds a NaN/Inf (a graph input does?)"
    if path is not None:
        try:
            found = _first_nonfinite_op(model, reference.run_all_tensors(path, feed))
        except reference.ReferenceError as e:
            note = f"cannot keep the CPU's intermediates: {e}"
        if found is not None:
            return {"side": side, "found_on": "CPU interpreter (builtin kernels)", **found}
    found = _first_nonfinite_op(model, executor_tensors(model, device, req, feed))
    if found is None:
        return {"side": side, "op": None, "note": note}
    return {"side": side, "found_on": "executor", **found}

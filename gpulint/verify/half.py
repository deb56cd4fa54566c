"""On a FAIL in half precision (fp16, fp32-fp16): the first op where the half path overflowed or
lost its precision, read from every tensor of one run on the executor, at the same precision,
against the CPU interpreter's tensors of the same name.

- overflow: an op whose output has NaN/Inf where the CPU's has numbers. Half's largest value is
  65504: a value above it (stored, or any step of the op's arithmetic at fp16) is Inf, and an
  Inf later meets another (Inf - Inf) as NaN.
- precision loss: an op whose output's error, against the CPU's and relative to the output's
  range, is at least LOSS_MIN and at least LOSS_JUMP times the largest error among the tensors
  the op reads (a cancellation, a small variance divided by, a long half accumulation). Healthy
  ops in half add a few half epsilons; the thresholds are calibrated on the corpus, see LOSS_MIN.
- underflow: an op whose output lies wholly below half's smallest normal value (6.1e-5, where
  half keeps fewer than its 11 bits), with an error of LOSS_MIN of its range or more: the
  YOLO corpus's random-weight exports shrink their activations to 1e-6 and below this way.

Constants and graph inputs have no error of their own here (the executor reads the same values).
"""

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

HALF_MAX = 65504.0
HALF_MIN_NORMAL = 2.0**-14
HALF_EPS = 2.0**-11  # half's unit roundoff: one rounding's relative error, at most
# An op "loses its precision" when its output's range-relative error is at least LOSS_MIN and
# at least LOSS_JUMP times its inputs'. Measured (bench/f16_errors.py --ops) on every op of the
# corpus's 58 float models (MediaPipe, tfconv, the YOLO and PyTorch f32/f16 exports), seeds 0-1 of
# uniform and normal inputs, tensors within half's normal range: the largest op error was 0.081
# of its range at fp16 (palm_detection_lite's last PRELU, 3.9 x what it reads), and among ops
# above 1/32 of their range the largest jump was 13.5 (selfie_segmentation's LOGISTIC). fp32-fp16,
# measured again when it began to compute in half as F32_F16 does: 0.038 (that LOGISTIC), the
# largest jump above 1/32 15.2 (the same op). 1/8 and 16 name none of them. Tensors below
# half's smallest normal (the YOLO exports' random-weight activations, 1e-8 .. 6e-5) have errors
# up to 1.46 of their range there: underflow.
LOSS_MIN = 2.0**-3
LOSS_JUMP = 16.0


def tensor_error(ref: np.ndarray, got: np.ndarray) -> float:
    """max |got - ref| / max |ref| over the values finite on both sides (0 for an all-zero ref)."""
    a, b = ref.astype(np.float64), got.astype(np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    if not both.any():
        return 0.0
    scale = float(np.abs(a[both]).max())
    err = float(np.abs(a[both] - b[both]).max())
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def as_float(value: np.ndarray, q: Any) -> np.ndarray | None:
    """A tensor's values as float: int8 ones dequantized; None for other integers."""
    if value.dtype.kind == "f":
        return value.astype(np.float32)
    if value.dtype.kind in "iu" and q is not None and q.scale:
        return np.asarray((value.astype(np.float64) - q.zero_point[0]) * q.scale[0], np.float32)
    return None


def op_errors(model: Model, cpu: dict[str, np.ndarray], exe: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Per op output both sides hold, in execution order: its range-relative error, the largest
    error among the tensors the op reads, the NaN/Inf on the executor where the CPU is finite."""
    sg = model.subgraphs[0]
    quant = {t.name: t.quantization for t in sg.tensors}
    err: dict[str, float] = {}
    rows = []
    for index, op in enumerate(sg.operators):
        reads = [sg.tensors[t].name or "" for t in op.inputs if t >= 0]
        before = max((err[n] for n in reads if n in err), default=0.0)
        for t in op.outputs:
            name = sg.tensors[t].name or ""
            if name not in cpu or name not in exe:
                continue
            ref, got = as_float(cpu[name], quant.get(name)), as_float(exe[name], quant.get(name))
            if ref is None or got is None or ref.shape != got.shape:
                continue
            finite = np.isfinite(ref)
            e = tensor_error(ref, got)
            err[name] = e
            rows.append(
                {
                    "op": clean(model.op_name(op), 60),
                    "op_index": index,
                    "tensor": clean(name, 200),
                    "error": e,
                    "input_error": before,
                    "overflowed": int(np.sum(finite & ~np.isfinite(got))),
                    "cpu_max_abs": float(np.abs(ref[finite]).max(initial=0.0)),
                    "values": int(ref.size),
                }
            )
    return rows


def first_half_loss(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first op that overflowed, and the first before it that lost its precision and that
    underflowed (after an overflow every error downstream is the Inf's); None when none is found."""
    overflow = next((r for r in rows if r["overflowed"]), None)
    before = rows[: rows.index(overflow)] if overflow is not None else rows
    normal = [r for r in before if r["cpu_max_abs"] >= HALF_MIN_NORMAL]
    loss = next(
        (r for r in normal if r["error"] >= LOSS_MIN and r["error"] >= LOSS_JUMP * max(r["input_error"], HALF_EPS)),
        None,
    )
    under = next((r for r in before if 0 < r["cpu_max_abs"] < HALF_MIN_NORMAL and r["error"] >= LOSS_MIN), None)
    if overflow is None and loss is None and under is None:
        return None
    found: dict[str, Any] = {}
    if overflow is not None:
        o = overflow
        where = (
            f"the CPU's values reach {o['cpu_max_abs']:.3g}, beyond half's largest {HALF_MAX:.0f}"
            if o["cpu_max_abs"] > HALF_MAX
            else f"inside the op's arithmetic: the CPU's values there stay within {o['cpu_max_abs']:.3g}, "
            f"a step before them went beyond half's largest {HALF_MAX:.0f}"
        )
        found["overflow"] = {
            **_where(o),
            "nonfinite": o["overflowed"],
            "cpu_max_abs": o["cpu_max_abs"],
            "reason": f"{o['overflowed']} of {o['values']} values NaN/Inf where the CPU has numbers; {where}",
        }
    if loss is not None:
        carried = (
            f"{loss['error'] / loss['input_error']:.3g} x the largest error among what it reads "
            f"({loss['input_error']:.3g})"
            if loss["input_error"] >= HALF_EPS
            else f"what it reads is within one half rounding ({loss['input_error']:.3g})"
        )
        found["precision_loss"] = {
            **_where(loss),
            "error": loss["error"],
            "input_error": loss["input_error"],
            "reason": f"its error against the CPU's is {loss['error']:.3g} of its range; {carried}",
        }
    if under is not None:
        found["underflow"] = {
            **_where(under),
            "error": under["error"],
            "cpu_max_abs": under["cpu_max_abs"],
            "reason": (
                f"the CPU's values there stay within {under['cpu_max_abs']:.3g}, below half's smallest normal "
                f"{HALF_MIN_NORMAL:.3g}, where half keeps fewer digits: its error is {under['error']:.3g} of its range"
            ),
        }
    return found


def _where(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("op", "op_index", "tensor")}


def locate_half_loss(req: Request, model: Model, device: Device, cpu_path: Path, feed: Any) -> dict[str, Any]:
    """One run of `model` on the CPU interpreter (`cpu_path`: the model, or its twin computed as
    the delegate computes) and on the executor at req.precision, every tensor kept: the first op
    that overflowed, lost its precision or underflowed (first_half_loss)."""
    try:
        cpu = reference.run_all_tensors(cpu_path, feed)
    except reference.ReferenceError as e:
        return {"precision": req.precision, "op": None, "note": f"cannot keep the CPU's intermediates: {e}"}
    rows = op_errors(model, cpu, executor_tensors(model, device, req, feed))
    found = first_half_loss(rows)
    if found is None:
        note = (
            f"no op overflowed, lost its precision ({LOSS_MIN:.3g} of its range and {LOSS_JUMP:g} x its "
            f"inputs' error) or underflowed, over {len(rows)} tensors compared"
        )
        return {"precision": req.precision, "op": None, "compared": len(rows), "note": note}
    # An overflow first (it is what an output's NaN/Inf comes from), else the earlier of the others.
    rest = [found[k] for k in ("precision_loss", "underflow") if k in found]
    head = found.get("overflow") or min(rest, key=lambda f: f["op_index"])
    return {"precision": req.precision, **_where(head), "compared": len(rows), **found}

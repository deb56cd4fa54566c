"""`gpulint verify`: the candidate (the OpenCL executor, partitioned as the delegate would run
it) against the reference (the LiteRT CPU interpreter on the original model), on the same inputs.

Tolerances are absolute, scaled by each reference output's magnitude (its range, or its largest
value for a constant output; for the output of LOGISTIC, SOFTMAX or TANH, the range the op can
produce), because a model's outputs span from logits in the tens to probabilities near 0:
- fp32: 1e-4 x scale. The executor's kernels match LiteRT per op within 1e-5 x scale; whole
  models stay within 3e-5 x scale on the corpus (selfie_segmentation, the worst, 2.9e-5).
- fp16: 1e-2 x scale, ten fp16 epsilons (9.8e-4 each): fp16 rounding compounds over depth;
  never below one epsilon (FP16_FLOOR). The executor's fp16 mode stores tensors and weights in
  half and computes in float (on any device: vload_half needs no cl_khr_fp16); a GPU that also
  computes in half rounds more, which these numbers do not cover.
- quantized (int) outputs: the delegate runs quantized models in float, LiteRT in integer
  arithmetic, so they differ by rounding steps; the tolerance is in steps (QUANT_STEPS).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import reference
from gpulint.executor import Device
from gpulint.fix import adapt_inputs
from gpulint.model.ir import NUMPY_DTYPES, Model
from gpulint.partitioned import PartitionedRunner
from gpulint.text import clean

RELATIVE = {"fp32": 1e-4, "fp16": 1e-2}
# The finest an fp16 result can be judged: one fp16 epsilon at magnitude 1. Intermediate values
# of order 1 carry that rounding even into an output whose own range is tiny (a segmentation
# mask that is almost all zero).
FP16_FLOOR = 2.0**-10
QUANT_STEPS = 3  # see README "verify": int8 outputs of the corpus differ by at most this many steps


class VerifyError(RuntimeError):
    """Verification could not run (bad inputs file, interface mismatch)."""


@dataclass
class Tolerance:
    atol: float
    rtol: float = 0.0
    source: str = "default"


@dataclass
class OutputResult:
    name: str
    shape: list[int]
    dtype: str
    tolerance: Tolerance
    metrics: dict[str, Any]
    passed: bool
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": self.shape,
            "dtype": self.dtype,
            "atol": self.tolerance.atol,
            "rtol": self.tolerance.rtol,
            "tolerance_source": self.tolerance.source,
            "status": "PASS" if self.passed else "FAIL",
            "reason": self.reason,
            **self.metrics,
        }


@dataclass
class VerifyResult:
    model: str
    candidate: str
    device: str
    precision: str
    runs: int
    partitions: list[dict[str, Any]]
    outputs: list[OutputResult] = field(default_factory=list)
    attribution: str = ""
    bisect: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "candidate": self.candidate,
            "status": "PASS" if self.passed else "FAIL",
            "device": self.device,
            "precision": self.precision,
            "runs": self.runs,
            "partitions": self.partitions,
            "outputs": [o.to_json() for o in self.outputs],
            "attribution": self.attribution,
            "bisect": self.bisect,
            "seconds": self.seconds,
        }


# -- inputs and saved references --------------------------------------------------------------


def load_inputs(path: Path, model: Model) -> list[np.ndarray]:
    """Inputs from an .npz: keyed by input tensor name, or arr_0, arr_1, ... in order."""
    sg = model.subgraphs[0]
    names = [sg.tensors[t].name for t in sg.inputs]
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise VerifyError(f"{path}: not a readable .npz file ({e})") from None
    out = []
    for i, (name, t) in enumerate(zip(names, sg.inputs, strict=True)):
        value = data.get(name, data.get(f"arr_{i}"))
        if value is None:
            raise VerifyError(f"{path}: no array for input {name!r} (keys: {', '.join(sorted(data)) or 'none'})")
        ttype = sg.tensors[t].type
        dtype = NUMPY_DTYPES.get(ttype) if isinstance(ttype, str) else None
        want = [d if d > 0 else value.shape[k] for k, d in enumerate(sg.tensors[t].shape)] if value.ndim else []
        if list(value.shape) != want:
            raise VerifyError(f"{path}: input {name!r} is {list(value.shape)}, the model takes {sg.tensors[t].shape}")
        out.append(value.astype(dtype) if dtype is not None else value)
    return out


def save_reference(path: Path, inputs: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> None:
    from gpulint.atomic import write_atomic

    arrays = {f"run{r}_input{i}": x for r, xs in enumerate(inputs) for i, x in enumerate(xs)}
    arrays |= {f"run{r}_output{i}": y for r, ys in enumerate(outputs) for i, y in enumerate(ys)}
    fd, tmp = tempfile.mkstemp(suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        write_atomic(path, [Path(tmp).read_bytes()])
    except OSError as e:
        raise VerifyError(f"{path}: cannot write the reference ({e.strerror or e})") from None
    finally:
        os.unlink(tmp)


def load_reference(path: Path) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise VerifyError(f"{path}: not a readable reference file ({e})") from None
    runs = sorted({int(k[3:].split("_")[0]) for k in data if k.startswith("run") and "_" in k})
    if not runs:
        raise VerifyError(f"{path}: no runs in it (written by `gpulint verify --save-reference`?)")

    def arrays(r: int, kind: str) -> list[np.ndarray]:
        count = len([k for k in data if k.startswith(f"run{r}_{kind}")])
        return [data[f"run{r}_{kind}{i}"] for i in range(count)]

    return [arrays(r, "input") for r in runs], [arrays(r, "output") for r in runs]


# -- metrics -----------------------------------------------------------------------------------


def quant_step(model: Model, position: int) -> float | None:
    """The size of one quantization step of output `position`, when it is an int tensor."""
    sg = model.subgraphs[0]
    t = sg.tensors[sg.outputs[position]]
    if t.type in ("INT8", "UINT8", "INT16") and t.quantization is not None and t.quantization.scale:
        return float(t.quantization.scale[0])
    return None


# Outputs of these ops span a fixed range whatever the input; that range is their scale.
BOUNDED_RANGE = {"LOGISTIC": 1.0, "SOFTMAX": 1.0, "TANH": 2.0}


def bounded_range(model: Model, position: int) -> float | None:
    """The width of the range output `position` can take, when the op producing it fixes one."""
    sg = model.subgraphs[0]
    t = sg.outputs[position]
    op = next((op for op in sg.operators if t in op.outputs), None)
    return None if op is None else BOUNDED_RANGE.get(model.op_name(op))


def default_tolerance(ref: np.ndarray, precision: str, integer: bool, bounded: float | None = None) -> Tolerance:
    """`bounded`: the output's fixed range (a probability's is 1). It sets the scale, because
    on random inputs such an output can stay near one end (a segmentation mask that is almost
    all zero), and its observed range would judge fp16 rounding far below what matters."""
    if integer:
        return Tolerance(float(QUANT_STEPS), 0.0, f"{QUANT_STEPS} quantization steps")
    r = ref.astype(np.float64)
    scale = float(np.ptp(r)) if r.size else 0.0
    if scale == 0.0:
        scale = float(np.max(np.abs(r), initial=0.0)) or 1.0
    if bounded is not None:
        scale = bounded
    factor = RELATIVE[precision]
    if precision == "fp16" and factor * scale < FP16_FLOOR:
        return Tolerance(FP16_FLOOR, 0.0, f"one fp16 epsilon, {FP16_FLOOR:.3g} (output scale {scale:.4g} is small)")
    return Tolerance(factor * scale, 0.0, f"{factor:g} x output scale {scale:.4g} ({precision})")


def metrics(ref: np.ndarray, got: np.ndarray) -> dict[str, Any]:
    a = ref.astype(np.float64).ravel()
    b = got.astype(np.float64).ravel()
    err = np.abs(a - b)
    finite = np.isfinite(err)
    nonzero = np.abs(a) > 0
    rel = err[nonzero & finite] / np.abs(a[nonzero & finite])
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    out: dict[str, Any] = {
        "max_abs_error": float(err[finite].max(initial=0.0)),
        "mean_abs_error": float(err[finite].mean()) if finite.any() else 0.0,
        "std_error": float((a - b)[finite].std()) if finite.any() else 0.0,
        "max_rel_error": float(rel.max(initial=0.0)),
        "cosine_similarity": float(a @ b / norm) if norm > 0 and finite.all() else (1.0 if not a.any() else 0.0),
        "nonfinite_mismatch": int(np.sum(np.isfinite(a) != np.isfinite(b))),
    }
    out["required_atol"] = out["max_abs_error"]
    zero_err = err[~nonzero & finite]
    out["required_rtol"] = float("inf") if zero_err.any() else out["max_rel_error"]
    if ref.ndim >= 1 and ref.shape[-1] >= 10 and ref.size // ref.shape[-1] <= 16:  # classifier-like
        ra = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
        rb = got.reshape(-1, ref.shape[-1]).astype(np.float64)
        top_ref = np.argsort(-ra, axis=1, kind="stable")
        top_got = np.argsort(-rb, axis=1, kind="stable")
        out["top1_agreement"] = float(np.mean(top_ref[:, 0] == top_got[:, 0]))
        out["top5_agreement"] = float(
            np.mean([len(set(x[:5]) & set(y[:5])) / 5 for x, y in zip(top_ref, top_got, strict=True)])
        )
    return out


def judge(
    name: str,
    refs: list[np.ndarray],
    gots: list[np.ndarray],
    tol: Tolerance | None,
    precision: str,
    step: float | None,
    bounded: float | None = None,
) -> OutputResult:
    ref, got = np.stack(refs), np.stack(gots)
    shape, dtype = list(refs[0].shape), str(refs[0].dtype)
    if ref.shape != got.shape:
        zero = Tolerance(0.0)
        return OutputResult(name, shape, dtype, tol or zero, {}, False, f"shape {list(gots[0].shape)}, not {shape}")
    integer = ref.dtype.kind in "iu" and step is not None
    tol = tol or default_tolerance(ref, precision, integer, bounded)
    m = metrics(ref, got)
    if integer:
        m["max_abs_error_steps"] = m["max_abs_error"]
    err = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    bound = tol.atol + tol.rtol * np.abs(ref.astype(np.float64))
    if m["nonfinite_mismatch"]:
        return OutputResult(
            name, shape, dtype, tol, m, False, f"{m['nonfinite_mismatch']} NaN/Inf where the other has none"
        )
    over = int(np.sum(np.nan_to_num(err, nan=0.0) > bound))
    if over:
        return OutputResult(name, shape, dtype, tol, m, False, f"{over} of {err.size} values beyond tolerance")
    return OutputResult(name, shape, dtype, tol, m, True)


# -- the whole verification ----------------------------------------------------------------------


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
    tolerances: dict[str, Tolerance] = field(default_factory=dict)  # by output name, or "*" for all
    bisect: bool = False
    save_reference: Path | None = None
    reference: Path | None = None


def verify(req: Request, original: Model, candidate: Model, device: Device) -> VerifyResult:
    clock = time.perf_counter()
    seconds: dict[str, float] = {}
    # Reference first: the original on the CPU interpreter (or a saved run of it).
    if req.reference is not None:
        all_inputs, all_refs = load_reference(req.reference)
    else:
        if req.inputs is not None:
            all_inputs = [load_inputs(req.inputs, original)]
        else:
            all_inputs = [reference.random_inputs(original, req.seed + r, req.distribution) for r in range(req.runs)]
        all_refs = [reference.run(req.model_path, x) for x in all_inputs]
    seconds["reference"] = time.perf_counter() - clock
    if req.save_reference is not None:
        save_reference(req.save_reference, all_inputs, all_refs)

    clock = time.perf_counter()
    runner = PartitionedRunner(candidate, device, req.precision, req.target, keep_intermediates=req.bisect)
    seconds["build"] = time.perf_counter() - clock
    try:
        clock = time.perf_counter()
        cand_inputs = [adapt_inputs(x, candidate, req.seed + r) for r, x in enumerate(all_inputs)]
        all_gots = [runner.run(x) for x in cand_inputs]
        seconds["run"] = time.perf_counter() - clock
        parts = [
            {
                "kind": p.kind,
                "ran_on": device.describe() if p.kind == "gpu" else "LiteRT CPU interpreter",
                "ops": p.ops,
                "summary": p.describe(candidate),
            }
            for p in runner.parts
        ]
        result = VerifyResult(
            str(req.model_path),
            str(req.candidate_path or req.model_path),
            device.describe(),
            req.precision,
            len(all_inputs),
            parts,
        )
        result.outputs = _judge_all(req, original, all_refs, all_gots)
        if not result.passed:
            result.attribution = _attribute(req, original, all_refs, cand_inputs)
            if req.bisect:
                result.bisect = _bisect(req, original, candidate, runner, all_inputs[0], cand_inputs[0])
    finally:
        runner.close()
    result.seconds = {k: round(v, 3) for k, v in seconds.items()}
    return result


def _judge_all(
    req: Request, original: Model, all_refs: list[list[np.ndarray]], all_gots: list[list[np.ndarray]]
) -> list[OutputResult]:
    sg = original.subgraphs[0]
    if any(len(g) != len(r) for g, r in zip(all_gots, all_refs, strict=True)):
        raise VerifyError(f"the candidate has {len(all_gots[0])} outputs, the original {len(all_refs[0])}")
    out = []
    for i, t in enumerate(sg.outputs):
        name = clean(sg.tensors[t].name, 200) or f"output {i}"  # model text: printable, bounded
        tol = req.tolerances.get(name) or req.tolerances.get("*")
        refs = [r[i] for r in all_refs]
        gots = [np.asarray(g[i]) for g in all_gots]
        out.append(judge(name, refs, gots, tol, req.precision, quant_step(original, i), bounded_range(original, i)))
    return out


def _attribute(req: Request, original: Model, all_refs: list[list[np.ndarray]], cand_inputs: list[Any]) -> str:
    """Whether the rewrite or the executor makes the difference: the candidate on the CPU too."""
    if req.candidate_path is None:
        return "executor: the model itself differs between the executor and the CPU interpreter"
    cpu = [reference.run(req.candidate_path, x) for x in cand_inputs]
    if all(o.passed for o in _judge_all(req, original, all_refs, cpu)):
        return "executor: the candidate matches on the CPU interpreter, so the executor makes the difference"
    return "rewrite: the candidate differs from the original on the CPU interpreter too"


def _bisect(
    req: Request, original: Model, candidate: Model, runner: PartitionedRunner, ref_in: Any, cand_in: Any
) -> dict[str, Any]:
    """The first op, in the candidate's execution order, whose output differs from the tensor of
    the same name in the original on the CPU interpreter."""
    expected = reference.run_all_tensors(req.model_path, ref_in)
    runner.run(cand_in)
    got: dict[str, np.ndarray] = {}
    for part in runner.parts:
        if part.executor is not None:
            got |= part.executor.intermediates()
    quant = {t.name: t.quantization for t in original.subgraphs[0].tensors}
    sg = candidate.subgraphs[0]
    compared = 0
    for part in runner.parts:
        if part.executor is None:
            continue
        psg = part.executor.sg
        for op in psg.operators:
            for t in op.outputs:
                name = psg.tensors[t].name
                if name not in expected or name not in got:
                    continue
                ref = _as_float(expected[name], quant.get(name))
                if ref is None or ref.shape != got[name].shape:
                    continue
                compared += 1
                q = quant.get(name)
                tol = None  # float originals: the default; int8 ones: quantization steps of the tensor
                if expected[name].dtype.kind in "iu" and q is not None and q.scale:
                    tol = Tolerance(QUANT_STEPS * float(q.scale[0]), 0.0, f"{QUANT_STEPS} quantization steps")
                res = judge(name, [ref], [got[name]], tol, req.precision, None)
                if not res.passed:
                    index = next(
                        (i for i, o in enumerate(sg.operators) if any(sg.tensors[x].name == name for x in o.outputs)),
                        None,
                    )
                    return {
                        "op": clean(part.executor.model.op_name(op), 60),
                        "op_index": index,
                        "tensor": clean(name, 200),
                        "max_abs_error": res.metrics["max_abs_error"],
                        "tolerance": res.tolerance.atol,
                        "compared": compared,
                    }
    return {
        "op": None,
        "compared": compared,
        "note": "no intermediate tensor diverges; the outputs' tolerance is tighter",
    }


def _as_float(value: np.ndarray, q: Any) -> np.ndarray | None:
    if value.dtype.kind == "f":
        return value.astype(np.float32)
    if value.dtype.kind in "iu" and q is not None and q.scale:
        return np.asarray((value.astype(np.float64) - q.zero_point[0]) * q.scale[0], np.float32)
    return None

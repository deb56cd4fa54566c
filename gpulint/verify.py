"""`gpulint verify`: two comparisons on the same inputs, both always made and reported.

- rewrite: the candidate on the LiteRT CPU interpreter against the original on it (did the
  rewrite change the numbers?). With no --candidate the two are the same file and this one is
  identical by construction.
- executor: the candidate on the OpenCL executor (partitioned as the delegate would run it)
  against the candidate on the CPU interpreter (does the GPU path compute the same?).

Either can FAIL, so which one is to blame is a fact, not a guess. Both go through
`gpulint.compare`, whose tolerances come from the CPU's own noise: every CPU run is made twice,
on XNNPACK and on the interpreter's builtin kernels, and how far those two disagree per output
scales the tolerance (see compare.py for the policies and the numbers behind them). A NaN or
Inf on one side where the other has a number FAILs, naming the first op that produced it.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import compare, reference
from gpulint.compare import Tolerance, Verdict
from gpulint.executor import Device
from gpulint.model.ir import NUMPY_DTYPES, Model
from gpulint.partitioned import PartitionedRunner
from gpulint.text import clean

__all__ = ["Request", "Tolerance", "VerifyError", "VerifyResult", "verify"]


class VerifyError(RuntimeError):
    """Verification could not run (bad inputs file, interface mismatch)."""


@dataclass
class OutputResult:
    """One output: the rewrite comparison and the executor comparison."""

    name: str
    shape: list[int]
    dtype: str
    rewrite: Verdict
    executor: Verdict
    first_nonfinite: dict[str, Any] | None = None  # the op that first made a NaN/Inf

    @property
    def passed(self) -> bool:
        return self.rewrite.passed and self.executor.passed

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
            "status": "PASS" if self.passed else "FAIL",
            "reason": self.reason,
            "rewrite": self.rewrite.to_json(),
            "executor": ex,
            "first_nonfinite": self.first_nonfinite,
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
    noise_probe: str = ""
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
            "noise_probe": self.noise_probe,
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


@dataclass
class _Cpu:
    """Per run: a model's outputs on the CPU interpreter, and the second CPU opinion."""

    outputs: list[list[np.ndarray]]
    second: list[list[np.ndarray]] | None  # None: not measured (a saved reference)
    probe: str = ""


def _cpu_runs(path: Path, inputs: list[list[np.ndarray]]) -> _Cpu:
    noisy = [reference.run_with_noise([path], x)[0] for x in inputs]
    return _Cpu([n.outputs for n in noisy], [n.second for n in noisy], noisy[0].probe if noisy else "")


def verify(req: Request, original: Model, candidate: Model, device: Device) -> VerifyResult:
    clock = time.perf_counter()
    seconds: dict[str, float] = {}
    same_model = req.candidate_path is None and req.reference is None
    # The original on the CPU interpreter (or a saved run of it), then the candidate there.
    if req.reference is not None:
        all_inputs, saved = load_reference(req.reference)
        orig = _Cpu(saved, None)
    else:
        if req.inputs is not None:
            all_inputs = [load_inputs(req.inputs, original)]
        else:
            all_inputs = [reference.random_inputs(original, req.seed + r, req.distribution) for r in range(req.runs)]
        orig = _cpu_runs(req.model_path, all_inputs)
    if req.save_reference is not None:
        save_reference(req.save_reference, all_inputs, orig.outputs)
    cand_inputs = [reference.adapt_inputs(x, candidate, req.seed + r) for r, x in enumerate(all_inputs)]
    cand_path = req.candidate_path or req.model_path
    cand = orig if same_model else _cpu_runs(cand_path, cand_inputs)
    seconds["reference"] = time.perf_counter() - clock

    clock = time.perf_counter()
    runner = PartitionedRunner(candidate, device, req.precision, req.target)
    seconds["build"] = time.perf_counter() - clock
    try:
        clock = time.perf_counter()
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
    finally:
        runner.close()
    result = VerifyResult(
        str(req.model_path),
        str(req.candidate_path or req.model_path),
        device.describe(),
        req.precision,
        len(all_inputs),
        parts,
        noise_probe=cand.probe,
    )
    result.outputs = _judge_all(req, original, candidate, orig, cand, all_gots, same_model)
    if not result.passed:
        clock = time.perf_counter()
        rewrite = any(not o.rewrite.passed for o in result.outputs)
        executor = any(not o.executor.passed for o in result.outputs)
        result.attribution = (
            " and ".join([w for w, bad in (("rewrite", rewrite), ("executor", executor)) if bad])
            + ": "
            + "; ".join([t for t, bad in ((REWRITE_FAULT, rewrite), (EXECUTOR_FAULT, executor)) if bad])
        )
        _find_nonfinite(req, original, candidate, device, result, all_inputs[0], cand_inputs[0])
        if req.bisect:
            result.bisect = _bisect(req, original, candidate, device, all_inputs[0], cand_inputs[0], rewrite)
        seconds["diagnose"] = time.perf_counter() - clock
    result.seconds = {k: round(v, 3) for k, v in seconds.items()}
    return result


REWRITE_FAULT = "the candidate differs from the original on the CPU interpreter"
EXECUTOR_FAULT = "the executor differs from the candidate on the CPU interpreter"


def _precision_dropped(original: Model, candidate: Model) -> bool:
    """Whether the candidate has fewer quantized tensors than the original: a precision rewrite
    (quantized -> float), which cannot keep the quantized model's rounding."""

    def quantized(m: Model) -> int:
        return sum(t.type in ("INT8", "UINT8", "INT16") for t in m.subgraphs[0].tensors)

    return quantized(candidate) < quantized(original)


def _judge_all(
    req: Request,
    original: Model,
    candidate: Model,
    orig: _Cpu,
    cand: _Cpu,
    all_gots: list[list[np.ndarray]],
    same_model: bool,
) -> list[OutputResult]:
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
        cand_noise = compare.noise(cpu, [s[i] for s in cand.second]) if cand.second is not None else None
        if same_model:
            rewrite = compare.judge(name, refs, cpu, rewrite_policy, "fp32", 0.0, None, Tolerance(0.0))
            rewrite.tolerance.source = "the candidate is the original: identical by construction"
        else:
            noises = [n for n in (cand_noise, _noise(orig, i)) if n is not None]
            step = compare.quant_step(original, i) if dropped or refs[0].dtype.kind in "iu" else None
            rewrite = compare.judge(
                name, refs, cpu, rewrite_policy, "fp32", max(noises) if noises else None, step,
                sides=("original on the CPU", "candidate on the CPU"),
            )  # fmt: skip
        step = compare.quant_step(candidate, i)
        executor = compare.judge(
            name, cpu, gots, compare.EXECUTOR_VS_CPU, req.precision, cand_noise, step, user,
            sides=("CPU interpreter", "executor"),
        )  # fmt: skip
        out.append(OutputResult(name, list(refs[0].shape), str(refs[0].dtype), rewrite, executor))
    return out


def _noise(cpu: _Cpu, i: int) -> float | None:
    return compare.noise([o[i] for o in cpu.outputs], [s[i] for s in cpu.second]) if cpu.second is not None else None


# -- diagnosis: the first op that made a NaN, the first op that diverges ---------------------------


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


def _find_nonfinite(
    req: Request, original: Model, candidate: Model, device: Device, result: VerifyResult, ref_in: Any, cand_in: Any
) -> None:
    """For each output with a NaN/Inf on one side only: where it came from, on that side."""
    for o in result.outputs:
        for verdict, (which, path, model, feed) in (
            (o.rewrite, ("candidate on the CPU", req.candidate_path or req.model_path, candidate, cand_in)),
            (o.executor, ("executor", None, candidate, cand_in)),
        ):
            m = verdict.metrics
            if o.first_nonfinite is not None or not m.get("nonfinite_mismatch"):
                continue
            if m["nonfinite_in_candidate"]:
                o.first_nonfinite = _locate(path, model, feed, device, req, which)
            elif m["nonfinite_in_reference"]:
                ref_path = req.model_path if verdict is o.rewrite else (req.candidate_path or req.model_path)
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
    found = _first_nonfinite_op(model, _executor_tensors(model, device, req, feed))
    if found is None:
        return {"side": side, "op": None, "note": note}
    return {"side": side, "found_on": "executor", **found}


def _executor_tensors(model: Model, device: Device, req: Request, feed: Any) -> dict[str, np.ndarray]:
    """Every tensor the executor wrote in one partitioned run, by name (one buffer per tensor),
    and the graph inputs. Tensors made by CPU partitions are not kept."""
    runner = PartitionedRunner(model, device, req.precision, req.target, keep_intermediates=True)
    try:
        sg = model.subgraphs[0]
        tensors = {sg.tensors[t].name or "": np.asarray(x) for t, x in zip(sg.inputs, feed, strict=True)}
        runner.run(feed)
        for part in runner.parts:
            if part.executor is not None:
                tensors |= part.executor.intermediates()
        return tensors
    finally:
        runner.close()


def _bisect(
    req: Request,
    original: Model,
    candidate: Model,
    device: Device,
    ref_in: Any,
    cand_in: Any,
    rewrite: bool,
) -> dict[str, Any]:
    """The first op, in the candidate's execution order, whose output differs from the tensor of
    the same name: the candidate's on the CPU against the original's there when the rewrite
    FAILs, else the executor's against the candidate's on the CPU."""
    cand_path = req.candidate_path or req.model_path
    if rewrite:
        expected = reference.run_all_tensors(req.model_path, ref_in)
        got = reference.run_all_tensors(cand_path, cand_in)
        quant = {t.name: t.quantization for t in original.subgraphs[0].tensors}
        policy, precision = compare.REWRITE_PROOF, "fp32"
    else:
        expected = reference.run_all_tensors(cand_path, cand_in)
        got = _executor_tensors(candidate, device, req, cand_in)
        quant = {t.name: t.quantization for t in candidate.subgraphs[0].tensors}
        policy, precision = compare.EXECUTOR_VS_CPU, req.precision
    sg = candidate.subgraphs[0]
    compared = 0
    for index, op in enumerate(sg.operators):
        for t in op.outputs:
            name = sg.tensors[t].name
            if name not in expected or name not in got:
                continue
            ref = _as_float(expected[name], quant.get(name))
            value = _as_float(got[name], quant.get(name))
            if ref is None or value is None or ref.shape != value.shape:
                continue
            compared += 1
            q = quant.get(name)
            step = None  # float tensors: the policy's floor; int8 ones: quantization steps of the tensor
            if expected[name].dtype.kind in "iu" and q is not None and q.scale:
                step = float(q.scale[0])
            res = compare.judge(name, [ref], [value], policy, precision, None, step)
            if not res.passed:
                return {
                    "comparison": "rewrite" if rewrite else "executor",
                    "op": clean(candidate.op_name(op), 60),
                    "op_index": index,
                    "tensor": clean(name, 200),
                    "max_abs_error": res.metrics["max_abs_error"],
                    "tolerance": res.tolerance.atol,
                    "rtol": res.tolerance.rtol,
                    "reason": res.reason,
                    "compared": compared,
                }
    return {
        "comparison": "rewrite" if rewrite else "executor",
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

"""`gpulint verify`: two comparisons on the same inputs, both always made and reported.

- rewrite: the candidate on the LiteRT CPU interpreter against the original on it (did the
  rewrite change the numbers?). With no --candidate the two are the same file and this one is
  identical by construction.
- executor: the candidate on the OpenCL executor (partitioned as the delegate would run it)
  against the candidate on the CPU interpreter (does the GPU path compute the same?).

Either can FAIL, so which one is to blame is a fact, not a guess. Both go through
`gpulint.compare`, whose tolerances come from the CPU's own noise: every CPU run is made twice,
on XNNPACK and on the interpreter's builtin kernels, and how far those two disagree, element by
element, scales the tolerance (see compare.py for the policies and the numbers behind them). A
NaN or Inf on one side where the other has a number FAILs, naming the first op that produced it.

A dynamic-range model (int8 weights beside float activations) runs on LiteRT's hybrid kernels,
which quantize each activation to int8 on the fly; the GPU delegate dequantizes the weights once
and computes in float. A full-int8 model runs on LiteRT's integer kernels, which requantize in
fixed point; the delegate computes its int8 ops in float too and rounds every int8 result to its
grid (add_quant_adjustments). Like is compared with like: the CPU side of both comparisons runs
the ops the delegate runs as it computes them (reference.float_twin for hybrid ops,
reference.fake_quant_twin for int8 ops), and the gap between LiteRT's own kernels and that
computation is reported per output, as information, never as the verdict.
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
from gpulint.partitioned import PartitionedRunner, main_plan
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
    hybrid_gap: dict[str, Any] | None = None  # the CPU's hybrid kernels against float (information)
    int8_gap: dict[str, Any] | None = None  # the CPU's int8 kernels against float + rounding (information)

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
            "hybrid_gap": self.hybrid_gap,
            "int8_gap": self.int8_gap,
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
    integer_inputs: list[dict[str, Any]] = field(default_factory=list)  # random ints: their range, and why
    cpu_reference: str = ""  # what the CPU side ran, where it is not the model as given
    attribution: str = ""
    bisect: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the runner's: ops moved to the CPU side, and why

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
            "integer_inputs": self.integer_inputs,
            "cpu_reference": self.cpu_reference,
            "outputs": [o.to_json() for o in self.outputs],
            "attribution": self.attribution,
            "bisect": self.bisect,
            "seconds": self.seconds,
            "warnings": self.warnings,
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


HYBRID_NOTE = (
    "LiteRT's hybrid kernels quantize each activation to int8 on the fly; the GPU delegate "
    "dequantizes the int8 weights once and computes in float"
)
INT8_NOTE = (
    "LiteRT's int8 kernels requantize in fixed point; the delegate computes in float and rounds to "
    "the int8 grid after each op"
)


@dataclass
class _Twins:
    """The original and the candidate as the delegate computes their GPU side (hybrid weights
    dequantized, int8 ops in float with each int8 result rounded to its grid), where they have
    such ops there: files in a temporary folder, or None."""

    original: Path | None
    candidate: Path | None
    hybrid: int  # the candidate's hybrid ops on the GPU side (the original's when the candidate has none)
    int8: int  # the same for int8 ops


def _twins(req: Request, original: Model, candidate: Model, tmp: str, gpu_ops: tuple[set[int], set[int]]) -> _Twins:
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
    return _Twins(paths[0], paths[1], hybrid_count, int8_count)


def _gpu_side(runner: PartitionedRunner) -> set[int]:
    """The ops the runner runs on the executor (the delegated ones it could lower)."""
    return {i for p in runner.parts if p.kind == "gpu" for i in p.ops}


def _delegated_ops(model: Model, target: str) -> set[int]:
    """The ops of the main subgraph that check's plan delegates (for the original of a rewrite)."""
    return {i for p in main_plan(model, target).partitions if p.delegated for i in p.ops}


def verify(req: Request, original: Model, candidate: Model, device: Device) -> VerifyResult:
    with tempfile.TemporaryDirectory(prefix="gpulint-verify-") as tmp:
        try:
            return _verify(req, original, candidate, device, tmp)
        except reference.ReferenceError as e:  # the float twins are gpulint's files: name the user's
            text = str(e)
            for name, path in (("original", req.model_path), ("candidate", req.candidate_path or req.model_path)):
                text = text.replace(str(Path(tmp, f"{name}.float.tflite")), f"{path} (as float)")
            raise reference.ReferenceError(text) from None


def _verify(req: Request, original: Model, candidate: Model, device: Device, tmp: str) -> VerifyResult:
    clock = time.perf_counter()
    seconds: dict[str, float] = {}
    # The runner first: which hybrid ops the reference computes in float depends on where it runs them.
    runner = PartitionedRunner(candidate, device, req.precision, req.target)
    seconds["build"] = time.perf_counter() - clock
    try:
        return _verify_with(req, original, candidate, device, tmp, runner, seconds)
    finally:
        runner.close()


def _verify_with(
    req: Request,
    original: Model,
    candidate: Model,
    device: Device,
    tmp: str,
    runner: PartitionedRunner,
    seconds: dict[str, float],
) -> VerifyResult:
    clock = time.perf_counter()
    same_model = req.candidate_path is None and req.reference is None
    cand_gpu = _gpu_side(runner)
    orig_gpu = cand_gpu if req.candidate_path is None else _delegated_ops(original, req.target)
    twins = _twins(req, original, candidate, tmp, (orig_gpu, cand_gpu))
    # The original on the CPU interpreter (or a saved run of it), then the candidate there. A
    # model with hybrid or int8 ops on the GPU side runs as its twin; the run on LiteRT's own
    # kernels is kept for the gap.
    if req.reference is not None:
        all_inputs, saved = load_reference(req.reference)
        orig = _Cpu(saved, None)
    else:
        if req.inputs is not None:
            all_inputs = [load_inputs(req.inputs, original)]
        else:
            all_inputs = [reference.random_inputs(original, req.seed + r, req.distribution) for r in range(req.runs)]
        orig = _cpu_runs(twins.original or req.model_path, all_inputs)
    if req.save_reference is not None:
        save_reference(req.save_reference, all_inputs, orig.outputs)
    cand_inputs = [reference.adapt_inputs(x, candidate, req.seed + r) for r, x in enumerate(all_inputs)]
    cand_path = req.candidate_path or req.model_path
    cand = orig if same_model and req.reference is None else _cpu_runs(twins.candidate or cand_path, cand_inputs)
    kernels = None
    if twins.candidate is not None:  # the candidate on LiteRT's own kernels, for the gap alone
        kernels = [reference.run(cand_path, x) for x in cand_inputs]
    seconds["reference"] = time.perf_counter() - clock

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
    result = VerifyResult(
        str(req.model_path),
        str(req.candidate_path or req.model_path),
        device.describe(),
        req.precision,
        len(all_inputs),
        parts,
        noise_probe=cand.probe,
        warnings=list(runner.warnings),
    )
    if req.inputs is None and req.reference is None:
        result.integer_inputs = reference.integer_inputs(original)
    result.cpu_reference = _cpu_reference_text(twins)
    result.outputs = _judge_all(req, original, candidate, orig, cand, all_gots, same_model)
    if kernels is not None:
        for i, o in enumerate(result.outputs):
            gap = _gap([c[i] for c in cand.outputs], [k[i] for k in kernels], compare.quant_step(candidate, i))
            if twins.hybrid:
                o.hybrid_gap = {**gap, "reason": HYBRID_NOTE}
            if twins.int8:
                o.int8_gap = {**gap, "reason": INT8_NOTE}
        if twins.int8:  # the text output shows each hybrid gap under its output; the int8 ones stand here
            gaps = ", ".join(f"{o.name} {_gap_text(o.int8_gap)}" for o in result.outputs if o.int8_gap)
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
        _find_nonfinite(req, original, candidate, device, result, all_inputs[0], cand_inputs[0], twins)
        if req.bisect:
            result.bisect = _bisect(
                req, original, candidate, device, all_inputs[0], cand_inputs[0], rewrite, twins, result
            )
        seconds["diagnose"] = time.perf_counter() - clock
    result.seconds = {k: round(v, 3) for k, v in seconds.items()}
    return result


def _cpu_reference_text(twins: _Twins) -> str:
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


def _gap(twin: list[np.ndarray], kernels: list[np.ndarray], step: float | None) -> dict[str, Any]:
    """How far LiteRT's own kernels are from the delegate's computation on one output (in
    quantization steps too, for a quantized output)."""
    m = compare.metrics(np.stack(twin), np.stack(kernels))
    keep = ("max_abs_error", "mean_abs_error", "max_rel_error", "cosine_similarity")
    gap = {k: m[k] for k in keep}
    if step is not None and m["max_abs_error"] is not None:
        gap["max_abs_error_steps"] = m["max_abs_error"] / step
        gap["mean_abs_error_steps"] = m["mean_abs_error"] / step
    return gap


def _gap_text(gap: dict[str, Any]) -> str:
    if gap["max_abs_error"] is None:
        return "no value is a number on both sides"
    if "max_abs_error_steps" in gap:
        return f"{gap['max_abs_error_steps']:.3g} quantization steps (mean {gap['mean_abs_error_steps']:.3g})"
    return f"max abs {gap['max_abs_error']:.3g}, max rel {gap['max_rel_error']:.3g}"


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
        executor = compare.judge(
            name, cpu, gots, compare.EXECUTOR_VS_CPU, req.precision, cand_noise, step, user,
            sides=("CPU interpreter", "executor"),
        )  # fmt: skip
        out.append(OutputResult(name, list(refs[0].shape), str(refs[0].dtype), rewrite, executor))
    return out


def _noise(cpu: _Cpu, i: int) -> compare.Noise | None:
    """Output i's CPU noise, element by element (None: not measured, a saved reference)."""
    if cpu.second is None:
        return None
    gap = 1.0 if cpu.probe == reference.BUILTIN_PROBE else compare.LOCAL_SCALE_GAP  # see compare.Noise
    return compare.noise_map([o[i] for o in cpu.outputs], [s[i] for s in cpu.second], gap)


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
    req: Request,
    original: Model,
    candidate: Model,
    device: Device,
    result: VerifyResult,
    ref_in: Any,
    cand_in: Any,
    twins: _Twins,
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
    twins: _Twins,
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
        got = _executor_tensors(candidate, device, req, cand_in)
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
            q = quant.get(name)
            ref = _as_float(expected[name], q)
            value = _as_float(got[name], q)
            if ref is None or value is None or ref.shape != value.shape:
                continue
            compared += 1
            step = None  # float tensors: their CPU noise; int8 ones: quantization steps of the tensor
            if expected[name].dtype.kind in "iu" and q is not None and q.scale:
                step = float(q.scale[0])
            nudged = _as_float(second[name], q) if name in second else None
            noise = compare.noise_map([ref], [nudged]) if nudged is not None and nudged.shape == ref.shape else None
            res = compare.judge(name, [ref], [value], policy, precision, noise, step)
            if res.metrics.get("nonfinite_in_candidate"):  # NaN/Inf where the reference has numbers
                found = _divergence(kind, candidate, op, index, name, res, compared)
                found["first_nonfinite"] = res.metrics["nonfinite_in_candidate"]
                found["reason"] = (
                    f"the first op whose output has NaN/Inf where the {'original' if rewrite else 'CPU'} has "
                    f"numbers ({res.metrics['nonfinite_in_candidate']} of {ref.size} values)"
                )
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


def _as_float(value: np.ndarray, q: Any) -> np.ndarray | None:
    if value.dtype.kind == "f":
        return value.astype(np.float32)
    if value.dtype.kind in "iu" and q is not None and q.scale:
        return np.asarray((value.astype(np.float64) - q.zero_point[0]) * q.scale[0], np.float32)
    return None

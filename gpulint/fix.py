"""`gpulint fix`: run rewrite passes to a fixed point, prove each on the CPU interpreter.

Every time a pass changes the model the pipeline keeps a snapshot. All snapshots then run on
the LiteRT CPU interpreter in one child process, on the same seeded inputs as the original;
the first snapshot whose outputs leave the tolerance (or that the interpreter refuses) names
a pass that is then disabled for this model, with the reason, and the pipeline starts over
without it. What is written is the last snapshot that matched.

Tolerances. A safe pass must keep every output within fp32 rounding: max |a - b| <=
1e-5 * max(1, max |reference|), i.e. a few ulps of the output's scale summed over the
reorderings a rewrite may cause (folded constants, zero padding, a dilated conv instead of
three ops). An unsafe precision pass (quantized-to-float) cannot match the quantized model
that closely: the float model has none of its rounding and saturation (on odd_channels_56 the
float model is 0.6 steps from the float twin the int8 model was made from, the int8 model 17).
It is held to a mean error of at most QUANT_STEPS quantization steps per quantized output,
which a wrong scale or a lost bias exceeds by far, and its max error is reported.
"""

from __future__ import annotations

import copy
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpulint import reference
from gpulint.model.ir import Model
from gpulint.model.write import write
from gpulint.passes import Pass, PassOptions, registry

FP32_TOLERANCE = 1e-5
# Mean error allowed for quantized-to-float, in output quantization steps. Measured on the
# corpus int8 models: 0.0 (mobilenet), 9.4 (pixel_shuffle), 11.3 (odd_channels).
QUANT_STEPS = 16
MAX_ROUNDS = 10
# What a pass may raise on a model it was not written for (a corrupt or unusual file).
PASS_FAILURES = (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError)


class FixError(Exception):
    """A bad request (unknown or unsafe pass); the message says which and why."""


@dataclass
class Applied:
    name: str
    changes: list[str]


@dataclass
class FixReport:
    applied: list[Applied] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    max_error: list[float] = field(default_factory=list)  # per output, final model vs original
    verified: bool = False
    ops_before: Counter[str] = field(default_factory=Counter)
    ops_after: Counter[str] = field(default_factory=Counter)
    tensors_before: int = 0
    tensors_after: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.applied)


def clone(model: Model) -> Model:
    """A deep copy that shares the (never mutated) constant bytes."""
    memo: dict[int, object] = {id(b.data): b.data for b in model.buffers}
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.custom_options is not None:
                memo[id(op.custom_options)] = op.custom_options
    return copy.deepcopy(model, memo)


def select_passes(names: list[str] | None, unsafe: bool) -> list[Pass]:
    passes = registry()
    if names:
        unknown = [n for n in names if n not in passes]
        if unknown:
            raise FixError(f"unknown pass {', '.join(unknown)}; passes: {', '.join(passes)}")
        risky = [n for n in names if not passes[n].safe and not unsafe]
        if risky:
            raise FixError(f"{', '.join(risky)} changes the interface or precision; add --unsafe-fixes to run it")
        return [p for p in passes.values() if p.name in names]
    return [p for p in passes.values() if p.safe or unsafe]


def tensor_count(model: Model) -> int:
    return sum(len(sg.tensors) for sg in model.subgraphs)


def op_histogram(model: Model) -> Counter[str]:
    return Counter(model.op_name(op) for _, _, op in model.operators())


def _run(
    original: Model, passes: list[Pass], options: PassOptions
) -> tuple[list[Applied], list[str], list[Model], list[str]]:
    """Passes to a fixed point on a copy of `original`: (applied, skipped, snapshots, failed)."""
    model = clone(original)
    failed: list[str] = []
    applied: list[Applied] = []
    snapshots: list[Model] = []
    skipped: list[str] = []
    for _ in range(MAX_ROUNDS):
        changed = False
        skipped = []
        for p in passes:
            try:
                result = p.run(model, options)
            except PASS_FAILURES as e:
                # A model this pass cannot handle (a corrupt or unusual file): leave the model as
                # the last good snapshot had it and go on without this pass.
                model = clone(snapshots[-1]) if snapshots else clone(original)
                failed.append(f"{p.name}: not applied: it cannot handle this model ({type(e).__name__}: {e})")
                passes = [q for q in passes if q is not p]
                changed = True  # start the round again without it
                break
            skipped += [f"{p.name}: {s}" for s in result.skipped]
            if result.changes:
                applied.append(Applied(p.name, result.changes))
                snapshots.append(clone(model))
                changed = True
        if not changed:
            break
    return applied, skipped, snapshots, failed


def unsafe_candidates(model: Model) -> list[str]:
    """The unsafe passes that would change `model` (for "N unsafe passes would apply")."""
    names = []
    for p in registry().values():
        if p.safe:
            continue
        try:
            if p.run(clone(model), PassOptions()).changes:
                names.append(p.name)
        except PASS_FAILURES:
            continue
    return names


def adapt_inputs(inputs: list[np.ndarray], model: Model, seed: int) -> list[np.ndarray]:
    """Inputs for a model whose inputs grew channels (rgba-input): the extra lanes are noise.
    Returns `inputs` itself when nothing grew."""
    rng = np.random.default_rng(seed + 1000)
    sg = model.subgraphs[0]
    out = []
    for x, t in zip(inputs, sg.inputs, strict=True):
        want = sg.tensors[t].shape
        if len(want) == x.ndim and want[-1] > x.shape[-1]:
            extra = rng.uniform(-1, 1, (*x.shape[:-1], want[-1] - x.shape[-1])).astype(x.dtype)
            x = np.concatenate([x, extra], axis=-1)
        out.append(x)
    return inputs if all(a is b for a, b in zip(out, inputs, strict=True)) else out


def _steps(model: Model) -> list[float | None]:
    """Per output, the size of one quantization step, if the output is quantized."""
    sg = model.subgraphs[0]
    producer = {t: op for op in sg.operators for t in op.outputs}
    steps: list[float | None] = []
    for t in sg.outputs:
        tensor = sg.tensors[t]
        if tensor.type in ("INT8", "UINT8", "INT16"):
            steps.append(1.0)
            continue
        op = producer.get(t)
        src = sg.tensors[op.inputs[0]] if op is not None and model.op_name(op) == "DEQUANTIZE" else None
        q = src.quantization if src is not None else None
        steps.append(q.scale[0] if q is not None and q.scale else None)
    return steps


def _max_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))


def _mismatch(ref: list[np.ndarray], got: list[np.ndarray], steps: list[float | None], precise: bool) -> str | None:
    if len(ref) != len(got):
        return f"{len(got)} outputs instead of {len(ref)}"
    for i, (a, b) in enumerate(zip(ref, got, strict=True)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i} is {b.dtype}{list(b.shape)}, was {a.dtype}{list(a.shape)}"
        if not np.all(np.isfinite(b.astype(np.float64)) == np.isfinite(a.astype(np.float64))):
            return f"output {i} has NaN or Inf where the original has none"
        err = _max_error(a, b)
        scale = float(np.max(np.abs(a.astype(np.float64)), initial=0.0))
        step = steps[i]
        if precise or step is None:
            limit = FP32_TOLERANCE * max(1.0, scale)
            if err > limit:
                return f"output {i} differs by {err:.3g} (fp32 tolerance {limit:.3g})"
        else:
            mean = float(np.mean(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            if mean > QUANT_STEPS * step:
                return (
                    f"output {i} differs by {mean / step:.1f} quantization steps on average (tolerance {QUANT_STEPS})"
                )
    return None


def fix_model(
    path: Path, original: Model, passes: list[Pass], options: PassOptions, verify: bool = True, seed: int = 0
) -> tuple[Model, FixReport]:
    """The rewritten model and what happened. `path` is the original's file, for the interpreter."""
    report = FixReport(ops_before=op_histogram(original), tensors_before=tensor_count(original))
    disabled: set[str] = set()
    try:
        inputs = reference.random_inputs(original, seed) if verify else []
    except reference.ReferenceError as e:
        raise FixError(f"cannot prove the passes: {e}") from None
    steps = _steps(original)
    while True:
        applied, skipped, snapshots, crashed = _run(original, [p for p in passes if p.name not in disabled], options)
        report.applied, report.skipped = applied, skipped
        report.rejected += crashed
        disabled.update(line.split(":", 1)[0] for line in crashed)
        if not verify or not snapshots:
            break
        reference_outputs, *candidates = _run_all(path, inputs, snapshots, seed)
        assert not isinstance(reference_outputs, str)
        failed, precise = None, True
        for done, got in zip(applied, candidates, strict=True):
            precise = precise and next(p for p in passes if p.name == done.name).safe
            why = got if isinstance(got, str) else _mismatch(reference_outputs, got, steps, precise)
            if why is not None:
                failed = (done.name, why)
                break
        if failed is None:
            last = candidates[-1]
            assert not isinstance(last, str)
            report.max_error = [_max_error(a, b) for a, b in zip(reference_outputs, last, strict=True)]
            break
        disabled.add(failed[0])
        report.rejected.append(f"{failed[0]}: not applied: {failed[1]}")
    report.verified = verify
    final = snapshots[-1] if snapshots else clone(original)
    report.ops_after = op_histogram(final)
    report.tensors_after = tensor_count(final)
    return final, report


def _run_all(path: Path, inputs: list[np.ndarray], snapshots: list[Model], seed: int) -> list[list[np.ndarray] | str]:
    """Outputs of the original and of every snapshot, all on the original's inputs (grown where a
    snapshot's inputs grew). A snapshot the interpreter refuses gives the reason instead."""
    with tempfile.TemporaryDirectory(prefix="gpulint-fix-") as tmp:
        paths: list[str | Path] = [path]
        for i, snap in enumerate(snapshots):
            paths.append(Path(tmp, f"step{i}.tflite"))
            write(snap, paths[-1])
        feeds = [inputs] + [adapt_inputs(inputs, s, seed) for s in snapshots]
        results: list[list[np.ndarray] | str] = []
        try:
            if all(f is inputs for f in feeds):
                results = list(reference.run_models(paths, inputs))
        except reference.ReferenceError:
            results = []
        if not results:  # one at a time: some need other inputs, or one is refused
            for i, (p, feed) in enumerate(zip(paths, feeds, strict=True)):
                try:
                    results.append(reference.run(p, feed))
                except reference.ReferenceError as e:
                    if i == 0:
                        raise FixError(f"the LiteRT interpreter cannot run the original model: {e}") from None
                    results.append(f"the LiteRT interpreter refuses the rewritten model: {e}")
        return results

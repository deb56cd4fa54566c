"""`gpulint fix`: run rewrite passes to a fixed point, prove each on the CPU interpreter.

Every time a pass changes the model the pipeline keeps a snapshot. All snapshots then run on
the LiteRT CPU interpreter in one child process, on the same seeded inputs as the original;
the first snapshot whose outputs leave the tolerance (or that the interpreter refuses) names
a pass that is then disabled for this model, with the reason, and the pipeline starts over
without it. What is written is the last snapshot that matched.

Tolerances come from `gpulint.compare`, the comparator `verify` uses too. A safe pass is held
to compare.REWRITE_PROOF: every element within fp32 rounding of the reorderings a rewrite may
cause (folded constants, zero padding, a dilated conv instead of three ops), scaled by how far
XNNPACK and the builtin kernels disagree on the original (measured in the same child process).
An unsafe precision pass (quantized-to-float) cannot match the quantized model that closely:
the float model has none of its rounding and saturation (on odd_channels_56 the float model is
0.6 steps from the float twin the int8 model was made from, the int8 model 17). It is held to
compare.PRECISION_REWRITE, a mean error of at most 16 quantization steps per quantized output,
which a wrong scale or a lost bias exceeds by far, and its max error is reported.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from gpulint import compare, reference
from gpulint.model.ir import Model, clone
from gpulint.model.write import write
from gpulint.passes import Pass, PassOptions, registry

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
    # with calibration inputs: what the fixed model still takes past half's range, and the ways to keep it
    # in float (gpulint.passes.keep_float), one line each
    keep_float: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied)


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
    return [p for p in passes.values() if (p.safe and not p.opt_in) or unsafe]


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
    """The unsafe and opt-in passes that would change `model` (for "N unsafe passes would apply")."""
    names = []
    for p in registry().values():
        if p.safe and not p.opt_in:
            continue
        try:
            if p.run(clone(model), PassOptions()).changes:
                names.append(p.name)
        except PASS_FAILURES:
            continue
    return names


def _max_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))


def _mismatch(model: Model, ref: reference.Noisy, got: list[np.ndarray], precise: bool) -> str | None:
    """Why `got` is not the original's outputs `ref` under the rewrite policy, or None."""
    if len(ref.outputs) != len(got):
        return f"{len(got)} outputs instead of {len(ref.outputs)}"
    policy = compare.REWRITE_PROOF if precise else compare.PRECISION_REWRITE
    for i, (a, b) in enumerate(zip(ref.outputs, got, strict=True)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i} is {b.dtype}{list(b.shape)}, was {a.dtype}{list(a.shape)}"
        step = None if precise else compare.quant_step(model, i)
        noise = compare.noise([a], [ref.second[i]])
        verdict = compare.judge(f"output {i}", [a], [b], policy, "fp32", noise, step, sides=("original", "rewrite"))
        if not verdict.passed:
            return f"output {i}: {verdict.reason} ({verdict.tolerance.source})"
    return None


def fix_model(
    path: Path,
    original: Model,
    passes: list[Pass],
    options: PassOptions,
    verify: bool = True,
    seed: int = 0,
    inputs: list[np.ndarray] | None = None,
) -> tuple[Model, FixReport]:
    """The rewritten model and what happened. `path` is the original's file, for the interpreter.

    `inputs` (`fix --inputs`): calibration inputs. The half-precision passes read how large each
    tensor gets on them (one run of the original on the CPU interpreter), and the proof runs on
    them instead of seeded random inputs."""
    report = FixReport(ops_before=op_histogram(original), tensors_before=tensor_count(original))
    disabled: set[str] = set()
    shaped = original
    if options.input_shapes:  # static-shapes pins these: prove every pass on inputs of those shapes
        from gpulint.passes.static_shapes.pin import bad_input_shapes

        why = bad_input_shapes(original, options.input_shapes)
        if why:
            raise FixError(why)
        shaped = clone(original)
        given = dict(options.input_shapes)
        for t in shaped.subgraphs[0].tensors:
            if t.name in given:
                t.shape = list(given[t.name])
    if inputs is not None:
        options = replace(options, calibration=calibrate(path, inputs))
    try:
        if inputs is None:
            inputs = reference.random_inputs(shaped, seed) if verify else []
    except reference.ReferenceError as e:
        raise FixError(f"cannot prove the passes: {e}") from None
    while True:
        applied, skipped, snapshots, crashed = _run(original, [p for p in passes if p.name not in disabled], options)
        report.applied, report.skipped = applied, skipped
        report.rejected += crashed
        disabled.update(line.split(":", 1)[0] for line in crashed)
        if not verify or not snapshots:
            break
        reference_outputs, candidates = _run_all(path, inputs, snapshots, seed)
        failed, precise = None, True
        for done, got in zip(applied, candidates, strict=True):
            precise = precise and next(p for p in passes if p.name == done.name).safe
            why = got if isinstance(got, str) else _mismatch(original, reference_outputs, got, precise)
            if why is not None:
                failed = (done.name, why)
                break
        if failed is None:
            last = candidates[-1]
            assert not isinstance(last, str)
            report.max_error = [_max_error(a, b) for a, b in zip(reference_outputs.outputs, last, strict=True)]
            break
        disabled.add(failed[0])
        report.rejected.append(f"{failed[0]}: not applied: {failed[1]}")
    report.verified = verify
    final = snapshots[-1] if snapshots else clone(original)
    if options.calibration and any(p.opt_in for p in passes):
        from gpulint.passes.keep_float import overflows

        try:
            report.keep_float = [o.describe() for o in overflows(final, inputs)]
        except reference.ReferenceError as e:
            report.keep_float = [f"cannot say what is left past half's range: {e}"]
    report.ops_after = op_histogram(final)
    report.tensors_after = tensor_count(final)
    return final, report


def calibrate(path: Path, inputs: list[np.ndarray]) -> tuple[tuple[str, float], ...]:
    """Each float tensor's largest |value| when the original runs on `inputs` (CPU interpreter)."""
    try:
        tensors = reference.run_all_tensors(path, inputs)
    except reference.ReferenceError as e:
        raise FixError(f"the LiteRT interpreter cannot run the original on the calibration inputs: {e}") from None
    return tuple(
        (name, float(np.max(np.abs(v), initial=0.0)))
        for name, v in tensors.items()
        if v.dtype == np.float32 and np.all(np.isfinite(v))
    )


def _run_all(
    path: Path, inputs: list[np.ndarray], snapshots: list[Model], seed: int
) -> tuple[reference.Noisy, list[list[np.ndarray] | str]]:
    """The original's outputs with its CPU noise, and every snapshot's outputs, all on the
    original's inputs (grown where a snapshot's inputs grew). A snapshot the interpreter refuses
    gives the reason instead."""
    try:
        original = reference.run_with_noise([path], inputs)[0]
    except reference.ReferenceError as e:
        raise FixError(f"the LiteRT interpreter cannot run the original model: {e}") from None
    with tempfile.TemporaryDirectory(prefix="gpulint-fix-") as tmp:
        paths: list[str | Path] = []
        for i, snap in enumerate(snapshots):
            paths.append(Path(tmp, f"step{i}.tflite"))
            write(snap, paths[-1])
        feeds = [reference.adapt_inputs(inputs, s, seed) for s in snapshots]
        results: list[list[np.ndarray] | str] = []
        try:
            if all(f is inputs for f in feeds):
                results = list(reference.run_models(paths, inputs))
        except reference.ReferenceError:
            results = []
        if not results:  # one at a time: some need other inputs, or one is refused
            for p, feed in zip(paths, feeds, strict=True):
                try:
                    results.append(reference.run(p, feed))
                except reference.ReferenceError as e:
                    results.append(f"the LiteRT interpreter refuses the rewritten model: {e}")
        return original, results

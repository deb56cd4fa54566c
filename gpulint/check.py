"""`gpulint check`: file discovery, rule selection, and one result per file (the settings come from
`gpulint.settings`)."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulint.cache import ResultCache, file_digest
from gpulint.model import Model, ModelError, litertlm, read
from gpulint.model.litertlm import SUFFIX, is_bundle
from gpulint.model.signatures import by_signature
from gpulint.rules import pack
from gpulint.rules.engine import Finding, Linter, LintResult, model_verdict
from gpulint.rules.pack import SEVERITY_RANK
from gpulint.rules.partition import SubgraphPlan
from gpulint.rules.placement import Placement
from gpulint.settings import Settings
from gpulint.text import op_ranges

if TYPE_CHECKING:
    from gpulint.verify.values import ValueInputs


def matches(code: str, name: str, selectors: list[str]) -> str | None:
    """The longest selector (a code prefix, or a rule name) that matches the rule, if any."""
    best = None
    for s in selectors:
        if (code.startswith(s) or s == name) and (best is None or len(s) > len(best)):
            best = s
    return best


def selected(finding: Finding, settings: Settings, path: str) -> bool:
    """ruff's model: the most specific of select and ignore wins; per-file and per-op ignores last."""
    select = ["" if s == "ALL" else s for s in settings.select + settings.extend_select]
    ignore = ["" if s == "ALL" else s for s in settings.ignore]
    hit, miss = matches(finding.code, finding.name, select), matches(finding.code, finding.name, ignore)
    if hit is None or (miss is not None and len(miss) >= len(hit)):
        return False
    for pattern, codes in settings.per_file_ignores.items():
        if _path_matches(path, pattern, settings) and matches(finding.code, finding.name, codes):
            return False
    if finding.op is not None:
        codes = settings.per_op_ignores.get(finding.op, [])
        if matches(finding.code, finding.name, codes):
            return False
    return True


def _path_matches(path: str, pattern: str, settings: Settings) -> bool:
    """Glob patterns are relative to the configuration file's folder (else the current one)."""
    base = settings.config.parent if settings.config is not None else Path.cwd()
    p = Path(path)
    try:
        rel = p.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        rel = p.as_posix()
    return fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(p.name, pattern)


def split_words(plan: SubgraphPlan) -> str:
    """How many GPU partitions a subgraph splits into, said the one way the summary line and the
    --max-partitions gate both say it: the runs of supported ops (what the gate counts), and how
    many of them the delegate takes (the rest run on the CPU)."""
    runs, taken = len(plan.gpu_partitions), len(plan.delegated_partitions)
    return f"{runs} GPU partition{'s' * (runs != 1)} (runs of supported ops; the delegate takes {taken})"


@dataclass
class GateFailure:
    """One CI gate a model fails (`check --max-partitions`, `--fail-on-cpu-fallback`), and why."""

    gate: str  # "max-partitions" | "cpu-fallback"
    message: str
    subgraph: int | None = None  # None: the whole model (a backend the delegate fails on)

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "subgraph": self.subgraph, "message": self.message}


@dataclass(frozen=True)
class Gates:
    """The CI gates of `check`, on top of the findings' severities.

    max_partitions: a subgraph may split into at most this many GPU partitions: the subsets of
    ops the delegate supports, each a separate GPU dispatch with CPU<->GPU copies between them,
    whether the delegate takes them or leaves them on the CPU (it takes the largest, up to its
    target's limit). A graph the interpreter refuses has none; `cpu_fallback` catches it.
    cpu_fallback: no op may run on the CPU: none left out of the delegated partitions, no graph
    refused, no backend the delegate fails to initialize on (there every op runs on the CPU).
    """

    max_partitions: int | None = None
    cpu_fallback: bool = False

    def __bool__(self) -> bool:
        return self.max_partitions is not None or self.cpu_fallback

    def flags(self) -> str:
        """The gates as the command line says them: `--max-partitions 1, --fail-on-cpu-fallback`."""
        on = [f"--max-partitions {self.max_partitions}"] if self.max_partitions is not None else []
        return ", ".join(on + ["--fail-on-cpu-fallback"] * self.cpu_fallback)

    def to_json(self) -> dict[str, Any]:
        return {"max_partitions": self.max_partitions, "fail_on_cpu_fallback": self.cpu_fallback}

    def check(self, r: FileResult) -> list[GateFailure]:
        """The gates `r` fails (none for a file that could not be read: that is its own error)."""
        if r.error is not None:
            return []
        out: list[GateFailure] = []
        op_names = {(p.subgraph, p.index): p.op for p in r.ops}
        for plan in r.plans:
            parts = plan.gpu_partitions if plan.verdict != "refused" else []
            if self.max_partitions is not None and len(parts) > self.max_partitions:
                ops = " | ".join(op_ranges(p.ops) for p in parts)
                out.append(
                    GateFailure(
                        "max-partitions",
                        f"subgraph {plan.subgraph} splits into {split_words(plan)}, more than "
                        f"--max-partitions {self.max_partitions} (ops {ops})",
                        plan.subgraph,
                    )
                )
            if self.cpu_fallback and plan.cpu_ops:
                kinds = Counter(op_names.get((plan.subgraph, i), "?") for i in plan.cpu_ops)
                named = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in kinds.most_common(5))
                named += ", ..." if len(kinds) > 5 else ""
                why = "; the interpreter refuses the delegate for the whole graph" if plan.verdict == "refused" else ""
                out.append(
                    GateFailure(
                        "cpu-fallback",
                        f"subgraph {plan.subgraph}: {len(plan.cpu_ops)} of {plan.op_count} ops run on the CPU "
                        f"(ops {op_ranges(plan.cpu_ops)}: {named}{why})",
                        plan.subgraph,
                    )
                )
        for name, outcome in r.backends.items() if self.cpu_fallback else ():
            if outcome.get("init") == "init-failure":
                out.append(
                    GateFailure(
                        "cpu-fallback",
                        f"{name}: the delegate fails to initialize, so every op runs on the CPU: {outcome['reason']}",
                    )
                )
        return out


@dataclass
class FileResult:
    path: str
    error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    ops: list[Placement] = field(default_factory=list)
    plans: list[SubgraphPlan] = field(default_factory=list)
    verdict: str | None = None
    reason: str = ""
    backends: dict[str, dict[str, str]] = field(default_factory=dict)
    gates: list[GateFailure] = field(default_factory=list)  # the CI gates it fails (Gates.check)
    # Each signature's subgraphs: its own, then those its ops call (composite bodies, loop bodies).
    signatures: dict[str, list[int]] = field(default_factory=dict)
    signature: str | None = None  # check --signature: the one signature this result reports

    def signature_of(self, subgraph: int) -> str | None:
        """The signature whose own subgraph this is, if any (an LLM's prefill_8, decode)."""
        return next((key for key, subgraphs in self.signatures.items() if subgraphs[0] == subgraph), None)

    def worst(self) -> int:
        return max((SEVERITY_RANK[f.severity] for f in self.findings), default=-1)


def discover(paths: list[str]) -> Iterator[tuple[str, str | None]]:
    """(path, error) for every file named, and every *.tflite and *.litertlm under every folder
    named; a LiteRT-LM bundle stands for each TFLite model inside it (`BUNDLE#N`)."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.rglob("*") if f.is_file() and f.suffix in (".tflite", SUFFIX))
            if not found:
                yield p, "no .tflite or .litertlm files in this folder"
            for f in found:
                yield from _members(f)
        else:
            yield from _members(p)


def _members(path: str) -> Iterator[tuple[str, str | None]]:
    """A bundle's TFLite models as `BUNDLE#N`, or an error; any other path as it is."""
    if not (is_bundle(path) and Path(path).is_file()):
        yield path, None
        return
    try:
        found = litertlm.models(path)
    except (ModelError, OSError) as e:
        yield path, str(e) if isinstance(e, ModelError) else (e.strerror or str(e))
        return
    if not found:
        yield path, "a LiteRT-LM bundle with no TFLite model in it"
    yield from ((f"{path}#{s.index}", None) for s in found)


def check_file(
    path: str,
    settings: Settings,
    cache: ResultCache | None = None,
    name: str | None = None,
    values: ValueInputs | None = None,
) -> FileResult:
    """The result of one file. `cache`: the lint of a model whose bytes, settings and gpulint were
    seen before is read back (selection, which names the file, is applied afresh). `name`: how the
    results name the file where `path` is a copy of it (a Ray worker's). `values`: the inputs of
    the value-range rule (GPU704, run on the CPU interpreter), part of the cache's key."""
    name = name or path
    key = None
    if cache is not None and cache.enabled:
        with contextlib.suppress(OSError):  # a file that cannot be read: read() below says why
            extra = {"values": values.key()} if values is not None else {}
            key = cache.key("check", model=file_digest(path), settings=lint_settings(settings), **extra)
            kept = cache.get(key)
            if isinstance(kept, FileResult):
                return _select(kept, settings, name)
    try:
        model = read(path)
    except ModelError as e:
        return FileResult(name, error=str(e))
    start = time.perf_counter()
    linted = lint_model(model, name, settings)
    if values is not None:
        error = _add_value_findings(linted, model, values)
        if error is not None:
            return FileResult(name, error=error)
    if key is not None and time.perf_counter() - start > KEEP_LINTS_OVER_S:
        cache.put(key, linted)  # type: ignore[union-attr]
    return _select(linted, settings, name)


# A lint quicker than this is not kept: writing and reading its entry costs about as much (0.5 ms
# here), and a run over hundreds of such models would be slower with the cache than without.
KEEP_LINTS_OVER_S = 0.002


def _add_value_findings(linted: FileResult, model: Model, values: ValueInputs) -> str | None:
    """GPU704's findings added to `linted`; the reason where the inputs or the interpreter fail."""
    from gpulint.reference import ReferenceError
    from gpulint.verify.request import VerifyError
    from gpulint.verify.values import value_findings

    try:
        linted.findings = linted.findings + value_findings(model, values)
    except (ReferenceError, VerifyError) as e:
        return f"the value-range rule (GPU704) cannot run: {e}"
    return None


def lint_settings(settings: Settings) -> dict[str, Any]:
    """What decides a model's lint before selection: the target, its options and flags, and the
    bytes of every rule pack given (the built-in ones are gpulint's code, in every key)."""
    return {
        "target": settings.target,
        "quantized": settings.quantized,
        "backend": settings.backend,
        "target_settings": settings.target_settings,
        "rules": [file_digest(p) for p in settings.rules],
    }


def check_model(model: Model, path: str, settings: Settings) -> FileResult:
    """Lint a model already in memory; `path` names it in the results."""
    return _select(lint_model(model, path, settings), settings, path)


def lint_model(model: Model, path: str, settings: Settings) -> FileResult:
    """Every finding of the model, before the run's selection."""
    targets = pack.load_targets(settings.rules)
    target = targets[settings.target]
    # A backend the target does not have never narrows it to none (which would drop its boundary
    # checks); `settings.resolve` refuses that combination on the command line.
    backends = (settings.backend,) if settings.backend in target.backends else None
    own = {k: v for k, v in settings.target_settings.items() if k in target.settings}
    target = pack.configure(target, own) if own else target
    linter = Linter(target, settings.quantized, targets=targets, backends=backends)
    result: LintResult = linter.lint(model)
    return FileResult(
        path,
        None,
        result.findings,
        result.ops,
        result.plans,
        result.verdict,
        result.reason,
        result.backends,
        signatures=by_signature(model),
    )


# The verdicts that hold for every signature: the interpreter delegates every subgraph of the file,
# and a refusal or an init failure in any of them leaves the whole model on the CPU
# (Interpreter::ModifyGraphWithDelegate undoes the delegate on every subgraph).
WHOLE_MODEL_VERDICTS = ("refused", "init-failure")


def for_signature(result: FileResult, key: str) -> FileResult:
    """`result` narrowed to signature `key`: its subgraphs' plans, ops and findings (and the
    model-wide findings). Its verdict is theirs, but where the whole model is refused or fails to
    initialize, since the runtime delegates every subgraph of the file at once."""
    if result.error is not None:
        return result
    if key not in result.signatures:
        there = ", ".join(repr(k) for k in result.signatures) or "none"
        return FileResult(result.path, error=f"the model has no signature {key!r} (its signatures: {there})")
    keep = set(result.signatures[key])
    plans = [p for p in result.plans if p.subgraph in keep]
    verdict, reason = result.verdict, result.reason
    if verdict in WHOLE_MODEL_VERDICTS:
        reason = f"the whole model, whose every subgraph the runtime delegates at once: {reason}"
    else:
        verdict, reason = model_verdict(plans)
    return replace(
        result,
        findings=[f for f in result.findings if f.subgraph is None or f.subgraph in keep],
        ops=[p for p in result.ops if p.subgraph in keep],
        plans=plans,
        verdict=verdict,
        reason=reason,
        signature=key,
    )


def _select(linted: FileResult, settings: Settings, path: str) -> FileResult:
    """The result as this run reports it: named `path`, with the findings its selectors keep."""
    findings = [f for f in linted.findings if selected(f, settings, path)]
    return replace(linted, path=path, findings=findings)


def check_all(
    paths: list[str],
    settings: Settings,
    jobs: int = 1,
    progress: Callable[[int], None] | None = None,
    cache: ResultCache | None = None,
    ray: str | None = None,
    values: ValueInputs | None = None,
) -> list[FileResult]:
    """One result per file found, in discovery order: in this process, in `jobs` processes, or
    one Ray task per model on the cluster at `ray` (gpulint.fanout). `values`: GPU704's inputs."""
    from gpulint.fanout import run_each

    work = list(discover(paths))
    found = [path for path, error in work if error is None]
    units = [CheckUnit(path, settings, cache is None or cache.enabled, values) for path in found]
    done = iter(run_each(check_unit, units, [u.path for u in units], jobs=jobs, ray=ray, progress=progress))
    return [FileResult(path, error=error) if error is not None else next(done) for path, error in work]


@dataclass
class CheckUnit:
    """One model's check, as a task: everything it needs but the model's bytes."""

    path: str
    settings: Settings
    use_cache: bool
    values: ValueInputs | None = None  # check --inputs / --input-range (this machine's .npz path)


def check_unit(unit: CheckUnit, local: str) -> FileResult:
    """A task of check_all: check the model at `local` (the file, or a worker's copy of it)."""
    return check_file(local, unit.settings, ResultCache(unit.use_cache), name=unit.path, values=unit.values)


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))

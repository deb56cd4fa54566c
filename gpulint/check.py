"""`gpulint check`: file discovery, rule selection, and one result per file (the settings come from
`gpulint.settings`)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpulint.model import Model, ModelError, read
from gpulint.rules import pack
from gpulint.rules.engine import Finding, Linter, LintResult
from gpulint.rules.pack import SEVERITY_RANK
from gpulint.rules.partition import SubgraphPlan
from gpulint.rules.placement import Placement
from gpulint.settings import Settings


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

    def worst(self) -> int:
        return max((SEVERITY_RANK[f.severity] for f in self.findings), default=-1)


def discover(paths: list[str]) -> Iterator[tuple[str, str | None]]:
    """(path, error) for every file named, and every *.tflite under every folder named."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.rglob("*.tflite") if f.is_file())
            if not found:
                yield p, "no .tflite files in this folder"
            yield from ((f, None) for f in found)
        else:
            yield p, None


def check_file(path: str, settings: Settings) -> FileResult:
    try:
        model = read(path)
    except ModelError as e:
        return FileResult(path, error=str(e))
    return check_model(model, path, settings)


def check_model(model: Model, path: str, settings: Settings) -> FileResult:
    """Lint a model already in memory; `path` names it in the results."""
    targets = pack.load_targets(settings.rules)
    target = targets[settings.target]
    # A backend the target does not have never narrows it to none (which would drop its boundary
    # checks); `settings.resolve` refuses that combination on the command line.
    backends = (settings.backend,) if settings.backend in target.backends else None
    own = {k: v for k, v in settings.target_settings.items() if k in target.settings}
    target = pack.configure(target, own) if own else target
    linter = Linter(target, settings.quantized, targets=targets, backends=backends)
    result: LintResult = linter.lint(model)
    findings = [f for f in result.findings if selected(f, settings, path)]
    return FileResult(path, None, findings, result.ops, result.plans, result.verdict, result.reason, result.backends)


def check_all(
    paths: list[str], settings: Settings, jobs: int = 1, progress: Callable[[int], None] | None = None
) -> list[FileResult]:
    work = list(discover(paths))
    results: list[FileResult | None] = [None] * len(work)
    todo = []
    for i, (path, error) in enumerate(work):
        if error is not None:
            results[i] = FileResult(path, error=error)
        else:
            todo.append(i)
    if jobs > 1 and len(todo) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            futures = {i: pool.submit(check_file, work[i][0], settings) for i in todo}
            for i in todo:
                results[i] = futures[i].result()
                if progress:
                    progress(1)
    else:
        for i in todo:
            results[i] = check_file(work[i][0], settings)
            if progress:
                progress(1)
    return [r for r in results if r is not None]


def default_jobs() -> int:
    return max(1, min(4, os.cpu_count() or 1))

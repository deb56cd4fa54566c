"""`gpulint check`: settings, file discovery, rule selection, and one result per file."""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulint.model import Model, ModelError, read
from gpulint.rules import pack
from gpulint.rules.engine import Finding, Linter, LintResult
from gpulint.rules.pack import SEVERITY_RANK
from gpulint.rules.partition import SubgraphPlan
from gpulint.rules.placement import Placement


class SettingsError(Exception):
    """A bad flag value or configuration file; the message says which and why."""


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["GPU"])
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    per_op_ignores: dict[str, list[str]] = field(default_factory=dict)
    target: str = "classic"
    quantized: bool = True
    backend: str = "both"  # opencl | opengl | both: which of the delegate's backends must build the graph
    rules: list[Path] = field(default_factory=list)
    config: Path | None = None
    target_settings: dict[str, Any] = field(default_factory=dict)  # a target's own options (--coreml-version)


CONFIG_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "per-op-ignores",
    "target",
    "quantized",
    "backend",
    "rules",
}
BACKENDS = ("opencl", "opengl", "both")


def find_config(start: Path) -> Path | None:
    """gpulint.toml, or a pyproject.toml with [tool.gpulint], in `start` or a parent folder."""
    for folder in (start, *start.parents):
        own = folder / "gpulint.toml"
        if own.is_file():
            return own
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "gpulint" in _read_toml(pyproject).get("tool", {}):
            return pyproject
    return None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SettingsError(f"{path}: {e}") from None


def load_config(path: Path) -> dict[str, Any]:
    data = _read_toml(path)
    table = data.get("tool", {}).get("gpulint", {}) if path.name == "pyproject.toml" else data
    if not isinstance(table, dict):
        raise SettingsError(f"{path}: [tool.gpulint] must be a table")
    unknown = sorted(set(table) - CONFIG_KEYS)
    if unknown:
        raise SettingsError(f"{path}: unknown key {', '.join(unknown)} (known: {', '.join(sorted(CONFIG_KEYS))})")

    def strings(key: str) -> list[str]:
        v = table.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SettingsError(f"{path}: `{key}` must be a list of strings")
        return v

    def mapping(key: str) -> dict[str, list[str]]:
        v = table.get(key, {})
        if not isinstance(v, dict) or not all(
            isinstance(x, list) and all(isinstance(c, str) for c in x) for x in v.values()
        ):
            raise SettingsError(f"{path}: `{key}` must map names to lists of rule codes")
        return v

    out: dict[str, Any] = {}
    for key in ("select", "extend-select", "ignore", "rules"):
        if key in table:
            out[key.replace("-", "_")] = strings(key)
    for key in ("per-file-ignores", "per-op-ignores"):
        if key in table:
            out[key.replace("-", "_")] = mapping(key)
    if "target" in table:
        if not isinstance(table["target"], str):
            raise SettingsError(f"{path}: `target` must be a string")
        out["target"] = table["target"]
    if "backend" in table:
        if table["backend"] not in BACKENDS:
            raise SettingsError(f"{path}: `backend` must be one of {', '.join(BACKENDS)}")
        out["backend"] = table["backend"]
    if "quantized" in table:
        if not isinstance(table["quantized"], bool):
            raise SettingsError(f"{path}: `quantized` must be true or false")
        out["quantized"] = table["quantized"]
    if "rules" in out:  # relative to the configuration file
        out["rules"] = [(path.parent / p) for p in out["rules"]]
    return out


def matches(code: str, name: str, selectors: list[str]) -> str | None:
    """The longest selector (a code prefix, or a rule name) that matches the rule, if any."""
    best = None
    for s in selectors:
        if (code.startswith(s) or s == name) and (best is None or len(s) > len(best)):
            best = s
    return best


def validate_selectors(selectors: list[str], rules: dict[str, pack.Rule], what: str) -> None:
    names = {r.name for r in rules.values()}
    for s in selectors:
        if s != "ALL" and s not in names and not any(code.startswith(s) for code in rules):
            raise SettingsError(f"{what}: `{s}` matches no rule code or name (see `gpulint rules`)")


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
    backends = None if settings.backend == "both" else (settings.backend,)
    target = targets[settings.target]
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

"""Render `gpulint check` results: text, JSON, SARIF 2.1.0, GitHub workflow commands."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpulint import __version__
from gpulint.check import FileResult, Gates, split_words
from gpulint.output.rules import rule_markdown
from gpulint.rules.engine import Finding
from gpulint.rules.pack import Rule
from gpulint.text import clean, op_ranges

JSON_SCHEMA_VERSION = 1
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _where(f: Finding) -> str:
    if f.op_index is not None:
        return f"subgraph {f.subgraph} op {f.op_index}" if f.subgraph else f"op {f.op_index}"
    if f.subgraph is not None:
        return f"subgraph {f.subgraph}"
    return "model"


def _groups(findings: list[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """One group per (rule, subgraph, op type), in the order first seen."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.code, f.subgraph, f.op if f.op_index is not None else id(f)), []).append(f)
    return [(fs[0], fs) for fs in groups.values()]


def render_text(results: list[FileResult], verbose: bool = False, statistics: bool = False) -> str:
    lines: list[str] = []
    counts: Counter[str] = Counter()
    files_with_findings = 0
    for r in results:
        if r.error is not None:
            continue
        files_with_findings += bool(r.findings)
        for f in r.findings:
            counts[f.severity] += 1
        if verbose:
            for f in r.findings:
                lines.append(f"{r.path}: {_where(f)}: {f.code} [{f.severity}] {f.message}")
        else:
            for first, group in _groups(r.findings):
                where = _where(first)
                if len(group) > 1:
                    sg = f"subgraph {first.subgraph} " if first.subgraph else ""
                    where = f"x{len(group)}: {sg}ops {op_ranges([g.op_index for g in group if g.op_index is not None])}"
                lines.append(f"{r.path}: {first.code} [{first.severity}] {first.message} ({where})")
        for plan in r.plans:
            if not plan.op_count:
                continue
            key = r.signature_of(plan.subgraph)
            sg = f"subgraph {plan.subgraph}" + (f" (signature {clean(key, 80)})" if key is not None else "")
            if plan.verdict == "refused":
                lines.append(f"{r.path}: {sg}: none of {plan.op_count} ops on the GPU (refused)")
                continue
            lines.append(
                f"{r.path}: {sg}: {len(plan.delegated)} of {plan.op_count} ops on the GPU, "
                f"{split_words(plan)}, {plan.cpu_subsets} CPU partition{'s' * (plan.cpu_subsets != 1)}, "
                f"{len(plan.transfers)} transfers, {plan.gpu_mac_share:.0%} of MACs on the GPU"
            )
        differ = len({o["init"] for o in r.backends.values()}) > 1
        for name, outcome in r.backends.items() if differ else ():
            lines.append(
                f"{r.path}: {name}: {outcome['init']}" + (f" ({outcome['reason']})" if outcome["reason"] else "")
            )
        of = f" of signature {clean(r.signature, 80)}" if r.signature is not None else ""
        lines.append(f"{r.path}: verdict{of}: {r.verdict} ({r.reason})")
        lines.extend(f"{r.path}: gate failed: {g.message}" for g in r.gates)
    if statistics:
        lines.append("")
        lines.extend(render_statistics(results))
    total = sum(counts.values())
    checked = sum(1 for r in results if r.error is None)
    if total:
        parts = ", ".join(f"{counts[s]} {s}" for s in ("error", "warning", "info") if counts[s])
        lines.append(f"Found {total} findings ({parts}) in {files_with_findings} of {checked} files.")
    elif checked and not any(r.gates for r in results):
        lines.append(f"All checks passed ({checked} files).")
    elif checked:
        lines.append(f"No findings ({checked} files).")
    failed = [r for r in results if r.gates]
    if failed:
        n = sum(len(r.gates) for r in failed)
        kinds = sorted({g.gate for r in failed for g in r.gates})
        lines.append(f"{n} gate failure{'s' * (n != 1)} ({', '.join(kinds)}) in {len(failed)} of {checked} files.")
    return "\n".join(lines)


def render_statistics(results: list[FileResult]) -> list[str]:
    counts: Counter[tuple[str, str, str]] = Counter()
    for r in results:
        for f in r.findings:
            counts[(f.code, f.severity, f.name)] += 1
    return [
        f"{n:5d}  {code}  [{sev}] {name}"
        for (code, sev, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def _file_json(r: FileResult) -> dict[str, Any]:
    if r.error is not None:
        return {"path": r.path, "error": r.error}
    return {
        "path": r.path,
        "verdict": r.verdict,
        "reason": r.reason,
        "backends": r.backends,
        "findings": [{**f.to_json(), "tensors": [clean(t) for t in f.tensors]} for f in r.findings],
        "ops": [p.to_json() for p in r.ops],
        "partitions": [{**p.to_json(), "signature": r.signature_of(p.subgraph)} for p in r.plans],
        "signatures": r.signatures,
        "signature": r.signature,
        "gate_failures": [g.to_json() for g in r.gates],
    }


def render_json(
    results: list[FileResult], target: str, quantized: bool, backend: str = "both", gates: Gates | None = None
) -> str:
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
        "gpulint": __version__,
        "target": target,
        "quantized": quantized,
        "backend": backend,
        "gates": {**(gates or Gates()).to_json(), "failures": sum(len(r.gates) for r in results)},
        "files": [_file_json(r) for r in results],
    }
    import json  # here, not at the top: text output (what pre-commit asks for) needs neither module

    return json.dumps(doc, indent=2)


def _sarif_rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.rationale},
        "help": {"text": f"{rule.summary} {rule.rationale}", "markdown": rule_markdown(rule)},
        "defaultConfiguration": {"level": SARIF_LEVEL[rule.severity]},
        "properties": {"category": rule.category, "tags": ["gpu", rule.category]},
    }


def _uri(path: str) -> str:
    return path.replace("\\", "/").removeprefix("./")


# The CI gates as SARIF rules of their own, after the rule pack's: a failed gate is a result on
# the model file, so code scanning shows why the check failed beside the findings.
GATE_RULES = {
    "max-partitions": (
        "gpulint/max-partitions",
        "A subgraph splits into more GPU partitions than `gpulint check --max-partitions` allows.",
    ),
    "cpu-fallback": (
        "gpulint/cpu-fallback",
        "Ops run on the CPU where `gpulint check --fail-on-cpu-fallback` allows none.",
    ),
}


def _gate_rule(gate: str) -> dict[str, Any]:
    rule_id, text = GATE_RULES[gate]
    return {
        "id": rule_id,
        "name": gate,
        "shortDescription": {"text": text},
        "fullDescription": {"text": text},
        "help": {"text": text, "markdown": text},
        "defaultConfiguration": {"level": "error"},
        "properties": {"category": "gate", "tags": ["gpu", "gate"]},
    }


def render_sarif(results: list[FileResult], rules: dict[str, Rule], gates: Gates | None = None) -> str:
    import hashlib
    import json

    codes = sorted(rules)
    index = {c: i for i, c in enumerate(codes)}
    gates = gates or Gates()
    on = {"max-partitions": gates.max_partitions is not None, "cpu-fallback": gates.cpu_fallback}
    gate_ids = [g for g in GATE_RULES if on[g]]  # the gates asked for, failed or not
    sarif_results = []
    for r in results:
        if r.error is not None:
            continue
        for g in r.gates:
            sarif_results.append(
                {
                    "ruleId": GATE_RULES[g.gate][0],
                    "ruleIndex": len(codes) + gate_ids.index(g.gate),
                    "level": "error",
                    "message": {"text": g.message},
                    "locations": [
                        {"physicalLocation": {"artifactLocation": {"uri": _uri(r.path)}, "region": {"startLine": 1}}}
                    ],
                    "partialFingerprints": {
                        "gpulintFinding/v1": hashlib.sha256(f"{g.gate}|{g.subgraph}".encode()).hexdigest()[:32]
                    },
                }
            )
        for f in r.findings:
            location: dict[str, Any] = {
                "physicalLocation": {"artifactLocation": {"uri": _uri(r.path)}, "region": {"startLine": 1}}
            }
            if f.op is not None:
                sg = f.subgraph if f.subgraph is not None else 0
                location["logicalLocations"] = [
                    {
                        "name": clean(f.op),
                        "fullyQualifiedName": f"subgraph[{sg}]/op[{f.op_index}]/{clean(f.op)}",
                        "kind": "function",
                    }
                ]
            key = f"{f.code}|{f.subgraph}|{f.op_index}|{f.op}|{f.message}"
            sarif_results.append(
                {
                    "ruleId": f.code,
                    "ruleIndex": index[f.code],
                    "level": SARIF_LEVEL[f.severity],
                    "message": {"text": f.message},
                    "locations": [location],
                    "partialFingerprints": {"gpulintFinding/v1": hashlib.sha256(key.encode()).hexdigest()[:32]},
                }
            )
    invocations = [
        {
            "executionSuccessful": all(r.error is None for r in results),
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": f"{r.path}: {r.error}"}} for r in results if r.error is not None
            ],
        }
    ]
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpulint",
                        "version": __version__,
                        "informationUri": "https://github.com/gpulint/gpulint",
                        "rules": [_sarif_rule(rules[c]) for c in codes] + [_gate_rule(g) for g in gate_ids],
                    }
                },
                "invocations": invocations,
                "results": sarif_results,
            }
        ],
    }
    return json.dumps(doc, indent=2)


def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def render_github(results: list[FileResult]) -> str:
    lines = []
    for r in results:
        if r.error is not None:
            continue
        for first, group in _groups(r.findings):
            extra = f" (x{len(group)})" if len(group) > 1 else ""
            title = _gh_prop(f"{first.code} {first.name}")
            lines.append(
                f"::{GITHUB_LEVEL[first.severity]} file={_gh_prop(r.path)},line=1,title={title}::"
                f"{_gh_data(first.message + extra)}"
            )
        for g in r.gates:
            title = _gh_prop(f"gate failed: {g.gate}")
            lines.append(f"::error file={_gh_prop(r.path)},line=1,title={title}::{_gh_data(g.message)}")
    return "\n".join(lines)

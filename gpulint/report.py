"""The HTML readiness report: one self-contained file (inline CSS, SVG and script, no network).

Everything here turns results into plain data for `reports/report.html.j2`; the template does
the markup, with autoescaping on. Model-provided strings are untrusted: they are cleaned and
bounded (`gpulint.text.clean`) before they reach the template, which escapes them again.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from gpulint import __version__
from gpulint.check import FileResult, check_model
from gpulint.fix import FixError, FixReport, fix_model, select_passes
from gpulint.model import ModelError, read, to_bytes
from gpulint.model.ir import Model
from gpulint.model.litertlm import model_size
from gpulint.output.rules import rule_doc
from gpulint.passes import PassOptions
from gpulint.rules.pack import Rule, builtin_rules
from gpulint.settings import Settings
from gpulint.text import clean, op_ranges

NODE_W, NODE_H, GAP_X, GAP_Y = 170, 36, 24, 30
# "refused": the interpreter refused the delegate for the whole graph, so every op runs on the CPU.
PLACEMENT_COLORS = {
    "gpu": "#2e9e5b",
    "cpu": "#d64545",
    "init-failure": "#e08a1e",
    "refused": "#8b1a1a",
    "folded": "#9aa3ad",
}
PARTITION_COLORS = ("#1f6feb", "#8250df", "#bf3989", "#0a7ea4", "#9a6700", "#57606a")
VERDICT_TITLES = {
    "ready": "Ready",
    "partial": "Partial",
    "not-worth-it": "Not ready",
    "init-failure": "Not ready",
    "refused": "Refused",
}
MARKED = {"GPU301": "odd channels", "GPU401": "data movement", "GPU402": "atrous pattern", "GPU403": "layout copy"}


@dataclass
class FixSummary:
    """What `gpulint fix` did, for the before/after section."""

    report: FixReport
    before: FileResult
    after: FileResult
    bytes_before: int
    bytes_after: int


def _graph(model: Model, result: FileResult, si: int) -> dict[str, Any]:
    """A layered layout of one subgraph: each op one row below the deepest op it reads from."""
    sg = model.subgraphs[si]
    placements = {p.index: p for p in result.ops if p.subgraph == si}
    plan = result.plans[si]
    partition_of: dict[int, int] = {}
    for pi, partition in enumerate(plan.partitions):
        for oi in partition.ops:
            partition_of[oi] = pi
    marks: dict[int, list[str]] = defaultdict(list)
    for f in result.findings:
        if f.subgraph == si and f.op_index is not None and f.code in MARKED:
            marks[f.op_index].append(MARKED[f.code])
    producer = {t: oi for oi, op in enumerate(sg.operators) for t in op.outputs}
    # Ops that only compute constants (fp16 DEQUANTIZE, DENSIFY of weights) would fill the first
    # row with hundreds of boxes; they are left out of the drawing (the table view lists them).
    hidden: set[int] = set()
    for oi, op in enumerate(sg.operators):
        runtime = [t for t in op.inputs if t >= 0 and not model.is_constant(sg.tensors[t])]
        if all(t in producer and producer[t] in hidden for t in runtime) and not set(op.outputs) & set(sg.outputs):
            hidden.add(oi)
    depth: dict[int, int] = {}
    for oi, op in enumerate(sg.operators):  # execution order is topological
        if oi not in hidden:
            reads = [depth[producer[t]] for t in op.inputs if t in producer and producer[t] in depth]
            depth[oi] = 1 + max(reads, default=-1)
    rows: dict[int, list[int]] = defaultdict(list)
    for oi, d in depth.items():
        rows[d].append(oi)
    width = max((len(r) for r in rows.values()), default=1)
    pos: dict[int, tuple[int, int]] = {}
    for d, ops in rows.items():
        offset = (width - len(ops)) * (NODE_W + GAP_X) // 2
        for k, oi in enumerate(ops):
            pos[oi] = (GAP_X + offset + k * (NODE_W + GAP_X), GAP_Y + d * (NODE_H + GAP_Y))
    nodes = []
    for oi, op in enumerate(sg.operators):
        if oi in hidden:
            continue
        p = placements.get(oi)
        kind = "folded" if p is not None and p.folded else (p.placement if p is not None else "cpu")
        part = partition_of.get(oi)
        x, y = pos[oi]
        name = clean(model.op_name(op), 40) or "?"
        nodes.append(
            {
                "index": oi,
                "x": x,
                "y": y,
                "label": f"{oi} {name}"[:24],
                "op": name,
                "kind": kind,
                "fill": PLACEMENT_COLORS[kind],
                "stroke": PARTITION_COLORS[part % len(PARTITION_COLORS)] if part is not None else "#57606a",
                "delegated": oi in plan.delegated,
                "partition": part,
                "marks": marks.get(oi, []),
                "reasons": [clean(r, 160) for r in (p.reasons if p is not None else [])],
            }
        )
    edges = []
    for oi, op in enumerate(sg.operators):
        for t in op.inputs:
            if t in producer and oi in pos and producer[t] in pos:
                (x1, y1), (x2, y2) = pos[producer[t]], pos[oi]
                edges.append({"x1": x1 + NODE_W // 2, "y1": y1 + NODE_H, "x2": x2 + NODE_W // 2, "y2": y2})
    height = GAP_Y + (max(rows, default=0) + 1) * (NODE_H + GAP_Y)
    return {
        "nodes": nodes,
        "edges": edges,
        "width": GAP_X * 2 + width * (NODE_W + GAP_X),
        "height": height,
        "node_w": NODE_W,
        "node_h": NODE_H,
        "hidden": len(hidden),
    }


def _findings(result: FileResult, rules: dict[str, Rule]) -> list[dict[str, Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for f in result.findings:
        groups[f.code].append(f)
    out = []
    for code in sorted(groups, key=lambda c: (-["info", "warning", "error"].index(rules[c].severity), c)):
        fs = groups[code]
        doc = rule_doc(rules[code])  # the rule's docs as `gpulint rule` and SARIF give them
        ops = [f.op_index for f in fs if f.op_index is not None]
        out.append(
            {
                "code": code,
                "name": doc.name,
                "severity": doc.severity,
                "count": len(fs),
                "summary": doc.summary,
                "rationale": doc.rationale,
                "use_instead": doc.use_instead,
                "fix": doc.fix,
                "ops": op_ranges(ops) if ops else "",
                "messages": list(dict.fromkeys(f.message for f in fs))[:8],
                "more": max(0, len(set(f.message for f in fs)) - 8),
                "references": list(doc.references),
            }
        )
    return out


def _coverage(result: FileResult) -> dict[str, Any]:
    # The partition plans' counts, which `check` prints ("N of M ops on the GPU"): ops in delegated
    # partitions. An op there that fails the delegate's init on a backend (OpenGL's missing shaders)
    # is counted apart, not taken off the GPU count, which made the page disagree with check.
    total = sum(p.total_macs for p in result.plans)
    share = sum(p.gpu_macs for p in result.plans) / total if total else 0.0
    return {
        "ops": sum(p.op_count for p in result.plans),
        "gpu_ops": sum(len(p.delegated) for p in result.plans),
        "init_failure_ops": sum(1 for p in result.ops if p.placement == "init-failure" and not p.folded),
        "folded": sum(1 for p in result.ops if p.folded),
        "mac_share": share,
        "severity": dict(Counter(f.severity for f in result.findings)),
    }


@dataclass
class Built:
    """One model's section of the report, and what went wrong on the way (for the terminal)."""

    section: dict[str, Any]
    model: Model | None = None
    result: FileResult | None = None
    error: str | None = None  # why the model could not be read: the section says only that
    fix_error: str | None = None  # why there is no fix preview


def build_section(path: str, settings: Settings, with_fix: bool, name: str | None = None) -> Built:
    """Read, check and (with_fix) preview the safe fix of one model. Each model, and each part of
    it, degrades on its own: an unreadable model gets a section saying why, a fix that cannot run
    a section without the preview. `name`: how the page names the model where `path` is a copy."""
    name = name or path
    try:
        model = read(path)
    except ModelError as e:
        return Built(error_section(name, str(e)), error=str(e))
    except OSError as e:
        return Built(error_section(name, e.strerror or str(e)), error=e.strerror or str(e))
    result = check_model(model, name, settings)
    size = model_size(path)
    summary, fix_error = None, None
    if with_fix:
        try:
            fixed, report = fix_model(Path(path), model, select_passes(None, False), PassOptions(keep_fp16=True))
            summary = FixSummary(report, result, check_model(fixed, name, settings), size, len(to_bytes(fixed)))
        except FixError as e:
            fix_error = clean(str(e), 1000) or "?"
    return Built(model_section(model, result, settings, size, summary, fix_error), model, result, None, fix_error)


def error_section(path: str, message: str) -> dict[str, Any]:
    """A model that could not be reported at all (an unreadable file): its path and why, so the
    other models' sections are still written."""
    return {"path": clean(path, 300), "error": clean(message, 1000) or "?"}


def model_section(
    model: Model,
    result: FileResult,
    settings: Settings,
    size: int,
    fix: FixSummary | None = None,
    fix_error: str | None = None,
) -> dict[str, Any]:
    rules = builtin_rules()
    plans = []
    for plan in result.plans:
        plans.append(
            {
                "subgraph": plan.subgraph,
                "name": clean(model.subgraphs[plan.subgraph].name, 80),
                "verdict": plan.verdict,
                "reason": plan.reason,
                "ops": plan.op_count,
                "gpu": len(plan.delegated),
                "transfers": len(plan.transfers),
                "transfer_bytes": sum(t.bytes for t in plan.transfers),
                "partitions": [
                    {
                        "kind": p.kind,
                        "ops": op_ranges(p.ops),
                        "count": len(p.ops),
                        "delegated": p.delegated,
                        "macs": p.macs,
                    }
                    for p in plan.partitions
                ],
            }
        )
    table = [
        {
            "subgraph": p.subgraph,
            "index": p.index,
            "op": clean(p.op, 60),
            "version": p.version,
            "placement": "folded" if p.folded else p.placement,
            "reasons": "; ".join(clean(r, 200) or "" for r in p.reasons),
        }
        for p in result.ops
    ]
    fix_view = None
    if fix is not None:

        def side(r: FileResult, nbytes: int) -> dict[str, Any]:
            return {
                "verdict": r.verdict,
                "coverage": _coverage(r),
                "findings": len(r.findings),
                "bytes": nbytes,
                "partitions": sum(len(p.partitions) for p in r.plans),
            }

        ops = sorted(set(fix.report.ops_before) | set(fix.report.ops_after))
        fix_view = {
            "applied": [{"name": a.name, "changes": [clean(c, 400) for c in a.changes]} for a in fix.report.applied],
            "rejected": [clean(r, 400) for r in fix.report.rejected],
            "skipped": [clean(r, 400) for r in fix.report.skipped[:20]],
            "before": side(fix.before, fix.bytes_before),
            "after": side(fix.after, fix.bytes_after),
            "ops": [
                {"op": op, "before": fix.report.ops_before[op], "after": fix.report.ops_after[op]}
                for op in ops
                if fix.report.ops_before[op] != fix.report.ops_after[op]
            ],
            "lost": dict(Counter(f.code for f in fix.before.findings) - Counter(f.code for f in fix.after.findings)),
            "max_error": fix.report.max_error,
        }
    return {
        "path": clean(result.path, 300),
        "bytes": size,
        "verdict": result.verdict,
        "verdict_title": VERDICT_TITLES.get(result.verdict or "", "Not ready"),
        "reason": result.reason,
        "target": settings.target,
        "quantized": settings.quantized,
        "coverage": _coverage(result),
        "plans": plans,
        "graphs": [dict(_graph(model, result, i), subgraph=i) for i in range(len(model.subgraphs))],
        "findings": _findings(result, rules),
        "table": table,
        "fix": fix_view,
        "error": None,
        "fix_error": clean(fix_error, 1000) if fix_error else None,  # why there is no fix preview
        "verify": None,  # filled in by `gpulint report --verify`: verify_view
        "description": clean(model.description, 200),
    }


def _num(x: Any, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _output_row(o: dict[str, Any]) -> dict[str, Any]:
    """One output of a verification as the page shows it: the engine's comparison against the CPU
    (the `executor` verdict of VerifyResult's JSON, whichever engine ran), its numbers formatted."""
    v = o["executor"]
    worst = (v.get("worst") or {}).get("error_over_tolerance")
    return {
        "name": clean(o["name"], 200),
        "status": o["status"],
        "engine_status": v["status"],
        "finite": v.get("max_abs_error") is not None,
        "max_abs": _num(v.get("max_abs_error")),
        "atol": _num(v.get("atol")),
        "worst": _num(worst),
        "mean_abs": _num(v.get("mean_abs_error")),
        "cosine": _num(v.get("cosine_similarity"), ".6f"),
        "snr": _num(v.get("snr_db"), ".1f"),
    }


def verify_view(runs: list[tuple[str, dict[str, Any] | None, str | None]]) -> dict[str, Any]:
    """`report --verify` on one model: per engine (name, VerifyResult.to_json() or None, why it
    could not run) the result as `gpulint verify` gives it, and with several engines the side-by-side
    rows `verify --engine all` prints: per engine its status, device and precision, per output each
    engine's max abs error, worst/tolerance, cosine and SNR against the same CPU reference."""
    from gpulint.output.verify import ENGINE_WORDS

    engines: list[dict[str, Any]] = []
    rows: dict[str, list[dict[str, Any]]] = {}  # per output name, each engine's row
    for name, result, error in runs:
        outputs = [_output_row(o) for o in result["outputs"]] if result is not None else []
        engines.append(
            {
                "engine": name,
                "words": ENGINE_WORDS.get(name, name),
                "result": result,
                "outputs": outputs,
                "warnings": [clean(w, 500) for w in result["warnings"]] if result is not None else [],
                "error": (clean(error, 1000) or "?") if result is None else None,
            }
        )
        for o in outputs:
            rows.setdefault(o["name"], []).append({"engine": name, **o})
    outputs = [row for per_engine in rows.values() for row in per_engine] if len(engines) > 1 else []
    return {"engines": engines, "several": len(engines) > 1, "side_by_side": outputs}


def matrix_section(rows: list[Any]) -> dict[str, Any]:
    """`check --matrix` as plain data: each model's cell per device family (gpulint.matrix.Row),
    and where a column was run on the real accelerator (`--run-litert-gpu`), what it did."""
    from gpulint.matrix import COLUMNS, run_text, short

    def cell(c: Any) -> dict[str, Any]:
        run = c.run
        kind = (
            None if run is None else "ran" if run["ran"] and run["agrees"] else "differs" if run["ran"] else "not-run"
        )
        label = {"ran": "ran here", "not-run": "not run here", None: ""}.get(kind) or (
            f"ran here: {run['gpu_ops']}/{run['ops']} ops" if run is not None else ""
        )
        return {
            "outcome": c.outcome,
            "text": short(c, with_run=False),  # the run below it, in a few words (its sentence on hover)
            "reason": clean(c.reason, 400),
            "run": kind,
            "run_label": label,
            "run_text": clean(run_text(run), 600) if run is not None else "",
        }

    return {
        "columns": [c.title for c in COLUMNS],
        "ran": any(r.cells[c.id].run is not None for r in rows if r.error is None for c in COLUMNS),
        "rows": [
            {
                "path": clean(r.path, 200),
                "error": clean(r.error, 300) if r.error else None,
                "cells": [cell(r.cells[c.id]) for c in COLUMNS] if r.error is None else [],
            }
            for r in rows
        ],
    }


def render(sections: list[dict[str, Any]], matrix: dict[str, Any] | None = None) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpulint", "reports"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("report.html.j2").render(
        sections=sections, version=__version__, colors=PLACEMENT_COLORS, matrix=matrix
    )


def node_data(model: Model, result: FileResult) -> dict[str, Any]:
    """Model Explorer node data (ModelNodeData: graph id -> GraphNodeData), keyed by each op's
    first output tensor name; values 0 GPU, 1 init failure, 2 CPU, with matching colors."""
    value = {"gpu": 0, "folded": 0, "init-failure": 1, "cpu": 2, "refused": 2}
    graphs: dict[str, Any] = {}
    for si, sg in enumerate(model.subgraphs):
        results = {}
        for p in (p for p in result.ops if p.subgraph == si):
            op = sg.operators[p.index]
            if not op.outputs:
                continue
            key = sg.tensors[op.outputs[0]].name or str(op.outputs[0])
            results[key] = {"value": value["folded" if p.folded else p.placement]}
        graphs[sg.name or f"subgraph_{si}"] = {
            "name": "gpulint placement (0 GPU, 1 init failure, 2 CPU)",
            "results": results,
            "thresholds": [
                {"value": 0, "bgColor": PLACEMENT_COLORS["gpu"]},
                {"value": 1, "bgColor": PLACEMENT_COLORS["init-failure"]},
                {"value": 2, "bgColor": PLACEMENT_COLORS["cpu"]},
            ],
        }
    return graphs


def write_node_data(path: Path, model: Model, result: FileResult) -> bytes:
    return (json.dumps(node_data(model, result), indent=2) + "\n").encode("utf-8")


def render_index(rows: list[dict[str, Any]], matrix: dict[str, Any], target: str, verify_columns: list[str]) -> str:
    """The index page of `report DIR`: a row per model (its page's link, verdict, GPU ops, the
    device-family matrix's cells, and a verify status per precision and engine), sortable."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpulint", "reports"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    cells = {r["path"]: r for r in matrix["rows"]}
    for row in rows:
        row["cells"] = cells.get(row["name"], {}).get("cells") or []
        if not row["error"] and not row["cells"]:
            row["cells"] = [{"outcome": "none", "text": "", "reason": ""} for _ in matrix["columns"]]
    return env.get_template("index.html.j2").render(
        rows=rows, columns=matrix["columns"], verify_columns=verify_columns, target=target, version=__version__
    )

"""`check --matrix`: one row per model, one column per device family gpulint models.

A column is a target pack and, for the classic delegate, one of its backends: Android devices
run the classic delegate on OpenCL where they have it and on OpenGL ES where they do not. Each
cell says what happens there - ready (everything on the GPU), partial, init-failure, refused
(the interpreter refuses the delegate for the whole graph) or none (nothing delegated) - with
the share of ops the delegate takes, its partitions and the first reason.

The targets share the model's Graphs (and their cached op signatures): the classic delegate is
linted once for both Android columns, since its backends differ only in what fails at init.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from gpulint.model import Model, ModelError, read
from gpulint.rules import pack
from gpulint.rules.engine import Linter, LintResult
from gpulint.rules.signature import Graph
from gpulint.text import clean


@dataclass(frozen=True)
class Column:
    id: str
    title: str
    target: str
    backend: str | None = None  # one backend of the target; None: all of them


COLUMNS = (
    Column("android-opencl", "Android OpenCL", "classic", "opencl"),
    Column("android-opengl", "Android OpenGL ES", "classic", "opengl"),
    Column("litert-gpu", "LiteRT GPU accelerator", "litert-gpu"),
    Column("ios-metal", "iOS Metal", "metal"),
    Column("ios-coreml", "iOS Core ML", "coreml"),
)
OUTCOMES = ("ready", "partial", "init-failure", "refused", "none")


@dataclass
class Cell:
    outcome: str  # one of OUTCOMES
    gpu_ops: int
    ops: int
    partitions: int  # node subsets the delegate takes
    reason: str = ""
    split: int = 0  # the most GPU partitions one subgraph splits into (supported subsets, taken or not)

    @property
    def share(self) -> float:
        return self.gpu_ops / self.ops if self.ops else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "gpu_op_share": round(self.share, 4)}


@dataclass
class Row:
    path: str
    cells: dict[str, Cell] = field(default_factory=dict)
    error: str | None = None
    gates: list[dict[str, str]] = field(default_factory=list)  # {column, gate, message}: gate_failures


def gate_failures(row: Row, max_partitions: int | None, cpu_fallback: bool) -> list[dict[str, str]]:
    """The CI gates of `check` (gpulint.check.Gates) per column: a subgraph split into more GPU
    partitions than `max_partitions`; with `cpu_fallback`, any op on the CPU (a cell not ready)."""
    out = []
    for c in COLUMNS if row.error is None else ():
        cl = row.cells[c.id]
        if max_partitions is not None and cl.split > max_partitions:
            message = f"a subgraph splits into {cl.split} GPU partitions, more than --max-partitions {max_partitions}"
            out.append({"column": c.id, "gate": "max-partitions", "message": message})
        if cpu_fallback and cl.outcome != "ready":
            on_cpu = cl.ops if cl.outcome in ("refused", "init-failure", "none") else cl.ops - cl.gpu_ops
            message = f"{on_cpu} of {cl.ops} ops run on the CPU ({cl.outcome})"
            out.append({"column": c.id, "gate": "cpu-fallback", "message": message})
    return out


def cell(result: LintResult, backends: list[str]) -> Cell:
    """One column's cell from a target's result; `backends`: those the column runs on."""
    gpu = sum(len(p.delegated) for p in result.plans)
    ops = sum(p.op_count for p in result.plans)
    parts = sum(1 for p in result.plans for part in p.partitions if part.delegated)
    split = max((len(p.gpu_partitions) for p in result.plans), default=0)
    if result.verdict == "refused":
        return Cell("refused", 0, ops, 0, result.reason)
    failing = [
        result.backends[b]["reason"] for b in backends if result.backends.get(b, {}).get("init") == "init-failure"
    ]
    if failing or (not result.backends and result.verdict == "init-failure"):
        return Cell("init-failure", gpu, ops, parts, failing[0] if failing else result.reason, split)
    # The first op kept off for its own sake; one cut off from the partition only says where.
    off = [p for p in result.ops if p.placement == "cpu" and not p.folded]
    first = next((p for p in off if not p.codes or p.codes[0][0] != "GPU109"), off[0] if off else None)
    why = f"`{first.op}` (op {first.index}): {first.reasons[0]}" if first is not None and first.reasons else ""
    if gpu == 0:
        return Cell("none", 0, ops, 0, why or result.reason, split)
    return Cell("ready" if gpu == ops else "partial", gpu, ops, parts, why, split)


def matrix_row(model: Model, path: str, quantized: bool, target_settings: dict[str, Any]) -> Row:
    targets = pack.load_targets()
    graphs = [Graph.of(model, si) for si in range(len(model.subgraphs))]
    row = Row(path)
    results: dict[str, LintResult] = {}
    for col in COLUMNS:
        target = targets[col.target]
        if col.target not in results:
            own = {k: v for k, v in target_settings.items() if k in target.settings}
            configured = pack.configure(target, own) if own else target
            results[col.target] = Linter(configured, quantized, targets=targets).lint(model, graphs)
        names = [col.backend] if col.backend else list(target.backends)
        row.cells[col.id] = cell(results[col.target], names)
    return row


def matrix(paths: list[str], quantized: bool = True, target_settings: dict[str, Any] | None = None) -> list[Row]:
    rows = []
    for path in paths:
        try:
            model = read(path)
        except ModelError as e:
            rows.append(Row(path, error=str(e)))
            continue
        rows.append(matrix_row(model, path, quantized, target_settings or {}))
    return rows


def render_json(
    rows: list[Row], quantized: bool, target_settings: dict[str, Any], gates: dict[str, Any] | None = None
) -> str:
    doc = {
        "columns": [asdict(c) for c in COLUMNS],
        "quantized": quantized,
        "settings": target_settings,
        "gates": {
            **(gates or {"max_partitions": None, "fail_on_cpu_fallback": False}),
            "failures": sum(len(r.gates) for r in rows),
        },
        "rows": [
            {
                "path": r.path,
                "error": r.error,
                "cells": {k: c.to_json() for k, c in r.cells.items()},
                "gate_failures": r.gates,
            }
            for r in rows
        ],
    }
    return json.dumps(doc, indent=2)


def short(c: Cell) -> str:
    """A cell in a few characters: `partial 80% 2p`."""
    if c.outcome in ("refused", "none"):
        return c.outcome
    return f"{c.outcome} {c.share:.0%} {c.partitions}p"


def render_text(rows: list[Row]) -> str:
    """A table (outcome, share of ops on the GPU, partitions taken), then each cell's first reason."""
    names = [r.path.rsplit("/", 1)[-1] for r in rows]
    head = ["model", *(c.title for c in COLUMNS)]
    body = [
        [n, *(short(r.cells[c.id]) if r.error is None else "error" for c in COLUMNS)]
        for n, r in zip(names, rows, strict=True)
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in [head, *body]]
    lines.append("")
    for n, r in zip(names, rows, strict=True):
        if r.error is not None:
            lines.append(f"{n}: error: {r.error}")
            continue
        # Columns that say the same thing share one line.
        said: dict[tuple[str, str], list[str]] = {}
        for c in COLUMNS:
            cl = r.cells[c.id]
            if cl.reason and cl.outcome != "ready":
                said.setdefault((cl.outcome, cl.reason), []).append(c.title)
        for (outcome, reason), titles in said.items():
            where = "every column" if len(titles) == len(COLUMNS) else ", ".join(titles)
            lines.append(f"{n} / {where}: {outcome}: {clean(reason, 300)}")
        title = {c.id: c.title for c in COLUMNS}
        lines.extend(f"{n} / {title[g['column']]}: gate failed: {g['message']}" for g in r.gates)
    return "\n".join(lines).rstrip()

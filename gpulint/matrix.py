"""`check --matrix`: one row per model, one column per device family gpulint models.

A column is a target pack and, for the classic delegate and LiteRT's GPU accelerator, one of its
backends: Android devices run the classic delegate on OpenCL where they have it and on OpenGL ES
where they do not; LiteRT's accelerator (ML Drift) runs on OpenCL on Android, on Metal on Apple
devices and on WebGPU on desktops and in browsers. Each
cell says what happens there - ready (everything on the GPU), partial, init-failure, refused
(the interpreter refuses the delegate for the whole graph) or none (nothing delegated) - with
the share of ops the delegate takes, its partitions and the first reason.

The targets share the model's Graphs (and their cached op signatures): each target is linted
once for all its columns, since its backends differ only in what fails at init.

Every cell is a prediction from the rules. With `run_litert` (`check --matrix --run-litert-gpu`)
the LiteRT GPU accelerator's WebGPU column (id `litert-gpu`, as before the backends had columns) is
also tried on this machine, the one backend ai-edge-litert ships for Linux: each model is compiled on LiteRT's
real accelerator (gpulint.engines' litert-gpu engine, at its default half precision) and its cell
says "ran here", with the ops the accelerator took and whether that is what the column predicts,
or why it did not run (no WebGPU adapter, a compile failure).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
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
    Column("litert-opencl", "LiteRT OpenCL (Android)", "litert-gpu", "opencl"),
    Column("litert-metal", "LiteRT Metal (Apple)", "litert-gpu", "metal"),
    # The WebGPU backend keeps the column's id and title from before the backends had columns: it is
    # the one --run-litert-gpu compiles on (ai-edge-litert's accelerator on Linux is WebGPU).
    Column("litert-gpu", "LiteRT GPU accelerator", "litert-gpu", "webgpu"),
    Column("ios-metal", "iOS Metal", "metal"),
    Column("ios-coreml", "iOS Core ML", "coreml"),
)
OUTCOMES = ("ready", "partial", "init-failure", "refused", "none")
RUN_COLUMN = "litert-gpu"  # the column --run-litert-gpu tries on the real accelerator (its WebGPU backend)
RUN_PRECISION = "fp16"  # the accelerator's default (half), as apps get it


@dataclass
class Cell:
    outcome: str  # one of OUTCOMES
    gpu_ops: int
    ops: int
    partitions: int  # node subsets the delegate takes
    reason: str = ""
    split: int = 0  # the most GPU partitions one subgraph splits into (supported subsets, taken or not)
    run: dict[str, Any] | None = None  # the real accelerator's run of this cell's column (accelerator_run)

    @property
    def share(self) -> float:
        return self.gpu_ops / self.ops if self.ops else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {**asdict(self), "gpu_op_share": round(self.share, 4)}
        if self.run is None:  # only a column that was run has one
            del out["run"]
        return out


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
            message = (
                f"a subgraph splits into {cl.split} GPU partitions (runs of supported ops), "
                f"more than --max-partitions {max_partitions}"
            )
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


def accelerator_run(model: Model, path: str) -> dict[str, Any]:
    """Compile `model` on LiteRT's real GPU accelerator and say what it did: {ran: true, precision,
    gpu_ops, ops, log_gpu_ops, agrees, differs, device, refused, warnings}. gpu_ops of ops: the main
    subgraph's ops the accelerator took, counted as the column counts them (the ops of check's
    partitions: constant ops the delegate folds, a DEQUANTIZE of fp16 weights, left out);
    log_gpu_ops: the count in its log (engine.gpu_op_count, those constant ops included where it
    takes the whole graph). agrees: the engine held its log against check's plan for `--target
    litert-gpu` and found them the same; where not, `differs` is its sentence. Or {ran: false,
    unavailable, reason} where it could not run (no WebGPU adapter, a compile failure, the verify
    extra not installed)."""
    try:
        from gpulint.engines import EngineError, EngineUnavailable, gpu_op_count
        from gpulint.engines.litert_gpu import LiteRtGpuEngine
    except ImportError as e:  # the light install: the engine needs the verify extra
        return _not_run(f"the accelerator needs the verify extra ({e}): pip install 'gpulint[verify]'", True)
    if not model.subgraphs or not model.subgraphs[0].operators:
        return _not_run("the model has no op to run", False)
    try:
        engine = LiteRtGpuEngine(model, Path(path), RUN_PRECISION)
    except EngineUnavailable as e:
        return _not_run(str(e), True)
    except (EngineError, OSError, ValueError) as e:
        return _not_run(str(e), False)
    try:
        logged = engine.gpu_op_count
        taken = gpu_op_count(engine.parts)
        ops = sum(int(p.get("op_count", len(p["ops"]))) for p in engine.parts)
        device = engine.info()
        warnings = [clean(w, 500) or "?" for w in engine.warnings]
        refused = [clean(u, 300) or "?" for u in engine.unsupported]
        differs = clean(engine.disagreement, 500) if engine.disagreement is not None else None
    finally:
        engine.close()
    return {
        "ran": True,
        "precision": RUN_PRECISION,
        "gpu_ops": taken,
        "ops": ops,
        "log_gpu_ops": logged,
        "agrees": differs is None,
        "differs": differs,
        "device": f"{device['name']} ({device['driver']})",
        "refused": refused,  # the accelerator's own list of the ops it left to the CPU, and why
        "warnings": warnings,
    }


def _not_run(reason: str, unavailable: bool) -> dict[str, Any]:
    return {"ran": False, "unavailable": unavailable, "reason": clean(reason, 500) or "?"}


def matrix(
    paths: list[str],
    quantized: bool = True,
    target_settings: dict[str, Any] | None = None,
    run_litert: bool = False,
) -> list[Row]:
    """A row per model; `run_litert`: also compile each on LiteRT's real GPU accelerator
    (accelerator_run). Where the accelerator is unavailable on this machine, it is tried once and
    every later row says the same."""
    rows = []
    unavailable: dict[str, Any] | None = None
    for path in paths:
        try:
            model = read(path)
        except ModelError as e:
            rows.append(Row(path, error=str(e)))
            continue
        row = matrix_row(model, path, quantized, target_settings or {})
        if run_litert:
            run = unavailable or accelerator_run(model, path)
            if run.get("unavailable"):
                unavailable = run
            row.cells[RUN_COLUMN].run = run
        rows.append(row)
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


def short(c: Cell, with_run: bool = True) -> str:
    """A cell in a few characters: `partial 80% 2p`, and (`with_run`) where the column was run on the
    real accelerator, `ran here` (`ran here: 3/5` where it took other ops than predicted) or `not run`."""
    text = c.outcome if c.outcome in ("refused", "none") else f"{c.outcome} {c.share:.0%} {c.partitions}p"
    if c.run is None or not with_run:
        return text
    if not c.run["ran"]:
        return f"{text}, not run"
    return f"{text}, ran here" + ("" if c.run["agrees"] else f": {c.run['gpu_ops']}/{c.run['ops']}")


def run_text(run: dict[str, Any]) -> str:
    """What the real accelerator did with a model, in a sentence."""
    if not run["ran"]:
        return f"did not run here: {run['reason']}"
    if run["agrees"]:
        took = f"the accelerator took {run['gpu_ops']} of {run['ops']} ops compiling it ({run['precision']})"
        return f"ran here on {run['device']}: {took}, as the column predicts"
    return f"ran here on {run['device']} ({run['precision']}), not as the column predicts: {run['differs']}"


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
        for c in COLUMNS:
            run = r.cells[c.id].run
            if run is not None:
                lines.append(f"{n} / {c.title}: {run_text(run)}")
        lines.extend(f"{n} / {title[g['column']]}: gate failed: {g['message']}" for g in r.gates)
    return "\n".join(lines).rstrip()

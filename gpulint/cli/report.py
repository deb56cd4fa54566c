"""`gpulint report`: settings -> one section per model (report.build_section), each verified with
--verify on the chosen engines (report.verify_view) -> the HTML file written."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulint.cli import common
from gpulint.cli.common import EXIT_USAGE, fail, user_errors
from gpulint.cli.verify import EngineChoice, engine_names
from gpulint.fanout import run_each

if TYPE_CHECKING:
    from gpulint.settings import Settings


def report(
    paths: Annotated[list[str], typer.Argument(help=".tflite files to report on.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    target: common.Target = None,
    quantized: common.Quantized = None,
    rules: common.Rules = None,
    backend: common.Backend = None,
    config: common.Config = None,
    select: common.Select = None,
    extend_select: common.ExtendSelect = None,
    ignore: common.Ignore = None,
    coreml_version: common.CoremlVersion = None,
    coreml_all_devices: common.CoremlAllDevices = None,
    litert_version: common.LitertVersion = None,
    with_fix: Annotated[
        bool, typer.Option("--fix/--no-fix", help="Show what the safe fix passes would change.")
    ] = True,
    node_data: Annotated[
        Path | None, typer.Option(help="Also write Model Explorer node data (placement per op) to this JSON file.")
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Also run `gpulint verify` on each model (needs an OpenCL device).")
    ] = False,
    engine: Annotated[
        EngineChoice,
        typer.Option(
            help="With --verify: what runs the GPU side, as in `gpulint verify`: opencl (gpulint's executor), "
            "litert-gpu (LiteRT's real GPU accelerator), all (both, side by side)."
        ),
    ] = EngineChoice.opencl,
    precision: Annotated[
        list[common.Precision] | None,
        typer.Option(help="With --verify: each precision to verify at (repeatable; default fp32)."),
    ] = None,
    jobs: common.Jobs = 1,
    ray: common.Ray = None,
    no_cache: common.NoCache = False,
) -> None:
    """Write a self-contained HTML readiness report: verdict, partitions, graph, findings, fix. Given
    a folder, -o names a folder: an index page (one sortable row per model: verdict, the device-family
    matrix, verify per precision) and a page per model."""
    from gpulint.check import discover

    if engine is not EngineChoice.opencl and not verify:
        fail(None, f"--engine {engine.value} chooses what runs --verify's GPU side: give --verify too")
    if precision and not verify:
        fail(None, "--precision chooses what --verify runs at: give --verify too")
    settings = common.resolve_settings(
        config=config,
        select=select,
        extend_select=extend_select,
        ignore=ignore,
        rules=rules,
        target=target,
        quantized=quantized,
        backend=backend,
        coreml_version=coreml_version,
        coreml_all_devices=coreml_all_devices,
        litert_version=litert_version,
    )
    vtarget = None
    if verify:
        from gpulint.cli.verify import verify_target

        vtarget = verify_target(settings)
    found = list(discover(paths))
    folder = any(Path(p).is_dir() for p in paths)
    models = [p for p, err in found if err is None]
    units = [
        ReportUnit(
            p,
            settings,
            with_fix,
            engine_names(engine),
            [x.value for x in precision or [common.Precision.fp32]],
            vtarget,
            not no_cache,
            node_data is not None and len(paths) == 1 and not folder,
        )
        for p in models
    ]
    with user_errors(None):  # --ray: a cluster that cannot be reached is one error
        done = iter(
            common.with_progress(
                "reporting",
                len(units),
                lambda tick: run_each(report_unit, units, models, jobs=jobs, ray=ray, progress=tick, fresh=True),
            )
        )
    from gpulint.report import error_section

    pieces = [
        next(done) if err is None else Piece(error_section(p, err), [f"gpulint: error: {p}: {err}"]) for p, err in found
    ]
    for piece in pieces:
        for line in piece.messages:
            typer.echo(line, err=True)
    if node_data is not None and pieces and pieces[0].node_data is not None:
        from gpulint.atomic import write_atomic

        with user_errors(node_data):
            write_atomic(node_data, [pieces[0].node_data])
    sections = [piece.section for piece in pieces]
    if all(s["error"] for s in sections):  # nothing to report: the errors are printed
        raise typer.Exit(EXIT_USAGE)
    if folder:
        out = output if output != Path("report.html") else Path("gpulint-report")
        verified = units[0].engines if vtarget is not None else []
        _write_folder(out, found, sections, settings, verified, units[0].precisions)
        typer.echo(f"wrote {out / 'index.html'} and {len(sections)} model page(s)")
    else:
        common.write_report(output, sections)
        typer.echo(f"wrote {output}")
    if any(s["error"] for s in sections):
        raise typer.Exit(EXIT_USAGE)


@dataclass
class ReportUnit:
    """One model's section of the report, as a task (gpulint.fanout)."""

    path: str
    settings: Settings
    with_fix: bool
    engines: list[str]
    precisions: list[str]
    verify_target: str | None  # None: no --verify
    use_cache: bool
    node_data: bool  # also Model Explorer's node data (one model)


@dataclass
class Piece:
    section: dict[str, Any]
    messages: list[str] = field(default_factory=list)  # for stderr, in the model's place
    node_data: bytes | None = None


def report_unit(unit: ReportUnit, local: str) -> Piece:
    """A task: the section of the model at `local` (the file, or a Ray worker's copy), named by the
    unit's path; its check and fix preview, and each verification, come from the result cache where
    the same bytes, settings and gpulint made them before."""
    from gpulint.cache import ResultCache, file_digest
    from gpulint.check import lint_settings
    from gpulint.report import build_section, verify_view, write_node_data

    cache = ResultCache(unit.use_cache)
    messages = []
    key = None
    section = None
    if cache.enabled and not unit.node_data:
        with contextlib.suppress(OSError):  # a file that cannot be read: build_section says why
            parts = {"model": file_digest(local), "settings": lint_settings(unit.settings), "fix": unit.with_fix}
            key = cache.key("report", name=unit.path, **parts)
            kept = cache.get(key)
            if isinstance(kept, tuple) and len(kept) == 2:
                section, messages = kept[0], list(kept[1])
    node = None
    if section is None:
        built = build_section(local, unit.settings, unit.with_fix, name=unit.path)
        section = built.section
        if built.error is not None:
            messages.append(f"gpulint: error: {unit.path}: {built.error}")
        if built.fix_error is not None:
            messages.append(f"gpulint: {unit.path}: no fix preview: {built.fix_error}")
        if unit.node_data and built.model is not None and built.result is not None:
            node = write_node_data(Path(local), built.model, built.result)
        if key is not None:
            cache.put(key, (section, messages))
    section = dict(section)
    if unit.verify_target is not None and not section["error"]:
        # Each engine degrades on its own: one that cannot run (no OpenCL device, no WebGPU
        # adapter, a compile failure) is one line on the page, beside the others' results.
        from gpulint.cli.verify import try_verify
        from gpulint.verify import Request

        views = []
        for precision in unit.precisions:
            runs = []
            for name in unit.engines:
                req = Request(Path(local), target=unit.verify_target, engine=name, precision=precision)
                attempt = try_verify(req, None, cache)
                result = None
                if attempt.result is None:
                    at = f" at {precision}" if len(unit.precisions) > 1 else ""
                    messages.append(f"gpulint: {unit.path}: not verified on {name}{at}: {attempt.error}")
                else:
                    result = attempt.result.to_json() | {"model": unit.path, "candidate": unit.path}
                runs.append((name, result, attempt.error))
            views.append(verify_view(runs) | {"precision": precision})
        section["verify"] = views[0]
        section["verify_also"] = views[1:]
    return Piece(section, messages, node)


def _write_folder(
    out: Path,
    found: list[tuple[str, str | None]],
    sections: list[dict[str, Any]],
    settings: Settings,
    engines: list[str],
    precisions: list[str],
) -> None:
    """`report DIR`: a page per model under OUT/models/ (named after its path) and OUT/index.html."""
    from gpulint import matrix as mx
    from gpulint.atomic import write_atomic
    from gpulint.report import matrix_section, render, render_index
    from gpulint.text import clean

    with user_errors(out):
        (out / "models").mkdir(parents=True, exist_ok=True)
    with user_errors(None):
        rows = mx.matrix([p for p, err in found if err is None], settings.quantized, settings.target_settings)
    matrix = matrix_section(rows)
    columns = [f"{p}{' ' + e if len(engines) > 1 else ''}" for p in precisions for e in engines]  # none unverified
    index_rows = []
    used: set[str] = set()
    for (path, _), section in zip(found, sections, strict=True):
        page = _page_name(path, used)
        with user_errors(out / page):
            write_atomic(out / page, [render([section]).encode("utf-8")])
        verify = []
        for view in [section["verify"], *section.get("verify_also", [])] if "verify" in section else []:
            for e in view["engines"]:
                r = e["result"]
                status = r["status"] if r is not None else "not-run"
                verify.append({"status": status, "detail": e["error"] or f"{r['device']['name']}" if r else e["error"]})
        cov = section.get("coverage") or {}
        index_rows.append(
            {
                "name": clean(path, 200),
                "page": page,
                "error": section["error"],
                "verdict": section.get("verdict"),
                "gpu_ops": cov.get("gpu_ops", 0),
                "ops": cov.get("ops", 0),
                "share": cov.get("gpu_ops", 0) / cov["ops"] if cov.get("ops") else 0,
                "verify": verify,
            }
        )
    with user_errors(out):
        write_atomic(out / "index.html", [render_index(index_rows, matrix, settings.target, columns).encode("utf-8")])


def _page_name(path: str, used: set[str]) -> str:
    """models/NAME.html, NAME from the model's path (a second model of the same name gets -2, -3)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(path).stem) or "model"
    name, n = stem, 1
    while name in used:
        n += 1
        name = f"{stem}-{n}"
    used.add(name)
    return f"models/{name}.html"

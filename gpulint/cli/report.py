"""`gpulint report`: settings -> one section per model (report.build_section), each verified with
--verify on the chosen engines (report.verify_view) -> the HTML file written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpulint.cli import common
from gpulint.cli.common import EXIT_USAGE, fail, user_errors
from gpulint.cli.verify import ENGINE_NAMES, EngineChoice


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
) -> None:
    """Write a self-contained HTML readiness report: verdict, partitions, graph, findings, fix."""
    from gpulint.atomic import write_atomic
    from gpulint.report import build_section, verify_view, write_node_data

    if engine is not EngineChoice.opencl and not verify:
        fail(None, f"--engine {engine.value} chooses what runs --verify's GPU side: give --verify too")
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
    )
    engines = ENGINE_NAMES if engine is EngineChoice.all else [engine.value]
    vtarget = None
    if verify:
        from gpulint.cli.verify import verify_target

        vtarget = verify_target(settings)
    sections = []
    for path in paths:  # each model, and each part of it, degrades on its own: the report is written
        built = build_section(path, settings, with_fix)
        if built.error is not None:
            typer.echo(f"gpulint: error: {path}: {built.error}", err=True)
        if built.fix_error is not None:
            typer.echo(f"gpulint: {path}: no fix preview: {built.fix_error}", err=True)
        if node_data is not None and len(paths) == 1 and built.model is not None and built.result is not None:
            with user_errors(node_data):
                write_atomic(node_data, [write_node_data(node_data, built.model, built.result)])
        section = built.section
        if vtarget is not None and not section["error"]:
            # Each engine degrades on its own: one that cannot run (no OpenCL device, no WebGPU
            # adapter, a compile failure) is one line on the page, beside the others' results.
            from gpulint.cli.verify import try_verify
            from gpulint.verify import Request

            runs = []
            for name in engines:
                attempt = try_verify(Request(Path(path), target=vtarget, engine=name), None)
                if attempt.result is None:
                    typer.echo(f"gpulint: {path}: not verified on {name}: {attempt.error}", err=True)
                runs.append((name, attempt.result.to_json() if attempt.result is not None else None, attempt.error))
            section["verify"] = verify_view(runs)
        sections.append(section)
    if all(s["error"] for s in sections):  # nothing to report: the errors are printed
        raise typer.Exit(EXIT_USAGE)
    common.write_report(output, sections)
    typer.echo(f"wrote {output}")
    if any(s["error"] for s in sections):
        raise typer.Exit(EXIT_USAGE)

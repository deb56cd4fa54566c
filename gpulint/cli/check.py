"""`gpulint check`: settings -> check_all (or the device matrix) -> a renderer -> an exit code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulint.cli import common
from gpulint.cli.common import EXIT_FINDINGS, EXIT_USAGE, Format, Severity, fail, user_errors

if TYPE_CHECKING:
    from gpulint.check import Gates
    from gpulint.settings import Settings
    from gpulint.verify.values import ValueInputs


def check(
    paths: Annotated[list[str], typer.Argument(help=".tflite files, or folders to search for *.tflite.")],
    select: common.Select = None,
    extend_select: common.ExtendSelect = None,
    ignore: common.Ignore = None,
    target: common.Target = None,
    quantized: common.Quantized = None,
    backend: common.Backend = None,
    rules: common.Rules = None,
    config: common.Config = None,
    output_format: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.text,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file.")] = None,
    exit_zero: Annotated[
        bool, typer.Option(help="Exit 0 whatever the findings (a gate below still fails the check).")
    ] = False,
    fail_on: Annotated[Severity, typer.Option(help="Lowest severity that makes the exit code 1.")] = Severity.error,
    max_partitions: Annotated[
        int | None,
        typer.Option(
            "--max-partitions",
            min=0,
            metavar="N",
            help="Gate: exit 1 when a subgraph splits into more than N GPU partitions (the runs of ops the "
            "delegate supports between ops it does not, whether it takes each or leaves it on the CPU).",
        ),
    ] = None,
    fail_on_cpu_fallback: Annotated[
        bool,
        typer.Option(
            "--fail-on-cpu-fallback",
            help="Gate: exit 1 when any op runs on the CPU (left out of the delegated partitions, a graph "
            "the interpreter refuses, or a backend the delegate fails to initialize on).",
        ),
    ] = False,
    signature: Annotated[
        str | None,
        typer.Option(
            help="Report this signature only (an LLM's prefill_8 or decode, with the subgraphs it calls); "
            "default: every subgraph, each signature's named."
        ),
    ] = None,
    statistics: Annotated[bool, typer.Option(help="Count findings per rule.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="One line per finding, not per op type.")] = False,
    jobs: common.Jobs = 1,
    ray: common.Ray = None,
    no_cache: common.NoCache = False,
    html: Annotated[Path | None, typer.Option(help="Also write an HTML readiness report of the checked files.")] = None,
    matrix: Annotated[
        bool,
        typer.Option(
            "--matrix",
            help="One row per model, one column per device family (Android OpenCL / OpenGL ES, LiteRT GPU, "
            "iOS Metal, iOS Core ML): outcome, share of ops delegated, partitions, first reason.",
        ),
    ] = False,
    run_litert_gpu: Annotated[
        bool,
        typer.Option(
            "--run-litert-gpu",
            help="With --matrix: also compile each model on LiteRT's real GPU accelerator on this machine (ML "
            'Drift on WebGPU, at its default half precision; about a second a model): its column says "ran here" '
            "with the ops the accelerator took and whether the column predicted them, or why it did not run.",
        ),
    ] = False,
    coreml_version: common.CoremlVersion = None,
    coreml_all_devices: common.CoremlAllDevices = None,
    litert_version: common.LitertVersion = None,
    inputs: Annotated[
        Path | None,
        typer.Option(
            "--inputs",
            metavar="FILE.npz",
            help="Run each model on these inputs (.npz, by input name or arr_0...) on the LiteRT CPU interpreter "
            "and report GPU704 where an op's result passes half's 65504 (needs the verify extra).",
        ),
    ] = None,
    input_range: Annotated[
        str | None,
        typer.Option(
            "--input-range",
            metavar="LO,HI",
            help="As --inputs, on float inputs drawn uniformly in [LO, HI] with three seeds (e.g. 0,255 or 0,1 "
            "for images, -1,1 normalized).",
        ),
    ] = None,
) -> None:
    """Check models against the GPU delegate's rules: ops, layout, performance, partitions.

    Exit codes:
    0 the check passed;
    1 a finding at or above --fail-on (not with --exit-zero), or a gate failed:
    --max-partitions, --fail-on-cpu-fallback (every output format says which and why);
    2 bad input or usage: a model that cannot be read, a bad flag, configuration or rule pack (wins over 1).
    """
    # The settings first: a bad flag, configuration or pack is one error before the checker loads.
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
        matrix=matrix,
    )
    from gpulint.cache import ResultCache
    from gpulint.check import Gates, check_all, discover, for_signature
    from gpulint.output.check import render_github, render_json, render_sarif, render_statistics, render_text
    from gpulint.rules.pack import SEVERITY_RANK, builtin_rules

    gates = Gates(max_partitions, fail_on_cpu_fallback)
    values = _value_inputs(inputs, input_range, matrix, ray)
    if run_litert_gpu and not matrix:
        fail(None, "--run-litert-gpu runs the --matrix's LiteRT GPU accelerator column: give --matrix too")
    if matrix:
        if signature is not None:
            fail(None, "--signature narrows check's report of each model: not with --matrix")
        if ray is not None:
            fail(None, "--matrix runs in this process: --ray is for check, verify and report")
        if output_format not in (Format.text, Format.json):
            fail(None, "--matrix writes text or json")
        _check_matrix(paths, settings, output_format is Format.json, output, html, gates, run_litert_gpu)
        return

    # A progress bar on a terminal when there are several files; never in logs or pipes.
    total = sum(1 for _, err in discover(paths) if err is None) if sys.stderr.isatty() else 0
    cache = ResultCache(enabled=not no_cache)
    with user_errors(None):  # --ray: a cluster that cannot be reached is one error
        if total > 1:
            with typer.progressbar(length=total, label="checking", file=sys.stderr) as bar:
                results = check_all(paths, settings, jobs, bar.update, cache, ray, values)
        else:
            results = check_all(paths, settings, jobs, cache=cache, ray=ray, values=values)

    if signature is not None:
        results = [for_signature(r, signature) for r in results]
    for r in results:
        r.gates = gates.check(r)
        if r.error is not None:
            typer.echo(f"gpulint: error: {r.path}: {r.error}", err=True)
    if output_format is Format.json:
        text = render_json(results, settings.target, settings.quantized, settings.backend, gates)
    elif output_format is Format.sarif:
        text = render_sarif(results, builtin_rules(), gates)
    elif output_format is Format.github:
        text = render_github(results)
    else:
        text = render_text(results, verbose=verbose, statistics=statistics)
    if output is not None:
        common.write_text(output, text)
    elif text:
        typer.echo(text)
    if output_format is not Format.text and statistics:
        typer.echo("\n".join(render_statistics(results)), err=True)
    if html is not None:
        from gpulint.model import read
        from gpulint.model.litertlm import model_size
        from gpulint.report import model_section

        sections = [model_section(read(r.path), r, settings, model_size(r.path)) for r in results if r.error is None]
        common.write_report(html, sections)

    if any(r.error is not None for r in results):
        raise typer.Exit(EXIT_USAGE)
    if any(r.gates for r in results):
        if output_format is not Format.text or output is not None:  # else the text on stdout says why
            for r in results:
                for g in r.gates:
                    typer.echo(f"gpulint: gate failed: {r.path}: {g.message}", err=True)
        raise typer.Exit(EXIT_FINDINGS)
    if not exit_zero and any(r.worst() >= SEVERITY_RANK[fail_on.value] for r in results):
        raise typer.Exit(EXIT_FINDINGS)


def _value_inputs(inputs: Path | None, input_range: str | None, matrix: bool, ray: str | None) -> ValueInputs | None:
    """What the value-range rule (GPU704) runs on, from --inputs or --input-range; None without either."""
    if inputs is None and input_range is None:
        return None
    if inputs is not None and input_range is not None:
        fail(None, "give --inputs or --input-range, not both")
    if matrix or ray is not None:
        fail(None, "--inputs and --input-range run the CPU interpreter here: not with --matrix or --ray")
    from gpulint.verify.values import ValueInputs, parse_range

    if inputs is not None:
        if not inputs.is_file():
            fail(inputs, "no such file")
        return ValueInputs(npz=inputs)
    assert input_range is not None
    try:
        low, high = parse_range(input_range)
    except ValueError as e:
        fail(None, str(e))
    return ValueInputs(low=low, high=high)


def _check_matrix(
    paths: list[str],
    settings: Settings,
    as_json: bool,
    output: Path | None,
    html: Path | None,
    gates: Gates,
    run_litert: bool = False,
) -> None:
    """`check --matrix`: every model against every device family's target; a gate fails where any
    column fails it. `run_litert`: the LiteRT GPU column also compiled on the real accelerator (the
    predictions, and so the gates, stay the rules'; a model it cannot run is said, not an error)."""
    from gpulint import matrix as mx
    from gpulint.check import discover

    found = list(discover(paths))
    for p, err in found:
        if err is not None:
            typer.echo(f"gpulint: error: {p}: {err}", err=True)
    with user_errors(None):  # the matrix reads every target pack: a broken one is one error
        rows = mx.matrix(
            [p for p, err in found if err is None], settings.quantized, settings.target_settings, run_litert
        )
    for r in rows:
        r.gates = mx.gate_failures(r, gates.max_partitions, gates.cpu_fallback)
        if r.error is not None:
            typer.echo(f"gpulint: error: {r.path}: {r.error}", err=True)
    if as_json:
        text = mx.render_json(rows, settings.quantized, settings.target_settings, gates.to_json())
    else:
        text = mx.render_text(rows)
    if output is not None:
        common.write_text(output, text)
    else:
        typer.echo(text)
    if html is not None:
        from gpulint.report import matrix_section

        common.write_report(html, [], matrix_section(rows))
    if any(err is not None for _, err in found) or any(r.error is not None for r in rows):
        raise typer.Exit(EXIT_USAGE)
    if any(r.gates for r in rows):
        if as_json or output is not None:  # else the text on stdout says why
            for r in rows:
                for g in r.gates:
                    typer.echo(f"gpulint: gate failed: {r.path}: {g['column']}: {g['message']}", err=True)
        raise typer.Exit(EXIT_FINDINGS)

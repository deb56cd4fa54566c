"""The `gpulint` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpulint import __version__
from gpulint.text import clean

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpulint.fix import FixReport
    from gpulint.model import Model
    from gpulint.settings import Settings

app = typer.Typer(
    name="gpulint",
    help="Make TensorFlow Lite / LiteRT models ready for the GPU delegate, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def fail(path: str | os.PathLike[str] | None, message: str) -> NoReturn:
    """One line on stderr and exit 2: the convention for every error a user can cause."""
    where = f"{path}: " if path is not None else ""
    typer.echo(f"gpulint: error: {where}{message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpulint {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Make TensorFlow Lite / LiteRT models ready for the GPU delegate, and prove it."""


@app.command()
def inspect(
    path: Annotated[str, typer.Argument(help="A .tflite file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Show a model's subgraphs, inputs and outputs, op histogram, weights and metadata."""
    from gpulint.model import ModelError, read
    from gpulint.summary import render_text, summarize

    try:
        model = read(path)
    except ModelError as e:
        fail(path, str(e))
    summary = summarize(model, path, os.path.getsize(path))
    typer.echo(json.dumps(summary, indent=2) if as_json else render_text(summary))


class Format(StrEnum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class VerifyFormat(StrEnum):
    text = "text"
    json = "json"


class Precision(StrEnum):
    fp32 = "fp32"
    fp16 = "fp16"


class Distribution(StrEnum):
    uniform = "uniform"
    normal = "normal"


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


# Options that mean the same in every command that takes them (check, report).
TargetOption = Annotated[
    str | None,
    typer.Option(
        help="Whose rules apply: classic (default), mediapipe, docs-2019, litert-gpu (LiteRT's GPU accelerator), "
        "metal, coreml, or a --rules pack."
    ),
]
RulesOption = Annotated[list[Path] | None, typer.Option("--rules", help="A target pack (YAML) to add.")]
ConfigOption = Annotated[
    Path | None, typer.Option(help="A gpulint.toml or pyproject.toml (default: found from the current folder up).")
]
QuantizedOption = Annotated[
    bool | None,
    typer.Option("--quantized/--no-quantized", help="The delegate's quantized-models flag (on by default)."),
]
BackendOption = Annotated[
    str | None,
    typer.Option(
        help="The delegate backend that must build the graph: opencl, opengl (devices without OpenCL), "
        "or both (default)."
    ),
]
SelectOption = Annotated[
    list[str] | None, typer.Option(help="Rule codes, code prefixes or names to report (comma-separated; ALL).")
]
ExtendSelectOption = Annotated[list[str] | None, typer.Option(help="Add to the selected rules.")]
IgnoreOption = Annotated[list[str] | None, typer.Option(help="Rule codes, prefixes or names not to report.")]
CoremlVersionOption = Annotated[
    int | None, typer.Option(help="--target coreml: the Core ML version the delegate targets, 2 or 3 (default 3).")
]
CoremlAllDevicesOption = Annotated[
    bool | None,
    typer.Option(
        "--coreml-all-devices/--no-coreml-all-devices",
        help="--target coreml: the delegate is created on every device, not only those with a Neural Engine.",
        show_default=False,
    ),
]


def _settings(matrix: bool = False, **flags: Any) -> Settings:
    """The run's settings: the configuration file, then these flags (gpulint.settings.resolve)."""
    from gpulint.rules.pack import PackError
    from gpulint.settings import Overrides, SettingsError, resolve

    select = flags.pop("select", None)
    given = Overrides(
        select=_split(select) if select else None,
        extend_select=_split(flags.pop("extend_select", None)),
        ignore=_split(flags.pop("ignore", None)),
        rules=list(flags.pop("rules", None) or []),
        **flags,
    )
    try:
        return resolve(given, matrix=matrix)
    except (SettingsError, PackError) as e:
        fail(None, str(e))


@app.command()
def check(
    paths: Annotated[list[str], typer.Argument(help=".tflite files, or folders to search for *.tflite.")],
    select: SelectOption = None,
    extend_select: ExtendSelectOption = None,
    ignore: IgnoreOption = None,
    target: TargetOption = None,
    quantized: QuantizedOption = None,
    backend: BackendOption = None,
    rules: RulesOption = None,
    config: ConfigOption = None,
    output_format: Annotated[Format, typer.Option("--format", help="Output format.")] = Format.text,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the report to this file.")] = None,
    exit_zero: Annotated[bool, typer.Option(help="Exit 0 even when there are findings.")] = False,
    fail_on: Annotated[Severity, typer.Option(help="Lowest severity that makes the exit code 1.")] = Severity.error,
    statistics: Annotated[bool, typer.Option(help="Count findings per rule.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="One line per finding, not per op type.")] = False,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Check files in this many processes.")] = 1,
    html: Annotated[Path | None, typer.Option(help="Also write an HTML readiness report of the checked files.")] = None,
    matrix: Annotated[
        bool,
        typer.Option(
            "--matrix",
            help="One row per model, one column per device family (Android OpenCL / OpenGL ES, LiteRT GPU, "
            "iOS Metal, iOS Core ML): outcome, share of ops delegated, partitions, first reason.",
        ),
    ] = False,
    coreml_version: CoremlVersionOption = None,
    coreml_all_devices: CoremlAllDevicesOption = None,
) -> None:
    """Check models against the GPU delegate's rules: ops, layout, performance, partitions."""
    from gpulint.check import check_all
    from gpulint.output import check as render
    from gpulint.rules.pack import SEVERITY_RANK, builtin_rules

    settings = _settings(
        matrix,
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
    if matrix and output_format not in (Format.text, Format.json):
        fail(None, "--matrix writes text or json")
    catalog = builtin_rules()

    if matrix:
        _check_matrix(paths, settings, output_format is Format.json, output, html)
        return

    # A progress bar on a terminal when there are several files; never in logs or pipes.
    from gpulint.check import discover

    total = sum(1 for _, err in discover(paths) if err is None) if sys.stderr.isatty() else 0
    if total > 1:
        with typer.progressbar(length=total, label="checking", file=sys.stderr) as bar:
            results = check_all(paths, settings, jobs, bar.update)
    else:
        results = check_all(paths, settings, jobs)

    for r in results:
        if r.error is not None:
            typer.echo(f"gpulint: error: {r.path}: {r.error}", err=True)
    if output_format is Format.json:
        text = render.render_json(results, settings.target, settings.quantized, settings.backend)
    elif output_format is Format.sarif:
        text = render.render_sarif(results, catalog)
    elif output_format is Format.github:
        text = render.render_github(results)
    else:
        text = render.render_text(results, verbose=verbose, statistics=statistics)
    if output is not None:
        from gpulint.atomic import write_atomic

        try:
            write_atomic(output, [(text + "\n").encode("utf-8")])
        except OSError as e:
            fail(output, e.strerror or str(e))
    elif text:
        typer.echo(text)
    if output_format is not Format.text and statistics:
        typer.echo("\n".join(render.render_statistics(results)), err=True)
    if html is not None:
        from gpulint.model import read
        from gpulint.report import model_section

        sections = [
            model_section(read(r.path), r, settings, os.path.getsize(r.path)) for r in results if r.error is None
        ]
        _write_report(html, sections)

    if any(r.error is not None for r in results):
        raise typer.Exit(EXIT_USAGE)
    threshold = SEVERITY_RANK[fail_on.value]
    if not exit_zero and any(r.worst() >= threshold for r in results):
        raise typer.Exit(EXIT_FINDINGS)


def _check_matrix(paths: list[str], settings: Any, as_json: bool, output: Path | None, html: Path | None) -> None:
    from gpulint import matrix as mx
    from gpulint.atomic import write_atomic
    from gpulint.check import discover

    found = list(discover(paths))
    for p, err in found:
        if err is not None:
            typer.echo(f"gpulint: error: {p}: {err}", err=True)
    rows = mx.matrix([p for p, err in found if err is None], settings.quantized, settings.target_settings)
    for r in rows:
        if r.error is not None:
            typer.echo(f"gpulint: error: {r.path}: {r.error}", err=True)
    text = mx.render_json(rows, settings.quantized, settings.target_settings) if as_json else mx.render_text(rows)
    if output is not None:
        try:
            write_atomic(output, [(text + "\n").encode("utf-8")])
        except OSError as e:
            fail(output, e.strerror or str(e))
    else:
        typer.echo(text)
    if html is not None:
        from gpulint.report import matrix_section

        _write_report(html, [], matrix_section(rows))
    if any(err is not None for _, err in found) or any(r.error is not None for r in rows):
        raise typer.Exit(EXIT_USAGE)


@app.command("rules")
def list_rules(
    target: Annotated[
        str | None, typer.Option(help="Also list a target pack's op entries: limits, checks and sources.")
    ] = None,
) -> None:
    """List every rule: code, severity, name and what it flags."""
    from gpulint.output.rules import render_catalogue, render_target
    from gpulint.rules.pack import PackError, builtin_rules, load_targets

    typer.echo(render_catalogue(builtin_rules()))
    if target is None:
        return
    targets = load_targets()
    try:
        t = targets[target]
    except KeyError:
        fail(None, f"unknown target `{target}`; known: {', '.join(targets)}")
    except PackError as e:
        fail(None, str(e))
    typer.echo("\n" + render_target(t))


@app.command("rule")
def explain_rule(
    code: Annotated[str, typer.Argument(help="A rule code (GPU101) or name (unsupported-op).")],
    output_format: Annotated[VerifyFormat, typer.Option("--format", help="Output format.")] = VerifyFormat.text,
) -> None:
    """Explain one rule: what it flags, why, an example, the fix, and where it comes from."""
    from gpulint.output.rules import render_rule, render_rule_json
    from gpulint.rules.pack import builtin_rules

    rules = builtin_rules()
    rule = rules.get(code.upper()) or next((r for r in rules.values() if r.name == code), None)
    if rule is None:
        fail(None, f"no rule `{code}`; `gpulint rules` lists them")
    typer.echo(render_rule_json(rule) if output_format is VerifyFormat.json else render_rule(rule))


@app.command()
def fix(
    path: Annotated[str, typer.Argument(help="The .tflite model to rewrite.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Where to write the rewritten model.")] = None,
    passes: Annotated[
        list[str] | None,
        typer.Option(
            help="Only these passes (comma-separated). Safe: static-shapes, densify-constants, dequantize-constants, "
            "remove-identity, fold-atrous, fuse-activations, pad-channels; unsafe: rgba-input, quantized-to-float "
            "(`gpulint fix` README table: what each does)."
        ),
    ] = None,
    unsafe_fixes: Annotated[bool, typer.Option(help="Also run passes that change the interface or precision.")] = False,
    keep_fp16: Annotated[
        bool,
        typer.Option(
            "--keep-fp16/--fold-fp16",
            help="Keep fp16 weights behind their DEQUANTIZE, which every GPU delegate folds itself; "
            "--fold-fp16 makes them float32 constants (twice the bytes) for runtimes that do not.",
        ),
    ] = True,
    dry_run: Annotated[bool, typer.Option(help="Say what would change; write nothing.")] = False,
    diff: Annotated[bool, typer.Option(help="Show ops, tensors and check findings before and after.")] = False,
    force: Annotated[bool, typer.Option(help="Overwrite an existing output, or the input itself.")] = False,
    skip_proof: Annotated[
        bool, typer.Option(help="Do not prove the passes on the LiteRT CPU interpreter (nothing checks the outputs).")
    ] = False,
    html: Annotated[Path | None, typer.Option(help="Also write an HTML report with the before and after.")] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Run `gpulint verify` on the result; write nothing if it fails.")
    ] = False,
    input_shape: Annotated[
        list[str] | None,
        typer.Option(
            help="static-shapes: pin an input, NAME=1,224,224,3 (repeatable; default: every -1 becomes 1). "
            "The pass runs by default only on a graph the interpreter refuses for the GPU delegate."
        ),
    ] = None,
) -> None:
    """Rewrite a model for the GPU delegate; every pass is proven on the LiteRT CPU interpreter."""
    from gpulint.fix import FixError, fix_model, select_passes
    from gpulint.model import ModelError, read
    from gpulint.output.fix import render_fix
    from gpulint.passes import PassOptions
    from gpulint.passes.static_shapes import parse_input_shape

    if output is None and not dry_run:
        fail(None, "give --output FILE (or --dry-run)")
    if output is not None and not dry_run:
        if output.exists() and not force:
            same = Path(path).exists() and output.resolve() == Path(path).resolve()
            fail(
                output,
                "is the input model; add --force to overwrite it" if same else "exists; add --force to overwrite it",
            )
        if output.is_dir():
            fail(output, "is a directory")
    try:
        model = read(path)
        chosen = select_passes(_split(passes), unsafe_fixes)
        try:
            shapes = tuple(parse_input_shape(s) for s in input_shape or [])
        except ValueError as e:
            fail(None, str(e))
        pin = bool(shapes) or "static-shapes" in _split(passes)
        options = PassOptions(keep_fp16=keep_fp16, input_shapes=shapes, pin_shapes=pin)
        fixed, report = fix_model(Path(path), model, chosen, options, verify=not skip_proof)
    except ModelError as e:
        fail(path, str(e))
    except FixError as e:
        fail(path, str(e))

    hidden = []
    if not unsafe_fixes and not passes:
        from gpulint.fix import unsafe_candidates

        hidden = unsafe_candidates(fixed)
    shown = render_fix(path, report, hidden, _fix_diff(model, fixed, report) if diff else None)
    if shown:
        typer.echo(shown)
    if html is not None:
        from gpulint.check import check_model
        from gpulint.model import to_bytes
        from gpulint.report import FixSummary, model_section
        from gpulint.settings import Settings

        before, after = check_model(model, path, Settings()), check_model(fixed, path, Settings())
        summary = FixSummary(report, before, after, os.path.getsize(path), len(to_bytes(fixed)))
        _write_report(html, [model_section(model, before, Settings(), os.path.getsize(path), summary)])
    if verify:
        _verify_fixed(path, fixed)
    if dry_run or output is None:
        return
    _write_fixed(path, output, fixed, report.changed)


def _write_fixed(path: str, output: Path, fixed: Model, changed: bool) -> None:
    """The fixed model to `output`; with nothing changed, the input's own bytes (never the input
    itself rewritten). Bytes appended after the model (another tool's data) go along either way."""
    from gpulint.atomic import write_atomic
    from gpulint.model import LossyWriteError, write
    from gpulint.summary import appended_text, describe_appended

    if not changed and output.resolve() == Path(path).resolve():
        typer.echo(f"{path}: left as it is")
        return
    try:
        if changed:
            write(fixed, output, allow_loss=False)
        else:
            write_atomic(output, _chunks(Path(path)))
    except LossyWriteError as e:  # the input holds what this schema cannot write back
        fail(path, clean(str(e), 1000) or "")
    except (OSError, ValueError) as e:
        fail(output, getattr(e, "strerror", None) or str(e))
    info = describe_appended(fixed.appended)
    if info:
        typer.echo(f"{path}: kept the {appended_text(info)} appended after the model")
    typer.echo(f"{path}: wrote {output}" if changed else f"{path}: copied to {output} unchanged")


def _chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk


def _verify_fixed(path: str, fixed: Model) -> None:
    """The fixed model on the executor against the original on the CPU; exit 1 on FAIL."""
    import tempfile

    from gpulint.model import LossyWriteError, write
    from gpulint.output.verify import render_verify
    from gpulint.verify import Request

    with tempfile.TemporaryDirectory(prefix="gpulint-fix-") as tmp:
        candidate = Path(tmp, "candidate.tflite")
        try:
            write(fixed, candidate, allow_loss=True)
        except (LossyWriteError, OSError, ValueError) as e:
            fail(path, f"cannot stage the fixed model for --verify: {e}")
        result, error, _ = _try_verify(Request(Path(path), candidate), None)
    if error is not None:  # the staged copy is gpulint's, not the user's: name the model they gave
        fail(path, f"--verify cannot run: {error.replace(str(candidate), 'the fixed model')}")
    result.candidate = "fixed model"
    typer.echo(render_verify(result))
    if not result.passed:
        typer.echo(f"gpulint: {path}: the fixed model fails verification; nothing written", err=True)
        raise typer.Exit(EXIT_FINDINGS)


def _fix_diff(before: Model, after: Model, report: FixReport) -> str:
    from gpulint.check import check_model
    from gpulint.output.fix import render_fix_diff
    from gpulint.settings import Settings

    checked = (check_model(before, "", Settings()), check_model(after, "", Settings()))
    return render_fix_diff(before, after, report, checked)


@app.command()
def verify(
    path: Annotated[str, typer.Argument(help="The original .tflite model (the reference runs it).")],
    candidate: Annotated[
        Path | None, typer.Option(help="The model to run on the executor (default: the original).")
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Runs with different random inputs.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the first run's inputs.")] = 0,
    distribution: Annotated[Distribution, typer.Option(help="Random float inputs.")] = Distribution.uniform,
    inputs: Annotated[Path | None, typer.Option(help="Inputs from an .npz (by input name, or arr_0...).")] = None,
    precision: Annotated[Precision, typer.Option(help="The executor's precision.")] = Precision.fp32,
    device: Annotated[
        str | None, typer.Option(help="OpenCL device: `platform:device` or part of its name (env GPULINT_CL_DEVICE).")
    ] = None,
    target: Annotated[str, typer.Option(help="Whose rules decide the GPU partition.")] = "classic",
    atol: Annotated[float | None, typer.Option(help="Absolute tolerance for every output.")] = None,
    rtol: Annotated[float, typer.Option(help="Relative tolerance, with --atol or --tolerance.")] = 0.0,
    tolerance: Annotated[
        list[str] | None, typer.Option(help="Per output: NAME=ATOL or NAME=ATOL:RTOL (repeatable).")
    ] = None,
    bisect: Annotated[bool, typer.Option(help="On FAIL, name the first op whose output diverges.")] = False,
    save_reference: Annotated[Path | None, typer.Option(help="Save the inputs and CPU outputs to an .npz.")] = None,
    reference_file: Annotated[
        Path | None, typer.Option("--reference", help="Use a saved reference instead of running the CPU.")
    ] = None,
    output_format: Annotated[VerifyFormat, typer.Option("--format", help="Output format.")] = VerifyFormat.text,
) -> None:
    """Run the model on the OpenCL executor (CPU partitions on LiteRT) and compare with the LiteRT
    CPU interpreter. Exit 0 PASS, 1 FAIL, 2 error."""
    from gpulint.output.verify import render_verify
    from gpulint.verify import Request, Tolerance

    def stop(where: str | os.PathLike[str] | None, message: str) -> NoReturn:
        if output_format is VerifyFormat.json:  # one JSON object in every outcome, errors too
            error = f"{where}: {message}" if where is not None else message
            typer.echo(
                json.dumps({"model": path, "candidate": str(candidate or path), "status": "ERROR", "error": error})
            )
        fail(where, message)

    tols: dict[str, Tolerance] = {}
    if atol is not None:
        tols["*"] = Tolerance(atol, rtol, "--atol")
    for item in tolerance or []:
        name, _, value = item.rpartition("=")
        try:
            a, _, r = value.partition(":")
            tols[name] = Tolerance(float(a), float(r) if r else 0.0, "--tolerance")
        except ValueError:
            stop(None, f"--tolerance {item!r}: expected NAME=ATOL or NAME=ATOL:RTOL")
        if not name:
            stop(None, f"--tolerance {item!r}: expected NAME=ATOL or NAME=ATOL:RTOL")
    if inputs is not None and reference_file is not None:
        stop(None, "--inputs and --reference both give inputs; use one")
    req = Request(
        Path(path),
        candidate,
        runs,
        seed,
        distribution.value,
        inputs,
        precision.value,
        target,
        tols,
        bisect,
        save_reference,
        reference_file,
    )
    result, error, where = _try_verify(req, device)
    if error is not None:
        stop(where, error)
    if output_format is VerifyFormat.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        typer.echo(render_verify(result))
    raise typer.Exit(0 if result.passed else 1)


def _run_verify(req: Any, device_spec: str | None) -> Any:
    result, error, where = _try_verify(req, device_spec)
    if error is not None:
        fail(where, error)
    return result


def _try_verify(req: Any, device_spec: str | None) -> tuple[Any, str | None, Path]:
    """(the verify result, None, the file) or (None, why it could not run, the file it concerns)."""
    from gpulint.executor import ExecutorError, select_device
    from gpulint.model import ModelError, read
    from gpulint.reference import ReferenceError
    from gpulint.verify import VerifyError, verify

    where: Path = req.model_path
    try:
        original = read(req.model_path)
        where = req.candidate_path or req.model_path
        candidate = read(where) if req.candidate_path is not None else original
        # pyopencl warns on every kernel build whose log is not empty (PoCL's notes on float16
        # vectors at fp16): noise to a user, and the build's real errors raise anyway.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=COMPILER_NOTE, module="pyopencl")
            return verify(req, original, candidate, select_device(device_spec)), None, where
    except (ModelError, ReferenceError, ExecutorError, VerifyError, ValueError) as e:
        return None, clean(str(e), 1000) or "", where
    except OSError as e:
        return None, e.strerror or str(e), where


COMPILER_NOTE = "(Non-empty compiler output|From-source build succeeded)"


@app.command("bench")
def bench_command(
    path: Annotated[str, typer.Argument(help="The .tflite model to time.")],
    runs: Annotated[int, typer.Option(min=1, help="Timed runs of each (the median is reported).")] = 20,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU interpreter threads (default: all cores).")] = None,
    precision: Annotated[Precision, typer.Option(help="The executor's precision.")] = Precision.fp32,
    device: Annotated[str | None, typer.Option(help="OpenCL device, as for verify.")] = None,
    start: Annotated[bool, typer.Option("--start/--no-start", help="Also time cold and cached starts.")] = True,
    output_format: Annotated[VerifyFormat, typer.Option("--format", help="Output format.")] = VerifyFormat.text,
) -> None:
    """Warm latency of the LiteRT CPU interpreter and of the OpenCL executor, their ratio, start
    times and the executor's per-op kernel times."""
    from gpulint.bench import bench
    from gpulint.executor import ExecutorError, select_device
    from gpulint.model import ModelError
    from gpulint.output.bench import render_bench
    from gpulint.reference import ReferenceError

    try:
        result = bench(Path(path), select_device(device), runs, threads, precision.value, start)
    except (ModelError, ReferenceError, ExecutorError, ValueError) as e:
        fail(path, clean(str(e), 1000) or "")
    except OSError as e:
        fail(path, e.strerror or str(e))
    if output_format is VerifyFormat.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    typer.echo(render_bench(path, result))


@app.command()
def report(
    paths: Annotated[list[str], typer.Argument(help=".tflite files to report on.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    target: TargetOption = None,
    quantized: QuantizedOption = None,
    rules: RulesOption = None,
    backend: BackendOption = None,
    config: ConfigOption = None,
    select: SelectOption = None,
    extend_select: ExtendSelectOption = None,
    ignore: IgnoreOption = None,
    coreml_version: CoremlVersionOption = None,
    coreml_all_devices: CoremlAllDevicesOption = None,
    with_fix: Annotated[
        bool, typer.Option("--fix/--no-fix", help="Show what the safe fix passes would change.")
    ] = True,
    node_data: Annotated[
        Path | None, typer.Option(help="Also write Model Explorer node data (placement per op) to this JSON file.")
    ] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Also run `gpulint verify` on each model (needs an OpenCL device).")
    ] = False,
) -> None:
    """Write a self-contained HTML readiness report: verdict, partitions, graph, findings, fix."""
    settings = _settings(
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
    sections = []
    for path in paths:  # each model, and each part of it, degrades on its own: the report is written
        section = _report_section(path, settings, with_fix, node_data if len(paths) == 1 else None)
        if verify and not section["error"]:
            from gpulint.verify import Request

            result, error, _ = _try_verify(Request(Path(path), target=settings.target), None)
            if error is not None:
                typer.echo(f"gpulint: {path}: not verified: {error}", err=True)
                section["verify_error"] = error
            else:
                section["verify"] = result.to_json()
        sections.append(section)
    if all(s["error"] for s in sections):  # nothing to report: the errors are printed
        raise typer.Exit(EXIT_USAGE)
    _write_report(output, sections)
    typer.echo(f"wrote {output}")
    if any(s["error"] for s in sections):
        raise typer.Exit(EXIT_USAGE)


def _report_section(path: str, settings: Settings, with_fix: bool, node_data: Path | None) -> dict[str, Any]:
    from gpulint.atomic import write_atomic
    from gpulint.check import check_model
    from gpulint.model import ModelError, read, to_bytes
    from gpulint.report import FixSummary, error_section, model_section, write_node_data

    try:
        model = read(path)
    except ModelError as e:
        typer.echo(f"gpulint: error: {path}: {e}", err=True)
        return error_section(path, str(e))
    except OSError as e:
        typer.echo(f"gpulint: error: {path}: {e.strerror or e}", err=True)
        return error_section(path, e.strerror or str(e))
    result = check_model(model, path, settings)
    summary, fix_error = None, None
    if with_fix:
        from gpulint.fix import FixError, fix_model, select_passes
        from gpulint.passes import PassOptions

        try:
            fixed, fix_report = fix_model(Path(path), model, select_passes(None, False), PassOptions(keep_fp16=True))
            after = check_model(fixed, path, settings)
            summary = FixSummary(fix_report, result, after, os.path.getsize(path), len(to_bytes(fixed)))
        except FixError as e:
            fix_error = clean(str(e), 1000) or "?"
            typer.echo(f"gpulint: {path}: no fix preview: {fix_error}", err=True)
    if node_data is not None:
        try:
            write_atomic(node_data, [write_node_data(node_data, model, result)])
        except OSError as e:
            fail(node_data, e.strerror or str(e))
    return model_section(model, result, settings, os.path.getsize(path), summary, fix_error)


def _write_report(output: Path, sections: list[dict[str, Any]], matrix: dict[str, Any] | None = None) -> None:
    from gpulint.atomic import write_atomic
    from gpulint.report import render

    try:
        write_atomic(output, [render(sections, matrix).encode("utf-8")])
    except OSError as e:
        fail(output, e.strerror or str(e))


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for the demo's outputs.")] = Path("demo-out"),
) -> None:
    """Build the sample model, inspect, check and fix it, prove a lossless round trip on LiteRT,
    and verify the fixed model on the OpenCL executor."""
    import numpy as np

    from gpulint import reference
    from gpulint.atomic import write_atomic
    from gpulint.check import check_file
    from gpulint.model import read, write
    from gpulint.output import check as render
    from gpulint.rules.pack import builtin_rules
    from gpulint.sample import sample_model
    from gpulint.settings import Settings
    from gpulint.summary import render_text, summarize

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(out, e.strerror or str(e))
    sample = out / "sample.tflite"
    write(sample_model(), sample)
    model = read(sample)
    summary = summarize(model, str(sample), sample.stat().st_size)
    typer.echo(render_text(summary))
    (out / "sample.inspect.json").write_text(json.dumps(summary, indent=2) + "\n")

    roundtrip = out / "sample.roundtrip.tflite"
    write(model, roundtrip)
    equal = read(roundtrip) == model
    inputs = reference.random_inputs(model, seed=0)
    try:
        before, after = reference.run_models([sample, roundtrip], inputs)
    except reference.ReferenceError as e:
        fail(sample, str(e))
    identical = all(a.tobytes() == b.tobytes() for a, b in zip(before, after, strict=True))
    top = int(np.argmax(before[0]))
    typer.echo("")
    typer.echo(f"round trip (read -> write -> read): {'equal' if equal else 'DIFFERENT'}")
    typer.echo(
        f"LiteRT CPU interpreter, original vs rewritten: {'bit-identical' if identical else 'DIFFERENT'}"
        f" (top class {top}, p={before[0].ravel()[top]:.4f})"
    )
    typer.echo("")
    typer.echo("gpulint check (classic GPU delegate):")
    result = check_file(str(sample), Settings())
    typer.echo(render.render_text([result]))
    write_atomic(out / "sample.check.json", [render.render_json([result], "classic", True).encode() + b"\n"])
    write_atomic(out / "sample.sarif", [render.render_sarif([result], builtin_rules()).encode() + b"\n"])
    typer.echo("")
    typer.echo("gpulint fix (safe passes, each proven on the LiteRT CPU interpreter):")
    from gpulint.fix import fix_model, select_passes
    from gpulint.passes import PassOptions

    fixed, report = fix_model(sample, model, select_passes(None, False), PassOptions(keep_fp16=True))
    for applied in report.applied:
        for change in applied.changes:
            typer.echo(f"  {applied.name}: {change}")
    typer.echo(f"  max abs error per output vs the original: {', '.join(f'{e:.3g}' for e in report.max_error)}")
    write(fixed, out / "sample.fixed.tflite")
    rechecked = check_file(str(out / "sample.fixed.tflite"), Settings())
    typer.echo(f"  check on the fixed model: verdict {rechecked.verdict} ({rechecked.reason})")
    typer.echo("")
    typer.echo("gpulint verify (the fixed model on the OpenCL executor vs the original on the CPU interpreter):")
    from gpulint.output.verify import render_verify
    from gpulint.verify import Request

    verified = _run_verify(Request(sample, out / "sample.fixed.tflite", runs=2), None)
    typer.echo(render_verify(verified))
    write_atomic(out / "sample.verify.json", [json.dumps(verified.to_json(), indent=2).encode() + b"\n"])
    typer.echo("")
    typer.echo(
        f"outputs in {out}/: sample.tflite, sample.inspect.json, sample.roundtrip.tflite, "
        "sample.check.json, sample.sarif, sample.fixed.tflite, sample.verify.json"
    )
    if not (equal and identical and verified.passed):
        raise typer.Exit(EXIT_FINDINGS)


def _terminated(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, a hook killed) unwinds like Ctrl-C, so a file being written is
    # left as it was and its temporary sibling is removed.
    raise SystemExit(128 + signum)


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("gpulint: interrupted", err=True)
        sys.exit(130)

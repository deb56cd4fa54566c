"""`gpulint fix`: options -> fix_model -> the fix report (and --diff, --html, --verify) -> the
rewritten model written, or nothing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulint.cli import common
from gpulint.cli.common import EXIT_FINDINGS, TextOrJson, fail, split_csv, user_errors
from gpulint.model.litertlm import model_size

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import numpy as np

    from gpulint.check import FileResult
    from gpulint.model import Model
    from gpulint.settings import Settings


def fix(
    path: Annotated[str, typer.Argument(help="The .tflite model to rewrite.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Where to write the rewritten model.")] = None,
    passes: Annotated[
        list[str] | None,
        typer.Option(
            help="Only these passes (comma-separated). Safe (keep the interface and every output within fp32 "
            "rounding): static-shapes, densify-constants, dequantize-constants, remove-identity, fold-atrous, "
            "fuse-activations, pad-channels; unsafe: rgba-input (changes the interface), quantized-to-float "
            "(changes the precision). Opt-in, for half precision (safe: exact in exact arithmetic, outputs within "
            "fp32 rounding; run when named or with --unsafe-fixes): stable-softmax (max subtracted before EXP), "
            "scaled-variance (squares of values scaled by 2^-k, undone after the root; k from --inputs or the "
            "graph's bounds), split-reduction (a long SUM/MEAN in two levels whose partial sums stay in half's "
            "range), scale-logits (an attention's 1/sqrt(d) applied to the query before BATCH_MATMUL, not to the "
            "product after it); and, for a runtime defect, dense-grouped-conv (a grouped CONV_2D given block-diagonal "
            "dense weights, which the OpenGL backend builds and computes right: GPU806; costs the group count in "
            "weights and MACs), tile-broadcast (a runtime operand TILEd to a constant's shape before the elementwise "
            "op the OpenGL backend computes wrong: GPU807), rank4 (RESHAPEs to 4-D around the ops LiteRT's "
            "accelerator lays out wrong below rank 4: GPU802-804, GPU808), output-copy (a graph output that one op "
            "inside the graph also reads given a copy of its own, which the runtimes' fusion would lose: GPU810, "
            "GPU811), broadcast-to (BROADCAST_TO, which no GPU runtime parses, as TILE: GPU404) and "
            "inline-composites (STABLEHLO_COMPOSITE ops replaced by their decompositions, on which LiteRT 2.3's "
            "accelerator dies). docs/commands/fix.md: what each does."
        ),
    ] = None,
    unsafe_fixes: Annotated[
        bool, typer.Option(help="Also run passes that change the interface or precision, and the opt-in ones.")
    ] = False,
    inputs: Annotated[
        Path | None,
        typer.Option(
            help="Calibration inputs (.npz, by input name or arr_0...): the half-precision passes size their "
            "scales from the values the original reaches on them, and the proof runs on them. With a "
            "half-precision pass asked for, fix then names each op the fixed model still takes past half's range "
            "and the two ways to keep it in float: the whole graph (each runtime's precision option) or the op on "
            "the CPU (the GPU ops that costs on the classic delegate)."
        ),
    ] = None,
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
    target: common.Target = None,
    rules: common.Rules = None,
    config: common.Config = None,
    output_format: Annotated[
        TextOrJson,
        typer.Option("--format", help="Output format (json: docs/schemas/fix.json; not with --diff, --verify)."),
    ] = TextOrJson.text,
) -> None:
    """Rewrite a model for the GPU delegate; every pass is proven on the LiteRT CPU interpreter.

    --diff, --html and --verify check the model with the rules --target (or gpulint.toml) sets."""
    from gpulint.fix import fix_model, select_passes, unsafe_candidates
    from gpulint.model import read
    from gpulint.output.fix import render_fix, render_fix_diff, render_fix_json
    from gpulint.passes import PassOptions
    from gpulint.passes.static_shapes.pin import parse_input_shape

    as_json = output_format is TextOrJson.json
    if output is None and not dry_run:
        fail(None, "give --output FILE (or --dry-run)")
    if as_json and (diff or verify):
        fail(None, "--format json does not take --diff or --verify (their output is text); leave them out")
    if output is not None and not dry_run:
        if output.exists() and not force:
            same = Path(path).exists() and output.resolve() == Path(path).resolve()
            fail(
                output,
                "is the input model; add --force to overwrite it" if same else "exists; add --force to overwrite it",
            )
        if output.is_dir():
            fail(output, "is a directory")
    settings = common.resolve_settings(config=config, rules=rules, target=target)
    with user_errors(path):
        model = read(path)
        chosen = select_passes(split_csv(passes), unsafe_fixes)
        with user_errors(None, also=(ValueError,)):
            shapes = tuple(parse_input_shape(s) for s in input_shape or [])
        pin = bool(shapes) or "static-shapes" in split_csv(passes)
        options = PassOptions(keep_fp16=keep_fp16, input_shapes=shapes, pin_shapes=pin)
        given = _load_inputs(inputs, model) if inputs is not None else None
        fixed, report = fix_model(Path(path), model, chosen, options, verify=not skip_proof, inputs=given)

    hidden = unsafe_candidates(fixed) if not unsafe_fixes and not passes else []
    checked = _check_both(model, fixed, path, settings) if diff or html is not None else None
    changes = render_fix_diff(model, fixed, report, checked) if diff and checked is not None else None
    shown = render_fix(path, report, hidden, changes)
    if shown and not as_json:
        typer.echo(shown)
    if html is not None and checked is not None:
        from gpulint.model import to_bytes
        from gpulint.report import FixSummary, model_section

        size = model_size(path)
        summary = FixSummary(report, checked[0], checked[1], size, len(to_bytes(fixed)))
        common.write_report(html, [model_section(model, checked[0], settings, size, summary)])
    if verify:
        _verify_fixed(path, fixed, settings)
    if dry_run or output is None:
        if as_json:
            typer.echo(render_fix_json(path, report, hidden, None, (0, 0)))
        return
    _write_fixed(path, output, fixed, report.changed, say=(lambda _: None) if as_json else typer.echo)
    if as_json:
        sizes = (model_size(path), os.path.getsize(output))
        typer.echo(render_fix_json(path, report, hidden, str(output), sizes))


def _load_inputs(path: Path, model: Model) -> list[np.ndarray]:
    from gpulint.verify.npz import load_inputs
    from gpulint.verify.request import VerifyError

    try:
        return load_inputs(path, model)
    except VerifyError as e:
        fail(None, str(e))


def _check_both(model: Model, fixed: Model, path: str, settings: Settings) -> tuple[FileResult, FileResult]:
    """check on the model before and after the fix, for --diff and --html."""
    from gpulint.check import check_model

    with user_errors(None):
        before, after = check_model(model, path, settings), check_model(fixed, path, settings)
    return before, after


def _write_fixed(path: str, output: Path, fixed: Model, changed: bool, say: Callable[[str], None] = typer.echo) -> None:
    """The fixed model to `output`; with nothing changed, the input's own bytes (never the input
    itself rewritten). Bytes appended after the model (another tool's data) go along either way.
    `say` prints what was done (nothing under --format json: the document says it)."""
    from gpulint.atomic import write_atomic
    from gpulint.model import LossyWriteError, write
    from gpulint.summary import appended_text, describe_appended

    if not changed and output.resolve() == Path(path).resolve():
        say(f"{path}: left as it is")
        return
    with user_errors(output, also=(ValueError,)):
        try:
            if changed:
                write(fixed, output, allow_loss=False)
            else:
                write_atomic(output, _source_chunks(path))
        except LossyWriteError as e:  # the input holds what this schema cannot write back
            fail(path, common.user_error(e) or "")
    info = describe_appended(fixed.appended)
    if info:
        say(f"{path}: kept the {appended_text(info)} appended after the model")
    if not changed:
        say(f"{path}: copied to {output} unchanged")
        return
    # The size, always: a pass may grow a model (folding sparse or fp16 weights into float ones)
    before, after = model_size(path), os.path.getsize(output)
    growth = f", {(after - before) / before:+.0%}" if before else ""
    say(f"{path}: wrote {output} ({before:,} -> {after:,} bytes{growth})")


def _source_chunks(path: str, size: int = 1 << 20) -> Iterator[bytes]:
    """The input's own bytes: the file's, or those of a model inside a LiteRT-LM bundle."""
    from gpulint.model.litertlm import model_bytes

    content = model_bytes(path)
    if content is not None:
        yield content
        return
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk


def _verify_fixed(path: str, fixed: Model, settings: Settings) -> None:
    """The fixed model on the executor against the original on the CPU; exit 1 on FAIL."""
    import tempfile

    from gpulint.cli.verify import try_verify, verify_target
    from gpulint.model import write
    from gpulint.output.verify import render_verify
    from gpulint.verify import Request

    target = verify_target(settings)
    with tempfile.TemporaryDirectory(prefix="gpulint-fix-") as tmp:
        candidate = Path(tmp, "candidate.tflite")
        try:
            write(fixed, candidate, allow_loss=True)
        except (OSError, ValueError) as e:  # LossyWriteError is a ValueError
            fail(path, f"cannot stage the fixed model for --verify: {e}")
        attempt = try_verify(Request(Path(path), candidate, target=target), None)
    if attempt.result is None:  # the staged copy is gpulint's, not the user's: name the model they gave
        fail(path, f"--verify cannot run: {(attempt.error or '').replace(str(candidate), 'the fixed model')}")
    result = attempt.result
    result.candidate = "fixed model"
    typer.echo(render_verify(result))
    if not result.passed:
        typer.echo(f"gpulint: {path}: the fixed model fails verification; nothing written", err=True)
        raise typer.Exit(EXIT_FINDINGS)

"""The `gpulint` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gpulint import __version__

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


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for the demo's outputs.")] = Path("demo-out"),
) -> None:
    """Build the sample model, inspect it, and prove a lossless round trip on LiteRT."""
    import numpy as np

    from gpulint import reference
    from gpulint.model import read, write
    from gpulint.sample import sample_model
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
    typer.echo(f"outputs in {out}/: sample.tflite, sample.inspect.json, sample.roundtrip.tflite")
    if not (equal and identical):
        raise typer.Exit(EXIT_FINDINGS)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("gpulint: interrupted", err=True)
        sys.exit(130)

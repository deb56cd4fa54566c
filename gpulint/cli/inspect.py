"""`gpulint inspect` (what a model holds) and `gpulint demo` (every command on the sample model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpulint.cli.common import EXIT_FINDINGS, user_errors


def inspect(
    path: Annotated[str, typer.Argument(help="A .tflite file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Show a model's subgraphs, inputs and outputs, op histogram, weights and metadata."""
    from gpulint.model import read
    from gpulint.model.litertlm import model_size
    from gpulint.summary import render_text, summarize

    with user_errors(path):
        model = read(path)
    summary = summarize(model, path, model_size(path))
    typer.echo(json.dumps(summary, indent=2) if as_json else render_text(summary))


def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for the demo's outputs.")] = Path("demo-out"),
) -> None:
    """Build the sample model, inspect, check and fix it, prove a lossless round trip on LiteRT,
    and verify the fixed model on the OpenCL executor."""
    import numpy as np

    from gpulint import reference
    from gpulint.atomic import write_atomic
    from gpulint.check import check_file
    from gpulint.cli.verify import run_verify
    from gpulint.fix import fix_model, select_passes
    from gpulint.model import read, write
    from gpulint.output.check import render_json, render_sarif
    from gpulint.output.check import render_text as render_check
    from gpulint.output.verify import render_verify
    from gpulint.passes import PassOptions
    from gpulint.rules.pack import builtin_rules
    from gpulint.sample import sample_model
    from gpulint.settings import Settings
    from gpulint.summary import render_text, summarize
    from gpulint.verify import Request

    with user_errors(out):
        out.mkdir(parents=True, exist_ok=True)
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
    with user_errors(sample):
        before, after = reference.run_models([sample, roundtrip], inputs)
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
    typer.echo(render_check([result]))
    write_atomic(out / "sample.check.json", [render_json([result], "classic", True).encode() + b"\n"])
    write_atomic(out / "sample.sarif", [render_sarif([result], builtin_rules()).encode() + b"\n"])
    typer.echo("")
    typer.echo("gpulint fix (safe passes, each proven on the LiteRT CPU interpreter):")
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
    verified = run_verify(Request(sample, out / "sample.fixed.tflite", runs=2), None)
    typer.echo(render_verify(verified))
    write_atomic(out / "sample.verify.json", [json.dumps(verified.to_json(), indent=2).encode() + b"\n"])
    typer.echo("")
    typer.echo(
        f"outputs in {out}/: sample.tflite, sample.inspect.json, sample.roundtrip.tflite, "
        "sample.check.json, sample.sarif, sample.fixed.tflite, sample.verify.json"
    )
    if not (equal and identical and verified.passed):
        raise typer.Exit(EXIT_FINDINGS)

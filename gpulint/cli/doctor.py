"""`gpulint doctor`: the machine's OpenCL platforms and devices, which one gpulint picks and
why, and a self-test of gpulint's kernels on each (gpulint/executor/doctor.py)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gpulint.cli.common import EXIT_FINDINGS, EXIT_OK, TextOrJson, user_errors


def doctor(
    device: Annotated[
        str | None, typer.Option(help="Only this OpenCL device: `platform:device` or part of its name.")
    ] = None,
    selftest: Annotated[
        bool, typer.Option("--selftest/--no-selftest", help="Run the self-test on each device (a few seconds each).")
    ] = True,
    output_format: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
) -> None:
    """The OpenCL platforms and devices here, the one gpulint uses and why, and a self-test of
    each at fp32, fp32-fp16 and fp16 (each run in a child process). Paste it into a bug report.
    Exit 0 when the device gpulint uses (or --device) passed, 1 when it failed, 2 without OpenCL."""
    from gpulint.executor.doctor import doctor as run_doctor
    from gpulint.executor.doctor import render

    with user_errors(None):
        report = run_doctor(device, selftest)
    typer.echo(json.dumps(report, indent=2) if output_format is TextOrJson.json else render(report))
    raise typer.Exit(EXIT_OK if report["passed"] else EXIT_FINDINGS)

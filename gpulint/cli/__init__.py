"""The `gpulint` command line: the app and its commands, one module per command (or pair).

Each command reads its options, resolves the settings (`common.resolve_settings`, the same for
every command), calls one core function, renders with `gpulint.output`, and ends with an exit
code: 0 clean or PASS, 1 findings or FAIL, 2 an error a user can cause (one line on stderr,
mapped once in `common.user_errors`). Heavy modules are imported inside the commands, so that
`gpulint check` never loads the executor.
"""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from gpulint import __version__
from gpulint.cli import check, doctor, fix, inspect, report, rules, verify

app = typer.Typer(
    name="gpulint",
    help="Make TensorFlow Lite / LiteRT models ready for the GPU delegate, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


# The commands, in the order `gpulint --help` lists them.
app.command()(inspect.inspect)
app.command()(check.check)
app.command("rules")(rules.list_rules)
app.command("rule")(rules.explain_rule)
app.command()(fix.fix)
app.command()(verify.verify)
app.command("bench")(verify.bench)
app.command()(doctor.doctor)
app.command()(report.report)
app.command()(inspect.demo)


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

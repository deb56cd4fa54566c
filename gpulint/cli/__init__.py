"""The `gpulint` command line: the app and its commands, one module per command (or pair).

Each command reads its options, resolves the settings (`common.resolve_settings`, the same for
every command), calls one core function, renders with `gpulint.output`, and ends with an exit
code: 0 clean or PASS, 1 findings or FAIL, 2 an error a user can cause (one line on stderr,
mapped once in `common.user_errors`). Heavy modules are imported inside the commands, so that
`gpulint check` never loads the executor.

Start-up is part of the interface (`gpulint check` runs on every commit under pre-commit;
bench/bench_startup.py measures it): this module imports nothing heavy, `gpulint --version` answers
before typer is imported, and a run that names its command builds only that command.

The light install (`pip install gpulint`) has no OpenCL executor (pyopencl, PoCL) and no LiteRT
runtime (ai-edge-litert): the commands that need them say which extra to install, one line and
exit 2, before they start (`EXTRAS`).
"""

import functools
import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from gpulint import __version__

if TYPE_CHECKING:
    import typer

# The commands, in the order `gpulint --help` lists them: (name, module in gpulint.cli, function).
COMMANDS = (
    ("inspect", "inspect", "inspect"),
    ("check", "check", "check"),
    ("rules", "rules", "list_rules"),
    ("rule", "rules", "explain_rule"),
    ("fix", "fix", "fix"),
    ("verify", "verify", "verify"),
    ("bench", "verify", "bench"),
    ("doctor", "doctor", "doctor"),
    ("report", "report", "report"),
    ("demo", "inspect", "demo"),
)

# The modules of the `verify` extra, by the package that installs each.
EXECUTOR = {"pyopencl": "pyopencl"}
RUNTIME = {"ai_edge_litert": "ai-edge-litert"}
EXTRA = "pip install 'gpulint[verify]'"


# What each command needs beyond the light install, given its options: {module: package}, and what
# the error line adds after the install command.
EXTRAS: dict[str, Callable[[dict[str, Any]], tuple[dict[str, str], str]]] = {
    "verify": lambda o: (EXECUTOR | RUNTIME, ""),
    "bench": lambda o: (EXECUTOR | RUNTIME, ""),
    "doctor": lambda o: (EXECUTOR, ""),
    "demo": lambda o: (EXECUTOR | RUNTIME, ""),
    "fix": lambda o: (
        (EXECUTOR | RUNTIME, " (or leave out --verify)")
        if o.get("verify")
        else ({} if o.get("skip_proof") else RUNTIME, " (or --skip-proof: then nothing checks the outputs)")
    ),
    "report": lambda o: (EXECUTOR | RUNTIME if o.get("verify") else {}, " (or leave out --verify)"),
    "check": lambda o: (
        (EXECUTOR | RUNTIME, " (or leave out --run-litert-gpu)")
        if o.get("run_litert_gpu")
        else (RUNTIME if o.get("inputs") or o.get("input_range") else {}, " (or leave out --inputs / --input-range)")
    ),
}


def missing(modules: dict[str, str]) -> list[str]:
    """The packages of these modules that this Python cannot import (looked up, not imported)."""
    out = []
    for module, package in modules.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(package)
    return out


def extra_message(command: str | None, packages: list[str], hint: str = "") -> str:
    who = f"`gpulint {command}`" if command else "this command"
    return f"{who} needs {', '.join(packages)}, which this install leaves out (the verify extra): {EXTRA}{hint}"


def _needing_extras(name: str, command: Callable[..., Any]) -> Callable[..., Any]:
    """`command`, first checking that the packages it needs with these options are installed."""
    if name not in EXTRAS:
        return command
    needs = EXTRAS[name]

    @functools.wraps(command)
    def run(**options: Any) -> Any:
        modules, hint = needs(options)
        lacking = missing(modules)
        if lacking:
            from gpulint.cli.common import fail

            fail(None, extra_message(name, lacking, hint))
        return command(**options)

    return run


def build_app(only: str | None = None) -> "typer.Typer":
    """The app with every command, or with `only` that one (a run that names its command)."""
    import typer

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

    @app.callback()  # annotations evaluated here (this module has no `from __future__ import annotations`)
    def main_options(
        version: Annotated[
            bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
        ] = False,
    ) -> None:
        """Make TensorFlow Lite / LiteRT models ready for the GPU delegate, and prove it."""

    for name, module, function in COMMANDS:
        if only is None or name == only:
            command = getattr(importlib.import_module(f"gpulint.cli.{module}"), function)
            app.command(name)(_needing_extras(name, command))
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # `from gpulint.cli import app`: the whole app, built once
        built = globals()["app"] = build_app()
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _terminated(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, a hook killed) unwinds like Ctrl-C, so a file being written is
    # left as it was and its temporary sibling is removed.
    raise SystemExit(128 + signum)


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:  # answered before typer is imported: what scripts and the action ask first
        print(f"gpulint {__version__}")
        return
    signal.signal(signal.SIGTERM, _terminated)
    named = args[0] if args and args[0] in {name for name, _, _ in COMMANDS} else None
    try:
        build_app(named)()
    except KeyboardInterrupt:
        print("gpulint: interrupted", file=sys.stderr)
        sys.exit(130)
    except ModuleNotFoundError as e:  # an extra's module that a command reached without asking first
        root = (e.name or "").partition(".")[0]
        if root not in EXECUTOR | RUNTIME:
            raise
        print(f"gpulint: error: {extra_message(named, [(EXECUTOR | RUNTIME)[root]])}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # a bug: still one line and exit 2, never a traceback or the FAIL code (1)
        if os.environ.get("GPULINT_TRACEBACK"):
            raise
        from gpulint.text import clean  # the message may quote model text

        where = f" in `gpulint {named}`" if named else ""
        print(
            f"gpulint: internal error{where}: {type(e).__name__}: {clean(str(e), 300)} (a bug in gpulint; "
            "GPULINT_TRACEBACK=1 shows where)",
            file=sys.stderr,
        )
        sys.exit(2)

"""What every command shares: exit codes, the one error line, the one mapping of errors a user
can cause to that line, the options that mean the same in every command, and writing a file."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from gpulint.text import clean

if TYPE_CHECKING:
    from gpulint.settings import Settings

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def fail(path: str | os.PathLike[str] | None, message: str) -> NoReturn:
    """One line on stderr and exit 2: the convention for every error a user can cause."""
    where = f"{path}: " if path is not None else ""
    typer.echo(f"gpulint: error: {where}{message}", err=True)
    raise typer.Exit(EXIT_USAGE)


# The errors a user can cause (a bad file, flag, pack or device), by the module that exports them
# and class. They are looked up among the modules already imported, so that mapping an error
# never imports the executor (pyopencl) into a `check` run: an error of a module not loaded
# cannot have happened.
USER_ERRORS = (
    ("gpulint.settings", "SettingsError"),
    ("gpulint.rules.pack", "PackError"),
    ("gpulint.model", "ModelError"),
    ("gpulint.model", "LossyWriteError"),
    ("gpulint.fix", "FixError"),
    ("gpulint.reference", "ReferenceError"),
    ("gpulint.executor", "ExecutorError"),
    ("gpulint.verify", "VerifyError"),
    ("gpulint.engines", "EngineError"),
    ("gpulint.fanout", "FanoutError"),
)


def user_error(e: BaseException, also: tuple[type[BaseException], ...] = ()) -> str | None:
    """The one-line message for an error a user can cause; None for anything else (a bug, which
    keeps its traceback). `also`: more types a command counts as the user's (ValueError where a
    model is run: numpy and the device report bad shapes and options with it)."""
    if isinstance(e, OSError):
        return e.strerror or str(e)
    loaded = (getattr(sys.modules.get(module), name, None) for module, name in USER_ERRORS)
    known = tuple(t for t in loaded if isinstance(t, type)) + also
    if isinstance(e, known):
        return clean(str(e), 1000) or ""
    return None


Fail = Callable[[str | os.PathLike[str] | None, str], NoReturn]


@contextmanager
def user_errors(
    where: str | os.PathLike[str] | None, also: tuple[type[BaseException], ...] = (), fail_with: Fail = fail
) -> Iterator[None]:
    """Run the block; an error a user can cause ends the command: `gpulint: error: WHERE: why`, exit 2.
    `fail_with`: a command's own way to end (verify --format json also prints a JSON object)."""
    try:
        yield
    except Exception as e:
        message = user_error(e, also)
        if message is None:
            raise
        fail_with(where, message)


# pyopencl warns on every kernel build whose log is not empty (PoCL's notes on float16 vectors
# at fp16): noise to a user, and a build's real errors raise anyway.
COMPILER_NOTE = "(Non-empty compiler output|From-source build succeeded)"


@contextmanager
def quiet_compiler() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=COMPILER_NOTE, module="pyopencl")
        yield


T = TypeVar("T")


def with_progress(label: str, total: int, work: Callable[[Callable[[int], None]], T]) -> T:
    """`work(tick)`, with a progress bar on stderr where it is a terminal and there are several
    models (never in logs or pipes); `tick(n)`: n more done."""
    if total > 1 and sys.stderr.isatty():
        with typer.progressbar(length=total, label=label, file=sys.stderr) as bar:
            return work(bar.update)
    return work(lambda n: None)


def split_csv(values: list[str] | None) -> list[str]:
    """Repeatable, comma-separated values: ["a,b", "c"] -> ["a", "b", "c"]."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def write_text(output: Path, text: str) -> None:
    """`text` and a newline to `output`, atomically (a reader never sees half a report)."""
    from gpulint.atomic import write_atomic

    with user_errors(output):
        write_atomic(output, [(text + "\n").encode("utf-8")])


def write_report(output: Path, sections: list[dict[str, Any]], matrix: dict[str, Any] | None = None) -> None:
    """The HTML report of these sections (and of a `check --matrix`) to `output`."""
    from gpulint.atomic import write_atomic
    from gpulint.report import render

    with user_errors(output):
        write_atomic(output, [render(sections, matrix).encode("utf-8")])


# -- options that mean the same in every command that takes them ---------------------------------


class Format(StrEnum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


class TextOrJson(StrEnum):
    text = "text"
    json = "json"


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Precision(StrEnum):
    """The executor's precisions, named as the GPU delegate names them (executor/precision.py)."""

    fp32 = "fp32"
    fp16 = "fp16"
    fp32_fp16 = "fp32-fp16"


PRECISION_HELP = (
    "The executor's precision, as the GPU delegate names them. fp32: float storage and arithmetic. "
    "fp16 (F16): half storage and half arithmetic, accumulations included: what phones run when precision "
    "loss is allowed, the default of GpuDelegate.Options and of MediaPipe. fp32-fp16 (F32_F16): half storage "
    "and arithmetic, but convolutions and matmuls sum in float."
)
PrecisionOption = Annotated[Precision, typer.Option(help=PRECISION_HELP)]


class Distribution(StrEnum):
    uniform = "uniform"
    normal = "normal"


TARGET_HELP = (
    "Whose rules apply: classic (default), mediapipe, docs-2019, litert-gpu (LiteRT's GPU accelerator), "
    "metal, coreml, or a --rules pack."
)
Target = Annotated[str | None, typer.Option(help=TARGET_HELP)]
Rules = Annotated[list[Path] | None, typer.Option("--rules", help="A target pack (YAML) to add.")]
Config = Annotated[
    Path | None, typer.Option(help="A gpulint.toml or pyproject.toml (default: found from the current folder up).")
]
Quantized = Annotated[
    bool | None,
    typer.Option("--quantized/--no-quantized", help="The delegate's quantized-models flag (on by default)."),
]
Backend = Annotated[
    str | None,
    typer.Option(
        help="The backend that must build the graph: opencl or opengl (classic: devices without OpenCL), "
        "opencl, metal or webgpu (litert-gpu: Android, Apple, desktop/browser), or both (default; also all): "
        "every backend of the target."
    ),
]
Select = Annotated[
    list[str] | None, typer.Option(help="Rule codes, code prefixes or names to report (comma-separated; ALL).")
]
ExtendSelect = Annotated[list[str] | None, typer.Option(help="Add to the selected rules.")]
Ignore = Annotated[list[str] | None, typer.Option(help="Rule codes, prefixes or names not to report.")]
CoremlVersion = Annotated[
    int | None, typer.Option(help="--target coreml: the Core ML version the delegate targets, 2 or 3 (default 3).")
]
LitertVersion = Annotated[
    str | None,
    typer.Option(
        help="--target litert-gpu: the LiteRT release you ship, 2.3 or 2.4 (default 2.3); GPU111 names what is "
        "modelled."
    ),
]
CoremlAllDevices = Annotated[
    bool | None,
    typer.Option(
        "--coreml-all-devices/--no-coreml-all-devices",
        help="--target coreml: the delegate is created on every device, not only those with a Neural Engine.",
        show_default=False,
    ),
]
NoCache = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Recompute every result: read nothing from the result cache, keep nothing in it "
        "(GPULINT_CACHE_DIR/results; docs/guides/model-zoos.md: Result cache).",
    ),
]
Jobs = Annotated[int, typer.Option("--jobs", "-j", min=1, help="Models in this many local processes at once.")]
Ray = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="One task per model on the Ray cluster at ADDRESS (auto: RAY_ADDRESS, or the cluster this machine "
        "runs); needs gpulint[ray] here and on the cluster's nodes.",
    ),
]
Device = Annotated[
    str | None, typer.Option(help="OpenCL device: `platform:device` or part of its name (env GPULINT_CL_DEVICE).")
]


def resolve_settings(
    *,
    config: Path | None = None,
    select: list[str] | None = None,
    extend_select: list[str] | None = None,
    ignore: list[str] | None = None,
    rules: list[Path] | None = None,
    target: str | None = None,
    quantized: bool | None = None,
    backend: str | None = None,
    coreml_version: int | None = None,
    coreml_all_devices: bool | None = None,
    litert_version: str | None = None,
    matrix: bool = False,
    fail_with: Fail = fail,
) -> Settings:
    """The run's settings from the configuration file and these flags (`gpulint.settings.resolve`);
    a bad value or pack ends the command with one error line."""
    from gpulint.settings import Overrides, resolve

    given = Overrides(
        config=config,
        select=split_csv(select) if select else None,
        extend_select=split_csv(extend_select),
        ignore=split_csv(ignore),
        rules=list(rules or []),
        target=target,
        quantized=quantized,
        backend=backend,
        coreml_version=coreml_version,
        coreml_all_devices=coreml_all_devices,
        litert_version=litert_version,
    )
    with user_errors(None, fail_with=fail_with):
        settings = resolve(given, matrix=matrix)
    return settings

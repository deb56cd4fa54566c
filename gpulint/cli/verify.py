"""`gpulint verify` and `gpulint bench`: the commands that run a model on the OpenCL executor.
`try_verify` is the one way to run a verification here, for `fix --verify`, `report --verify`
and `demo` too."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from gpulint.cli import common
from gpulint.cli.common import Distribution, Precision, TextOrJson, fail, quiet_compiler, user_error, user_errors

if TYPE_CHECKING:
    from gpulint.settings import Settings
    from gpulint.verify import Request, Tolerance, VerifyResult


class EngineChoice(StrEnum):
    opencl = "opencl"
    litert_gpu = "litert-gpu"
    all = "all"


ENGINE_NAMES = ["opencl", "litert-gpu"]  # --engine all: each, in this order


@dataclass
class Attempt:
    """A verification's result, or why it could not run and which file that concerns."""

    result: VerifyResult | None
    error: str | None
    where: Path


def try_verify(req: Request, device_spec: str | None) -> Attempt:
    from gpulint.executor import select_device
    from gpulint.model import read
    from gpulint.verify import verify

    where: Path = req.model_path
    try:
        original = read(req.model_path)
        where = req.candidate_path or req.model_path
        candidate = read(where) if req.candidate_path is not None else original
        device = select_device(device_spec) if req.engine == "opencl" else None  # the accelerator brings its own
        with quiet_compiler():
            return Attempt(verify(req, original, candidate, device), None, where)
    except Exception as e:
        message = user_error(e, also=(ValueError,))
        if message is None:
            raise
        return Attempt(None, message, where)


def run_verify(req: Request, device_spec: str | None) -> VerifyResult:
    """The verification's result; an error a user can cause ends the command."""
    attempt = try_verify(req, device_spec)
    if attempt.result is None:
        fail(attempt.where, attempt.error or "")
    return attempt.result


def verify_target(settings: Settings, fail_with: common.Fail = fail) -> str:
    """The target whose plan decides the GPU partition of a verification: a built-in one (the
    partitioned runner reads the built-in packs only)."""
    from gpulint.rules.pack import BUILTIN_TARGETS

    if settings.target not in BUILTIN_TARGETS:
        fail_with(
            None,
            f"target `{settings.target}` comes from a rule pack; the executor's partitions follow a built-in "
            f"target ({', '.join(BUILTIN_TARGETS)}): give --target",
        )
    return settings.target


def verify(
    path: Annotated[str, typer.Argument(help="The original .tflite model (the reference runs it).")],
    candidate: Annotated[
        Path | None, typer.Option(help="The model to run on the executor (default: the original).")
    ] = None,
    runs: Annotated[int, typer.Option(min=1, help="Runs with different random inputs.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the first run's inputs.")] = 0,
    distribution: Annotated[Distribution, typer.Option(help="Random float inputs.")] = Distribution.uniform,
    inputs: Annotated[Path | None, typer.Option(help="Inputs from an .npz (by input name, or arr_0...).")] = None,
    precision: common.PrecisionOption = Precision.fp32,
    device: common.Device = None,
    target: common.Target = None,
    config: common.Config = None,
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
    output_format: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
    engine: Annotated[
        EngineChoice,
        typer.Option(
            help="What runs the GPU side: opencl (gpulint's executor emulating the classic delegate, any OpenCL "
            "device), litert-gpu (LiteRT's real GPU accelerator, ML Drift on WebGPU: fp32 and fp16), all (both, "
            "side by side)."
        ),
    ] = EngineChoice.opencl,
    export_repro: Annotated[
        Path | None,
        typer.Option(
            help="With --bisect: write the smallest failing sub-model, its inputs and CPU output here "
            "(with --engine all, a folder per engine)."
        ),
    ] = None,
) -> None:
    """Run the model on a GPU engine (CPU partitions on LiteRT) and compare with the LiteRT CPU
    interpreter. Exit 0 PASS, 1 FAIL, 2 error, 3 nothing ran on the GPU side (CPU-ONLY)."""
    from gpulint.output.verify import render_side_by_side, render_verify
    from gpulint.verify import Request

    def stop(where: str | os.PathLike[str] | None, message: str) -> NoReturn:
        if output_format is TextOrJson.json:  # one JSON object in every outcome, errors too
            error = f"{where}: {message}" if where is not None else message
            typer.echo(
                json.dumps({"model": path, "candidate": str(candidate or path), "status": "ERROR", "error": error})
            )
        fail(where, message)

    try:
        tols = _tolerances(atol, rtol, tolerance)
    except ValueError as e:
        stop(None, str(e))
    if inputs is not None and reference_file is not None:
        stop(None, "--inputs and --reference both give inputs; use one")
    if export_repro is not None and not bisect:
        stop(None, "--export-repro writes what --bisect finds: give --bisect too")
    settings = common.resolve_settings(config=config, target=target, fail_with=stop)
    req = Request(
        model_path=Path(path),
        candidate_path=candidate,
        runs=runs,
        seed=seed,
        distribution=distribution.value,
        inputs=inputs,
        precision=precision.value,
        target=verify_target(settings, stop),
        tolerances=tols,
        bisect=bisect,
        save_reference=save_reference,
        reference=reference_file,
        export_repro=export_repro,
    )
    names = ENGINE_NAMES if engine is EngineChoice.all else [engine.value]
    results = []
    for name in names:
        repro = export_repro / name if export_repro is not None and len(names) > 1 else export_repro  # one each
        attempt = try_verify(replace(req, engine=name, export_repro=repro), device)
        if attempt.result is None:
            stop(attempt.where, attempt.error or "")
        results.append(attempt.result)
    status = max((r.status for r in results), key=WORST_LAST.index)
    if output_format is TextOrJson.json:
        one = (
            results[0].to_json() if len(results) == 1 else {"status": status, "engines": [r.to_json() for r in results]}
        )
        typer.echo(json.dumps(one, indent=2))
    else:
        typer.echo(render_verify(results[0]) if len(results) == 1 else render_side_by_side(results))
    raise typer.Exit(EXIT_CODES[status])


# 0 PASS, 1 FAIL, 2 a usage error or a model that cannot run, 3 within tolerance but nothing ran on
# the GPU side (VerifyResult.status): CI can tell "the GPU path was shown right" from "not shown".
# Of several engines' results, the worst decides: FAIL, then CPU-ONLY, then PASS.
EXIT_CODES = {"PASS": 0, "FAIL": 1, "CPU-ONLY": 3}
WORST_LAST = ["PASS", "CPU-ONLY", "FAIL"]


def _tolerances(atol: float | None, rtol: float, items: list[str] | None) -> dict[str, Tolerance]:
    """--atol/--rtol for every output ("*"), --tolerance NAME=ATOL[:RTOL] for one."""
    from gpulint.verify import Tolerance

    tols: dict[str, Tolerance] = {}
    if atol is not None:
        tols["*"] = Tolerance(atol, rtol, "--atol")
    for item in items or []:
        name, _, value = item.rpartition("=")
        a, _, r = value.partition(":")
        try:
            tols[name] = Tolerance(float(a), float(r) if r else 0.0, "--tolerance")
        except ValueError:
            name = ""
        if not name:
            raise ValueError(f"--tolerance {item!r}: expected NAME=ATOL or NAME=ATOL:RTOL")
    return tols


def bench(
    path: Annotated[str, typer.Argument(help="The .tflite model to time.")],
    runs: Annotated[int, typer.Option(min=1, help="Timed runs of each (the median is reported).")] = 20,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU interpreter threads (default: all cores).")] = None,
    precision: common.PrecisionOption = Precision.fp32,
    device: Annotated[str | None, typer.Option(help="OpenCL device, as for verify.")] = None,
    start: Annotated[bool, typer.Option("--start/--no-start", help="Also time cold and cached starts.")] = True,
    output_format: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
) -> None:
    """Warm latency of the LiteRT CPU interpreter and of the OpenCL executor, their ratio, start
    times and the executor's per-op kernel times."""
    from gpulint.bench import bench as run_bench
    from gpulint.executor import select_device
    from gpulint.output.bench import render_bench

    with user_errors(path, also=(ValueError,)), quiet_compiler():
        result = run_bench(Path(path), select_device(device), runs, threads, precision.value, start)
    if output_format is TextOrJson.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    typer.echo(render_bench(path, result))

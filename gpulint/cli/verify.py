"""`gpulint verify` and `gpulint bench`: the commands that run a model on the OpenCL executor.
`try_verify` is the one way to run a verification here, for `fix --verify`, `report --verify`
and `demo` too."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpulint.cli import common
from gpulint.cli.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    Distribution,
    Precision,
    TextOrJson,
    fail,
    quiet_compiler,
    user_error,
    user_errors,
)
from gpulint.fanout import run_each

if TYPE_CHECKING:
    from gpulint.cache import ResultCache
    from gpulint.model import Model
    from gpulint.settings import Settings
    from gpulint.verify import Request, Tolerance, VerifyResult


class EngineChoice(StrEnum):
    opencl = "opencl"
    litert_gpu = "litert-gpu"
    gl = "gl"
    all = "all"


ENGINE_NAMES = ["opencl", "litert-gpu", "gl"]  # --engine all: each, in this order


def engine_names(choice: EngineChoice) -> list[str]:
    """The engines a choice runs: `all` is every engine this install has (gl only with gpulint[gl],
    an optional extra whose absence is no error of the user's here)."""
    if choice is not EngineChoice.all:
        return [choice.value]
    from gpulint.engines.gl import installed

    return [e for e in ENGINE_NAMES if e != "gl" or installed()]


@dataclass
class Attempt:
    """A verification's result, or why it could not run and which file that concerns."""

    result: VerifyResult | None
    error: str | None
    where: Path


def try_verify(req: Request, device_spec: str | None, cache: ResultCache | None = None) -> Attempt:
    """Verify as `req` asks. `cache`: a verification whose files, options, engine and device were
    seen before is read back, not run (none is kept where it writes files: a saved reference, a repro)."""
    from gpulint.executor import select_device
    from gpulint.model import read
    from gpulint.verify import verify

    where: Path = req.model_path
    try:
        device = select_device(device_spec) if req.engine == "opencl" else None  # the accelerator brings its own
        key = None
        if cache is not None and cache.enabled and req.save_reference is None and req.export_repro is None:
            key = cache.key("verify", request=verify_key(req), device=device_key(req.engine, device))
            kept = cache.get(key)
            if kept is not None:
                return Attempt(kept, None, where)
        original = read(req.model_path)
        where = req.candidate_path or req.model_path
        candidate = read(where) if req.candidate_path is not None else original
        with quiet_compiler(), signature_files(req, original, candidate) as (req, original, candidate):
            result = verify(req, original, candidate, device)
        if key is not None:
            cache.put(key, result)  # type: ignore[union-attr]
        return Attempt(result, None, where)
    except Exception as e:
        message = user_error(e, also=(ValueError,))
        if message is None:
            raise
        return Attempt(None, message, where)


@contextmanager
def signature_files(req: Request, original: Model, candidate: Model) -> Iterator[tuple[Request, Model, Model]]:
    """The request on files the CPU interpreter can open, with the models it runs. With
    --signature: copies of both models whose main subgraph is that signature's (everything verify
    runs, the CPU reference too, runs subgraph 0). A model inside a LiteRT-LM bundle is written out
    too. Otherwise the request and models as they are."""
    from gpulint.model import litertlm

    def bundled(path: Path | None) -> bool:
        return path is not None and (litertlm.is_bundle(path) or litertlm.member(str(path)) is not None)

    if req.signature is None and not bundled(req.model_path) and not bundled(req.candidate_path):
        yield req, original, candidate
        return
    from gpulint.model import write
    from gpulint.model.signatures import as_main

    def main(model: Model) -> Model:
        return as_main(model, req.signature) if req.signature is not None else model

    with tempfile.TemporaryDirectory(prefix="gpulint-signature-") as tmp:
        main_original = main(original)
        model_path = Path(tmp, "original.tflite")
        write(main_original, model_path)  # never a copy that drops what the schema does not know
        main_candidate, candidate_path = main_original, None
        if req.candidate_path is not None:
            main_candidate, candidate_path = main(candidate), Path(tmp, "candidate.tflite")
            write(main_candidate, candidate_path)
        yield replace(req, model_path=model_path, candidate_path=candidate_path), main_original, main_candidate


def verify_key(req: Request) -> dict[str, Any]:
    """What decides a verification's result: the bytes of every file it reads, and its options."""
    from gpulint.cache import file_digest

    files = {"model": req.model_path, "candidate": req.candidate_path, "inputs": req.inputs, "reference": req.reference}
    return {
        **{name: file_digest(p) if p is not None else None for name, p in files.items()},
        "same_candidate": req.candidate_path is None,
        "runs": req.runs,
        "seed": req.seed,
        "distribution": req.distribution,
        "precision": req.precision,
        "target": req.target,
        "engine": req.engine,
        "tolerances": {k: [t.atol, t.rtol, t.source, t.statistic] for k, t in sorted(req.tolerances.items())},
        "bisect": req.bisect,
        "signature": req.signature,
    }


def device_key(engine: str, device: Any) -> dict[str, Any]:
    """The device and driver a result was computed on: the OpenCL device, for LiteRT's
    accelerator its runtime's version and the Vulkan driver files it is told to use, for the GL
    delegate the Python that runs it (its wheel is pinned) and the GL it is told to use."""
    from gpulint.executor.device import host_cpu

    if device is not None:
        return {"name": device.name, "driver": device.driver, "llvm": device.llvm_target, "cpu": host_cpu()[0]}
    if engine == "gl":
        from gpulint.engines.gl import python

        gl = {k: os.environ.get(k) for k in ("EGL_PLATFORM", "__EGL_VENDOR_LIBRARY_FILENAMES", "LP_NUM_THREADS")}
        return {"engine": engine, "python": os.path.realpath(python()), "gl": gl, "cpu": host_cpu()[0]}
    from importlib import metadata

    try:
        litert = metadata.version("ai-edge-litert")
    except metadata.PackageNotFoundError:
        litert = None
    vulkan = {k: os.environ.get(k) for k in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES")}
    return {"engine": engine, "ai-edge-litert": litert, "vulkan": vulkan, "cpu": host_cpu()[0]}


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
    paths: Annotated[
        list[str],
        typer.Argument(help="The original .tflite model (the reference runs it), or several, or folders of them."),
    ],
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
            "device), litert-gpu (LiteRT's real GPU accelerator, ML Drift on WebGPU: fp32 and fp16), gl (the real "
            "classic delegate's OpenGL backend, from gpulint[gl]: fp32 and fp16), all (each installed here, side by "
            "side; gl where gpulint[gl] is)."
        ),
    ] = EngineChoice.opencl,
    export_repro: Annotated[
        Path | None,
        typer.Option(
            help="With --bisect: write the smallest failing sub-model, its inputs and CPU output here "
            "(with --engine all, a folder per engine)."
        ),
    ] = None,
    signature: Annotated[
        str | None,
        typer.Option(help="Run this signature (an LLM's prefill_8 or decode); default: the main subgraph."),
    ] = None,
    generate: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="A decoder's generation: prefill a prompt, then N decode steps with the KV cache carried, on the "
            "engine and the CPU side by side; per step the logits' error and whether the greedy tokens agree.",
        ),
    ] = None,
    jobs: common.Jobs = 1,
    ray: common.Ray = None,
    no_cache: common.NoCache = False,
) -> None:
    """Run the model on a GPU engine (CPU partitions on LiteRT) and compare with the LiteRT CPU
    interpreter. Exit 0 PASS, 1 FAIL, 2 error, 3 nothing ran on the GPU side (CPU-ONLY), 4 no output
    failed but one was judged with a tolerance that covers its whole range, so it could not have
    failed (INCONCLUSIVE: the text says what would decide it, e.g. --precision fp32). Of several
    engines or models, the worst decides: an error, FAIL, CPU-ONLY, INCONCLUSIVE, PASS."""
    from gpulint.check import discover
    from gpulint.verify import Request

    found = list(discover(paths))
    one = len(found) == 1 and not Path(paths[0]).is_dir()  # one model: its own output, as always

    def stop(where: str | os.PathLike[str] | None, message: str) -> NoReturn:
        if output_format is TextOrJson.json:  # one JSON object in every outcome, errors too
            error = f"{where}: {message}" if where is not None else message
            head = {"model": paths[0], "candidate": str(candidate or paths[0])} if one else {}
            typer.echo(json.dumps({**head, "status": "ERROR", "error": error}))
        fail(where, message)

    try:
        tols = _tolerances(atol, rtol, tolerance)
    except ValueError as e:
        stop(None, str(e))
    if inputs is not None and reference_file is not None:
        stop(None, "--inputs and --reference both give inputs; use one")
    if export_repro is not None and not bisect:
        stop(None, "--export-repro writes what --bisect finds: give --bisect too")
    own = {"--candidate": candidate, "--inputs": inputs, "--reference": reference_file}
    own |= {"--save-reference": save_reference, "--export-repro": export_repro}
    given = [flag for flag, value in own.items() if value is not None]
    if given and (not one or ray is not None):
        stop(None, f"{given[0]} belongs to one model's files: give one model, without --ray")
    if generate is not None:
        mixed = [flag for flag, value in own.items() if value is not None and flag != "--candidate"]
        if not one or ray is not None or mixed or bisect or signature is not None:
            stop(
                None,
                "--generate runs one decoder's prefill and decode signatures: give one model, and none of "
                "--signature, --bisect, --inputs, --reference, --save-reference, --export-repro, --ray",
            )
    settings = common.resolve_settings(config=config, target=target, fail_with=stop)
    template = Request(
        model_path=Path(paths[0]),
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
        signature=signature,
    )
    engines = engine_names(engine)
    if generate is not None:
        raise typer.Exit(run_generation(template, engines, device, generate, output_format is TextOrJson.json, stop))
    models = [p for p, err in found if err is None]
    units = [VerifyUnit(replace(template, model_path=Path(p)), engines, device, not no_cache) for p in models]
    with user_errors(None):  # --ray: a cluster that cannot be reached is one error
        done = common.with_progress(
            "verifying",
            len(units),
            lambda tick: run_each(verify_unit, units, models, jobs=jobs, ray=ray, progress=tick, fresh=True, gpu=True),
        )
    if one:
        attempts = done[0]
        for attempt in attempts:
            if attempt.result is None:
                stop(attempt.where, attempt.error or "")
        results = [a.result for a in attempts if a.result is not None]
        status = max((r.status for r in results), key=WORST_LAST.index)
        if output_format is TextOrJson.json:
            single = (
                results[0].to_json()
                if len(results) == 1
                else {"status": status, "engines": [r.to_json() for r in results]}
            )
            typer.echo(json.dumps(single, indent=2))
        else:
            typer.echo(render_one(results))
        raise typer.Exit(EXIT_CODES[status])
    raise typer.Exit(_report_many(found, iter(done), output_format is TextOrJson.json))


def run_generation(req: Request, engines: list[str], device: str | None, steps: int, as_json: bool, stop: Any) -> int:
    """`verify --generate`: the generation on each engine; exit 0 PASS, 1 FAIL, 2 an engine that failed."""
    from gpulint.executor import select_device
    from gpulint.model import read
    from gpulint.verify.generate import generate

    done = []
    with user_errors(req.model_path, also=(ValueError,), fail_with=stop):
        original = read(req.model_path)
        candidate = read(req.candidate_path) if req.candidate_path is not None else original
        for name in engines:
            dev = select_device(device) if name == "opencl" else None
            with quiet_compiler():
                done.append(generate(replace(req, engine=name), original, candidate, dev, steps))
    if as_json:
        body = done[0].to_json() if len(done) == 1 else {"engines": [g.to_json() for g in done]}
        typer.echo(json.dumps(body, indent=2))
    else:
        typer.echo("\n\n".join(g.text() for g in done))
    statuses = {g.status for g in done}
    return EXIT_USAGE if "ERROR" in statuses else EXIT_FINDINGS if "FAIL" in statuses else EXIT_OK


def render_one(results: list[VerifyResult]) -> str:
    from gpulint.output.verify import render_side_by_side, render_verify

    return render_verify(results[0]) if len(results) == 1 else render_side_by_side(results)


def _report_many(found: list[tuple[str, str | None]], done: Iterator[list[Attempt]], as_json: bool) -> int:
    """Several models: each one's result in the order given (a model that cannot run is one error
    line, and an ERROR entry in JSON), a count, and the exit code of the worst."""
    entries: list[dict[str, Any]] = []
    texts: list[str] = []
    codes: list[int] = []
    for path, error in found:
        attempts = next(done) if error is None else [Attempt(None, error, Path(path))]
        failed = next((a for a in attempts if a.result is None), None)
        if failed is not None:
            typer.echo(f"gpulint: error: {failed.where}: {failed.error}", err=True)
            entries.append({"model": path, "status": "ERROR", "error": f"{failed.where}: {failed.error}"})
            codes.append(EXIT_USAGE)
            continue
        results = [a.result for a in attempts if a.result is not None]
        status = max((r.status for r in results), key=WORST_LAST.index)
        codes.append(EXIT_CODES[status])
        if len(results) == 1:
            entries.append(results[0].to_json())
        else:
            entries.append({"model": path, "status": status, "engines": [r.to_json() for r in results]})
        texts.append(render_one(results))
    counts = Counter(e["status"] for e in entries)
    worst = max(codes, key=EXIT_RANK.index)
    status = next(s for s, c in {**EXIT_CODES, "ERROR": EXIT_USAGE}.items() if c == worst)
    if as_json:
        typer.echo(json.dumps({"status": status, "counts": dict(sorted(counts.items())), "models": entries}, indent=2))
    else:
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        typer.echo("\n\n".join([*texts, f"{len(entries)} model(s): {summary}"]))
    return worst


@dataclass
class VerifyUnit:
    """One model's verification on each engine, as a task (gpulint.fanout)."""

    request: Request
    engines: list[str]
    device: str | None
    use_cache: bool


def verify_unit(unit: VerifyUnit, local: str) -> list[Attempt]:
    """A task: verify the model at `local` (the file, or a Ray worker's copy) on each engine in
    turn, each result naming the model by the unit's path."""
    from gpulint.cache import ResultCache

    name = unit.request.model_path
    attempts = []
    for engine in unit.engines:
        repro = unit.request.export_repro
        if repro is not None and len(unit.engines) > 1:
            repro = repro / engine  # --engine all: one folder each
        req = replace(unit.request, model_path=Path(local), engine=engine, export_repro=repro)
        attempt = try_verify(req, unit.device, ResultCache(unit.use_cache))
        if attempt.result is not None:  # named as this run names them (a cached result: as the run that kept it)
            candidate = unit.request.candidate_path
            attempt.result = replace(attempt.result, model=str(name), candidate=str(candidate or name))
        if attempt.where == Path(local):
            attempt.where = name
        attempts.append(attempt)
    return attempts


# 0 PASS, 1 FAIL, 2 a usage error or a model that cannot run, 3 within tolerance but nothing ran on
# the GPU side, 4 within tolerance but a tolerance covered an output's whole range, so that
# comparison could not have failed (VerifyResult.status): CI can tell "the GPU path was shown
# right" from "not shown". Of several engines' results the worst decides: FAIL, then CPU-ONLY
# (nothing of the GPU shown), then INCONCLUSIVE (part of it not shown), then PASS.
EXIT_CPU_ONLY, EXIT_INCONCLUSIVE = 3, 4
EXIT_CODES = {"PASS": EXIT_OK, "FAIL": EXIT_FINDINGS, "CPU-ONLY": EXIT_CPU_ONLY, "INCONCLUSIVE": EXIT_INCONCLUSIVE}
WORST_LAST = ["PASS", "INCONCLUSIVE", "CPU-ONLY", "FAIL"]
# several models: an error, then FAIL, CPU-ONLY, INCONCLUSIVE, PASS
EXIT_RANK = [EXIT_OK, EXIT_INCONCLUSIVE, EXIT_CPU_ONLY, EXIT_FINDINGS, EXIT_USAGE]


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
    signature: Annotated[
        str | None, typer.Option(help="Time this signature (an LLM's prefill_8 or decode); default: the main subgraph.")
    ] = None,
    generate: Annotated[
        bool,
        typer.Option(
            "--generate", help="A decoder: time its prefill and decode steps; prefill tokens/s and decode ms/token."
        ),
    ] = False,
) -> None:
    """Warm latency of the LiteRT CPU interpreter and of the OpenCL executor, their ratio, start
    times and the executor's per-op kernel times."""
    from gpulint.bench import bench as run_bench
    from gpulint.bench import bench_generation, bench_signature
    from gpulint.executor import select_device
    from gpulint.output.bench import render_bench, render_generation

    if generate and signature is not None:
        fail(None, "--generate times the prefill and decode signatures itself: leave out --signature")
    with user_errors(path, also=(ValueError,)), quiet_compiler():
        dev = select_device(device)
        if generate:
            timed = bench_generation(Path(path), dev, runs, threads, precision.value, start)
            typer.echo(
                json.dumps(timed.to_json(), indent=2)
                if output_format is TextOrJson.json
                else render_generation(path, timed)
            )
            return
        if signature is not None:
            result = bench_signature(Path(path), signature, dev, runs, threads, precision.value, start)
        else:
            result = run_bench(Path(path), dev, runs, threads, precision.value, start)
    if output_format is TextOrJson.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    typer.echo(render_bench(result.model if signature is not None else path, result))

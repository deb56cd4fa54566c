"""The emulation judged by the real runtime: gpulint's OpenCL executor and LiteRT's GPU accelerator
on the same models and inputs, each against the LiteRT CPU interpreter.

    .venv/bin/python bench/bench_engines.py [--corpus ../shared/models] [--models a,b] [--precisions fp32,fp16]
        [--seeds 2] [--mutants] [--json out.json]

Per model, precision and output: each engine's verdict, its max abs error over the output's range,
the worst element's error over its tolerance, and the ratio of the two engines' errors (the
emulation's error over the real runtime's; README explains where it passes 4x either way). With
--mutants, each weight mutation (bench/mutation.py) whose effect on the CPU is beyond the
executor-vs-CPU tolerance at that precision is run on the accelerator against the unmutated model
on the CPU: the comparator must FAIL it there too. Needs a WebGPU adapter (a GPU's Vulkan driver,
or Mesa >= 24 lavapipe: `make oracle-webgpu`); the first run of a model compiles its shaders.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import KINDS, mutate

from gpulint import compare, reference
from gpulint.engines import open_engine
from gpulint.executor import select_device
from gpulint.executor.device import host_cpu
from gpulint.model import read
from gpulint.model.write import write
from gpulint.verify import Request, verify

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"
ENGINES = ("opencl", "litert-gpu")


def side_by_side(path: Path, precision: str, seeds: int, distribution: str, device: Any) -> list[dict[str, Any]]:
    """One model at one precision on both engines: one row per output."""
    model = read(path)
    results = {}
    for engine in ENGINES:
        req = Request(path, runs=seeds, distribution=distribution, precision=precision, engine=engine)
        results[engine] = verify(req, model, model, device if engine == "opencl" else None)
    rows = []
    for i, o in enumerate(results["opencl"].outputs):
        row: dict[str, Any] = {"model": path.stem, "precision": precision, "output": o.name, "shape": o.shape}
        for engine, r in results.items():
            v = r.outputs[i].executor
            m = v.metrics
            row[engine] = {
                "passed": v.passed,
                "status": r.status,
                "max_abs": m.get("max_abs_error"),
                "worst_over_tol": m.get("worst", {}).get("error_over_tolerance"),
                "tolerance_over_range": m.get("tolerance_over_range"),
                "cannot_fail": m.get("cannot_fail"),
                "cosine": m.get("cosine_similarity"),
                "snr_db": m.get("snr_db"),
                "gpu_ops": r.executor_ops,
                "device": r.device,
                "seconds": r.seconds,
            }
        a, b = row["opencl"]["max_abs"], row["litert-gpu"]["max_abs"]
        row["ratio"] = (a / b) if a is not None and b else None
        rows.append(row)
    return rows


def engine_mutants(path: Path, precision: str) -> list[dict[str, Any]]:
    """Each mutation run on the accelerator, judged against the unmutated model on the CPU."""
    feed = reference.random_inputs(read(path), 0, "uniform")
    cpu = reference.run_with_noise([path], feed)[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpulint-engmut-") as tmp:
        for kind in KINDS:
            bad = read(path)
            what = mutate(bad, kind)
            if what is None:
                continue
            cand = Path(tmp, "mutant.tflite")
            write(bad, cand, allow_loss=True)
            on_cpu = reference.run(cand, feed)
            engine = open_engine("litert-gpu", bad, cand, precision, "litert-gpu", None)
            try:
                got = engine.run(feed)
            finally:
                engine.close()
            should = failed = False
            for k, ref in enumerate(cpu.outputs):
                noise = compare.noise_map([ref], [cpu.second[k]])
                policy = compare.EXECUTOR_VS_CPU
                should |= not compare.judge("o", [ref], [on_cpu[k]], policy, precision, noise).passed
                failed |= not compare.judge("o", [ref], [got[k]], policy, precision, noise).passed
            row = {"model": path.stem, "precision": precision, "kind": kind}
            rows.append({**row, "should_fail": should, "failed": failed})
    return rows


def _fmt(x: float | None, f: str = ".2g") -> str:
    return "-" if x is None else format(x, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--models", default="", help="comma-separated model stems (default: all)")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--distribution", default="uniform")
    ap.add_argument("--mutants", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    paths = sorted(args.corpus.glob("**/*.tflite"))
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if p.stem in wanted]
    device = select_device()
    cpu, flags = host_cpu()
    vector = ", ".join(f for f in ("avx2", "avx512f", "f16c") if f in flags)
    print(f"machine: {platform.machine()}, {cpu} ({vector}); executor device: {device.describe()}", flush=True)
    report: dict[str, Any] = {"rows": [], "mutants": [], "skipped": []}
    for p in paths:
        for precision in args.precisions.split(","):
            clock = time.perf_counter()
            try:
                rows = side_by_side(p, precision, args.seeds, args.distribution, device)
            except Exception as e:  # a model one engine cannot run: said, and the run goes on
                report["skipped"].append({"model": p.stem, "precision": precision, "why": str(e)[:300]})
                print(f"{p.stem} {precision}: skipped: {str(e)[:200]}", file=sys.stderr, flush=True)
                continue
            report["rows"] += rows
            took = time.perf_counter() - clock
            print(f"{p.stem} {precision}: {len(rows)} outputs, {took:.1f} s", file=sys.stderr, flush=True)
            if args.mutants:
                report["mutants"] += engine_mutants(p, precision)
    print("| model | output | precision | opencl (max abs, worst/tol) | litert-gpu (max abs, worst/tol) | ratio |")
    print("|---|---|---|---|---|---:|")
    for r in report["rows"]:
        a, b = r["opencl"], r["litert-gpu"]
        flag = " (tolerance >= range)" if b["cannot_fail"] else ""
        print(
            f"| {r['model']} | {r['output']} {r['shape']} | {r['precision']} "
            f"| {'PASS' if a['passed'] else 'FAIL'} {_fmt(a['max_abs'])}, {_fmt(a['worst_over_tol'])} "
            f"| {'PASS' if b['passed'] else 'FAIL'} {_fmt(b['max_abs'])}, {_fmt(b['worst_over_tol'])}{flag} "
            f"| {_fmt(r['ratio'])} |"
        )
    for s in report["skipped"]:
        print(f"skipped {s['model']} {s['precision']}: {s['why']}")
    if report["mutants"]:
        should = [m for m in report["mutants"] if m["should_fail"]]
        caught = [m for m in should if m["failed"]]
        print(f"mutants beyond tolerance on the CPU: {len(should)}, FAILed on the accelerator: {len(caught)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

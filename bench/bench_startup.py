"""Start-up of the `gpulint` command (#40 item 8): what pre-commit pays on every commit.

    .venv/bin/python bench/bench_startup.py [--model PATH] [--runs 10] [--json out.json]

1. Whole processes, interleaved round by round so that a busy machine slows each alike (median and
   minimum of --runs, and the median CPU time, user + system, which another process on the machine
   disturbs less than the wall time): `python -c pass` (the floor: the interpreter and site),
   `gpulint --version`, `gpulint --help`, `gpulint check MODEL`, and where check has a result cache,
   `gpulint check --no-cache MODEL` (the model read and linted, as for a model a commit changed;
   plain `check` is then a result-cache hit after the warm-up run); each also as a ratio to
   `python -c pass`.
2. Where `gpulint check MODEL` spends its imports (with --no-cache where there is one): `python -X
   importtime`, each module's own time summed by package (numpy, typer and its dependencies, yaml,
   tflite, gpulint, the rest: the standard library mostly), median over --runs, then the slowest
   gpulint modules.

The processes run without PYTHONDONTWRITEBYTECODE, so that gpulint's bytecode is cached as a pip
install caches it (with it set, every run compiles ~45 modules from source: about 70 ms more).
The cache folder (GPULINT_CACHE_DIR) is the user's: the warm-up run fills the parsed rule packs'
cache (gpulint/rules/packcache.py) as any earlier run would.

MODEL: --model, else ../shared/models/mediapipe/pose_landmark_full.tflite, else the largest model
under ../shared/models/mediapipe (or $GPULINT_CORPUS/mediapipe). The `gpulint` measured is this
interpreter's (its console script beside it, else `python -m gpulint`). Targets: check <= 0.25 s,
--version <= 60 ms (medians, a quiet machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

CORPUS = Path(os.environ.get("GPULINT_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "models"))
TARGETS = {"check": 0.25, "check --no-cache": 0.25, "--version": 0.060}
GROUPS = (
    ("numpy", ("numpy",)),
    ("typer, click, rich", ("typer", "click", "rich", "shellingham", "annotated_doc", "pydantic", "typing_extensions")),
    ("yaml", ("yaml", "_yaml")),
    ("tflite, flatbuffers", ("tflite", "flatbuffers")),
    ("gpulint", ("gpulint",)),
)


def default_model() -> Path:
    folder = CORPUS / "mediapipe"
    wanted = folder / "pose_landmark_full.tflite"
    if wanted.is_file():
        return wanted
    models = sorted(folder.glob("*.tflite"), key=lambda p: p.stat().st_size)
    if not models:
        raise SystemExit(f"no model under {folder}: give --model")
    return models[-1]


def gpulint_argv() -> list[str]:
    script = Path(sys.executable).parent / "gpulint"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "gpulint"]


def machine() -> str:
    model = platform.processor() or platform.machine()
    if shutil.which("lscpu"):
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line), model)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{model}, {os.cpu_count()} cores, load {load:.2f}, Python {platform.python_version()}"


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds, CPU seconds (user + system of the child) and the finished process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=ENV)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # check exits 1 on findings
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return took, cpu, done


def check_args(model: Path) -> list[str]:
    """check's arguments that read and lint the model: --no-cache where check has a result cache."""
    helped = subprocess.run([*gpulint_argv(), "check", "--help"], capture_output=True, text=True, env=ENV).stdout
    return ["check", "--no-cache", str(model)] if "--no-cache" in helped else ["check", str(model)]


def processes(model: Path, runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    gl = gpulint_argv()
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "--version": [*gl, "--version"],
        "--help": [*gl, "--help"],
        "check": [*gl, "check", str(model)],
    }
    cold = check_args(model)
    if "--no-cache" in cold:
        cases["check --no-cache"] = [*gl, *cold]
    for argv in cases.values():  # warm the page cache, the bytecode caches and gpulint's caches
        run(argv)
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            took, cpu, _ = run(argv)
            times[name].append(took)
            cpus[name].append(cpu)
    return times, cpus


def importtime(model: Path, runs: int) -> tuple[dict[str, float], dict[str, float], float]:
    """Median ms of each group's modules (their own times, so that numpy imported by a gpulint
    module counts as numpy), median own ms per gpulint module, and the median sum of all imports."""
    code = "import sys; from gpulint.cli import main; sys.argv[0] = 'gpulint'; main()"
    argv = [sys.executable, "-X", "importtime", "-c", code, *check_args(model)]
    groups: dict[str, list[float]] = defaultdict(list)
    own: dict[str, list[float]] = defaultdict(list)
    totals = []
    for _ in range(runs):
        _, _, done = run(argv)
        per_group: dict[str, float] = defaultdict(float)
        for line in done.stderr.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, _, name = line[len("import time:") :].split("|")
            module = name.strip()
            ms = int(self_us) / 1000
            if module.startswith("gpulint"):
                own[module].append(ms)
            root = module.split(".")[0]
            per_group[next((g for g, roots in GROUPS if root in roots), "other")] += ms
        for group in [g for g, _ in GROUPS] + ["other"]:
            groups[group].append(per_group.get(group, 0.0))
        totals.append(sum(per_group.values()))
    return (
        {g: statistics.median(v) for g, v in groups.items()},
        {m: statistics.median(v) for m, v in own.items()},
        statistics.median(totals),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None, help="Also write the numbers here.")
    args = ap.parse_args()
    model = args.model or default_model()
    print(f"# gpulint start-up: {model.name} ({model.stat().st_size:,} bytes)\n")
    print(f"machine: {machine()}; gpulint: {' '.join(gpulint_argv())}\n")
    times, cpus = processes(model, args.runs)
    floor = statistics.median(times["python -c pass"])
    print(f"## Processes (median and min of {args.runs}, interleaved)\n")
    print("| command | median ms | min ms | CPU ms (median) | / python -c pass | target |")
    print("|---|---:|---:|---:|---:|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target * 1000:.0f} ms: {'met' if med <= target else 'NOT met'}"
        cpu = statistics.median(cpus[name]) * 1000
        print(f"| {name} | {med * 1000:.0f} | {min(ts) * 1000:.0f} | {cpu:.0f} | {med / floor:.1f}x | {verdict} |")
    groups, own, total = importtime(model, args.runs)
    print(f"\n## Imports of `gpulint check` (python -X importtime, median of {args.runs})\n")
    print(f"All imports: {total:.0f} ms (importtime's own overhead included).\n")
    print("| package | ms (own times) |")
    print("|---|---:|")
    for group, ms in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {group} | {ms:.1f} |")
    print("\nSlowest gpulint modules by own time (ms):", end=" ")
    print(", ".join(f"{m} {ms:.1f}" for m, ms in sorted(own.items(), key=lambda kv: -kv[1])[:8]))
    if args.json:
        doc = {
            "model": str(model),
            "machine": machine(),
            "runs": args.runs,
            "processes_ms": {
                n: {"median": statistics.median(t) * 1e3, "min": min(t) * 1e3, "cpu": statistics.median(cpus[n]) * 1e3}
                for n, t in times.items()
            },
            "imports_ms": {"total": total, "groups": groups, "gpulint_own": own},
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()

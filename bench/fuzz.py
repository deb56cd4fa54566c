"""Fuzz gpulint with mutated corpus models: every command must succeed or fail cleanly.

    .venv/bin/python bench/fuzz.py [--cases 300] [--seed 0] [--jobs 1] [--root DIR ...]
                                   [--command NAME ...] [--case N] [--start N] [--keep DIR]

Seeds: every *.tflite under each root (default: ../shared/models, and .converter-cache, where
`make converters` builds the torch, torch-half, yolo and generative corpora); a missing root is
skipped with a note, a hidden folder (a corpus being built) is not read. A case draws a corpus
(the root's first folder: mediapipe, tfconv, torch, yolo, ...) uniformly, then one of its models,
so a corpus of many files does not crowd out the others; mutates the model's structure
(tests/fuzzing.py: bit flips, u32 words set to extreme values, swapped offsets, truncation); and
runs one command on it as a process of its own: `inspect`, `check --format json`,
`report --no-fix`, `fix --skip-proof`, `fix` (passes proven on the LiteRT interpreter),
`fix --unsafe-fixes --skip-proof` (every pass, the opt-in ones too), `verify`
on each engine present (the OpenCL executor, LiteRT's GPU accelerator and the classic delegate's
OpenGL backend, each at fp32 and fp16; the gl engine runs the Python $GPULINT_GL_PYTHON names, as
verify does; an engine that cannot verify the sample model here is left out, with a note) and `bench`.
Case N of seed S is the same on every run over the same seed files (a random.Random of its own),
so `--case N` repeats one and `--start N` runs the rest of a stopped run; `--keep DIR` keeps
each bad case's mutated model.

A case is bad when the command (tests/fuzzing.py `problem`)
- prints a traceback (GPULINT_TRACEBACK=1 is set, so the CLI's catch-all shows a bug as one) or
  an `internal error` line;
- ends on a signal, or with an exit code outside 0/1/2 (0-4 for verify: 3 is CPU-ONLY, 4
  INCONCLUSIVE);
- exits 2 with anything but exactly one `gpulint: error: ...` line on stderr;
- is still running at its time bound, where it is killed with its process group: 30 s plus 2 s
  per MB of model for inspect, check, report and fix --skip-proof; 120 s plus 10 s per MB for
  fix, verify and bench, which run the model;
- leaves a process running.
Memory: every case runs under an RLIMIT_AS of 4 GiB per process (set on this runner, inherited;
the peak RSS is reported). A limit of gpulint's own stopping a run (the LiteRT child's 1 GiB and
time limit, the executor's check of a buffer against the device's largest, its one line when the
host has no memory for a buffer the device would take) ends in one clear line: a clean result.
Where only the fuzzer's bound stops a run, it shows as a hang, a MemoryError traceback or a
signal: bad.

Measured: docs/reference/hostile-input.md (the 10,000-case run, its bad cases and each command's rate).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzzing import find_seeds, mutate, problem, run_case, structure_positions, time_bound

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOTS = (REPO.parent / "shared" / "models", REPO / ".converter-cache")
COMMANDS = {
    "inspect": ["inspect"],
    "check-json": ["check", "--format", "json"],
    "report": ["report", "--no-fix", "-o", "{out}.html"],
    "fix-skip-proof": ["fix", "--skip-proof", "--force", "-o", "{out}.tflite"],
    "fix": ["fix", "--force", "-o", "{out}.tflite"],
    "fix-unsafe": ["fix", "--unsafe-fixes", "--skip-proof", "--force", "-o", "{out}.tflite"],
    "verify-opencl-fp32": ["verify", "--no-cache", "--engine", "opencl"],
    "verify-opencl-fp16": ["verify", "--no-cache", "--engine", "opencl", "--precision", "fp16", "--format", "json"],
    "verify-litert-gpu-fp32": ["verify", "--no-cache", "--engine", "litert-gpu", "--format", "json"],
    "verify-litert-gpu-fp16": ["verify", "--no-cache", "--engine", "litert-gpu", "--precision", "fp16"],
    "verify-gl-fp32": ["verify", "--no-cache", "--engine", "gl", "--format", "json"],
    "verify-gl-fp16": ["verify", "--no-cache", "--engine", "gl", "--precision", "fp16"],
    "bench": ["bench", "--runs", "2", "--no-start", "--format", "json"],
}
ADDRESS_SPACE = 4 << 30
OUTCOMES = {0: "ok", 1: "findings", 2: "clean error", 3: "cpu-only", 4: "inconclusive"}  # verify's 3 and 4


def engine_missing(gpulint: str, command: list[str], sample: Path, env: dict[str, str]) -> str | None:
    """None when this `verify` runs on the sample model here; else why not."""
    out = run_case([gpulint, command[0], str(sample), *command[1:]], 600.0, env)
    if out.rc in (0, 1, 3):
        return None
    return (out.stderr.strip().splitlines() or [f"exit {out.rc}"])[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="cases at once")
    ap.add_argument("--root", type=Path, action="append", help="seed folder (repeatable)")
    ap.add_argument("--command", action="append", choices=sorted(COMMANDS), help="only these (repeatable)")
    ap.add_argument("--case", type=int, help="run this one case")
    ap.add_argument("--start", type=int, default=0, help="run cases START..CASES-1 (a stopped run's rest)")
    ap.add_argument("--keep", type=Path, help="copy each bad case's mutated model here")
    args = ap.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    corpora = find_seeds(args.root or list(DEFAULT_ROOTS))
    if not corpora:
        sys.exit("no *.tflite seeds under the roots")
    gpulint = str(Path(sys.executable).with_name("gpulint"))
    tmp = Path(tempfile.mkdtemp(prefix="gpulint-fuzz-"))
    # One cache for the run (kernels, shaders), as on a user's machine; verify keeps no results (--no-cache).
    env = dict(os.environ, GPULINT_TRACEBACK="1", GPULINT_CACHE_DIR=str(tmp / "cache"))
    commands = {k: v for k, v in COMMANDS.items() if not args.command or k in args.command}
    sample = tmp / "sample.tflite"
    _write_sample(sample)
    for engine in ("opencl", "litert-gpu", "gl"):
        names = [k for k in commands if k.startswith(f"verify-{engine}-")]
        if names and (why := engine_missing(gpulint, COMMANDS[names[0]], sample, env)):
            print(f"note: engine {engine} left out (it cannot verify the sample model here: {why})", file=sys.stderr)
            for k in names:
                del commands[k]
    # The seeds are copied now (a converter cache may be rebuilt, its folder renamed, while this
    # runs), and read back per case: kept in this process they would count in every case's peak
    # RSS (a forked child's ru_maxrss starts at its parent's).
    files: dict[Path, Path] = {}
    for i, p in enumerate(p for ps in corpora.values() for p in ps):
        files[p] = tmp / "seeds" / f"{i}.tflite"
        files[p].parent.mkdir(exist_ok=True)
        shutil.copyfile(p, files[p])
    print(f"seeds: {', '.join(f'{c} {len(ps)}' for c, ps in corpora.items())}; commands: {', '.join(commands)}")

    positions: dict[Path, np.ndarray] = {}
    lock = threading.Lock()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    busy: dict[str, float] = defaultdict(float)
    bad: list[str] = []
    slowest: dict[str, float] = defaultdict(float)
    worst_rss = 0
    start = time.perf_counter()

    def summary() -> None:
        """Per command: cases, the rate of one process running them back to back, the slowest, outcomes."""
        for name in commands:
            n = sum(counts[name].values())
            if n:
                rate = n / busy[name] if busy[name] else 0.0
                print(
                    f"  {name:<24} {n:>6} cases, {rate:5.2f}/s in one process, slowest {slowest[name]:5.1f} s: "
                    f"{dict(counts[name])}"
                )
        print(f"bad: {len(bad)}; peak RSS {worst_rss >> 20} MiB", flush=True)

    def one(case: int) -> None:
        nonlocal worst_rss
        rng = random.Random(f"{args.seed}/{case}")
        model = rng.choice(corpora[rng.choice(sorted(corpora))])
        data = files[model].read_bytes()
        with lock:
            if model not in positions:
                positions[model] = structure_positions(data)
        mutated, what = mutate(data, positions[model], rng)
        name = rng.choice(sorted(commands))
        path = tmp / f"case{case}.tflite"
        path.write_bytes(mutated)
        command = [a.format(out=tmp / f"out{case}") for a in commands[name]]
        bound = time_bound(command, len(mutated))
        out = run_case([gpulint, command[0], str(path), *command[1:]], bound, env)
        why = problem(command[0], out, bound)
        with lock:
            worst_rss = max(worst_rss, out.rss)
            busy[name] += out.seconds
            slowest[name] = max(slowest[name], out.seconds)
            counts[name]["bad" if why else OUTCOMES[out.rc]] += 1
            if why:
                kept = args.keep / f"fuzz-{args.seed}-{case}.tflite" if args.keep else path
                bad.append(
                    f"case {case} (seed {args.seed}): {model} [{what}]: {why}\n"
                    f"  gpulint {command[0]} {kept} {' '.join(command[1:])}\n{out.stderr[-1500:]}"
                )
                print(f"BAD {bad[-1]}", flush=True)
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    kept.write_bytes(mutated)
            done = sum(sum(c.values()) for c in counts.values())
            if done % 100 == 0:
                elapsed = time.perf_counter() - start
                print(f"{done} cases, {len(bad)} bad, {elapsed:.0f} s: {done / elapsed:.2f} cases/s", flush=True)
            if done % 1000 == 0:  # a long run's log has the table even if it is stopped
                summary()
        for p in [path, *tmp.glob(f"out{case}.*")]:
            p.unlink(missing_ok=True)

    cases = [args.case] if args.case is not None else list(range(args.start, args.cases))
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, cases))
    wall = time.perf_counter() - start
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(cases)} cases (seed {args.seed}, {args.jobs} jobs) in {wall:.0f} s: {len(cases) / wall:.2f} cases/s")
    summary()
    sys.exit(1 if bad else 0)


def _write_sample(path: Path) -> None:
    from gpulint.model import to_bytes
    from gpulint.sample import sample_model

    path.write_bytes(to_bytes(sample_model()))


if __name__ == "__main__":
    main()

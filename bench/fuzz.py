"""Fuzz gpulint with mutated corpus models: every command must succeed or fail cleanly.

    .venv/bin/python bench/fuzz.py [--cases 300] [--seed 0] [--corpus ../shared/models]

Each case mutates one corpus model's structure (tests/fuzzing.py: bit flips, u32 words set to
extreme values, swapped offsets, truncation) and runs one of `inspect`, `check --format json`,
`report --no-fix`, `fix --skip-proof` and `fix` (passes proven on the LiteRT interpreter) as
its own process. A case passes when the process exits 0, 1 or 2, prints no traceback, prints
exactly one `gpulint: error: ...` line when it exits 2, takes at most 10 s and stays under
1 GiB of resident memory (children included).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzzing import mutate, structure_positions

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"
COMMANDS = (
    ["inspect"],
    ["check", "--format", "json"],
    ["report", "--no-fix", "-o", "{out}.html"],
    ["fix", "--skip-proof", "--force", "-o", "{out}.tflite"],
    ["fix", "--force", "-o", "{out}.tflite"],
)
TIME_LIMIT, MEMORY_LIMIT = 10.0, 1 << 30


def run_case(argv: list[str]) -> tuple[int, str, float, int]:
    """(exit code, stderr, seconds, peak RSS bytes of the process and its waited-for children)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except KeyboardInterrupt:
            proc.kill()
            raise
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return proc.returncode, text, time.perf_counter() - start, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    models = sorted(args.corpus.glob("*/*.tflite"))
    seeds = {p: (p.read_bytes(), structure_positions(p.read_bytes())) for p in models}
    gpulint = str(Path(sys.executable).with_name("gpulint"))
    outcomes: Counter[str] = Counter()
    worst_time, worst_mem, bad = 0.0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        for case in range(args.cases):
            model = rng.choice(models)
            data, positions = seeds[model]
            mutated, what = mutate(data, positions, rng)
            path = Path(tmp, f"case{case}.tflite")
            path.write_bytes(mutated)
            command = [a.format(out=Path(tmp, f"out{case}")) for a in rng.choice(COMMANDS)]
            rc, err, seconds, rss = run_case([gpulint, command[0], str(path), *command[1:]])
            worst_time, worst_mem = max(worst_time, seconds), max(worst_mem, rss)
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("INFO:", "WARNING:"))]
            problem = None
            if "Traceback" in err:
                problem = "traceback"
            elif rc not in (0, 1, 2):
                problem = f"exit code {rc}"
            elif rc == 2 and (len(lines) != 1 or not lines[0].startswith("gpulint: error: ")):
                problem = f"{len(lines)} stderr lines"
            elif seconds > TIME_LIMIT:
                problem = f"{seconds:.1f} s"
            elif rss > MEMORY_LIMIT:
                problem = f"{rss >> 20} MiB"
            outcomes["bad" if problem else {0: "ok", 1: "findings", 2: "clean error"}[rc]] += 1
            if problem:
                bad.append(f"{model.name} [{what}] gpulint {' '.join(command)}: {problem}\n{err[-800:]}")
                path.rename(Path(tmp).parent / f"gpulint-fuzz-{case}.tflite")
            path.unlink(missing_ok=True)
    print(
        f"{args.cases} cases (seed {args.seed}): {dict(outcomes)}; slowest {worst_time:.2f} s, "
        f"peak RSS {worst_mem >> 20} MiB"
    )
    for b in bad:
        print("FAIL", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

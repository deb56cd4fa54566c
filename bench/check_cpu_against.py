"""CPU time of whole `gpulint check` processes: this tree against another checkout of gpulint.

    git worktree add /tmp/before REV
    .venv/bin/python bench/check_cpu_against.py /tmp/before [MODEL] [--runs 10]

Wall time on a shared machine moves by more than the differences worth measuring here; the
child's user + system CPU time (resource.getrusage) moves much less. The two trees alternate,
run by the same interpreter and venv (the other tree through PYTHONPATH).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "shared" / "models" / "mediapipe" / "pose_detection.tflite"


def cpu_ms(pythonpath: str | None, model: Path) -> float:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # `-m` puts the current folder first on sys.path, ahead of PYTHONPATH: run in the tree measured.
    cwd = pythonpath or str(Path(__file__).resolve().parents[1])
    cmd = [sys.executable, "-m", "gpulint", "check", str(model), "--exit-zero"]
    r = subprocess.run(cmd, env=env, capture_output=True, cwd=cwd)
    if r.returncode:  # a failing run's time says nothing
        sys.exit(f"gpulint check failed in {cwd}: {r.stderr.decode(errors='replace')[-800:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("other", help="another gpulint checkout (e.g. a git worktree)")
    ap.add_argument("model", nargs="?", default=str(DEFAULT_MODEL))
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    model = Path(args.model).resolve()
    if not model.is_file():
        sys.exit(f"no model at {model}")
    ours, theirs = [], []
    for _ in range(args.runs):
        ours.append(cpu_ms(None, model))
        theirs.append(cpu_ms(str(Path(args.other).resolve()), model))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"{model.name}: this tree {a:.0f} ms CPU, {args.other} {b:.0f} ms CPU", end="")
    print(f" (ratio {a / b:.3f}, medians of {args.runs})")


if __name__ == "__main__":
    main()

"""Cold and cached start of two gpulint trees, alternating, in fresh processes: per round and
tree, a `gpulint.bench` start-time child with empty kernel caches (cold), then one with the
caches it left (cached), and the CPU time of the cold one with the children it waited for.

    git worktree add /tmp/before HEAD~3
    python bench/ab_start.py /tmp/before . MODEL [--rounds 8]

Both trees run with this interpreter (their own source first on the path).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpulint.bench import cache_env


def start(tree: Path, model: Path, env: dict[str, str]) -> float:
    cmd = [sys.executable, "-m", "gpulint.bench", str(model), "pthread", "fp32"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tree, env=env)
    return float(json.loads(proc.stdout)["seconds"])


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("model", type=Path)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    seen: dict[str, dict[str, list[float]]] = {k: {"cold": [], "cached": [], "cold cpu": []} for k in trees}
    for _ in range(args.rounds):
        for key, tree in trees.items():
            with tempfile.TemporaryDirectory(prefix="gpulint-ab-") as tmp:
                env = os.environ | cache_env(tmp) | {"PYTHONPATH": str(tree)}
                cpu = cpu_of_children()
                seen[key]["cold"].append(start(tree, args.model.resolve(), env))
                seen[key]["cold cpu"].append(cpu_of_children() - cpu)
                seen[key]["cached"].append(start(tree, args.model.resolve(), env))
    for key, tree in trees.items():
        for kind, values in seen[key].items():
            shown = ", ".join(f"{v:.2f}" for v in values)
            print(f"{key} ({tree}) {kind}: {shown} s; median {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()

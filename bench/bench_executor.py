"""The OpenCL executor against the LiteRT CPU interpreter, and `gpulint verify` end to end.

    .venv/bin/python bench/bench_executor.py [--corpus ../shared/models] [--runs 20] [--models mediapipe]

Per model, in one run (ratios, because these machines are shared and noisy): the warm latency
of the interpreter (all cores) and of the executor (`gpulint.bench`), their ratio, and the
executor's start in a fresh process with empty kernel caches (cold) and with the caches that
left (cached). Then a whole `gpulint verify pose_detection.tflite` process, cold and warm.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpulint.bench import bench, cache_env
from gpulint.executor import select_device

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"


def verify_process(model: Path, env: dict[str, str]) -> float:
    clock = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpulint", "verify", str(model)], capture_output=True, check=True, env=env)
    return time.perf_counter() - clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--models", default="mediapipe", help="a corpus subfolder, or 'all'")
    args = ap.parse_args()
    if not args.corpus.is_dir():
        sys.exit(f"no corpus at {args.corpus}")
    pattern = "*/*.tflite" if args.models == "all" else f"{args.models}/*.tflite"
    device = select_device()
    print(f"device: {device.describe()}; {os.cpu_count()} cores")
    print("| model | CPU interpreter | executor | ratio | cold start | cached start | cached/cold |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for path in sorted(args.corpus.glob(pattern)):
        try:
            r = bench(path, device, runs=args.runs)
        except Exception as e:  # a model the executor cannot run: say so, go on
            print(f"| {path.name} | {str(e)[:80]} ||||||")
            continue
        ratios.append(r.ratio)
        assert r.cold_start_s is not None and r.cached_start_s is not None
        print(
            f"| {path.name} | {r.cpu_ms:.2f} ms | {r.executor_ms:.2f} ms | {r.ratio:.2f} | {r.cold_start_s:.2f} s "
            f"| {r.cached_start_s:.2f} s | {r.cached_start_s / r.cold_start_s:.2f} |"
        )
    if ratios:
        print(f"geometric mean ratio: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    pose = args.corpus / "mediapipe" / "pose_detection.tflite"
    if pose.exists():
        with tempfile.TemporaryDirectory() as tmp:
            env = os.environ | cache_env(tmp)
            cold, warm = verify_process(pose, env), verify_process(pose, env)
        print(f"gpulint verify pose_detection.tflite: cold caches {cold:.2f} s, warm {warm:.2f} s")


if __name__ == "__main__":
    main()

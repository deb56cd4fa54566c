"""The OpenCL executor against the LiteRT CPU interpreter, and `gpulint verify` end to end.

    .venv/bin/python bench/bench_executor.py [--corpus ../shared/models] [--runs 20] [--models mediapipe]
        [--devices all | SPEC,SPEC]

Per model, in one run (ratios, because these machines are shared and noisy): the warm latency
of the interpreter (all cores) and of the executor (`gpulint.bench`), their ratio, and the
executor's start in a fresh process with empty kernel caches (cold) and with the caches that
left (cached). Then a whole `gpulint verify pose_detection.tflite` process, cold and warm.
`--devices all` (or device specs, as GPULINT_CL_DEVICE takes them) measures each model on each
OpenCL device in turn, so that two drivers on one machine are compared in one run.
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
from gpulint.executor import device as device_module
from gpulint.executor import select_device


def cpu_model() -> str:
    """lscpu's model name, and the vector extensions a driver compiles for."""
    name, flags = device_module.host_cpu()
    wanted = [f for f in ("avx2", "avx512f", "f16c") if f in flags]
    return f"{name or 'unknown CPU'} ({' '.join(wanted) or 'no avx2'})"


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
    ap.add_argument(
        "--devices", default="", help="'all', or device specs separated by commas (default: the default device)"
    )
    args = ap.parse_args()
    if not args.corpus.is_dir():
        sys.exit(f"no corpus at {args.corpus}")
    pattern = "*/*.tflite" if args.models == "all" else f"{args.models}/*.tflite"
    if args.devices == "all":
        devices = [select_device(f"{pi}:{di}") for pi, di, _, _ in device_module.devices()]
    else:
        devices = [select_device(spec) for spec in (args.devices.split(",") if args.devices else [None])]
    for device in devices:
        print(f"device: {device.describe()}")
    print(f"host: {cpu_model()}; {os.cpu_count()} cores")
    print("| model | device | CPU interpreter | executor | ratio | cold start | cached start | cached/cold |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    ratios: dict[str, list[float]] = {device.describe(): [] for device in devices}
    for path in sorted(args.corpus.glob(pattern)):
        for device in devices:
            try:
                r = bench(path, device, runs=args.runs)
            except Exception as e:  # a model the executor cannot run: say so, go on
                print(f"| {path.name} | {device.name} | {str(e)[:80]} ||||||")
                continue
            ratios[device.describe()].append(r.ratio)
            assert r.cold_start_s is not None and r.cached_start_s is not None
            print(
                f"| {path.name} | {device.name} | {r.cpu_ms:.2f} ms | {r.executor_ms:.2f} ms | {r.ratio:.2f} "
                f"| {r.cold_start_s:.2f} s | {r.cached_start_s:.2f} s | {r.cached_start_s / r.cold_start_s:.2f} |"
            )
    for name, values in ratios.items():
        if values:
            print(f"geometric mean ratio, {name}: {math.exp(sum(map(math.log, values)) / len(values)):.2f}")
    pose = args.corpus / "mediapipe" / "pose_detection.tflite"
    if pose.exists():
        with tempfile.TemporaryDirectory() as tmp:
            env = os.environ | cache_env(tmp)
            cold, warm = verify_process(pose, env), verify_process(pose, env)
        print(f"gpulint verify pose_detection.tflite: cold caches {cold:.2f} s, warm {warm:.2f} s")


if __name__ == "__main__":
    main()

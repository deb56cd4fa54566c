"""Read time and memory of `gpulint.model.read`, against the references, in one run.

    .venv/bin/python bench/bench_read.py [--corpus ../shared/models] [--repeat 15]

1. Every corpus model: median in-process read time, next to the reader TFLite itself uses
   from Python, timed in the same process: the flatbuffers object API behind TFLite's
   flatbuffer_utils (`ai_edge_litert.schema_py_generated.ModelT.InitFromPackedBuf`).
2. The same graph with more and more constant bytes: read time and peak memory must stay flat.
3. A whole `gpulint inspect` process on the largest-op corpus model (median of runs).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import conv_model
from timing import median_time

from gpulint.model import read, write

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"


def corpus_table(corpus: Path, repeat: int) -> None:
    from ai_edge_litert import schema_py_generated as fb_object_api

    print("## Reading the corpus (median of", repeat, "runs, in-process)\n")
    print("| model | bytes | ops | gpulint read ms | ModelT ms | gpulint / ModelT |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in sorted(corpus.glob("*/*.tflite")):
        model = read(path)
        ops = sum(len(sg.operators) for sg in model.subgraphs)
        ours = median_time(lambda p=path: read(p), repeat)
        data = bytearray(path.read_bytes())
        objapi = median_time(lambda d=data: fb_object_api.ModelT.InitFromPackedBuf(d, 0), repeat)
        print(
            f"| {path.name} | {path.stat().st_size:,} | {ops} | {ours * 1e3:.1f} | {objapi * 1e3:.1f} | "
            f"{ours / objapi:.2f} |"
        )


def memory_table(repeat: int) -> None:
    print("\n## Same graph, growing constants: read time and peak Python memory\n")
    print("| constant bytes | file bytes | read ms | peak traced memory KiB |")
    print("|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for mib in (0, 16, 128, 512):
            path = Path(tmp, f"w{mib}.tflite")
            write(conv_model(weight_bytes=mib << 20), path)
            t = median_time(lambda p=path: read(p), repeat)
            tracemalloc.start()
            read(path)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            print(f"| {mib << 20:,} | {path.stat().st_size:,} | {t * 1e3:.2f} | {peak / 1024:.0f} |")
            path.unlink()


def process_time(corpus: Path, runs: int) -> None:
    path = max(corpus.glob("*/*.tflite"), key=lambda p: sum(len(sg.operators) for sg in read(p).subgraphs))
    cmd = [str(Path(sys.executable).with_name("gpulint")), "inspect", str(path)]
    baseline = [sys.executable, "-c", "pass"]
    times, base = [], []
    for _ in range(runs):
        for argv, sink in ((cmd, times), (baseline, base)):
            t = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            sink.append(time.perf_counter() - t)
    print(f"\n## Whole process: `gpulint inspect {path.name}` (median of {runs} runs)\n")
    print(f"- gpulint inspect: {statistics.median(times) * 1e3:.0f} ms")
    print(f"- bare `python -c pass` on the same machine: {statistics.median(base) * 1e3:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if args.corpus.is_dir():
        corpus_table(args.corpus, args.repeat)
    else:
        print(f"(corpus {args.corpus} absent: corpus and process sections skipped)")
    memory_table(max(3, args.repeat // 3))
    if args.corpus.is_dir():
        process_time(args.corpus, 10)


if __name__ == "__main__":
    main()

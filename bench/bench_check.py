"""Speed of `gpulint check`, in one run, against the LiteRT interpreter's own model preparation.

    .venv/bin/python bench/bench_check.py [--corpus ../shared/models] [--repeat 15]

1. Every corpus model: median in-process lint time (rules, placements, partitions; the read
   excluded), per 300 ops, next to the LiteRT CPU interpreter preparing the same model
   (`Interpreter(model_path).allocate_tensors()`, XNNPACK on) in the same process.
2. A whole `gpulint check` process on the corpus model with the most ops (median of 10).
3. All corpus files with `--jobs 2` (median of 3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from timing import median_time, median_wall

from gpulint.model import read
from gpulint.rules import pack
from gpulint.rules.engine import Linter

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"


def lint_table(corpus: Path, repeat: int) -> None:
    from ai_edge_litert.interpreter import Interpreter

    targets = pack.load_targets()
    linter = Linter(targets["classic"], targets=targets)
    print(f"## In-process lint (median of {repeat})\n")
    print("| model | ops | lint ms | ms per 300 ops | LiteRT prepare ms | lint / LiteRT |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in sorted(corpus.glob("*/*.tflite")):
        model = read(path)
        ops = sum(len(sg.operators) for sg in model.subgraphs)
        ours = median_time(lambda m=model: linter.lint(m), repeat)

        def prepare(p: Path = path) -> None:
            Interpreter(model_path=str(p)).allocate_tensors()

        ref = median_time(prepare, repeat)
        print(
            f"| {path.name} | {ops} | {ours * 1e3:.1f} | {ours * 1e3 * 300 / ops:.1f} | {ref * 1e3:.1f} | "
            f"{ours / ref:.2f} |"
        )


def process_times(corpus: Path) -> None:
    gpulint = str(Path(sys.executable).with_name("gpulint"))
    files = sorted(corpus.glob("*/*.tflite"))
    biggest = max(files, key=lambda p: sum(len(sg.operators) for sg in read(p).subgraphs))

    one = median_wall([gpulint, "check", "--exit-zero", str(biggest)], 10)
    base = median_wall([sys.executable, "-c", "pass"], 10)
    every = median_wall([gpulint, "check", "--exit-zero", "--jobs", "2", str(corpus)], 3)
    serial = median_wall([gpulint, "check", "--exit-zero", str(corpus)], 3)
    print("\n## Whole processes\n")
    print(f"- `gpulint check {biggest.name}`: {one * 1e3:.0f} ms (median of 10)")
    print(f"- bare `python -c pass`: {base * 1e3:.0f} ms")
    print(f"- `gpulint check --jobs 2` on all {len(files)} corpus files: {every:.2f} s (median of 3)")
    print(f"- the same with --jobs 1: {serial:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if not args.corpus.is_dir():
        sys.exit(f"corpus {args.corpus} is absent")
    lint_table(args.corpus, args.repeat)
    process_times(args.corpus)


if __name__ == "__main__":
    main()

"""Speed of `gpulint fix`, against the LiteRT interpreter running the same model, in one run.

    .venv/bin/python bench/bench_fix.py [--corpus ../shared/models] [--runs 5]

A whole `gpulint fix` process (read, passes to a fixed point, write the snapshots, run them
and the original on the LiteRT CPU interpreter in a child process, write the result) on the
corpus models with the most ops, next to a process that only loads and runs the original
model once on the interpreter: the floor that verification costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from timing import median_wall

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"
MODELS = (
    "mediapipe/pose_detection.tflite",
    "mediapipe/selfie_segmentation.tflite",
    "tfconv/deeplab_like_65_f32.tflite",
    "tfconv/mobilenet_v1_025_224_f16.tflite",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    gpulint = str(Path(sys.executable).with_name("gpulint"))
    print(f"| model | `gpulint fix` s | one LiteRT run s | ratio |  (median of {args.runs})")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for rel in MODELS:
            path = args.corpus / rel
            if not path.exists():
                continue
            out = Path(tmp, "out.tflite")
            fix = median_wall([gpulint, "fix", str(path), "-o", str(out), "--force"], args.runs)
            run_once = (
                "import sys; from gpulint import reference; from gpulint.model import read; "
                "reference.run(sys.argv[1], reference.random_inputs(read(sys.argv[1])))"
            )
            ref = median_wall([sys.executable, "-c", run_once, str(path)], args.runs)
            print(f"| {path.name} | {fix:.2f} | {ref:.2f} | {fix / ref:.2f} |")


if __name__ == "__main__":
    main()

"""Speed and size of the HTML report.

    .venv/bin/python bench/bench_report.py [--corpus ../shared/models] [--runs 5]

1. A whole `gpulint report` process on the corpus model with the most ops (pose_detection),
   with the fix preview (safe passes proven on the LiteRT interpreter) and without it.
2. Rendering alone, in-process, for a built chain of 700 convs and activations: the size a
   large model's page reaches.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from timing import median_time, median_wall

from gpulint.check import Settings, check_model
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model
from gpulint.report import model_section, render

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"


def chain(n: int) -> Model:
    """n ops: CONV_2D / RELU alternating, with a branch every 50 ops so the layout is not a line."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 16, 16, 8])
    w = g.const("w", np.zeros((8, 3, 3, 8), np.float32))
    skip = x
    for i in range(n // 2):
        y = g.op("CONV_2D", [x, w, -1], [1, 16, 16, 8], options=dict(padding="SAME", stride_w=1, stride_h=1))
        x = g.op("RELU", [y], [1, 16, 16, 8]) if i % 25 else g.op("ADD", [y, skip], [1, 16, 16, 8])
        skip = x if i % 25 == 0 else skip
    g.output(x)
    return mb.build()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    gpulint = str(Path(sys.executable).with_name("gpulint"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "r.html")
        pose = args.corpus / "mediapipe" / "pose_detection.tflite"
        if pose.exists():
            for flag in ("--fix", "--no-fix"):
                seconds = median_wall([gpulint, "report", str(pose), "-o", str(out), flag], args.runs)
                print(
                    f"- `gpulint report {pose.name} {flag}`: {seconds:.2f} s "
                    f"(median of {args.runs}), {out.stat().st_size:,} bytes"
                )
        model = chain(700)
        result = check_model(model, "chain700.tflite", Settings())
        t = median_time(lambda: render([model_section(model, result, Settings(), 0)]), 3)
        html = render([model_section(model, result, Settings(), 0)])
        print(f"- render only, built 700-op model: {t:.2f} s (median of 3), {len(html.encode()):,} bytes")


if __name__ == "__main__":
    main()

"""What the runtime-defect passes cost on LiteRT's GPU accelerator here: each model before and after
its pass, compiled once each (GPU with CPU fallback, as verify does), then timed in turns.

    .venv/bin/python bench/defect_passes.py [--runs 40] [--warmup 5] [--precision fp32|fp16]

Cases: broadcast-to on LiteRT#9191's [1, 4, 1, 64] -> [1, 4, 8, 64] expand with an ADD after it
(before: BROADCAST_TO on the CPU, the ADD on the GPU; after: both on the GPU); output-copy on an ADD
returned and summed (LiteRT#8599) and on a conv returned and scaled by a constant (before: both
computed wrong here, so this times the same work, not a right answer). Runs alternate before/after
so that the machine's load falls on both; the ratio is the median after / median before. Measured
numbers: docs/how-we-know/runtime-defects.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def cases() -> dict[str, tuple[object, object]]:
    from test_broadcast_to import FIRES, rewrite
    from test_output_fusion import copied, model

    out: dict[str, tuple[object, object]] = {}
    before = FIRES["rank4-gqa"]()
    out["broadcast-to [1,4,1,64]->[1,4,8,64] + ADD"] = (before, rewrite(before)[0])
    for prod, read in (("add", "sum"), ("conv", "mul-const")):
        before = model(prod, read)
        out[f"output-copy {prod.upper()} returned, read by {read}"] = (before, copied(before)[0])
    return out


def compile_gpu(path: Path, enforce_f32: bool) -> object:
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import GpuOptions, Options

    options = Options(
        HardwareAccelerator.GPU | HardwareAccelerator.CPU, gpu_options=GpuOptions(enforce_f32=enforce_f32)
    )
    return CompiledModel.from_file(str(path), options=options)


def timer(model: object) -> object:
    m: Any = model
    key = next(iter(m.get_signature_list()))
    details = m.get_input_tensor_details(key)
    ins, outs = m.create_input_buffers(0), m.create_output_buffers(0)
    rng = np.random.default_rng(0)
    for buf, name in zip(ins, m.get_signature_by_index(0)["inputs"], strict=True):
        buf.write(rng.standard_normal(list(details[name]["shape"])).astype(np.float32))

    out_details = m.get_output_tensor_details(key)
    reads = [
        (int(np.prod(out_details[n]["shape"])), np.dtype(out_details[n]["dtype"]))
        for n in m.get_signature_by_index(0)["outputs"]
    ]

    def once() -> float:
        """One run, its outputs read back (the run itself may only enqueue the GPU's work)."""
        t0 = time.perf_counter()
        m.run_by_index(0, ins, outs)
        for buf, (size, dtype) in zip(outs, reads, strict=True):
            buf.read(size, dtype)
        return (time.perf_counter() - t0) * 1e3

    return once


def cpu_name() -> str:
    """lscpu's model name, family and model (a name alone does not tell Zen generations apart)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or "?"
    info = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}
    return f"{info.get('Model name', '?')} (family {info.get('CPU family', '?')} model {info.get('Model', '?')})"


def main() -> None:
    from gpulint.model.write import write

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    args = ap.parse_args()
    print(f"CPU: {cpu_name()}; LiteRT's accelerator (WebGPU), {args.precision}; {args.runs} runs after {args.warmup}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (before, after) in cases().items():
            paths = [Path(tmp) / f"{i}.tflite" for i in range(2)]
            for m, p in zip((before, after), paths, strict=True):
                write(m, p)  # type: ignore[arg-type]
            runs = [timer(compile_gpu(p, args.precision == "fp32")) for p in paths]
            times: list[list[float]] = [[], []]
            for i in range(args.warmup + args.runs):
                for k in (0, 1) if i % 2 == 0 else (1, 0):
                    t = runs[k]()  # type: ignore[operator]
                    if i >= args.warmup:
                        times[k].append(t)
            a, b = (statistics.median(t) for t in times)
            print(f"  {name:<48} median ms before {a:6.2f}, after {b:6.2f}: after/before {b / a:.2f}")


if __name__ == "__main__":
    main()

"""An A/B of one executor setting in one process: per model, an executor lowered with a module's
constant at value A and one at value B, their outputs compared bit for bit, their kernel
variants counted, and their warm latency timed in alternating rounds (the ratio B/A is what to
read on a noisy machine; the two absolute times move together).

    python bench/ab_setting.py gpulint.executor.ops.conv.NARROW_WORK 0 2000000 MODEL... \
        [--rounds 30] [--precision fp32]

Values are Python literals. The constant is set only while an executor is lowered (where the
executor reads it), then put back.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import statistics
import time
from typing import Any

import numpy as np

from gpulint import reference
from gpulint.executor import Executor, select_device
from gpulint.model import read


def lowered(module: Any, name: str, value: Any, model: Any, device: Any, precision: str) -> Executor:
    kept = getattr(module, name)
    setattr(module, name, value)
    try:
        return Executor(model, device, precision)
    finally:
        setattr(module, name, kept)


def variants(ex: Executor) -> int:
    return len({(ln.kernel, ln.defines) for ln in ex.input_launches + ex.launches})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("setting", help="module.CONSTANT, e.g. gpulint.executor.ops.conv.NARROW_WORK")
    ap.add_argument("a", type=ast.literal_eval)
    ap.add_argument("b", type=ast.literal_eval)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rounds", type=int, default=30, help="alternating rounds of 10 runs each")
    ap.add_argument("--precision", default="fp32")
    args = ap.parse_args()
    module_name, name = args.setting.rsplit(".", 1)
    module = importlib.import_module(module_name)
    device = select_device()
    for path in args.models:
        model = read(path)
        a = lowered(module, name, args.a, model, device, args.precision)
        b = lowered(module, name, args.b, model, device, args.precision)
        inputs = reference.random_inputs(model, 0)
        same = all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a.run(inputs), b.run(inputs), strict=True))
        times: dict[int, list[float]] = {id(a): [], id(b): []}
        for r in range(args.rounds):
            for ex in (a, b) if r % 2 == 0 else (b, a):
                ex.run(inputs)
                clock = time.perf_counter()
                for _ in range(10):
                    ex.run(inputs)
                times[id(ex)].append((time.perf_counter() - clock) / 10)
        ta, tb = statistics.median(times[id(a)]), statistics.median(times[id(b)])
        print(
            f"{os.path.basename(path)}: variants {variants(a)} -> {variants(b)}, outputs "
            f"{'identical' if same else 'DIFFERENT'}, A {ta * 1e3:.2f} ms, B {tb * 1e3:.2f} ms, B/A {tb / ta:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

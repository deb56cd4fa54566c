"""The executor's error against the CPU interpreter at each precision (fp32, fp32-fp16 = F32_F16,
fp16 = F16), per output, next to the CPU's own noise: the numbers compare.py's EXECUTOR_VS_CPU
policy is calibrated on (its docstring), and README's F16 table.

    .venv/bin/python bench/f16_errors.py --out /tmp/f16 MODEL.tflite|FOLDER [...]   # measure
    .venv/bin/python bench/f16_errors.py --out /tmp/f16 --table                      # README's table
    .venv/bin/python bench/f16_errors.py --out /tmp/f16 --summary                    # calibration
    .venv/bin/python bench/f16_errors.py --ops /tmp/f16ops MODEL.tflite|FOLDER [...]  # per op, then
    .venv/bin/python bench/f16_errors.py --ops /tmp/f16ops --summary                 # their calibration
    .venv/bin/python bench/f16_errors.py --out /tmp/f16 --again fp32-fp16 MODEL.tflite|FOLDER [...]
                                   # after a kernel change: that precision measured again, the rest kept

Per model, distribution (uniform, normal) and precision: one `verify` of --runs seeds (the same
inputs at every precision), with the executor comparison's arrays captured on their way into
compare.judge. Per output it records the error (max abs, max rel where |ref| is above 1/1000 of
the output's range), the CPU noise (XNNPACK against the builtin kernels, element by element),
their ratio, and the noise multiple each rtol would need: per element (|got - ref| - rtol x
|ref|) / the noise verify holds that element to (per slice, compare.Noise.local), the largest.
Quantized outputs: the error in quantization steps. One JSON file per model in --out, written
when the model is done; a model already there is not measured again.

--ops: per op instead, for verify's half-precision diagnosis (gpulint/verify/half.py): on float
models (no hybrid or int8 op: their CPU side would need the twins), every tensor of one run on
the CPU interpreter and on the executor at fp32-fp16 and fp16, seeds 0..--runs-1 of both
distributions: each op output's range-relative error and the largest among what the op reads
(half.op_errors), and which ops half.first_half_loss would name on these healthy models.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import compare, reference
from gpulint.executor import select_device
from gpulint.model import read
from gpulint.verify import Request, verify

PRECISIONS = ("fp32", "fp32-fp16", "fp16")
DISTRIBUTIONS = ("uniform", "normal")
RTOLS = (0.0, 2.0**-10, 2.0**-9, 2.0**-8, 2.0**-7, 2.0**-6, 2.0**-5)


def _k_needed(err: np.ndarray, ref: np.ndarray, per: np.ndarray | float, rtol: float, floor: float) -> float:
    """The smallest noise multiple k with every element within max(k x noise, floor) + rtol x |ref|
    (inf: some element is beyond that with noise 0)."""
    slack = err - rtol * np.abs(ref)
    need = slack > floor
    if not need.any():
        return 0.0
    per_b = np.broadcast_to(per, err.shape)[need]
    if (per_b <= 0).any():
        return math.inf
    return float(np.max(slack[need] / per_b))


def output_numbers(refs: list[np.ndarray], gots: list[np.ndarray], noise: Any, step: float | None) -> dict[str, Any]:
    ref = np.stack(refs).astype(np.float64)
    got = np.stack([np.asarray(g) for g in gots]).astype(np.float64)
    out: dict[str, Any] = {"shape": list(refs[0].shape)}
    both = np.isfinite(ref) & np.isfinite(got)
    out["nonfinite_in_candidate"] = int(np.sum(np.isfinite(ref) & ~np.isfinite(got)))
    err = np.where(both, np.abs(ref - got), 0.0)
    out["max_abs"] = float(err.max(initial=0.0))
    big = np.abs(ref) > 1e-3 * float(np.abs(np.where(both, ref, 0.0)).max(initial=0.0))
    rel = err[both & big] / np.abs(ref[both & big])
    out["max_rel"] = float(rel.max(initial=0.0))
    out["p999_rel"] = float(np.quantile(rel, 0.999)) if rel.size else 0.0
    out["range"] = float(np.abs(np.where(both, ref, 0.0)).max(initial=0.0))
    if step is not None:
        out["step"] = step
        out["max_steps"] = out["max_abs"] / step
        out["noise_steps"] = (noise.total if isinstance(noise, compare.Noise) else float(noise or 0.0)) / step
        return out
    if not isinstance(noise, compare.Noise):
        out["noise"] = None
        return out
    per, axis, _ = noise.local()
    out["noise"] = noise.total
    out["noise_axis"] = axis
    out["ratio"] = out["max_abs"] / noise.total if noise.total > 0 else (0.0 if out["max_abs"] == 0 else math.inf)
    # per slice (keepdims) -> runs x shape
    per_e = per if isinstance(per, float) else np.broadcast_to(per, refs[0].shape)[None]
    floor = compare.FP16_EPS
    out["k_needed"] = {f"{r:.6g}": _k_needed(err, np.where(both, ref, 0.0), per_e, r, floor) for r in RTOLS}
    out["k_needed_fp32_floor"] = _k_needed(err, np.where(both, ref, 0.0), per_e, 1e-5, 1e-5)
    return out


def measure(path: Path, device: Any, runs: int, precisions: tuple[str, ...] = PRECISIONS) -> dict[str, Any]:
    model = read(path)
    captured: list[dict[str, Any]] = []
    real = compare.judge

    def capture(name: str, refs: Any, gots: Any, policy: Any, precision: str = "fp32", noise: Any = None,
                step: Any = None, tol: Any = None, sides: Any = ("reference", "candidate"),
                half_steps: float = 0.0) -> Any:  # fmt: skip
        if policy is compare.EXECUTOR_VS_CPU and sides[1] == "executor":
            captured.append({"name": name, "half_steps": half_steps, **output_numbers(refs, gots, noise, step)})
        return real(name, refs, gots, policy, precision, noise, step, tol, sides, half_steps)

    rows = []
    compare.judge = capture  # type: ignore[assignment]
    try:
        for dist in DISTRIBUTIONS:
            for precision in precisions:
                captured.clear()
                clock = time.perf_counter()
                result = verify(Request(path, runs=runs, distribution=dist, precision=precision), model, model, device)
                outs = []
                for o, c in zip(result.outputs, captured, strict=True):
                    ex = o.executor
                    c["status"] = "PASS" if ex.passed else "FAIL"
                    c["worst_over_tolerance"] = ex.metrics.get("worst", {}).get("error_over_tolerance")
                    c["reason"] = ex.reason
                    c["first_nonfinite"] = o.first_nonfinite
                    outs.append(dict(c))
                rows.append(
                    {
                        "distribution": dist,
                        "precision": precision,
                        "passed": result.passed,
                        "seconds": round(time.perf_counter() - clock, 2),
                        "outputs": outs,
                    }
                )
                print(f"  {path.stem} {dist} {precision}: {'PASS' if result.passed else 'FAIL'}", file=sys.stderr)
    finally:
        compare.judge = real  # type: ignore[assignment]
    return {"model": path.stem, "path": str(path), "runs": runs, "rows": rows}


def measure_ops(path: Path, device: Any, runs: int, precisions: tuple[str, ...] = PRECISIONS) -> dict[str, Any]:
    from gpulint.verify import half
    from gpulint.verify.intermediates import executor_tensors

    model = read(path)
    if reference.hybrid_ops(model) or reference.int8_ops(model):
        return {"model": path.stem, "path": str(path), "skipped": "hybrid or int8 ops", "rows": []}
    rows = []
    for dist in DISTRIBUTIONS:
        for seed in range(runs):
            feed = reference.random_inputs(model, seed, dist)
            cpu = reference.run_all_tensors(path, feed)
            for precision in (p for p in precisions if p != "fp32"):
                ops = half.op_errors(
                    model, cpu, executor_tensors(model, device, Request(path, precision=precision), feed)
                )
                named = half.first_half_loss(ops)
                rows.append(
                    {
                        "distribution": dist,
                        "seed": seed,
                        "precision": precision,
                        "ops": [
                            [o["op_index"], o["op"], o["error"], o["input_error"], o["overflowed"], o["cpu_max_abs"]]
                            for o in ops
                        ],
                        "named": named,
                    }
                )
    return {"model": path.stem, "path": str(path), "rows": rows}


def ops_summary(data: list[dict[str, Any]]) -> None:
    """Per precision: the largest op error, and for each floor the largest jump (error over what
    the op reads, at least one half rounding) among ops whose error is above it; what
    first_half_loss names on these healthy models."""
    from gpulint.verify import half

    for prec in PRECISIONS[1:]:
        print(f"== {prec}")
        errors: list[tuple[float, str]] = []
        jumps: dict[float, list[tuple[float, str]]] = {}
        named = []
        for m in data:
            for r in m["rows"]:
                if r["precision"] != prec:
                    continue
                where = f"{m['model']} ({r['distribution']} {r['seed']})"
                if r["named"]:
                    named.append((where, r["named"]))
                for index, op, e, before, _, biggest in r["ops"]:
                    if biggest < half.HALF_MIN_NORMAL:  # subnormal in half throughout: underflow, not a jump
                        continue
                    errors.append((e, f"{where} op {index} {op}"))
                    for floor in (2.0**-9, 2.0**-8, 2.0**-7, 2.0**-6, 2.0**-5, 2.0**-4):
                        if e >= floor:
                            jumps.setdefault(floor, []).append(
                                (e / max(before, half.HALF_EPS), f"{where} op {index} {op}")
                            )
        for e, w in sorted(errors, reverse=True)[:6]:
            print(f"  error {e:.3g} of range  {w}")
        for floor, js in sorted(jumps.items()):
            top = sorted(js, reverse=True)[:3]
            print(f"  error >= {floor:.3g}: {len(js)} ops, largest jumps " + ", ".join(f"{j:.3g} {w}" for j, w in top))
        print(f"  named on healthy models: {len(named)}")
        for w, n in named[:10]:
            print(f"    {w}: {json.dumps(n)[:300]}")


def models(items: list[str]) -> list[Path]:
    found: list[Path] = []
    for item in items:
        p = Path(item)
        found += sorted(p.glob("*.tflite")) if p.is_dir() else [p]
    return found


def _row_order(row: dict[str, Any]) -> tuple[int, int, int]:
    return DISTRIBUTIONS.index(row["distribution"]), row.get("seed", 0), PRECISIONS.index(row["precision"])


def load(out: Path) -> list[dict[str, Any]]:
    data = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    for m in data:
        if m.get("error"):
            print(f"{m['model']}: {m['error']}", file=sys.stderr)
    return [m for m in data if m["rows"]]


def _fmt(x: float | None) -> str:
    return "-" if x is None else ("inf" if math.isinf(x) else f"{x:.2g}")


def table(data: list[dict[str, Any]]) -> None:
    """Per model and output, uniform and normal inputs together, the worst at each precision: max
    abs error and max rel (where |ref| is above 1/1000 of the output's range); in half precision
    also the noise multiple the output needs with rtol 2^-9 and floor 2^-10 (0: within those
    alone), against compare.py's 2^15 (both). Quantized outputs: steps."""
    head = ["model", "output", "F32 max abs", "F32_F16 max abs / rel (x noise)", "F16 max abs / rel (x noise)"]
    print("| " + " | ".join([*head, "F16 / F32_F16"]) + " |")
    print("|---|---|---:|---:|---:|---:|")
    rtol = f"{2.0**-9:.6g}"
    for m in data:
        names = [o["name"] for o in m["rows"][0]["outputs"]]
        for i, name in enumerate(names):
            cells = []
            worst: dict[str, float] = {}
            for prec in PRECISIONS:
                outs = [r["outputs"][i] for r in m["rows"] if r["precision"] == prec]
                if "step" in outs[0]:
                    worst[prec] = max(o["max_steps"] for o in outs)
                    cells.append(f"{worst[prec]:.3g} steps")
                    continue
                a, r = max(o["max_abs"] for o in outs), max(o["max_rel"] for o in outs)
                worst[prec] = a
                nan = sum(o["nonfinite_in_candidate"] for o in outs)
                cell = f"{a:.2g}" if prec == "fp32" else f"{a:.2g} / {r:.2g}"
                if prec != "fp32" and all("k_needed" in o for o in outs):
                    cell += f" ({max(o['k_needed'][rtol] for o in outs):.2g})"
                cells.append(cell + (f", {nan} NaN/Inf" if nan else ""))
            ratio = f"{worst['fp16'] / worst['fp32-fp16']:.2g}" if worst["fp32-fp16"] else "-"
            short = name if len(name) <= 32 else name[:30] + ".."
            print(f"| {m['model']} | {short} | " + " | ".join(cells) + f" | {ratio} |")


def summary(data: list[dict[str, Any]]) -> None:
    """Per precision: the worst ratio error / noise and the multiple each rtol needs, with the
    output that needs it; quantized outputs' worst steps."""
    for prec in PRECISIONS:
        print(f"== {prec}")
        ratios, steps = [], []
        needs: dict[str, list[tuple[float, str]]] = {}
        for m in data:
            for r in m["rows"]:
                if r["precision"] != prec:
                    continue
                for o in r["outputs"]:
                    where = f"{m['model']}:{o['name']} ({r['distribution']})"
                    if "step" in o:
                        steps.append((o["max_steps"], o["noise_steps"], where))
                        continue
                    if o.get("noise") is None:
                        continue
                    ratios.append((o["ratio"], where))
                    for k, v in o["k_needed"].items():
                        needs.setdefault(k, []).append((v, where))
        for v, w in sorted(ratios, reverse=True)[:8]:
            print(f"  ratio max abs / noise {_fmt(v)}  {w}")
        for k, vs in needs.items():
            top = sorted(vs, reverse=True)[:4]
            print(f"  rtol {float(k):.3g}: k needed " + ", ".join(f"{_fmt(v)} {w}" for v, w in top))
        for s, n, w in sorted(steps, reverse=True)[:8]:
            print(f"  steps {s:.3g} (CPU noise {n:.3g})  {w}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--out", type=Path, help="folder of one JSON file per model")
    ap.add_argument("--ops", type=Path, help="per op instead: folder of one JSON file per model")
    ap.add_argument("--runs", type=int, default=3, help="seeds per verify")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument(
        "--again", action="append", choices=PRECISIONS, help="measure this precision again in the files there"
    )
    args = ap.parse_args()
    if (args.out is None) == (args.ops is None):
        ap.error("give --out or --ops")
    if args.ops is not None and args.summary:
        return ops_summary(load(args.ops))
    if args.table or args.summary:
        data = load(args.out)
        if args.table:
            table(data)
        if args.summary:
            summary(data)
        return
    folder = args.ops or args.out
    folder.mkdir(parents=True, exist_ok=True)
    device = select_device()
    for path in models(args.paths):
        dst = folder / f"{path.parent.name}__{path.stem}.json"
        old = json.loads(dst.read_text()) if dst.exists() else None
        if old is not None and (not args.again or "error" in old):
            continue
        precisions = tuple(args.again) if old is not None else PRECISIONS
        clock = time.perf_counter()
        try:
            data = (measure_ops if args.ops else measure)(path, device, args.runs, precisions)
        except Exception as e:  # one model's error is a row, not the end of the run
            data = {"model": path.stem, "path": str(path), "error": f"{type(e).__name__}: {e}", "rows": []}
        if old is not None and "error" not in data:  # the other precisions' rows kept, in their order
            kept = [r for r in old["rows"] if r["precision"] not in precisions]
            data["rows"] = sorted(kept + data["rows"], key=_row_order)
        data["seconds"] = round(time.perf_counter() - clock, 1)
        dst.write_text(json.dumps(data, indent=1, default=str))
        print(f"{path}: {data['seconds']} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

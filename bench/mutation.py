"""Mutation testing of `gpulint verify`: does it FAIL broken models and PASS good ones?

    .venv/bin/python bench/mutation.py [--corpus ../shared/models] [--seeds 10] [--models a,b]

1. False FAILs: every corpus model, unmutated, verified over --seeds seeds x {uniform, normal}
   x {fp32, fp32-fp16, fp16} (one verify per distribution and precision, --runs = seeds).
2. Mutations: per model, one weight tensor (the middle conv / fully connected op's) perturbed by
   a relative 1e-4, 1e-3, 1e-2, 1e-1 (each element times 1 +- r), one output channel's sign
   flipped, the op's bias zeroed, two output channels swapped, one NaN put in the weights.
   Each mutant is verified as `--candidate` against the original (fp32, one run), and its
   effect on the CPU measured on the same inputs: a mutant whose CPU-vs-CPU effect exceeds the
   rewrite tolerance must FAIL.

Prints a table per mutation kind and the tolerance each unmutated output got; --json writes all.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpulint.executor import select_device
from gpulint.model import Model, read, write
from gpulint.verify import Request, verify

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "models"
PRECISIONS = ("fp32", "fp32-fp16", "fp16")  # the executor's, as the delegate names them
WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}  # output-channel axis
RELATIVE = (1e-4, 1e-3, 1e-2, 1e-1)
KINDS = [f"weights x(1+-{r:g})" for r in RELATIVE] + ["sign flip", "zero bias", "swap channels", "one NaN"]


def _weight(model: Model, nonzero_bias: bool = False) -> tuple[int, int, int | None] | None:
    """(op index, weight constant tensor, bias constant tensor) of the middle conv-like op whose
    weights are a dense constant (directly or behind DEQUANTIZE), or None. `nonzero_bias`: of
    those whose bias is a constant that is not all zero (many depthwise biases are)."""
    sg = model.subgraphs[0]
    producer = {t: i for i, op in enumerate(sg.operators) for t in op.outputs}
    found = []
    for i, op in enumerate(sg.operators):
        if model.op_name(op) not in WEIGHTED or len(op.inputs) < 2:
            continue
        w = op.inputs[1]  # TRANSPOSE_CONV too: (output shape, weights, input, bias)
        if w in producer:
            src = sg.operators[producer[w]]
            if model.op_name(src) != "DEQUANTIZE":
                continue  # DENSIFY (sparse weights) or computed
            w = src.inputs[0]
        value = model.tensor_data(sg.tensors[w])
        if value is None or np.asarray(value).ndim < 2:
            continue
        at = 3 if model.op_name(op) == "TRANSPOSE_CONV" else 2
        b = op.inputs[at] if len(op.inputs) > at and op.inputs[at] >= 0 else None
        bias = None if b is None or b in producer else model.tensor_data(sg.tensors[b])
        if bias is None:
            b = None
        if nonzero_bias and (bias is None or not np.asarray(bias).any()):
            continue
        found.append((i, w, b))
    return found[len(found) // 2] if found else None


def _set(model: Model, t: int, value: np.ndarray) -> None:
    tensor = model.subgraphs[0].tensors[t]
    model.buffers[tensor.buffer].data = np.ascontiguousarray(value).tobytes()


def mutate(model: Model, kind: str, seed: int = 0) -> str | None:
    """Apply one mutation in place; returns what was changed, or None when it does not apply."""
    picked = _weight(model, nonzero_bias=kind == "zero bias")
    if picked is None:
        return None
    op_index, w, b = picked
    sg = model.subgraphs[0]
    op = sg.operators[op_index]
    axis = WEIGHTED[model.op_name(op)]
    value = np.array(model.tensor_data(sg.tensors[w]))
    name = f"op {op_index} {model.op_name(op)} weights {sg.tensors[w].name}"
    rng = np.random.default_rng(seed)
    if kind.startswith("weights"):
        r = float(kind.split("+-")[1].rstrip(")"))
        sign = np.where(rng.random(value.shape) < 0.5, -1.0, 1.0)
        moved = value.astype(np.float64) * (1 + r * sign)
        if value.dtype.kind in "iu":
            info = np.iinfo(value.dtype)
            moved = np.clip(np.round(moved), info.min, info.max)
        _set(model, w, moved.astype(value.dtype))
        return name
    if kind == "sign flip":
        idx = [slice(None)] * value.ndim
        idx[axis] = 0
        if value.dtype.kind in "iu":
            info = np.iinfo(value.dtype)
            value[tuple(idx)] = np.clip(-value[tuple(idx)].astype(np.int64), info.min, info.max)
        else:
            value[tuple(idx)] = -value[tuple(idx)]
        _set(model, w, value)
        return f"{name}, output channel 0"
    if kind == "zero bias":
        if b is None:
            return None
        bias = np.array(model.tensor_data(sg.tensors[b]))
        if not bias.any():
            return None
        _set(model, b, np.zeros_like(bias))
        return f"op {op_index} {model.op_name(op)} bias {sg.tensors[b].name}"
    if kind == "swap channels":
        if value.shape[axis] < 2:
            return None
        value = np.swapaxes(np.swapaxes(value, 0, axis)[[1, 0, *range(2, value.shape[axis])]], 0, axis)
        _set(model, w, value)
        return f"{name}, output channels 0 and 1"
    if kind == "one NaN":
        if value.dtype.kind != "f":
            return None
        value.flat[value.size // 2] = np.nan
        _set(model, w, value)
        return f"{name}, element {value.size // 2}"
    raise ValueError(kind)


def run_mutants(path: Path, device: Any, kinds: list[str] = KINDS) -> list[dict[str, Any]]:
    """Every mutation of one model, verified as a candidate against it (fp32, one run)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpulint-mut-") as tmp:
        original = read(path)
        for kind in kinds:
            bad = read(path)
            what = mutate(bad, kind)
            if what is None:
                rows.append({"model": path.stem, "kind": kind, "applies": False})
                continue
            cand = Path(tmp, "mutant.tflite")
            write(bad, cand, allow_loss=True)
            result = verify(Request(path, cand), original, read(cand), device)
            over = [o.rewrite.metrics.get("worst", {}).get("error_over_tolerance") for o in result.outputs]
            rewrite_fail = any(not o.rewrite.passed for o in result.outputs)
            nonfinite = any(o.rewrite.metrics.get("nonfinite_mismatch") for o in result.outputs)
            rows.append(
                {
                    "model": path.stem,
                    "kind": kind,
                    "applies": True,
                    "mutation": what,
                    # the CPU-vs-CPU effect, in multiples of the rewrite tolerance (NaN: beyond)
                    "effect_over_tolerance": None if nonfinite else max((x or 0.0) for x in over),
                    "should_fail": rewrite_fail or nonfinite,
                    "failed": not result.passed,
                    "executor_failed": any(not o.executor.passed for o in result.outputs),
                    "first_nonfinite": [o.first_nonfinite for o in result.outputs if o.first_nonfinite],
                }
            )
    return rows


def run_clean(path: Path, device: Any, seeds: int, precision: str, distribution: str) -> dict[str, Any]:
    model = read(path)
    req = Request(path, runs=seeds, distribution=distribution, precision=precision)
    result = verify(req, model, model, device)
    return {
        "model": path.stem,
        "precision": precision,
        "distribution": distribution,
        "passed": result.passed,
        "seconds": result.seconds,
        "outputs": [
            {
                "name": o.name,
                "shape": o.shape,
                "passed": o.passed,
                "atol": o.executor.tolerance.atol,
                "atol_min": None
                if o.executor.tolerance.atol_map is None
                else float(o.executor.tolerance.atol_map.min()),
                "axis": o.executor.tolerance.axis,
                "rtol": o.executor.tolerance.rtol,
                "why": o.executor.tolerance.source,
                "hybrid_gap": None if o.hybrid_gap is None else o.hybrid_gap["max_abs_error"],
                "worst": o.executor.metrics.get("worst", {}).get("error_over_tolerance"),
                "reason": o.reason,
            }
            for o in result.outputs
        ],
        "probe": result.noise_probe,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--models", default="", help="comma-separated model stems (default: all)")
    ap.add_argument("--skip-clean", action="store_true")
    ap.add_argument("--skip-mutants", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    paths = sorted(args.corpus.glob("*/*.tflite"))
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        sys.exit(f"no models under {args.corpus}")
    device = select_device()
    report: dict[str, Any] = {"clean": [], "mutants": []}
    progress: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if not args.skip_clean:
        for p in paths:
            for precision in PRECISIONS:
                for dist in ("uniform", "normal"):
                    row = run_clean(p, device, args.seeds, precision, dist)
                    report["clean"].append(row)
                    worst = max((o["worst"] or 0.0) for o in row["outputs"])
                    progress(f"{p.stem} {precision} {dist}: {'PASS' if row['passed'] else 'FAIL'} worst {worst:.3g}")
        clean = report["clean"]
        fails = [r for r in clean if not r["passed"]]
        print(f"false FAILs: {len(fails)} of {len(clean)} verifies ({args.seeds} seeds each)")
        for r in fails:
            print(f"  {r['model']} {r['precision']} {r['distribution']}: {[o['reason'] for o in r['outputs']]}")
        print("| model | output | fp32 atol | fp32-fp16 atol | fp16 atol | why (fp16, uniform) | worst |")
        print("|---|---|---|---|---|---|---:|")
        for p in paths:
            rows = [r for r in clean if r["model"] == p.stem]
            for i, o in enumerate(rows[0]["outputs"] if rows else []):
                atol = {}
                for prec in PRECISIONS:
                    u = next(r for r in rows if r["precision"] == prec and r["distribution"] == "uniform")["outputs"][i]
                    low = f"{u['atol_min']:.2g}..{u['atol']:.2g}" if u["atol_min"] is not None else f"{u['atol']:.2g}"
                    atol[prec] = low
                why = next(r for r in rows if r["precision"] == "fp16" and r["distribution"] == "uniform")
                why = why["outputs"][i]["why"]
                worst = max((r["outputs"][i]["worst"] or 0.0) for r in rows)
                print(
                    f"| {p.stem} | {o['name']} {o['shape']} | {atol['fp32']} | {atol['fp32-fp16']} | {atol['fp16']} "
                    f"| {why} | {worst:.2f} |"
                )
    if not args.skip_mutants:
        for p in paths:
            rows = run_mutants(p, device)
            report["mutants"] += rows
            progress(f"{p.stem}: " + ", ".join(f"{r['kind']} {'FAIL' if r.get('failed') else '-'}" for r in rows))
        print("| mutation | models it applies to | effect beyond tolerance | verify FAILs those | detection |")
        print("|---|---:|---:|---:|---:|")
        for kind in KINDS:
            rows = [r for r in report["mutants"] if r["kind"] == kind and r["applies"]]
            should = [r for r in rows if r["should_fail"]]
            caught = [r for r in should if r["failed"]]
            rate = f"{len(caught) / len(should):.0%}" if should else "-"
            print(f"| {kind} | {len(rows)} | {len(should)} | {len(caught)} | {rate} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

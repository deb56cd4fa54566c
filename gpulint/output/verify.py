"""`gpulint verify`'s result as terminal text: the verdict, what ran where, and per output the
numbers that decided it (tolerance, why that tolerance, the statistic), then the diagnosis of a
FAIL (first NaN/Inf, attribution, bisect)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulint.compare import CANNOT_FAIL, precision_text
from gpulint.text import clean

if TYPE_CHECKING:  # types only: rendering needs neither the executor nor the interpreter loaded
    from gpulint.compare import Verdict
    from gpulint.verify import VerifyResult


def render_verify(result: VerifyResult) -> str:
    d = result.device
    side = ENGINE_WORDS.get(result.engine, result.engine)
    lines = [
        f"{clean(result.candidate, 300)}: {result.status} against the LiteRT CPU interpreter "
        f"on {clean(result.model, 300)} ({result.runs} run(s), {precision_text(result.precision)}, {d['name']})",
        f"  engine: {result.engine} ({side})",
        f"  device: {clean(d['name'], 200)} ({clean(d['driver'], 200)})" + (f": {d['why']}" if d["why"] else ""),
    ]
    for p in result.partitions:
        lines.append(f"  partition {p['kind']:3} on {p['ran_on']}: {clean(p['summary'], 300)}")
    for w in result.warnings:
        lines.append(f"  warning: {clean(w, 500)}")
    if result.status == "CPU-ONLY":
        lines.append(
            f"  no op ran on the GPU side ({side}): every op ran on LiteRT's CPU, so the comparison "
            "set the CPU against itself and shows nothing about the GPU (exit 3)"
        )
    if result.status == "INCONCLUSIVE":
        lines.append(
            "  INCONCLUSIVE: no output failed, but the tolerance of "
            + ", ".join(clean(o.name, 200) or "?" for o in result.outputs if o.status == "INCONCLUSIVE")
            + " covers its whole range, so that comparison could not have failed (exit 4)"
        )
    if result.noise_probe:
        lines.append(f"  CPU noise: {result.noise_probe}")
    for r in result.integer_inputs:
        lines.append(f"  input {r['input']}: random integers in [{r['low']}, {r['high']}]: {r['note']}")
    if result.cpu_reference:
        lines.append(f"  CPU reference: {result.cpu_reference}")
    for o in result.outputs:
        lines.append(f"  {o.status} {clean(o.name, 200)} {o.dtype}{o.shape}")
        for kind, v in o.comparisons().items():
            at = f" at {result.precision}" if kind == "executor" else ""  # the error is that precision's
            label = result.engine if kind == "executor" and result.engine != "opencl" else kind
            lines.append(f"    {label:8} {v.status}{at}: {verdict_text(v)}")
            if v.reason:
                lines.append(f"             {clean(v.reason, 500)}")
            if v.decidable:
                lines.append(f"             decidable with {v.decidable}")
        if o.hybrid_gap is not None and o.hybrid_gap["max_abs_error"] is not None:
            g = o.hybrid_gap
            gap = f"max abs {g['max_abs_error']:.3g}, max rel {g['max_rel_error']:.3g}"
            lines.append(f"    hybrid kernels vs float (information): {gap}")
        f = o.first_nonfinite
        if f is not None:
            where = f"op {f['op_index']} {f['op']} -> {clean(f['tensor'], 200)}" if f.get("op") else f["note"]
            if f.get("constant"):
                where += f", reading constant {clean(f['constant'], 200)}, which holds NaN/Inf"
            if f.get("found_on"):
                where += f" (seen on the {f['found_on']})"
            lines.append(f"    first NaN/Inf ({f['side']}): {where}")
    if result.attribution:
        lines.append(f"  attribution: {result.attribution}")
    if result.half_loss is not None:
        lines += half_loss_lines(result.half_loss)
    if result.bisect is not None:
        b = result.bisect
        if b.get("op"):
            what = "first op to make a NaN/Inf" if b.get("first_nonfinite") else "first divergence"
            counted = "prefixes run" if b.get("method") else "tensors compared"
            lines.append(
                f"  {what} ({b['comparison']}): op {b['op_index']} {b['op']} -> {clean(b['tensor'], 200)} "
                f"({clean(b['reason'], 300)}; {b['compared']} {counted})"
            )
            if b.get("drift_before"):
                d = b["drift_before"]
                lines.append(f"    before it, op {d['op_index']} {d['op']} drifts (finite): {clean(d['reason'], 300)}")
        else:
            counted = "prefixes run" if b.get("method") else "tensors compared"
            lines.append(f"  bisect ({b['comparison']}): {b['note']} ({b['compared']} {counted})")
    if result.repro is not None:
        r = result.repro
        if r.get("error"):
            lines.append(f"  repro: {clean(r['error'], 300)}")
        else:
            lines.append(
                f"  repro: {clean(r['model'], 300)} ({r['ops']} ops: {r['what']}) and {clean(r['reference'], 300)}"
            )
            lines.append(f"    again: {clean(r['rerun'], 600)}")
    secs = ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items())
    lines.append(f"  time: {secs}")
    return "\n".join(lines)


ENGINE_WORDS = {
    "opencl": "gpulint's OpenCL executor, computing as the classic delegate does",
    "litert-gpu": "LiteRT's GPU accelerator, ML Drift on WebGPU: the real runtime",
    "gl": "the classic TFLite GPU delegate's OpenGL backend: the real runtime the opencl engine models",
}


def render_side_by_side(results: list[VerifyResult]) -> str:
    """Several engines' verifications of one model: each in full, then per output their numbers
    in one table (`verify --engine all`)."""
    lines = [render_verify(r) for r in results]
    rows = [("output", "engine", "status", "max abs", "worst/tol", "cosine", "SNR dB")]
    for i, o in enumerate(results[0].outputs):
        for r in results:
            v = r.outputs[i].executor
            m = v.metrics
            worst = m.get("worst", {}).get("error_over_tolerance")
            rows.append(
                (
                    clean(o.name, 60) or "?",
                    r.engine,
                    v.status,
                    _num(m.get("max_abs_error")),
                    _num(worst),
                    _num(m.get("cosine_similarity"), ".6f"),
                    _num(m.get("snr_db"), ".1f"),
                )
            )
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines.append("side by side, each engine against the LiteRT CPU interpreter on the same inputs:")
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def _num(x: Any, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def verdict_text(v: Verdict) -> str:
    """One comparison's numbers: the tolerance, why it is that, and the statistic that decided."""
    m, t = v.metrics, v.tolerance
    if not m:
        return ""
    rule = t.rule()
    if m["max_abs_error"] is None:
        return f"no value is a number on both sides ({nonfinite_text(m)}); tolerance {rule} ({t.source})"
    over = m.get("error_over_noise")
    noise = f", max abs {over:.3g} x CPU noise" if over is not None else ""
    text = (
        f"max abs {m['max_abs_error']:.3g}, mean abs {m['mean_abs_error']:.3g}, "
        f"max rel {m['max_rel_error']:.3g}, cosine {m['cosine_similarity']:.6f}{noise}"
    )
    if m.get("snr_db") is not None:
        text += f", SNR {m['snr_db']:.1f} dB"
    if m.get("psnr_db") is not None:
        text += f", PSNR {m['psnr_db']:.1f} dB"
    if m.get("cannot_fail"):
        text += f", {CANNOT_FAIL}"
    if "worst" in m and t.statistic == "max":
        text += f", worst {m['worst']['error_over_tolerance']:.3g} x its tolerance"
    if m["nonfinite_mismatch"] or m.get("nonfinite_on_both"):
        text += f" (over the {m['compared']} values that are numbers on both sides; {nonfinite_text(m)})"
    if "top1_agreement" in m:
        text += f", top-1 {m['top1_agreement']:.0%}, top-5 {m['top5_agreement']:.0%}"
    return f"{text}; tolerance {rule} ({t.source})"


def nonfinite_text(m: dict[str, Any]) -> str:
    """How many values are NaN/Inf, and where: "NaN/Inf in 256 of 256 values: 256 on both sides"."""
    sides = [
        (m.get("nonfinite_on_both", 0), "on both sides"),
        (m["nonfinite_in_reference"], "in the reference only"),
        (m["nonfinite_in_candidate"], "in the candidate only"),
    ]
    total = sum(n for n, _ in sides)
    return f"NaN/Inf in {total} of {m.get('values', '?')} values: " + ", ".join(f"{n} {w}" for n, w in sides if n)


def half_loss_lines(h: dict[str, Any]) -> list[str]:
    """Where the half path went wrong: the first op that overflowed, the first that lost its precision."""
    head = f"  in half precision ({h['precision']}, run {h.get('run', 0)})"
    if not h.get("op"):
        return [f"{head}: {clean(h.get('note', ''), 300)}"]
    lines = []
    kinds = (("overflow", "overflowed"), ("precision_loss", "lost its precision"), ("underflow", "underflowed"))
    for key, what in kinds:
        f = h.get(key)
        if f is not None:
            where = f"op {f['op_index']} {f['op']} -> {clean(f['tensor'], 200)}"
            lines.append(f"{head}, first op that {what}: {where}: {clean(f['reason'], 300)}")
    return lines

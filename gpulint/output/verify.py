"""`gpulint verify`'s result as terminal text: the verdict, what ran where, and per output the
numbers that decided it (tolerance, why that tolerance, the statistic), then the diagnosis of a
FAIL (first NaN/Inf, attribution, bisect)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulint.compare import precision_text
from gpulint.text import clean

if TYPE_CHECKING:  # types only: rendering needs neither the executor nor the interpreter loaded
    from gpulint.compare import Verdict
    from gpulint.verify import VerifyResult


def render_verify(result: VerifyResult) -> str:
    d = result.device
    lines = [
        f"{clean(result.candidate, 300)}: {result.status} against the LiteRT CPU interpreter "
        f"on {clean(result.model, 300)} ({result.runs} run(s), {precision_text(result.precision)}, {d['name']})",
        f"  device: {clean(d['name'], 200)} ({clean(d['driver'], 200)})" + (f": {d['why']}" if d["why"] else ""),
    ]
    for p in result.partitions:
        lines.append(f"  partition {p['kind']:3} on {p['ran_on']}: {clean(p['summary'], 300)}")
    if result.status == "CPU-ONLY":
        lines.append(
            "  no op ran on the executor: every op ran on the LiteRT CPU interpreter, so the executor comparison "
            "set the CPU against itself and shows nothing about the GPU (exit 3)"
        )
    if result.noise_probe:
        lines.append(f"  CPU noise: {result.noise_probe}")
    for r in result.integer_inputs:
        lines.append(f"  input {r['input']}: random integers in [{r['low']}, {r['high']}]: {r['note']}")
    if result.cpu_reference:
        lines.append(f"  CPU reference: {result.cpu_reference}")
    for o in result.outputs:
        lines.append(f"  {'PASS' if o.passed else 'FAIL'} {clean(o.name, 200)} {o.dtype}{o.shape}")
        for kind, v in o.comparisons().items():
            at = f" at {result.precision}" if kind == "executor" else ""  # the error is that precision's
            lines.append(f"    {kind:8} {'PASS' if v.passed else 'FAIL'}{at}: {verdict_text(v)}")
            if v.reason:
                lines.append(f"             {clean(v.reason, 500)}")
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
            lines.append(
                f"  {what} ({b['comparison']}): op {b['op_index']} {b['op']} -> {clean(b['tensor'], 200)} "
                f"({clean(b['reason'], 300)}; {b['compared']} tensors compared)"
            )
            if b.get("drift_before"):
                d = b["drift_before"]
                lines.append(f"    before it, op {d['op_index']} {d['op']} drifts (finite): {clean(d['reason'], 300)}")
        else:
            lines.append(f"  bisect ({b['comparison']}): {b['note']} ({b['compared']} tensors compared)")
    secs = ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items())
    lines.append(f"  time: {secs}")
    return "\n".join(lines)


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

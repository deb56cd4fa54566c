"""`gpulint bench`'s result as terminal text: both latencies and their ratio, the partitions
when some run on the CPU, warnings, start times, and the slowest kernels per op."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulint.bench import busy
from gpulint.compare import precision_text
from gpulint.text import clean

if TYPE_CHECKING:
    from gpulint.bench import BenchResult, GenerationBench

SLOWEST = 15


def render_bench(path: str, result: BenchResult) -> str:
    lines = [
        f"{clean(path, 300)} on {result.device} ({precision_text(result.precision)}), median of {result.runs} runs",
        f"  LiteRT CPU interpreter ({result.threads} threads): {result.cpu_ms:.2f} ms",
        f"  OpenCL executor: {result.executor_ms:.2f} ms  (ratio {result.ratio:.2f})",
    ]
    for p in result.partitions if any(p["kind"] == "cpu" for p in result.partitions) else []:
        lines.append(f"    partition {p['kind']:3} {p['ms']:8.3f} ms on {p['ran_on']}: {clean(p['summary'], 300)}")
    for warning in result.warnings:
        lines.append(f"  warning: {warning}")
    if result.load:
        load = result.load
        lines.append(
            f"  measured under: load average {load['before']:.1f} before, {load['after']:.1f} after, "
            f"on {load['cores']:.0f} cores"
            + (": a busy machine, the times are under that sharing; compare them on a quiet one" if busy(load) else "")
        )
    if result.cold_start_s is not None and result.cached_start_s is not None:
        lines.append(
            f"  start (read, build, first run): cold {result.cold_start_s:.2f} s, cached {result.cached_start_s:.2f} s"
        )
    lines.append(f"  kernel time per op (slowest {SLOWEST}):")
    for row in result.ops[:SLOWEST]:
        number = f"{row['op_index']:5d}" if row["op_index"] >= 0 else "    -"
        lines.append(f"    {number} {row['op']:28} {row['ms']:9.3f} ms {row['share']:6.1%}")
    return "\n".join(lines)


def render_generation(path: str, result: GenerationBench) -> str:
    """The decoder's rates first, then each step's bench."""
    rates = result.rates()
    prefill, decode = rates["prefill_tokens_per_s"], rates["decode_ms_per_token"]
    head = [
        f"{clean(path, 300)}: generation, {result.prefill_tokens}-token prefill then one-token decode steps",
        f"  prefill: LiteRT CPU interpreter {prefill['cpu']:.1f} tokens/s, "
        f"OpenCL executor {prefill['executor']:.1f} tokens/s",
        f"  decode: LiteRT CPU interpreter {decode['cpu']:.2f} ms/token, "
        f"OpenCL executor {decode['executor']:.2f} ms/token",
    ]
    return "\n".join(
        [
            *head,
            "",
            render_bench(result.prefill.model, result.prefill),
            "",
            render_bench(result.decode.model, result.decode),
        ]
    )

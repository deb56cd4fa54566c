"""`gpulint fix`'s report as terminal text: what each pass changed or left alone, what an unsafe
pass would change, and with --diff the ops, tensors, constant bytes and check findings before
and after. Pass messages quote tensor names from the model: printable and bounded before they
print."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from gpulint.text import clean

if TYPE_CHECKING:
    from gpulint.check import FileResult
    from gpulint.fix import FixReport
    from gpulint.model import Model


def render_fix(path: str, report: FixReport, unsafe: list[str], diff: str | None = None) -> str:
    """`unsafe`: the unsafe and opt-in passes that would change the fixed model (--unsafe-fixes)."""
    lines = [f"{path}: {a.name}: {clean(change, 400)}" for a in report.applied for change in a.changes]
    lines += [f"{path}: {clean(line, 400)}" for line in report.rejected]
    lines += [f"{path}: left alone by {clean(line, 400)}" for line in report.skipped]
    risky, opt_in = _would_apply(unsafe)
    if risky:
        lines.append(f"{path}: {len(risky)} unsafe pass(es) would apply: {', '.join(risky)} (--unsafe-fixes)")
    if opt_in:
        names = ", ".join(opt_in)
        lines.append(f"{path}: {len(opt_in)} opt-in pass(es) for half precision would apply: {names} (--passes NAME)")
    if diff is not None:
        lines.append(diff)
    if report.verified and report.applied:
        errs = ", ".join(f"{e:.3g}" for e in report.max_error)
        lines.append(f"{path}: verified on the LiteRT CPU interpreter: max abs error per output {errs}")
    if not report.applied:
        lines.append(f"{path}: nothing to change")
    lines += [f"{path}: keep in float: {clean(line, 800)}" for line in report.keep_float]
    return "\n".join(lines)


def _would_apply(unsafe: list[str]) -> tuple[list[str], list[str]]:
    """The passes that would change the fixed model: (unsafe ones, opt-in safe ones)."""
    from gpulint.passes import registry

    passes = registry()
    risky = [n for n in unsafe if n not in passes or not passes[n].safe]
    return risky, [n for n in unsafe if n not in risky]


def render_fix_json(
    path: str, report: FixReport, unsafe: list[str], written: str | None, sizes: tuple[int, int]
) -> str:
    """`gpulint fix --format json` (docs/schemas/fix.json): what the text says, as data. `written`: the
    file written (None: --dry-run, or nothing to write); `sizes`: its bytes before and after."""
    import json

    risky, opt_in = _would_apply(unsafe)
    doc = {
        "model": path,
        "output": written,
        "changed": report.changed,
        "applied": [{"pass": a.name, "changes": a.changes} for a in report.applied],
        "rejected": report.rejected,
        "skipped": report.skipped,
        "would_apply": {"unsafe": risky, "opt_in": opt_in},
        "proof": {"verified": report.verified, "max_abs_error": report.max_error if report.verified else None},
        "ops": {"before": dict(report.ops_before), "after": dict(report.ops_after)},
        "tensors": {"before": report.tensors_before, "after": report.tensors_after},
        "bytes": {"before": sizes[0], "after": sizes[1]} if written else None,
        "keep_float": report.keep_float,
    }
    return json.dumps(doc, indent=2)


def render_fix_diff(before: Model, after: Model, report: FixReport, checked: tuple[FileResult, FileResult]) -> str:
    """--diff: op counts that changed, tensors, constant bytes, and check's findings gone and new
    (`checked`: check on the model before and after)."""
    ops = [
        f"  {op:<24} {report.ops_before[op]:>4} -> {report.ops_after[op]}"
        for op in sorted(set(report.ops_before) | set(report.ops_after))
        if report.ops_before[op] != report.ops_after[op]
    ]
    lines = ["ops:", *ops] if ops else ["ops: unchanged"]
    lines.append(f"tensors: {report.tensors_before} -> {report.tensors_after}")
    size = [sum(len(buf.data) for buf in m.buffers) for m in (before, after)]
    lines.append(f"constant bytes: {size[0]:,} -> {size[1]:,}")
    found = [Counter(f.code for f in r.findings) for r in checked]
    gone, new = found[0] - found[1], found[1] - found[0]
    lines.append("check findings gone: " + (", ".join(f"{c} x{n}" for c, n in sorted(gone.items())) or "none"))
    lines.append("check findings new: " + (", ".join(f"{c} x{n}" for c, n in sorted(new.items())) or "none"))
    return "\n".join(lines)

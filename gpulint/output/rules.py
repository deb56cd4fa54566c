"""The rule catalogue, and one rule's documentation written once.

Every surface that explains a rule reads `rule_doc(rule)`: `gpulint rule CODE` (text or JSON),
SARIF's rule descriptors (`help.markdown`) and the HTML report's findings (ruff: `ruff rule`, the
SARIF emitter and the docs site all read the rule's one explanation). The sections come in ruff's
order: what it does, why, an example, what to use instead, the fix, the sources.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpulint.rules.pack import Rule, Target


@dataclass(frozen=True)
class RuleDoc:
    code: str
    name: str
    severity: str
    category: str
    summary: str  # what it does
    rationale: str  # why
    example: str
    use_instead: str
    fix_command: str | None  # `gpulint fix --passes NAME`, or None: no automatic fix
    fix_safety: str | None
    references: tuple[str, ...]

    @property
    def fix(self) -> str | None:
        """The fix line: the command and whether it is safe."""
        return f"{self.fix_command} ({self.fix_safety})" if self.fix_command else None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "category": self.category,
            "summary": self.summary,
            "rationale": self.rationale,
            "example": self.example or None,
            "use_instead": self.use_instead or None,
            "fix": {"command": self.fix_command, "safety": self.fix_safety} if self.fix_command else None,
            "references": list(self.references),
        }


def rule_doc(rule: Rule) -> RuleDoc:
    return RuleDoc(
        rule.code,
        rule.name,
        rule.severity,
        rule.category,
        rule.summary,
        rule.rationale,
        rule.example,
        rule.use_instead,
        f"gpulint fix --passes {rule.fix_pass}" if rule.fix_pass else None,
        rule.fix_safety if rule.fix_pass else None,
        tuple(rule.references),
    )


def render_rule(rule: Rule) -> str:
    """`gpulint rule CODE`: one heading per section, its text indented under it."""
    doc = rule_doc(rule)
    lines = [f"{doc.code} {doc.name} ({doc.severity}, {doc.category})", ""]
    lines += ["What it does", f"  {doc.summary}", "", "Why", f"  {doc.rationale}"]
    if doc.example:
        lines += ["", "Example", f"  {doc.example}"]
    if doc.use_instead:
        lines += ["", "Use instead", f"  {doc.use_instead}"]
    lines += ["", "Fix", f"  {doc.fix or 'none automatic'}"]
    lines += ["", "Source"] + [f"  {ref}" for ref in doc.references]
    return "\n".join(lines)


def render_rule_json(rule: Rule) -> str:
    return json.dumps(rule_doc(rule).to_json(), indent=2)


def rule_markdown(rule: Rule) -> str:
    """SARIF's `help.markdown`: the same sections, labels in bold, the fix command as code."""
    doc = rule_doc(rule)
    fix = doc.fix.replace(doc.fix_command, f"`{doc.fix_command}`", 1) if doc.fix and doc.fix_command else None
    return (
        f"**{doc.name}** ({doc.code})\n\n{doc.summary}\n\n**Why:** {doc.rationale}\n\n"
        + (f"**Example:** {doc.example}\n\n" if doc.example else "")
        + (f"**Use instead:** {doc.use_instead}\n\n" if doc.use_instead else "")
        + (f"**Fix:** {fix}\n\n" if fix else "")
        + "".join(f"- {ref}\n" for ref in doc.references)
    )


def render_catalogue(rules: dict[str, Rule]) -> str:
    """`gpulint rules`: one line per rule."""
    return "\n".join(
        f"{r.code}  {r.severity:<7}  {r.name:<28}  {r.summary}" + (f"  [fix: {r.fix_pass}]" if r.fix_pass else "")
        for r in rules.values()
    )


def render_target(t: Target) -> str:
    """`gpulint rules --target NAME`: the pack's op entries with their limits, checks and sources."""
    lines = [f"{t.name}: {t.title}", f"source: {t.source}"]
    if t.settings:
        lines.append("settings: " + ", ".join(f"{k}={v}" for k, v in t.settings.items()))
    partitions = "no limit" if t.max_partitions == 0 else str(t.max_partitions)
    lines.append(f"partitions: {partitions}, at least {t.min_partition_nodes} node(s) each")
    for name, support in [*sorted(t.ops.items()), *sorted(t.custom_ops.items())]:
        version = f"v1-{support.max_version}" if support.max_version is not None else "any version"
        checks = ", ".join(c.name for c in support.checks) or "-"
        init = ", ".join(c.name for c in support.init_checks)
        lines.append(f"  {name:<28} {version:<12} checks: {checks}" + (f"; at init: {init}" if init else ""))
        lines.append(f"  {'':<28} source: {support.source or t.source}")
    for b in t.backends.values():
        extra = [
            *(f"{op}: no kernel" for op in b.no_kernel),
            *(f"{op}: {', '.join(c.name for c in calls)} at init" for op, calls in b.init_checks.items()),
            *b.graph_checks,
        ]
        lines.append(f"  backend {b.name} ({b.title}): {', '.join(extra) or 'no known limits'}; source: {b.source}")
    return "\n".join(lines)

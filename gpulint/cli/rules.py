"""`gpulint rules` (the catalogue, and a target pack's op entries) and `gpulint rule CODE` (one
rule's docs, from the renderer SARIF and the HTML report use too)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpulint.cli.common import TextOrJson, fail, user_errors


def list_rules(
    target: Annotated[
        str | None, typer.Option(help="Also list a target pack's op entries: limits, checks and sources.")
    ] = None,
) -> None:
    """List every rule: code, severity, name and what it flags."""
    from gpulint.output.rules import render_catalogue, render_target
    from gpulint.rules.pack import builtin_rules, load_targets

    with user_errors(None):
        typer.echo(render_catalogue(builtin_rules()))
        if target is None:
            return
        targets = load_targets()
        if target not in targets:
            fail(None, f"unknown target `{target}`; known: {', '.join(targets)}")
        typer.echo("\n" + render_target(targets[target]))


def explain_rule(
    code: Annotated[str, typer.Argument(help="A rule code (GPU101) or name (unsupported-op).")],
    output_format: Annotated[TextOrJson, typer.Option("--format", help="Output format.")] = TextOrJson.text,
) -> None:
    """Explain one rule: what it flags, why, an example, the fix, and where it comes from."""
    from gpulint.output.rules import render_rule, render_rule_json
    from gpulint.rules.pack import builtin_rules

    with user_errors(None):
        rules = builtin_rules()
    rule = rules.get(code.upper()) or next((r for r in rules.values() if r.name == code), None)
    if rule is None:
        fail(None, f"no rule `{code}`; `gpulint rules` lists them")
    typer.echo(render_rule_json(rule) if output_format is TextOrJson.json else render_rule(rule))

"""MkDocs hooks (mkdocs.yml `hooks:`): the pages that are generated from the code at build time.

- A page per rule, `rules/CODE.md`, and the catalogue `rules/index.md`, from the rule packs through
  the registry every other surface reads (`gpulint.rules.pack.builtin_rules`, `gpulint.output.rules.
  rule_doc`): a rule added to YAML gets its page with no edit here, and nothing generated is committed.
- `<!-- options: NAME -->` in a page becomes the table of `gpulint NAME`'s options and arguments,
  read from the command itself (what `gpulint NAME --help` prints).

tests/test_docs.py imports this file to hold the pages to the registry and the CLI.
"""

from __future__ import annotations

import re
from typing import Any

from gpulint.output.rules import render_rule, rule_doc
from gpulint.rules import pack
from gpulint.rules.catalog import Rule

OPTIONS = re.compile(r"<!-- options: ([a-z]+) -->")

# Where each way of finding a rule is described (the catalog's FOUND_BY).
FOUND_BY = {
    "detector": "a detector registered under its code (`gpulint/rules/detectors/`)",
    "target-pack": "the placer, from the target pack's op entries (`gpulint/rules/targets/*.yaml`)",
    "partition": "the partition step (`gpulint/rules/partition.py`)",
    "refusal": "the interpreter's refusal model (`gpulint/rules/prepare.py`)",
    "interpreter": "check's run of the model on the inputs given (`--inputs` / `--input-range`)",
}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def rule_page(rule: Rule) -> str:
    """The page of one rule: what `gpulint rule CODE` prints, as Markdown, and that text verbatim."""
    doc = rule_doc(rule)
    lines = [
        f"# {doc.code} {doc.name}",
        "",
        f"**Severity** {doc.severity} · **Category** {doc.category} · "
        f"**Found by** {FOUND_BY.get(rule.found_by, rule.found_by)}",
        "",
        "## What it does",
        "",
        doc.summary,
        "",
        "## Why",
        "",
        doc.rationale,
    ]
    if doc.example:
        lines += ["", "## Example", "", doc.example]
    if doc.use_instead:
        lines += ["", "## Use instead", "", doc.use_instead]
    lines += ["", "## Fix", ""]
    if doc.fix_command:
        lines.append(f"`{doc.fix_command}` ({doc.fix_safety}; the passes: [gpulint fix](../commands/fix.md#passes))")
    else:
        lines.append("None automatic.")
    lines += ["", "## Source", ""] + [f"- {ref}" for ref in doc.references]
    lines += [
        "",
        "## On the command line",
        "",
        f"`gpulint rule {doc.code}` prints (`--format json` gives the same as data):",
        "",
        "```text",
        render_rule(rule),
        "```",
        "",
    ]
    return "\n".join(lines)


def rules_index(rules: dict[str, Rule]) -> str:
    """The catalogue: what `gpulint rules` prints, a row per rule linking its page."""
    lines = [
        "# Rules",
        "",
        "Every rule `gpulint check` reports, generated from the rule packs (`gpulint/rules/rules.yaml` and",
        "`gpulint/rules/targets/*.yaml`) when the site is built; `gpulint rules` prints the same list and",
        "`gpulint rule CODE` one rule. GPU1xx: the op runs on the CPU; GPU2xx: the delegate fails at init or",
        "is refused; GPU3xx: layout; GPU4xx: data movement; GPU5xx: quantization, dynamic shapes, control",
        "flow; GPU6xx: partitions; GPU7xx: half precision; GPU8xx: known runtime defects.",
        "",
        "| code | name | severity | what it flags | fix |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rules.values():
        fix = f"`{r.fix_pass}`" if r.fix_pass else "-"
        lines.append(f"| [{r.code}]({r.code}.md) | {r.name} | {r.severity} | {_cell(r.summary)} | {fix} |")
    return "\n".join(lines) + "\n"


def command_params(name: str) -> list[dict[str, str]]:
    """`gpulint NAME`'s arguments and options as its --help lists them: names, value, default, help."""
    import typer.main

    from gpulint.cli import build_app

    command = typer.main.get_command(build_app(name)).commands[name]  # type: ignore[attr-defined]
    ctx = command.context_class(command, info_name=name)
    out = []
    for p in command.params:  # typer's own copy of click's Parameter: read by duck typing
        if getattr(p, "hidden", False):
            continue
        argument = p.param_type_name == "argument"
        if argument:
            names, value = p.human_readable_name.upper(), ""
        else:
            names = ", ".join([*p.opts, *p.secondary_opts])
            value = "" if p.is_flag else p.make_metavar(ctx) if _takes_ctx(p) else p.make_metavar()
        default = None if argument else p.get_default(ctx, call=False)
        shown = "" if default in (None, False, (), []) or callable(default) else str(getattr(default, "value", default))
        out.append({"names": names, "value": value, "default": shown, "help": getattr(p, "help", None) or ""})
    out.append({"names": "--help", "value": "", "default": "", "help": "Show this message and exit."})
    return out


def _takes_ctx(p: Any) -> bool:
    """click 8.2 gave make_metavar a context argument; 8.1 takes none."""
    import inspect

    return "ctx" in inspect.signature(p.make_metavar).parameters


def options_table(name: str) -> str:
    rows = ["| option | value | default | what it does |", "| --- | --- | --- | --- |"]
    for p in command_params(name):
        value = f"`{p['value']}`" if p["value"] else ""
        default = f"`{p['default']}`" if p["default"] else ""
        rows.append(f"| `{p['names']}` | {_cell(value)} | {_cell(default)} | {_cell(p['help'])} |")
    return "\n".join(rows)


# --- MkDocs events ---------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    rules = pack.builtin_rules()  # looked up at each build: a test may stand in for it
    files.append(File.generated(config, "rules/index.md", content=rules_index(rules)))
    for rule in rules.values():
        files.append(File.generated(config, f"rules/{rule.code}.md", content=rule_page(rule)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return OPTIONS.sub(lambda m: options_table(m.group(1)), markdown)


def on_config(config: Any) -> Any:
    """Every rule page goes in the nav under Rules, after the catalogue."""
    pages = [f"rules/{code}.md" for code in pack.builtin_rules()]
    for item in config["nav"]:
        if isinstance(item, dict) and item.get("Rules") == "rules/index.md":
            item["Rules"] = ["rules/index.md", *pages]
    return config

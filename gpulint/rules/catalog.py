"""The rule catalog, `rules.yaml`: each rule's code, name, severity, message template, docs and
fix, validated on load, and held to the detector registry: a rule `found_by: detector` has a
function registered under its code, and every registered detector has a rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpulint.rules import packcache
from gpulint.rules.detectors import DETECTORS
from gpulint.rules.loader import PackError, Validator, load_yaml

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(reversed(SEVERITIES))}  # info 0 < warning 1 < error 2


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: str
    category: str
    found_by: str  # where code decides the rule applies: one of FOUND_BY
    message: str
    summary: str
    rationale: str
    example: str = ""
    use_instead: str = ""
    fix_pass: str | None = None
    fix_safety: str | None = None
    references: tuple[str, ...] = ()

    def render(self, **values: Any) -> str:
        return self.message.format(**values)


_RULE_KEYS = ("code", "name", "severity", "category", "found_by", "message", "summary", "rationale")
# `detector`: the function registered under the rule's code (detectors/); the others are the
# engine's own steps: the placer with the target pack, the partition step, the refusal;
# `interpreter`: check's run of the model on the user's inputs (gpulint/verify/values.py).
FOUND_BY = ("detector", "target-pack", "partition", "refusal", "interpreter")
_RULE_OPTIONAL = ("example", "use_instead", "fix", "references")


def parse_rules(text: str, where: str) -> dict[str, Rule]:
    v = Validator(where)
    doc = v.mapping(load_yaml(text, where), None)
    v.keys(doc, ("rules",), ())
    entries = doc["rules"]
    if not isinstance(entries, list):
        raise v.fail(doc, "rules", "a list of rules")
    out: dict[str, Rule] = {}
    names: set[str] = set()
    for entry in entries:
        e = v.mapping(entry, None, doc)
        v.keys(e, _RULE_KEYS, _RULE_OPTIONAL)
        for k in (*_RULE_KEYS, "example", "use_instead"):
            v.typed(e, k, str, "a string")
        if not re.fullmatch(r"[A-Z]+[0-9]{3}", e["code"]):
            raise v.fail(e, "code", "a code like GPU101 (letters, then three digits)")
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", e["name"]):
            raise v.fail(e, "name", "a kebab-case name")
        if e["severity"] not in SEVERITIES:
            raise v.fail(e, "severity", "one of " + ", ".join(SEVERITIES))
        if e["code"] in out or e["name"] in names:
            raise v.fail(e, "code", f"a unique code and name; {e['code']} / {e['name']} is defined twice")
        if e["found_by"] not in FOUND_BY:
            raise v.fail(e, "found_by", "one of " + ", ".join(FOUND_BY))
        found = DETECTORS.get(e["code"])
        if e["found_by"] == "detector" and found is None:
            raise v.fail(
                e,
                "found_by",
                f'a detector for {e["code"]}: @detector("{e["code"]}", scope) in gpulint/rules/detectors/',
            )
        if e["found_by"] != "detector" and found is not None:
            raise v.fail(e, "found_by", f"`detector`: {e['code']} has one, {found.where}")
        fix = e.get("fix")
        fix_pass = fix_safety = None
        if fix is not None:
            f = v.mapping(fix, "fix", e)
            v.keys(f, ("pass", "safety"), ())
            if f["safety"] not in ("safe", "unsafe"):
                raise v.fail(f, "safety", "safe or unsafe")
            fix_pass, fix_safety = str(f["pass"]), f["safety"]
        refs = v.str_list(e, "references")
        out[e["code"]] = Rule(
            e["code"],
            e["name"],
            e["severity"],
            e["category"],
            e["found_by"],
            e["message"],
            e["summary"].strip(),
            " ".join(e["rationale"].split()),
            e.get("example", ""),
            e.get("use_instead", ""),
            fix_pass,
            fix_safety,
            tuple(refs),
        )
        names.add(e["name"])
    unknown = sorted(set(DETECTORS) - set(out))
    if unknown:
        d = DETECTORS[unknown[0]]
        raise PackError(f"{where}: no rule {d.code}, for which {d.where} is registered as the detector")
    return out


@cache
def builtin_rules() -> dict[str, Rule]:
    text = resources.files("gpulint.rules").joinpath("rules.yaml").read_text("utf-8")
    return packcache.cached("rules", [text], lambda: parse_rules(text, "gpulint/rules/rules.yaml"))

"""A rule is one rules.yaml entry plus, where code must decide, one registered detector: the two
sides match, the codes the engine's own steps give are declared where they come from, and a
catalog that breaks this is one PackError naming the file, the line and the key."""

from __future__ import annotations

import inspect
import re
from importlib import resources

import pytest

from gpulint.passes import registry
from gpulint.rules import engine, pack, placer
from gpulint.rules.detectors import DETECTORS
from gpulint.rules.detectors.registry import SCOPES
from gpulint.verify import values

RULES = pack.builtin_rules()
TEXT = resources.files("gpulint.rules").joinpath("rules.yaml").read_text("utf-8")
WHERE = "gpulint/rules/rules.yaml"


def test_every_detector_rule_has_one_detector_and_every_detector_a_rule() -> None:
    assert {c for c, r in RULES.items() if r.found_by == "detector"} == set(DETECTORS)


@pytest.mark.parametrize("code", sorted(DETECTORS))
def test_a_detector_is_named_for_its_rule(code: str) -> None:
    d = DETECTORS[code]
    assert d.scope in SCOPES
    assert d.find.__name__ == RULES[code].name.replace("-", "_"), d.where


def test_the_engine_steps_codes_are_declared_where_they_come_from() -> None:
    placed = set(re.findall(r'"(GPU\d{3})"', inspect.getsource(placer)))
    assert placed and all(RULES[c].found_by == "target-pack" for c in placed), placed
    assert RULES[engine.CUT_OFF].found_by == "partition"
    assert RULES[engine.REFUSED].found_by == "refusal"
    assert RULES[values.CODE].found_by == "interpreter"
    own = {c for c, r in RULES.items() if r.found_by != "detector"}
    assert own == placed | {engine.CUT_OFF, engine.REFUSED, values.CODE}


def test_every_fix_pass_exists() -> None:
    for rule in RULES.values():
        assert rule.fix_pass is None or rule.fix_pass in registry(), rule.code


def entry_line(code: str) -> int:
    return TEXT[: TEXT.index(f"  - code: {code}")].count("\n") + 1


def test_a_detector_rule_without_a_detector() -> None:
    broken = TEXT.replace("found_by: target-pack", "found_by: detector", 1)  # GPU101's
    line = entry_line("GPU101") + 4
    message = f'{WHERE}:{line}: `found_by`: expected a detector for GPU101: @detector("GPU101", scope) in'
    with pytest.raises(pack.PackError, match=re.escape(message)):
        pack.parse_rules(broken, WHERE)


def test_a_rule_found_elsewhere_that_has_a_detector() -> None:
    start = TEXT.index("  - code: GPU401")
    broken = TEXT[:start] + TEXT[start:].replace("found_by: detector", "found_by: target-pack", 1)
    message = f"{WHERE}:{entry_line('GPU401') + 4}: `found_by`: expected `detector`: GPU401 has one, "
    with pytest.raises(pack.PackError, match=re.escape(message + "gpulint.rules.detectors.op.reshuffle_op")):
        pack.parse_rules(broken, WHERE)


def test_an_unknown_found_by() -> None:
    broken = TEXT.replace("found_by: refusal", "found_by: magic")
    message = f"{WHERE}:{entry_line('GPU202') + 4}: `found_by`: expected one of detector, target-pack, partition"
    with pytest.raises(pack.PackError, match=re.escape(message)):
        pack.parse_rules(broken, WHERE)


def test_a_detector_whose_rule_is_gone() -> None:
    broken = TEXT[: TEXT.index("  - code: GPU703")]
    message = f"{WHERE}: no rule GPU703, for which gpulint.rules.detectors.f16.half_zero_variance is registered"
    with pytest.raises(pack.PackError, match=re.escape(message)):
        pack.parse_rules(broken, WHERE)


def test_a_missing_found_by() -> None:
    broken = TEXT.replace("    found_by: partition\n", "")
    with pytest.raises(pack.PackError, match=re.escape(f"{WHERE}:{entry_line('GPU109')}: expected key `found_by`")):
        pack.parse_rules(broken, WHERE)

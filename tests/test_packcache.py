"""The cache of parsed built-in rule packs (gpulint/rules/packcache.py, #40 start-up): a hit gives
what the parse gives, a changed pack text is a miss, a damaged entry is a miss that is rewritten, a
folder that cannot be written still gives the parse, and concurrent runs agree."""

from __future__ import annotations

import pickle
import threading
import time
from pathlib import Path

import pytest

from gpulint.rules import catalog, pack, packcache


class Counting:
    def __init__(self, value: object) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.value


def test_hit_returns_the_parse_without_parsing(tmp_path: Path) -> None:
    parse = Counting({"GPU101": ("a", 1)})
    assert packcache.cached("rules", ["text"], parse, tmp_path) == {"GPU101": ("a", 1)}
    assert packcache.cached("rules", ["text"], parse, tmp_path) == {"GPU101": ("a", 1)}
    assert parse.calls == 1
    assert len(list(tmp_path.glob("*.pickle"))) == 1


def test_a_changed_pack_text_or_kind_is_a_miss(tmp_path: Path) -> None:
    old, new = Counting("old"), Counting("new")
    assert packcache.cached("target classic", ["ops: {ADD: {}}"], old, tmp_path) == "old"
    assert packcache.cached("target classic", ["ops: {ADD: {max_version: 2}}"], new, tmp_path) == "new"
    assert packcache.cached("target metal", ["ops: {ADD: {}}"], new, tmp_path) == "new"
    # texts are delimited: ["ab", "c"] is not ["a", "bc"]
    assert packcache.key("k", ["ab", "c"]) != packcache.key("k", ["a", "bc"])
    assert (old.calls, new.calls) == (1, 2)


def test_a_changed_code_file_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = packcache.key("rules", ["text"])
    monkeypatch.setattr(packcache, "_CODE", None)
    real = packcache._stat_lines

    def edited(top: str, suffixes: tuple[str, ...]) -> list[str]:
        return [*real(top, suffixes), "checks/compat.py\x00123\x00456\n"]

    monkeypatch.setattr(packcache, "_stat_lines", edited)
    assert packcache.key("rules", ["text"]) != before


@pytest.mark.parametrize("damage", [b"", b"not a pickle", b"\x80\x05\x95garbage", None])
def test_a_damaged_entry_is_a_miss_and_rewritten(tmp_path: Path, damage: bytes | None) -> None:
    packcache.cached("rules", ["text"], Counting([1, 2, 3]), tmp_path)
    (entry,) = tmp_path.glob("*.pickle")
    entry.write_bytes(entry.read_bytes()[:10] if damage is None else damage)  # None: truncated
    parse = Counting([1, 2, 3])
    assert packcache.cached("rules", ["text"], parse, tmp_path) == [1, 2, 3]
    assert parse.calls == 1
    assert pickle.loads(entry.read_bytes()) == [1, 2, 3]


def test_a_folder_that_cannot_be_written_still_parses(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    parse = Counting("parsed")
    for _ in range(2):
        assert packcache.cached("rules", ["text"], parse, blocker / "packs") == "parsed"
    assert parse.calls == 2
    assert blocker.read_text() == "not a folder"


def test_concurrent_runs_agree_and_leave_one_whole_entry(tmp_path: Path) -> None:
    def slow() -> list[int]:
        time.sleep(0.01)
        return list(range(1000))

    got: list[object] = []
    threads = [
        threading.Thread(target=lambda: got.append(packcache.cached("rules", ["t"], slow, tmp_path))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [list(range(1000))] * 8
    assert [p.name.endswith(".pickle") for p in tmp_path.iterdir()] == [True]
    assert pickle.loads(next(tmp_path.iterdir()).read_bytes()) == list(range(1000))


def test_builtin_packs_from_the_cache_equal_a_fresh_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path))
    assert packcache.folder() == tmp_path / "packs"
    texts = pack._builtin_texts()
    rules_text = (Path(catalog.__file__).parent / "rules.yaml").read_text("utf-8")
    fresh_rules = catalog.parse_rules(rules_text, "gpulint/rules/rules.yaml")
    fresh: dict[str, pack.Target] = {}

    class Known(pack.Targets):
        def __getitem__(self, name: str) -> pack.Target:
            return fresh[name]

    for name in pack.BUILTIN_TARGETS:
        fresh[name] = pack.parse_target(texts[name], f"gpulint/rules/targets/{name}.yaml", Known())
    for _ in range(2):  # a miss that writes, then a hit that reads
        for fn in (catalog.builtin_rules, pack._builtin_target):
            fn.cache_clear()
        assert catalog.builtin_rules() == fresh_rules
        for name in pack.BUILTIN_TARGETS:
            assert pack._builtin_target(name) == fresh[name], name
    assert len(list((tmp_path / "packs").glob("*.pickle"))) == 1 + len(pack.BUILTIN_TARGETS)
    for fn in (catalog.builtin_rules, pack._builtin_target):
        fn.cache_clear()

"""The schema's reflection with one compiled pattern per kind (#40, start-up) reads what the former
per-field patterns read, for every table and field of the installed `tflite` package."""

from __future__ import annotations

import re

from gpulint.model import schema


def _old_accessor(src: str, table: str, camel: str) -> str:
    m = re.search(rf"    # {table}\n    def {camel}\(self[^)]*\):\n(?P<body>(?:        .*\n|\n)+)", src)
    return m.group("body") if m else ""


def _old_field_count(src: str, table: str) -> int | None:
    m = re.search(rf"def {table}Start\(builder\):\n\s+builder\.StartObject\((\d+)\)", src)
    return int(m.group(1)) if m else None


def test_every_accessor_and_field_count_as_before() -> None:
    names = sorted(p.stem for p in schema.package_dir().glob("*.py") if p.stem != "__init__")
    assert len(names) > 150
    accessors = tables = 0
    for name in names:
        src = schema.source(name)
        for m in schema._ADD.finditer(src):
            table, camel = m.group("table"), m.group("camel")
            assert schema._accessor_source(name, table, camel) == _old_accessor(src, table, camel), (name, camel)
            accessors += 1
        old = _old_field_count(src, name)
        if old is None:
            try:
                schema.field_count(name)
            except RuntimeError:
                continue
            raise AssertionError(f"{name}: a field count where there was none")
        assert schema.field_count(name) == old, name
        tables += 1
    assert accessors > 250 and tables > 100

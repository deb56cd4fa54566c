"""Every options table the schema has, enumerated from the installed `tflite` package,
survives write -> read with a non-default value in every field."""

from __future__ import annotations

from typing import Any

import pytest

from gpulint.model import Options, read_buffer, schema, to_bytes
from gpulint.model.build import ModelBuilder, options_table_for

UNIONS = {"BuiltinOptions": "builtin_options", "BuiltinOptions2": "builtin_options_2"}
ALL_TYPES = [(u, t) for u in UNIONS for t in schema.options_types(u)]


def test_the_schema_has_the_options_tables_we_expect() -> None:
    # Not a fixed list: a sanity floor, so an empty enumeration cannot pass silently.
    assert len(schema.options_types("BuiltinOptions")) > 120
    assert len(schema.options_types("BuiltinOptions2")) > 15
    assert "Conv2DOptions" in schema.options_types("BuiltinOptions")


def _value(table: str, f: schema.Field) -> Any:
    """A valid, non-default value for a field, different per slot."""
    enum = schema.enum_of(table, f)
    if enum:
        names = [n for n, v in schema.enum_members(enum).items() if v != f.default]
        return names[f.slot % len(names)]
    if f.kind == "string":
        return f"{table}.{f.name}-ü"
    if f.kind == "strings":
        return ["a", f"{f.name}-ß"]
    if f.kind == "vector":
        if f.scalar == "Bool":
            return [True, False, True]
        if f.scalar and f.scalar.startswith("Float"):
            return [0.25, -1.5, float(f.slot)]
        return [f.slot + 1, 0, 7]
    if f.scalar == "Bool":
        return not f.default
    if f.scalar and f.scalar.startswith("Float"):
        return 0.5 + f.slot
    return f.slot + 2 if f.default != f.slot + 2 else f.slot + 3


@pytest.mark.parametrize(("union", "table"), ALL_TYPES, ids=[t for _, t in ALL_TYPES])
def test_options_table_round_trips(union: str, table: str) -> None:
    fields = schema.fields(table)
    assert all(f.kind in ("scalar", "vector", "string", "strings") for f in fields), fields
    values = {f.name: _value(table, f) for f in fields}
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4])
    op_name = next((n for n in schema.enum_members("BuiltinOperator") if options_table_for(n) == table), "ADD")
    y = g.op(op_name, [x], [1, 4], options_type=table, options=values)
    g.output(y)
    model = mb.build()
    if union == "BuiltinOptions2":
        op = model.subgraphs[0].operators[0]
        op.builtin_options_2, op.builtin_options = op.builtin_options, None

    again = read_buffer(to_bytes(model))
    assert again == model
    op = again.subgraphs[0].operators[0]
    got = getattr(op, UNIONS[union])
    assert isinstance(got, Options) and got.type == table
    for f in fields:
        expected = values[f.name]
        if f.scalar and f.scalar.startswith("Float") and f.kind == "scalar":
            assert got[f.name] == pytest.approx(expected), f.name
        else:
            assert got[f.name] == expected, f.name


def test_enum_fields_name_real_scalar_fields() -> None:
    seen = set()
    for union in UNIONS:
        for table in schema.options_types(union):
            for f in schema.fields(table):
                if schema.enum_of(table, f):
                    seen.add(f.name if (table, f.name) not in schema.ENUM_FIELDS else (table, f.name))
    assert seen >= {k for k in schema.ENUM_FIELDS}


def test_options_of_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="Conv2DOptions has no field strides"):
        Options.of("Conv2DOptions", strides=2)


def test_options_of_fills_defaults_and_names_enums() -> None:
    o = Options.of("Conv2DOptions", padding=1, stride_w=2)
    assert o["padding"] == "VALID"
    assert o["stride_w"] == 2
    assert o["dilation_w_factor"] == 1  # the schema's default
    assert o["fused_activation_function"] == "NONE"

"""What the installed `tflite` package knows about the schema, found by reflection.

The `tflite` package is flatc's Python output: one module per table or enum, with an accessor
method per field and builder functions `<T>Start`, `<T>Add<Field>`, `<T>Start<Field>Vector`,
`<T>End`. Nothing lists a table's fields as data, so we read them off the generated source:
each `<T>Add<Field>` holds `builder.Prepend<Kind>Slot(<slot>, <value>, <default>)`, and the
accessor `<Field>(self...)` shows whether an offset field is a string, a vector, a table or a
union. That gives every options table without a hand-written case per op, and it follows the
schema when the package is upgraded.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Field:
    """One field of a generated table."""

    name: str  # snake_case, as in schema.fbs
    camel: str  # as in the generated accessor names
    slot: int
    # "scalar", "string", "vector" (of scalars), "strings", "tables", "table", "union", "struct"
    kind: str
    scalar: str | None = None  # "Int8", "Float32", ... for a scalar or the elements of a vector
    default: object = None
    table: str | None = None  # class name for "table" / "tables"

    @property
    def numpy_dtype(self) -> np.dtype:
        import flatbuffers.number_types as nt  # imports numpy
        import numpy as np

        assert self.scalar is not None
        dtype: np.dtype = np.dtype(nt.to_numpy_type(getattr(nt, self.scalar + "Flags")))
        return dtype


def module(name: str) -> ModuleType:
    """The generated module (imports the whole `tflite` package: only the writer needs this)."""
    return importlib.import_module(f"tflite.{name}")


@cache
def package_dir() -> Path:
    """The installed `tflite` package's folder."""
    spec = importlib.util.find_spec("tflite")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the `tflite` package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def source(name: str) -> str:
    """A generated module's source text. Reading needs only this: the package's __init__
    imports all ~190 modules, which would cost every `gpulint` process ~50 ms."""
    try:
        return (package_dir() / f"{name}.py").read_text("utf-8")
    except FileNotFoundError:
        raise KeyError(f"the installed tflite schema has no {name}") from None


def table_class(name: str) -> type:
    cls: type = getattr(module(name), name)
    return cls


def snake(camel: str) -> str:
    """`StrideW` -> `stride_w`, `DilationHFactor` -> `dilation_h_factor`."""
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", camel)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


_ADD = re.compile(
    r"^def (?P<table>\w+?)Add(?P<camel>\w+)\(builder, \w+\):\n"
    r"\s+builder\.Prepend(?P<kind>\w+)Slot\((?P<slot>\d+), .*, (?P<default>[^,]+)\)$",
    re.MULTILINE,
)
_MEMBER = re.compile(r"^    (\w+) = (-?\d+)$", re.MULTILINE)
_FLAGS = re.compile(r"flatbuffers\.number_types\.(\w+)Flags")
_IMPORT = re.compile(r"from tflite\.(\w+) import")


# An accessor method: `    # <Table>` above `    def <Field>(self...):`, then its indented body. One pattern
# for every table and field (a pattern per field cost each process ~60 compilations, ~5 ms).
_ACCESSOR = re.compile(r"    # (\w+)\n    def (\w+)\(self[^)]*\):\n(?P<body>(?:        .*\n|\n)+)")
_START = re.compile(r"def (\w+)Start\(builder\):\n\s+builder\.StartObject\((\d+)\)")


@cache
def _accessors(name: str) -> dict[tuple[str, str], str]:
    """(table, field) -> the body of its accessor, the first where the source has two."""
    out: dict[tuple[str, str], str] = {}
    for m in _ACCESSOR.finditer(source(name)):
        out.setdefault((m.group(1), m.group(2)), m.group("body"))
    return out


def _accessor_source(name: str, table: str, camel: str) -> str:
    return _accessors(name).get((table, camel), "")


@cache
def fields(table: str) -> tuple[Field, ...]:
    """The fields of a generated table, in slot order."""
    src = source(table)
    out = []
    for m in _ADD.finditer(src):
        if m.group("table") != table:
            continue
        camel, kind = m.group("camel"), m.group("kind")
        default = ast.literal_eval(m.group("default"))
        if kind == "UOffsetTRelative":
            body = _accessor_source(table, table, camel)
            flags = _FLAGS.findall(body.replace("UOffsetTFlags", ""))
            imp = _IMPORT.search(body)
            if "Union(" in body:
                f = Field(snake(camel), camel, int(m.group("slot")), "union")
            elif "Vector(o)" in body and "String(a" in body:
                f = Field(snake(camel), camel, int(m.group("slot")), "strings")
            elif "Vector(o)" in body and imp:
                f = Field(snake(camel), camel, int(m.group("slot")), "tables", table=imp.group(1))
            elif "Vector(o)" in body and flags:
                f = Field(snake(camel), camel, int(m.group("slot")), "vector", scalar=flags[0])
            elif "String(o" in body:
                f = Field(snake(camel), camel, int(m.group("slot")), "string")
            elif imp:
                f = Field(snake(camel), camel, int(m.group("slot")), "table", table=imp.group(1))
            else:
                raise RuntimeError(f"tflite.{table}.{camel}: cannot tell the field's kind")
        elif kind == "Struct":
            f = Field(snake(camel), camel, int(m.group("slot")), "struct")
        else:
            f = Field(snake(camel), camel, int(m.group("slot")), "scalar", scalar=kind, default=default)
        out.append(f)
    out.sort(key=lambda f: f.slot)
    return tuple(out)


@cache
def field_count(table: str) -> int:
    """How many vtable slots the installed schema knows for a table (deprecated ones too)."""
    for m in _START.finditer(source(table)):
        if m.group(1) == table:
            return int(m.group(2))
    raise RuntimeError(f"tflite.{table}: no {table}Start")


@cache
def enum_members(enum: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in _MEMBER.finditer(source(enum))}


@cache
def enum_names(enum: str) -> dict[int, str]:
    names: dict[int, str] = {}
    for k, v in enum_members(enum).items():
        names.setdefault(v, k)  # first name wins where two share a value
    return names


def enum_name(enum: str, value: int) -> str | int:
    """The member's name, or the bare number for a value this schema does not know."""
    return enum_names(enum).get(value, value)


def enum_value(enum: str, value: str | int) -> int:
    if isinstance(value, int):
        return value
    try:
        return enum_members(enum)[value]
    except KeyError:
        raise ValueError(f"{value!r} is not a member of {enum}") from None


def options_types(union: str = "BuiltinOptions") -> dict[str, int]:
    """Every options table the union can hold, name -> type code (NONE left out)."""
    return {k: v for k, v in enum_members(union).items() if k != "NONE"}


# Scalar options fields that hold an enum, so the IR shows `"SAME"` rather than `1`.
# Keyed by field name, or by (options table, field name) where the name is too generic.
ENUM_FIELDS: dict[str | tuple[str, str], str] = {
    "fused_activation_function": "ActivationFunctionType",
    "padding": "Padding",
    "weights_format": "FullyConnectedOptionsWeightsFormat",
    "combiner": "CombinerType",
    "kernel_type": "LSTMKernelType",
    "out_type": "TensorType",
    "output_type": "TensorType",
    "in_data_type": "TensorType",
    "out_data_type": "TensorType",
    "idx_out_type": "TensorType",
    "key_dtype": "TensorType",
    "value_dtype": "TensorType",
    "quantized_bias_type": "TensorType",
    ("LSHProjectionOptions", "type"): "LSHProjectionType",
    ("MirrorPadOptions", "mode"): "MirrorPadMode",
}


def enum_of(table: str, f: Field) -> str | None:
    if f.kind != "scalar":
        return None
    return ENUM_FIELDS.get((table, f.name)) or ENUM_FIELDS.get(f.name)

"""Table-driven: single-op signatures against the placement the delegate's source gives.

The rows live in tests/data/placements.yaml, each citing the source line that decides it;
they were written from the delegate's source (LiteRT gpu_compatibility.cc, model_builder.cc),
not from gpulint's rule packs. See the file's header for the row format.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Linter

TABLE = Path(__file__).parent / "data" / "placements.yaml"
ROWS: list[dict[str, Any]] = yaml.safe_load(TABLE.read_text()) if TABLE.exists() else []
TARGETS = pack.load_targets()

DTYPES = {
    "f32": "FLOAT32",
    "f16": "FLOAT16",
    "i32": "INT32",
    "i8": "INT8",
    "u8": "UINT8",
    "i16": "INT16",
    "i64": "INT64",
    "bool": "BOOL",
    "i4": "INT4",
}
NUMPY = {
    "FLOAT32": np.float32,
    "FLOAT16": np.float16,
    "INT32": np.int32,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "INT16": np.int16,
    "INT64": np.int64,
    "BOOL": np.bool_,
}
SPEC = re.compile(r"^(?P<const>const )?(?P<dtype>[a-z0-9]+)\[(?P<dims>[-\d,\s]*)\](?:=(?P<values>.*))?$")


def tensor(g: SubgraphBuilder, spec: str, name: str) -> int:
    if spec == "-":
        return -1
    m = SPEC.match(spec.strip())
    if m is None:
        raise ValueError(f"bad tensor spec {spec!r}")
    dtype = DTYPES[m["dtype"]]
    shape = [int(d) for d in m["dims"].split(",") if d.strip()]
    quant = (0.1, 0) if dtype in ("INT8", "UINT8", "INT16") else None
    if not m["const"]:
        return g.tensor(name, shape, dtype, quant=quant)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if dtype == "INT4":
        return g.const(name, b"\0" * ((n + 1) // 2), "INT4", shape=shape, quant=quant)
    values = [float(v) for v in m["values"].split(",")] if m["values"] else [0] * n
    arr = np.array(values, NUMPY[dtype]).reshape(shape)
    return g.const(name, arr, dtype, quant=quant, shape=shape)


PADDING = {"SAME": 1, "VALID": 2}  # TfLitePadding
ACTIVATION = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGN_BIT": 5, "SIGMOID": 6}


def custom_struct(options: dict[str, Any] | None) -> bytes:
    """A custom op's parameters as the C struct the delegate reads (TfLitePoolParams or
    TfLiteTransposeConvParams: padding, stride_width, stride_height, then the pool fields)."""
    if not options:
        return b""
    fields = [PADDING.get(options.get("padding", "SAME"), 0), options.get("stride_w", 0), options.get("stride_h", 0)]
    if "filter_width" in options or "filter_height" in options:
        fields += [
            options.get("filter_width", 0),
            options.get("filter_height", 0),
            ACTIVATION[options.get("fused_activation_function", "NONE")],
        ]
    return struct.pack(f"<{len(fields)}i", *fields)


def build(row: dict[str, Any]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    ins = [tensor(g, s, f"in{i}") for i, s in enumerate(row.get("in", []))]
    outs = [tensor(g, s, f"out{i}") for i, s in enumerate(row.get("out", []))]
    for i in ins:
        if i >= 0 and g.sg.tensors[i].buffer == 0 and i not in g.sg.inputs:
            g.sg.inputs.append(i)
    op = str(row["op"])
    custom = op.startswith("CUSTOM:")
    name = op.removeprefix("CUSTOM:")
    g.op(
        name,
        ins,
        out=outs,
        version=int(row.get("version", 1)),
        options=None if custom else row.get("options"),
        custom_options=custom_struct(row.get("options")) if custom else None,
    )
    consumer = row.get("consumer")
    if consumer is not None:
        c_ins = [
            outs[0] if s == "<this>" else tensor(g, s, f"c_in{i}") for i, s in enumerate(consumer.get("in", ["<this>"]))
        ]
        c_out = tensor(g, consumer["out"], "c_out")
        g.op(consumer["op"], c_ins, out=[c_out], options=consumer.get("options"))
        g.output(c_out)
        if row.get("graph_output"):
            g.output(outs[0])
    else:
        g.output(*outs)
    return mb.build()


def row_id(row: dict[str, Any]) -> str:
    return f"{row['op']}-v{row.get('version', 1)}-{row['expect']}-{row.get('target', 'classic')}"


@pytest.mark.skipif(not ROWS, reason=f"{TABLE} is missing")
def test_the_table_is_large_enough() -> None:
    assert len(ROWS) >= 200
    assert all(r.get("source") for r in ROWS), "every row cites its source"


@pytest.mark.parametrize("row", ROWS, ids=[row_id(r) for r in ROWS])
def test_placement(row: dict[str, Any]) -> None:
    model = build(row)
    # The rows are the OpenCL backend's (see the table's header); the OpenGL backend's
    # differences are held against the real delegate in the oracle tests.
    target, quantized = TARGETS[row.get("target", "classic")], bool(row.get("quantized", True))
    linter = Linter(target, quantized, targets=TARGETS, backends=("opencl",))
    result = linter.lint(model)
    placement = result.ops[0]
    assert placement.placement == row["expect"], f"{row['source']}: {placement.reasons}"
    if row.get("reason"):
        assert any(row["reason"] in r for r in placement.reasons), (row["reason"], placement.reasons)

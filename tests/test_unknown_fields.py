"""A file from a newer schema: what the installed schema does not know is reported, not dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import flatbuffers
import pytest
from helpers import conv_model, root, table_field_pos
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import LossyWriteError, Tensor, read, read_buffer, schema, to_bytes, write
from gpulint.model import ir as ir_module


def with_extra_operator_field(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Write conv_model with an Operator table that carries slot 20, which no schema has yet."""
    mod = schema.module("Operator")
    count = schema.field_count("Operator")

    def start(b: flatbuffers.Builder) -> None:
        b.StartObject(count + 8)

    def end(b: flatbuffers.Builder) -> Any:
        b.PrependInt32Slot(count + 6, 42, 0)
        return b.EndObject()

    monkeypatch.setattr(mod, "OperatorStart", start)
    monkeypatch.setattr(mod, "OperatorEnd", end)
    data = to_bytes(conv_model())
    monkeypatch.undo()
    return data


def test_unknown_table_field_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = with_extra_operator_field(monkeypatch)
    model = read_buffer(data)
    slot = schema.field_count("Operator") + 6
    assert model.unknown == [f"subgraph 0 operator 0: Operator field #{slot} is not in the installed schema"]
    with pytest.raises(LossyWriteError, match=f"writing would drop: subgraph 0 operator 0: Operator field #{slot}"):
        write(model, tmp_path / "out.tflite")
    assert not (tmp_path / "out.tflite").exists()
    # Asked for, the loss is accepted, and what remains reads back equal.
    write(model, tmp_path / "out.tflite", allow_loss=True)
    again = read(tmp_path / "out.tflite")
    assert again == model and again.unknown == []


def test_inspect_warns_about_unknown_fields(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "newer.tflite"
    path.write_bytes(with_extra_operator_field(monkeypatch))
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 0
    assert "warning: subgraph 0 operator 0: Operator field #" in result.stdout
    assert "(gpulint fix would drop it)" in result.stdout


def test_unknown_options_type_is_reported() -> None:
    data = bytearray(to_bytes(conv_model()))
    pos = table_field_pos(root(data).Subgraphs(0).Operators(0), 10)  # Operator.builtin_options_type
    data[pos] = 250
    model = read_buffer(bytes(data))
    assert model.unknown == ["subgraph 0 operator 0: BuiltinOptions type 250 is not in the installed schema"]
    assert model.subgraphs[0].operators[0].builtin_options is None


def test_unknown_enum_values_are_kept() -> None:
    model = conv_model()
    model.subgraphs[0].tensors.append(Tensor("future", [2], type=99))
    model.operator_codes.append(ir_module.OperatorCode(builtin_code=4000, version=2, deprecated_builtin_code=127))
    again = read_buffer(to_bytes(model))
    assert again == model and again.unknown == []
    assert again.subgraphs[0].tensors[-1].type == 99
    assert again.operator_codes[-1].name == "BUILTIN_4000"


@pytest.mark.parametrize(
    ("table", "cls", "renamed"),
    [
        ("Model", ir_module.Model, {}),
        ("SubGraph", ir_module.Subgraph, {}),
        ("Tensor", ir_module.Tensor, {}),
        (
            "Operator",
            ir_module.Operator,
            {
                "builtin_options_type": "builtin_options",
                "builtin_options2_type": "builtin_options_2",
                "builtin_options2": "builtin_options_2",
                "large_custom_options_offset": "custom_options",
                "large_custom_options_size": "custom_options",
            },
        ),
        ("OperatorCode", ir_module.OperatorCode, {}),
        ("Buffer", ir_module.Buffer, {"offset": "data", "size": "data"}),
        ("QuantizationParameters", ir_module.Quantization, {"details_type": "custom", "details": "custom"}),
        ("SparsityParameters", ir_module.Sparsity, {}),
        (
            "DimensionMetadata",
            ir_module.DimensionMetadata,
            {"array_segments_type": "array_segments", "array_indices_type": "array_indices"},
        ),
        ("VariantSubType", ir_module.VariantSubType, {}),
        ("SignatureDef", ir_module.SignatureDef, {}),
        ("TensorMap", ir_module.TensorMap, {}),
        ("Metadata", ir_module.Metadata, {}),
    ],
)
def test_ir_covers_every_schema_field(table: str, cls: type, renamed: dict[str, str]) -> None:
    """When the tflite package gains a field, this fails until the IR carries it."""
    ir_fields = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    for f in schema.fields(table):
        assert renamed.get(f.name, f.name) in ir_fields, f"{table}.{f.name} has no place in {cls.__name__}"

"""Reflection over the generated `tflite` modules."""

from __future__ import annotations

import pytest

from gpulint.model import OperatorCode, schema


@pytest.mark.parametrize(
    ("camel", "snake"),
    [
        ("StrideW", "stride_w"),
        ("DilationHFactor", "dilation_h_factor"),
        ("FusedActivationFunction", "fused_activation_function"),
        ("AdjX", "adj_x"),
        ("BuiltinOptions2", "builtin_options2"),
    ],
)
def test_snake(camel: str, snake: str) -> None:
    assert schema.snake(camel) == snake


def test_conv2d_fields_match_schema_fbs() -> None:
    fields = {f.name: (f.slot, f.kind, f.scalar, f.default) for f in schema.fields("Conv2DOptions")}
    assert fields["padding"] == (0, "scalar", "Int8", 0)
    assert fields["dilation_w_factor"] == (4, "scalar", "Int32", 1)
    assert schema.enum_of("Conv2DOptions", schema.fields("Conv2DOptions")[0]) == "Padding"


def test_field_kinds_of_core_tables() -> None:
    kinds = {f.name: (f.kind, f.table) for f in schema.fields("Model")}
    assert kinds["subgraphs"] == ("tables", "SubGraph")
    assert kinds["description"] == ("string", None)
    assert {f.name: f.kind for f in schema.fields("Operator")}["builtin_options"] == "union"
    # SignatureDef slot 3 (method_name) is deprecated: counted, but not a field.
    assert schema.field_count("SignatureDef") == 5
    assert [f.slot for f in schema.fields("SignatureDef")] == [0, 1, 2, 4]


def test_operator_codes() -> None:
    assert OperatorCode.of("CONV_2D", 3).name == "CONV_2D"
    custom = OperatorCode.of("Convolution2DTransposeBias")
    assert custom.is_custom and custom.name == "Convolution2DTransposeBias"
    # Codes above 127 live in builtin_code; the deprecated int8 field holds the placeholder.
    gelu = OperatorCode.of("GELU")
    assert gelu.builtin_code == 150 and gelu.deprecated_builtin_code == 127 and gelu.name == "GELU"
    # Old files only set the deprecated field.
    assert OperatorCode(builtin_code=0, deprecated_builtin_code=3).name == "CONV_2D"

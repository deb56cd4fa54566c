"""Lossless round trip over the shared corpus: equal IR, and bit-identical LiteRT outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import tflite
from conftest import corpus_params

from gpulint import reference
from gpulint.model import read, read_buffer, schema, to_bytes, write


@pytest.mark.parametrize("path", corpus_params())
def test_read_write_read_is_equal(path: Path, tmp_path: Path) -> None:
    model = read(path)
    assert model.unknown == []
    out = tmp_path / path.name
    write(model, out)
    again = read(out)
    assert again == model  # bytes appended after the model too (MediaPipe's associated-files zips)
    # Writing is deterministic: the same IR gives the same bytes, then what was appended.
    data, head = out.read_bytes(), to_bytes(again)
    assert data[: len(head)] == head
    assert data[len(head) :].lstrip(b"\0") == bytes(model.appended)


@pytest.mark.parametrize("path", corpus_params())
def test_rewritten_file_gives_bit_identical_outputs(path: Path, tmp_path: Path) -> None:
    model = read(path)
    out = tmp_path / path.name
    write(model, out)
    inputs = reference.random_inputs(model, seed=1)
    before, after = reference.run_models([path, out], inputs)
    assert len(before) == len(after) > 0
    for a, b in zip(before, after, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def _accessor_value(obj: object, table: str, f: schema.Field) -> object:
    if f.kind == "vector":
        arr = getattr(obj, f.camel + "AsNumpy")()
        return None if isinstance(arr, int) else arr.tolist()
    value = getattr(obj, f.camel)()
    if f.kind == "string":
        return None if value is None else value.decode("utf-8", "surrogateescape")
    enum = schema.enum_of(table, f)
    return schema.enum_name(enum, value) if enum else value


@pytest.mark.parametrize("path", corpus_params())
def test_reader_agrees_with_generated_accessors(path: Path) -> None:
    """The fast reader and tflite's own accessors see the same tensors, ops and options."""
    data = path.read_bytes()
    model = read_buffer(data)
    fb = tflite.Model.GetRootAs(data, 0)
    assert fb.SubgraphsLength() == len(model.subgraphs)
    for si, sg in enumerate(model.subgraphs):
        fsg = fb.Subgraphs(si)
        for ti, t in enumerate(sg.tensors):
            ft = fsg.Tensors(ti)
            assert t.shape == (ft.ShapeAsNumpy().tolist() if not ft.ShapeIsNone() else [])
            assert t.type == schema.enum_name("TensorType", ft.Type())
            assert t.buffer == ft.Buffer()
            assert t.name == ft.Name().decode("utf-8", "surrogateescape")
            fq = ft.Quantization()
            if fq is not None and not fq.ScaleIsNone():
                assert t.quantization is not None
                assert t.quantization.scale == fq.ScaleAsNumpy().tolist()
                assert t.quantization.zero_point == fq.ZeroPointAsNumpy().tolist()
        for oi, op in enumerate(sg.operators):
            fop = fsg.Operators(oi)
            assert op.opcode_index == fop.OpcodeIndex()
            assert op.inputs == fop.InputsAsNumpy().tolist()
            assert op.outputs == fop.OutputsAsNumpy().tolist()
            if op.builtin_options is None:
                assert fop.BuiltinOptionsType() == 0
                continue
            table = op.builtin_options.type
            assert schema.enum_value("BuiltinOptions", table) == fop.BuiltinOptionsType()
            obj = schema.table_class(table)()
            tab = fop.BuiltinOptions()
            obj.Init(tab.Bytes, tab.Pos)
            for f in schema.fields(table):
                assert op.builtin_options[f.name] == _accessor_value(obj, table, f), f"{table}.{f.name}"
    for bi, b in enumerate(model.buffers):
        fbuf = fb.Buffers(bi)
        expected = b"" if fbuf.DataIsNone() else fbuf.DataAsNumpy().tobytes()
        assert bytes(b.data) == expected

"""LiteRT-LM bundles (issue #47): `gpulint check model.litertlm` reads the bundle and checks the
TFLite models inside it, each named `BUNDLE#N`. The bundles here are written by `bundle()` below,
the layout of LiteRT-LM's own builder (tests/test_corpus_generative.py checks that builder's)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import flatbuffers
import pytest
from helpers import conv_model, needs_opencl
from toy_decoder import decoder
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import ModelError, read, to_bytes
from gpulint.model.litertlm import TFLITE_MODEL, models, sections

runner = CliRunner()
GENERIC = 1  # AnySectionDataType.GenericBinaryData (a tokenizer, say)


def _header(items: list[tuple[int, int, int, str | None]]) -> bytes:
    """The header flatbuffer: per section (begin, end, data type, model_type)."""
    b = flatbuffers.Builder(0)
    objects = []
    for begin, end, data_type, model_type in items:
        kvs = []
        if model_type is not None:
            key, text = b.CreateString("model_type"), b.CreateString(model_type)
            b.StartObject(1)
            b.PrependUOffsetTRelativeSlot(0, text, 0)
            value = b.EndObject()
            b.StartObject(3)
            b.PrependUOffsetTRelativeSlot(0, key, 0)
            b.PrependUint8Slot(1, 9, 0)  # VData.StringValue
            b.PrependUOffsetTRelativeSlot(2, value, 0)
            kvs.append(b.EndObject())
        b.StartVector(4, len(kvs), 4)
        for kv in reversed(kvs):
            b.PrependUOffsetTRelative(kv)
        vector = b.EndVector()
        b.StartObject(4)
        b.PrependUOffsetTRelativeSlot(0, vector, 0)
        b.PrependUint64Slot(1, begin, 0)
        b.PrependUint64Slot(2, end, 0)
        b.PrependUint8Slot(3, data_type, 0)
        objects.append(b.EndObject())
    b.StartVector(4, len(objects), 4)
    for o in reversed(objects):
        b.PrependUOffsetTRelative(o)
    vector = b.EndVector()
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, vector, 0)
    meta = b.EndObject()
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(1, meta, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def bundle(parts: list[tuple[bytes, int, str | None]]) -> bytes:
    """A bundle of (bytes, data type, model_type) sections, each 16-byte aligned after the header."""
    size = len(_header([(1 << 40, 1 << 40, t, m) for _, t, m in parts]))  # offsets of 8 bytes, as below
    at = 32 + size + (-(32 + size) % 16)
    items = []
    for data, t, m in parts:
        items.append((at, at + len(data), t, m))
        at += len(data) + (-len(data) % 16)
    header = _header(items)
    out = bytearray(b"LITERTLM" + struct.pack("<III", 1, 7, 0) + bytes(4) + struct.pack("<Q", 32 + len(header)))
    out += header
    for (data, _, _), (begin, _, _, _) in zip(parts, items, strict=True):
        out += bytes(begin - len(out)) + data
    return bytes(out)


@pytest.fixture
def two_models(tmp_path: Path) -> Path:
    path = tmp_path / "llm.litertlm"
    path.write_bytes(
        bundle(
            [
                (b"tokenizer bytes", GENERIC, None),
                (to_bytes(decoder()), TFLITE_MODEL, "tf_lite_prefill_decode"),
                (to_bytes(conv_model()), TFLITE_MODEL, "tf_lite_embedder"),
            ]
        )
    )
    return path


def test_the_bundle_lists_its_sections_and_models(two_models: Path) -> None:
    found = sections(two_models.read_bytes())
    assert [(s.index, s.data_type, s.model_type) for s in found] == [
        (0, GENERIC, None),
        (1, TFLITE_MODEL, "tf_lite_prefill_decode"),
        (2, TFLITE_MODEL, "tf_lite_embedder"),
    ]
    assert [s.index for s in models(two_models)] == [1, 2]


def test_a_member_reads_as_its_model(two_models: Path) -> None:
    assert [sg.name for sg in read(f"{two_models}#1").subgraphs] == ["prefill_4", "decode"]
    assert read(f"{two_models}#2").subgraphs[0].operators
    with pytest.raises(ModelError, match=r"section 0 of .* is no TFLite model \(its TFLite sections: 1, 2\)"):
        read(f"{two_models}#0")
    with pytest.raises(ModelError, match="a LiteRT-LM bundle of 2 TFLite models: name one"):
        read(two_models)


def test_check_reads_the_bundle_and_checks_each_model(two_models: Path) -> None:
    result = runner.invoke(app, ["check", str(two_models), "--format", "json", "--exit-zero"])
    assert result.exit_code == 0, result.output
    files = json.loads(result.stdout)["files"]
    assert [f["path"] for f in files] == [f"{two_models}#1", f"{two_models}#2"]
    assert files[0]["signatures"] == {"prefill_4": [0], "decode": [1]}
    text = runner.invoke(app, ["check", str(two_models.parent), "--exit-zero"]).stdout
    assert f"{two_models}#1: subgraph 1 (signature decode): " in text


@pytest.mark.parametrize(
    "data,words",
    [
        (b"LITERTLM" + bytes(8), "ends inside its header"),
        (b"LITERTLM" + bytes(16) + struct.pack("<Q", 1 << 40), "header ends at byte 1099511627776"),
        (b"LITERTLM" + bytes(16) + struct.pack("<Q", 40) + b"\xff" * 8, "not a LiteRT-LM header flatbuffer"),
    ],
)
def test_a_broken_bundle_is_one_line(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "broken.litertlm"
    path.write_bytes(data)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr


def test_a_section_past_the_end_is_one_line(tmp_path: Path) -> None:
    good = bundle([(to_bytes(conv_model()), TFLITE_MODEL, None)])
    path = tmp_path / "cut.litertlm"
    path.write_bytes(good[: len(good) - 100])
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2 and "outside the file" in result.stderr, result.output


@needs_opencl()
def test_verify_runs_a_model_inside_the_bundle(two_models: Path) -> None:
    result = runner.invoke(app, ["verify", f"{two_models}#1", "--signature", "decode", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["model"] == f"{two_models}#1"
    result = runner.invoke(app, ["verify", f"{two_models}#1", "--generate", "3"])
    assert result.exit_code == 0 and "tokens 1-3 agree" in result.stdout, result.output


def test_fix_report_inspect_and_bench_take_a_model_inside_the_bundle(two_models: Path, tmp_path: Path) -> None:
    member = f"{two_models}#1"
    out = tmp_path / "copy.tflite"
    result = runner.invoke(app, ["fix", member, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == to_bytes(decoder())  # unchanged: the member's own bytes, not the bundle's
    size = len(to_bytes(decoder()))
    assert f"{size:,} bytes" in runner.invoke(app, ["inspect", member]).stdout
    assert runner.invoke(app, ["report", member, "-o", str(tmp_path / "r.html")]).exit_code == 0


@needs_opencl()
def test_bench_runs_a_model_inside_the_bundle(two_models: Path) -> None:
    result = runner.invoke(app, ["bench", f"{two_models}#2", "--runs", "1", "--no-start"])
    assert result.exit_code == 0, result.output
    assert "LiteRT CPU interpreter" in result.stdout

"""Bytes after the model are another tool's data: read finds exactly them, write puts them back.

Ultralytics appends a zip with metadata.json (task, imgsz, stride, names, kpt_shape) after the
flatbuffer; TFLite Support appends a zip of associated files. Neither is the constants a large
model stores after its flatbuffer at Buffer.offset, nor the zero padding writers leave.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from gpulint.model import read, read_buffer, write
from gpulint.model.write import serialize
from gpulint.sample import sample_model

META = {"task": "pose", "imgsz": [640, 640], "stride": 32, "names": {"0": "person"}, "kpt_shape": [17, 3]}


def ultralytics_zip() -> bytes:
    """What Ultralytics' exporter appends (zipfile.ZipFile(file, "a") with one metadata.json)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", json.dumps(META, indent=2))
    return out.getvalue()


def model_bytes(tmp_path: Path, external: bool) -> bytes:
    path = tmp_path / "plain.tflite"
    write(sample_model(), path, external_buffers=external)
    return path.read_bytes()


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-buffers"])
def test_appended_zip_is_found_and_written_back(tmp_path: Path, external: bool) -> None:
    plain, zipped = model_bytes(tmp_path, external), ultralytics_zip()
    model = read_buffer(plain + zipped)
    assert bytes(model.appended) == zipped
    same = read_buffer(plain)
    same.appended = model.appended
    assert model == same  # the tables read the same with or without the zip after them
    out = tmp_path / "again.tflite"
    write(model, out, external_buffers=external)
    data = out.read_bytes()
    assert data.endswith(zipped)
    assert bytes(read(out).appended) == zipped
    with zipfile.ZipFile(out) as z:  # as Ultralytics reads it back
        assert json.loads(z.read("metadata.json")) == META


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external-buffers"])
def test_padding_is_not_appended_data(tmp_path: Path, external: bool) -> None:
    plain = model_bytes(tmp_path, external)
    assert read_buffer(plain).appended == b""
    # The converter writes 16 zeros after external buffers, then aligns to 16 (AppendBufferData).
    assert read_buffer(plain + b"\0" * 32).appended == b""


def test_appended_right_after_the_last_byte(tmp_path: Path) -> None:
    head, _ = serialize(sample_model())
    model = read_buffer(bytes(head) + b"x")
    assert bytes(model.appended) == b"x"


def test_appended_after_the_last_external_buffer(tmp_path: Path) -> None:
    """External constants are the model's own, however far past the flatbuffer they lie."""
    plain = model_bytes(tmp_path, True)
    model = read_buffer(plain + b"tail")
    assert bytes(model.appended) == b"tail"
    assert all(bytes(b.data) == bytes(c.data) for b, c in zip(model.buffers, sample_model().buffers, strict=True))

"""Bad input ends in one line `gpulint: error: <path>: <what>` and exit code 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import conv_model, patch_u32, root, table_field_pos, vector_length_pos
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import ModelError, read_buffer, to_bytes, write
from gpulint.model.build import ModelBuilder
from gpulint.summary import render_text, summarize

runner = CliRunner()


def good_bytes() -> bytearray:
    return bytearray(to_bytes(conv_model()))


def inspect_error(path: Path) -> str:
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gpulint: error: {path}: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0][len(f"gpulint: error: {path}: ") :]


def write_bytes(tmp_path: Path, data: bytes | bytearray, name: str = "bad.tflite") -> Path:
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


def test_missing_path(tmp_path: Path) -> None:
    assert inspect_error(tmp_path / "nope.tflite") == "no such file"


def test_directory(tmp_path: Path) -> None:
    assert inspect_error(tmp_path) == "is a directory, not a .tflite file"


def test_empty_file(tmp_path: Path) -> None:
    assert inspect_error(write_bytes(tmp_path, b"")) == "empty file"


def test_tiny_file(tmp_path: Path) -> None:
    assert inspect_error(write_bytes(tmp_path, b"TFL3")) == "too small to be a TFLite model (4 bytes)"


def test_wrong_identifier(tmp_path: Path) -> None:
    data = good_bytes()
    data[4:8] = b"ONNX"
    msg = inspect_error(write_bytes(tmp_path, data))
    assert msg == "not a TFLite model: file identifier is b'ONNX', expected b'TFL3'"


def test_random_bytes(tmp_path: Path) -> None:
    data = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    assert inspect_error(write_bytes(tmp_path, data)).startswith("not a TFLite model")


@pytest.mark.parametrize("keep", [0.25, 0.5, 0.9])
def test_truncated_file(tmp_path: Path, keep: float) -> None:
    data = good_bytes()
    msg = inspect_error(write_bytes(tmp_path, data[: int(len(data) * keep)]))
    assert msg.startswith("corrupt flatbuffer"), msg


def test_root_offset_out_of_range(tmp_path: Path) -> None:
    data = patch_u32(good_bytes(), 0, 0x7FFF_FFF0)
    assert "root table offset 2147483632 is past the end" in inspect_error(write_bytes(tmp_path, data))


def test_vector_length_claiming_gigabytes(tmp_path: Path) -> None:
    data = good_bytes()
    tensors_len = vector_length_pos(root(data).Subgraphs(0), 4)
    patch_u32(data, tensors_len, 0x4000_0000)
    msg = inspect_error(write_bytes(tmp_path, data))
    assert msg == (
        f"corrupt flatbuffer: subgraph 0: SubGraph.tensors claims 1073741824 elements, "
        f"more than a {len(data)}-byte file can hold"
    )


def test_shape_vector_length_claiming_gigabytes(tmp_path: Path) -> None:
    data = good_bytes()
    shape_len = vector_length_pos(root(data).Subgraphs(0).Tensors(0), 4)
    patch_u32(data, shape_len, 0xFFFF_FFFF)
    assert "Tensor.shape claims 4294967295 elements" in inspect_error(write_bytes(tmp_path, data))


def test_tensor_index_out_of_range(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 4])
    g.output(g.op("ADD", [x, 99], [1, 4]))
    path = tmp_path / "bad_index.tflite"
    write(mb.build(), path)
    msg = inspect_error(path)
    assert msg == "subgraph 0 operator 0 (ADD): input tensor index 99 is out of range (there are 2 tensors)"


def test_buffer_index_out_of_range(tmp_path: Path) -> None:
    data = good_bytes()
    pos = table_field_pos(root(data).Subgraphs(0).Tensors(1), 8)  # Tensor.buffer
    patch_u32(data, pos, 500)
    msg = inspect_error(write_bytes(tmp_path, data))
    assert msg.startswith("subgraph 0 tensor 1: buffer index 500 is out of range (there are ")


def test_external_buffer_offset_outside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ext.tflite"
    write(conv_model(), path, external_buffers=True)
    data = bytearray(path.read_bytes())
    fb = root(data)
    i = next(i for i in range(fb.BuffersLength()) if fb.Buffers(i).Offset() > 1)
    pos = table_field_pos(fb.Buffers(i), 6)
    data[pos : pos + 8] = (1 << 40).to_bytes(8, "little")
    msg = inspect_error(write_bytes(tmp_path, data))
    assert msg.startswith(f"corrupt flatbuffer: buffer {i}: buffer data at bytes 1099511627776..")


def test_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    bad = write_bytes(tmp_path, good_bytes()[:100])
    for args in (["inspect", str(bad)], ["inspect", str(tmp_path / "missing.tflite")], ["inspect", str(tmp_path)]):
        proc = subprocess.run([sys.executable, "-m", "gpulint", *args], capture_output=True, text=True)
        assert proc.returncode == 2
        assert proc.stdout == ""
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("gpulint: error: ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file, so permissions cannot be tested")
def test_unreadable_file(tmp_path: Path) -> None:
    p = write_bytes(tmp_path, good_bytes())
    p.chmod(0)
    assert inspect_error(p) == "Permission denied"


@settings(
    max_examples=int(os.environ.get("GPULINT_FUZZ_EXAMPLES", "300")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.one_of(st.none(), st.integers(8, 10_000)),
)
def test_mutated_models_read_or_fail_cleanly(flips: list[tuple[int, int]], cut: int | None) -> None:
    data = good_bytes()
    for pos, value in flips:
        data[pos % len(data)] = value
    if cut is not None:
        data = data[: cut % len(data)]
    start = time.perf_counter()
    try:
        model = read_buffer(bytes(data))
    except ModelError as e:
        assert str(e) and "\n" not in str(e)
    else:
        # What reads must also summarize and write back.
        render_text(summarize(model, "fuzz.tflite", len(data)))
        to_bytes(model, allow_loss=True)
    assert time.perf_counter() - start < 1.0

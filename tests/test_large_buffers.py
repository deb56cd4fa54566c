"""Constants stored after the flatbuffer (Buffer.offset/size), as converters write >2 GiB models."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import numpy as np
from helpers import conv_model, root

from gpulint import reference
from gpulint.model import read, write
from gpulint.model.write import serialize


def test_external_buffers_round_trip_and_run(tmp_path: Path) -> None:
    model = conv_model(weight_bytes=1 << 16)
    inline, external = tmp_path / "inline.tflite", tmp_path / "external.tflite"
    write(model, inline)
    write(model, external, external_buffers=True)
    # The external file keeps no data inside the flatbuffer.
    fb = root(external.read_bytes())
    assert all(fb.Buffers(i).DataIsNone() for i in range(fb.BuffersLength()))
    assert any(fb.Buffers(i).Offset() > 1 for i in range(fb.BuffersLength()))
    assert read(external) == model == read(inline)
    inputs = reference.random_inputs(model, seed=3)
    a, b = reference.run_models([inline, external], inputs)
    assert a[0].tobytes() == b[0].tobytes()


def test_buffer_past_2_gib_is_read_from_its_offset(tmp_path: Path) -> None:
    """A sparse file whose constant lies beyond 2**31: read through the mapping, not copied."""
    model = conv_model()
    head, _ = serialize(model, external_buffers=True)
    fb = root(head)
    where = 2**31 + 4096
    path = tmp_path / "big.tflite"
    expected = {}
    with open(path, "wb") as f:
        pos = where
        for i, buf in enumerate(model.buffers):
            if not len(buf.data):
                continue
            entry = fb.Buffers(i)
            struct.pack_into("<Q", head, entry._tab.Pos + entry._tab.Offset(6), pos)
            f.seek(pos)
            f.write(buf.data)
            expected[i] = bytes(buf.data)
            pos += (len(buf.data) + 15) // 16 * 16
        f.seek(0)
        f.write(head)
    assert path.stat().st_size > 2**31
    tracemalloc.start()
    again = read(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20
    for i, data in expected.items():
        assert bytes(again.buffers[i].data) == data
    assert again == model
    w = again.tensor_data(again.subgraphs[0].tensors[1])
    assert w is not None and w.shape == (8, 3, 3, 3)


def test_reading_does_not_copy_weights(tmp_path: Path) -> None:
    """Peak Python memory of a read does not grow with the bytes of constants."""
    path = tmp_path / "heavy.tflite"
    write(conv_model(weight_bytes=32 << 20), path)
    tracemalloc.start()
    model = read(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sum(len(b.data) for b in model.buffers) > 32 << 20
    assert peak < 1 << 20, f"reading a 32 MiB model allocated {peak} bytes"
    big = model.tensor_data(next(t for t in model.subgraphs[0].tensors if t.name == "big"))
    assert big is not None and big.dtype == np.float32 and not big.flags.writeable

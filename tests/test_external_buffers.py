"""Constants stored after the flatbuffer (Buffer.offset/size) are constants, for check as for the interpreter.

ai-edge-quantizer (litert-torch 0.10's fp16, weight-only and dynamic-range recipes) writes every buffer of 1024
bytes or more after the flatbuffer; the float export keeps them inline. TFLite's InterpreterBuilder reads such a
buffer through the model's Allocation (tflite/core/interpreter_builder.cc 756-776: `else if (offset > 1 &&
allocation_)`), which every FlatBufferModel has (BuildFromFile, BuildFromBuffer, BuildFromAllocation), and makes
the tensor read-only (kTfLiteMmapRo): a constant to the GPU delegate. Built without an Allocation
(`InterpreterBuilder(const Model*, ..., allocation = nullptr)`, which tests/oracle/gl_child.py used for issue #49's
measurements) the same buffer is not read: the tensor becomes a read-write arena tensor, a runtime input to every
op that reads it ("CONV_2D: Expected 1 or 2 input tensor(s), but node has 3 runtime inputs").

Each test builds its model with gpulint's own builder and writes it both ways; `without_allocation` writes what
such an interpreter sees of a file (the external buffers without data), the near miss of every case.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpulint.check import Settings, check_file
from gpulint.model import read
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Buffer, Model
from gpulint.model.write import write

# The GL oracle's settings (tests/test_oracle_fidelity.py): quantized ops off, MediaPipe's build, OpenGL.
SETTINGS = Settings(quantized=False, target="mediapipe", backend="opengl")
THREE_RUNTIME = "Expected 1 or 2 input tensor(s), but node has 3 runtime inputs."


def external_buffers(path: str | Path) -> set[int]:
    """The buffers a file stores after its flatbuffer (Buffer.offset > 1, schema.fbs)."""
    from gpulint.model import schema

    data = Path(path).read_bytes()
    fb = schema.table_class("Model").GetRootAs(data, 0)  # type: ignore[attr-defined]
    return {i for i in range(fb.BuffersLength()) if fb.Buffers(i).Offset() > 1}


def without_allocation(path: str | Path, out: str | Path) -> Path:
    """The model as an interpreter built without an Allocation reads `path`: each buffer stored after the
    flatbuffer has no data, so its tensors are read-write arena tensors (interpreter_builder.cc 756-776, 826-834)."""
    model: Model = read(path)
    for i in external_buffers(path):
        model.buffers[i] = Buffer()
    write(model, out, external_buffers=False)
    return Path(out)


def conv(fp16_weights: bool = False, runtime_weights: bool = False) -> Model:
    """CONV_2D [1,8,8,8] -> 8 with 3x3 weights (1152 bytes in fp32: over the quantizer's 1024-byte line) and an
    [8] bias; the weights fp16 behind a DEQUANTIZE, or a graph input."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 8])
    w_value = rng.standard_normal((8, 3, 3, 8)).astype(np.float32)
    if runtime_weights:
        w = g.input("w", [8, 3, 3, 8])
    elif fp16_weights:
        w = g.op("DEQUANTIZE", [g.const("w16", w_value.astype(np.float16))], [8, 3, 3, 8])
    else:
        w = g.const("w", w_value)
    b = g.const("b", rng.standard_normal(8).astype(np.float32))
    y = g.op("CONV_2D", [x, w, b], [1, 8, 8, 8], options={"padding": "SAME", "stride_h": 1, "stride_w": 1})
    g.output(y)
    return mb.build()


def written(model: Model, path: Path, external: bool) -> Path:
    write(model, path, external_buffers=external)
    assert bool(external_buffers(path)) == external
    return path


def conv_index(path: Path) -> int:
    m = read(path)
    return next(i for i, op in enumerate(m.subgraphs[0].operators) if m.op_name(op) == "CONV_2D")


@pytest.mark.parametrize("fp16", [False, True], ids=["f32-weights", "fp16-weights"])
def test_external_constants_are_constants(tmp_path: Path, fp16: bool) -> None:
    inline = written(conv(fp16), tmp_path / "inline.tflite", external=False)
    external = written(conv(fp16), tmp_path / "external.tflite", external=True)
    answers = [check_file(str(p), SETTINGS) for p in (inline, external)]
    for r in answers:
        assert r.error is None and r.verdict == "ready", r.reason
    assert answers[0].plans[0].delegated_nodes == answers[1].plans[0].delegated_nodes
    assert conv_index(external) in answers[1].plans[0].delegated_nodes


@pytest.mark.parametrize("fp16", [False, True], ids=["f32-weights", "fp16-weights"])
def test_without_an_allocation_the_weights_and_bias_are_runtime(tmp_path: Path, fp16: bool) -> None:
    """The near miss: the same file read without an Allocation. The weights (and the fp16 constant behind the
    DEQUANTIZE, which FP16GraphPartitionHelper then does not fold: utils.cc 239-253 asks IsConstantTensor) and
    the bias are runtime tensors: three runtime inputs, which compat's CheckConvoultionInputOutput refuses."""
    external = written(conv(fp16), tmp_path / "external.tflite", external=True)
    seen = without_allocation(external, tmp_path / "seen.tflite")
    r = check_file(str(seen), SETTINGS)
    assert r.error is None
    op = next(p for p in r.ops if p.op == "CONV_2D")
    assert op.placement == "cpu" and THREE_RUNTIME in op.reasons, op.reasons


def test_runtime_weights_with_a_constant_bias(tmp_path: Path) -> None:
    """Between the two: weights a runtime tensor, the bias (under 1024 bytes: inline) a constant. compat takes
    the conv (two runtime inputs), and the delegate then fails at init: the weights enter the GL graph as a
    runtime value whose batch (8) is not the input's (what the oracle says of the weight-only int8 exports,
    whose DEQUANTIZE it leaves on the CPU)."""
    path = written(conv(runtime_weights=True), tmp_path / "rt.tflite", external=False)
    r = check_file(str(path), SETTINGS)
    assert r.error is None and r.verdict == "init-failure", r.reason
    assert "Batch size mismatch" in r.reason and "`w` [8, 3, 3, 8]" in r.reason, r.reason

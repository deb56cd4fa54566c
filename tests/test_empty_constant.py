"""A zero-element constant (a buffer with an empty data vector, no producer), as converters write the
shape operand of a RESHAPE to a scalar (BirdNET's STFT framing, litert-torch's LLM exports): the
interpreter reads it as a constant, so it is one everywhere in gpulint (issue #47). A buffer with no
data vector at all leaves the tensor to the arena, and then the RESHAPE's output shape is unknown at
Prepare: the GL oracle agrees with both (tests/oracle/grid.py issue_47_graphs)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tflite
from helpers import needs_opencl
from typer.testing import CliRunner

from gpulint import cli
from gpulint.cli import app
from gpulint.model import Model, read_buffer, to_bytes, write
from gpulint.model.build import ModelBuilder

runner = CliRunner()
SHAPE = 1  # the shape operand's tensor index in scalar_reshape's models


def scalar_reshape(vector: bool) -> Model:
    """x * RESHAPE(pos, shape=[]) -> RELU, the shape operand a zero-element INT32 tensor."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 4])
    shape = g.tensor("scalar_shape", [0], "INT32", buffer=mb.buffer(b"", constant=vector))
    s = g.op("RESHAPE", [g.input("pos", [1]), shape], [], options=dict(new_shape=[]))
    g.output(g.op("RELU", [g.op("MUL", [x, s], [1, 8, 8, 4])], [1, 8, 8, 4]))
    return mb.build()


def data_vector(data: bytes, tensor: int) -> tuple[bool, int]:
    """(whether the file has a data vector for the tensor's buffer, its length), read with tflite."""
    m = tflite.Model.GetRootAsModel(data, 0)
    buf = m.Buffers(m.Subgraphs(0).Tensors(tensor).Buffer())
    return not buf.DataIsNone(), buf.DataLength()


def test_an_empty_data_vector_survives_a_round_trip_and_reads_as_a_constant() -> None:
    model = scalar_reshape(vector=True)
    data = to_bytes(model)
    assert data_vector(data, SHAPE) == (True, 0)
    back = read_buffer(data)
    tensor = back.subgraphs[0].tensors[SHAPE]
    assert back.is_constant(tensor)
    value = back.tensor_data(tensor)
    assert value is not None and value.shape == (0,) and value.dtype == np.int32
    assert data_vector(to_bytes(back), SHAPE) == (True, 0)


def test_a_buffer_without_a_data_vector_stays_without_one() -> None:
    model = scalar_reshape(vector=False)
    data = to_bytes(model)
    assert data_vector(data, SHAPE) == (False, 0)
    back = read_buffer(data)
    assert not back.is_constant(back.subgraphs[0].tensors[SHAPE])
    assert back.tensor_data(back.subgraphs[0].tensors[SHAPE]) is None


def test_the_builder_and_the_passes_write_an_empty_constant_with_its_vector() -> None:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    t = g.const("empty", np.zeros([0], np.int32))
    model = mb.build()
    assert model.is_constant(model.subgraphs[0].tensors[t])
    from gpulint.passes.edit import add_const

    u = add_const(model, model.subgraphs[0], "empty2", np.zeros([2, 0], np.float32))
    assert model.tensor_data(model.subgraphs[0].tensors[u]).shape == (2, 0)  # type: ignore[union-attr]


def test_check_does_not_refuse_a_graph_for_an_empty_constant(tmp_path: Path) -> None:
    path = tmp_path / "m.tflite"
    write(scalar_reshape(vector=True), path)
    result = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert "refused" not in result.stdout.split('"verdict"')[-1][:80], result.stdout
    assert "is a graph input" not in result.stdout


def test_check_refuses_where_the_shape_operand_has_no_data_vector_and_says_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "m.tflite"
    write(scalar_reshape(vector=False), path)
    result = runner.invoke(app, ["check", str(path)])
    assert "verdict: refused" in result.stdout, result.stdout
    assert "`scalar_shape` has no data in the file and no op computes it" in result.stdout
    assert "is a graph input" not in result.stdout


@needs_opencl()
@pytest.mark.parametrize("vector,code", [(True, 0), (False, 3)])
def test_verify_runs_a_model_with_an_empty_constant(tmp_path: Path, vector: bool, code: int) -> None:
    """Before, the partitioner took the empty constant for an input of its part: KeyError."""
    path = tmp_path / "m.tflite"
    write(scalar_reshape(vector), path)
    result = runner.invoke(app, ["verify", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output


@needs_opencl()
def test_the_partitioned_runner_feeds_no_empty_constant() -> None:
    from helpers import opencl_device

    from gpulint.partitioned import PartitionedRunner

    device, _ = opencl_device()
    assert device is not None
    runner_ = PartitionedRunner(scalar_reshape(vector=True), device)
    try:
        assert all(SHAPE not in part.inputs for part in runner_.parts)
        x = np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype(np.float32)
        (out,) = runner_.run([x, np.array([2.0], np.float32)])
        np.testing.assert_allclose(out, np.maximum(2 * x, 0), rtol=1e-6)
    finally:
        runner_.close()


def test_an_unexpected_error_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A bug anywhere in a command: one line naming the command and the error, exit 2, never 1 (FAIL)."""
    import functools

    import gpulint.cli.inspect as inspect_cli

    @functools.wraps(inspect_cli.inspect)
    def broken(*args: object, **options: object) -> None:
        raise KeyError(23)

    monkeypatch.setattr(inspect_cli, "inspect", broken)
    monkeypatch.setattr(sys, "argv", ["gpulint", "inspect", str(tmp_path / "m.tflite")])
    monkeypatch.delenv("GPULINT_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("gpulint: internal error in `gpulint inspect`: KeyError: 23"), err

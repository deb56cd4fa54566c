"""The partitioned runner: an op the delegate runs but the executor cannot lower runs on the
LiteRT CPU interpreter instead, with a warning, so verify never gives up on a model for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import opencl_device
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.executor import ExecutorError
from gpulint.executor import executor as executor_module
from gpulint.executor.ops import LOWER
from gpulint.model import Model, to_bytes, write
from gpulint.model.build import ModelBuilder
from gpulint.partitioned import PartitionedRunner

DEVICE, NO_DEVICE = opencl_device()
pytestmark = pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE or "no OpenCL device")
RNG = np.random.default_rng(5)


def chain() -> Model:
    """CONV_2D -> SOFTMAX -> CONV_2D, all on the GPU as check places them."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    y = g.input("x", [1, 6, 6, 8])
    opts = dict(padding="SAME", stride_w=1, stride_h=1)
    for i in range(2):
        wt, b = (
            g.const(f"w{i}", RNG.standard_normal((8, 3, 3, 8)).astype(np.float32) * 0.3),
            g.const(f"b{i}", np.zeros(8)),
        )
        y = g.op("CONV_2D", [y, wt, b], [1, 6, 6, 8], options=opts, out_name=f"conv{i}")
        if i == 0:
            y = g.op("SOFTMAX", [y], [1, 6, 6, 8], options=dict(beta=1.0), out_name="softmax")
    g.output(y)
    return mb.build()


def cpu(model: Model, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=to_bytes(model))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return np.asarray(it.get_tensor(it.get_output_details()[0]["index"]))


def refuse_softmax(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any, *args: Any) -> None:
        raise ExecutorError("not lowered in this test")

    monkeypatch.setitem(LOWER, "SOFTMAX", refuse)


def test_an_op_the_executor_cannot_lower_runs_on_the_cpu_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_softmax(monkeypatch)
    model = chain()
    assert DEVICE is not None
    runner = PartitionedRunner(model, DEVICE)
    try:
        assert [(p.kind, p.ops) for p in runner.parts] == [("gpu", [0]), ("cpu", [1]), ("gpu", [2])]
        assert runner.warnings == [
            "op 1 SOFTMAX (not lowered in this test): runs on the LiteRT CPU interpreter here, "
            "though the delegate runs it on the GPU"
        ]
        assert "moved from the GPU side, the executor cannot run SOFTMAX" in runner.parts[1].describe(model)
        x = RNG.uniform(-2, 2, (1, 6, 6, 8)).astype(np.float32)
        np.testing.assert_allclose(runner.run([x])[0], cpu(model, x), rtol=0, atol=1e-5)
    finally:
        runner.close()


def test_an_error_that_names_no_op_moves_its_whole_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(model: Model, fusing: bool) -> Model:
        raise ExecutorError("cannot prepare the model for the executor (test)")

    monkeypatch.setattr(executor_module, "prepare", refuse)
    model = chain()
    assert DEVICE is not None
    runner = PartitionedRunner(model, DEVICE)
    try:
        assert [(p.kind, p.ops) for p in runner.parts] == [("cpu", [0, 1, 2])]
        assert len(runner.warnings) == 3 and "cannot prepare the model" in runner.warnings[0]
        x = RNG.uniform(-2, 2, (1, 6, 6, 8)).astype(np.float32)
        np.testing.assert_allclose(runner.run([x])[0], cpu(model, x), rtol=0, atol=1e-6)
    finally:
        runner.close()


def test_verify_passes_with_the_op_on_the_cpu_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_softmax(monkeypatch)
    path = tmp_path / "chain.tflite"
    write(chain(), path)
    r = CliRunner().invoke(app, ["verify", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["status"] == "PASS"
    assert [p["kind"] for p in out["partitions"]] == ["gpu", "cpu", "gpu"]
    assert "the executor cannot run SOFTMAX (not lowered in this test)" in out["partitions"][1]["summary"]
    text = CliRunner().invoke(app, ["verify", str(path)])
    assert text.exit_code == 0 and "moved from the GPU side" in text.stdout


def test_verify_json_lists_the_ops_moved_to_the_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`verify --format json` carries the runner's warnings at the top level, as the text output does."""
    refuse_softmax(monkeypatch)
    path = tmp_path / "chain.tflite"
    write(chain(), path)
    r = CliRunner().invoke(app, ["verify", str(path), "--format", "json"])
    out = json.loads(r.stdout)
    assert r.exit_code == 0, r.output
    assert out["warnings"] == [
        "op 1 SOFTMAX (not lowered in this test): runs on the LiteRT CPU interpreter here, "
        "though the delegate runs it on the GPU"
    ]

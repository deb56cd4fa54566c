"""Limits: deep graphs without recursion; check and fix without a working OpenCL install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

runner = CliRunner()


def test_a_3000_op_chain_goes_through_every_command(tmp_path: Path) -> None:
    """Nothing walks the graph recursively: depth is bounded by the op count alone."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    w = g.const("w", np.zeros((4, 1, 1, 4), np.float32))
    for i in range(1500):
        x = g.op("CONV_2D", [x, w, -1], [1, 4, 4, 4], options=dict(padding="SAME", stride_w=1, stride_h=1))
        x = g.op("RELU" if i % 2 else "RELU6", [x], [1, 4, 4, 4])
    g.output(x)
    path = tmp_path / "deep.tflite"
    write(mb.build(), path)
    assert runner.invoke(app, ["inspect", str(path)]).exit_code == 0
    assert runner.invoke(app, ["check", str(path)]).exit_code == 0
    assert runner.invoke(app, ["report", str(path), "--no-fix", "-o", str(tmp_path / "r.html")]).exit_code == 0
    r = runner.invoke(app, ["fix", str(path), "-o", str(tmp_path / "f.tflite"), "--skip-proof"])
    assert r.exit_code == 0 and "fused RELU6" in r.stdout


def test_check_and_fix_work_with_a_broken_opencl(tmp_path: Path) -> None:
    """A broken pyopencl (here: one that raises on import) never stops check or fix."""
    shim = tmp_path / "shim" / "pyopencl"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise RuntimeError('clGetPlatformIDs failed: -1001 (broken ICD)')\n")
    model = tmp_path / "m.tflite"
    write(sample_model(), model)
    env = {**os.environ, "PYTHONPATH": str(shim.parent)}
    for args in (
        ["check", str(model), "--exit-zero"],
        ["fix", str(model), "-o", str(tmp_path / "f.tflite")],
        ["inspect", str(model)],
        ["report", str(model), "-o", str(tmp_path / "r.html")],
    ):
        proc = subprocess.run([sys.executable, "-m", "gpulint", *args], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stderr[-1500:])

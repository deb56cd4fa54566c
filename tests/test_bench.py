"""`gpulint bench`: the CPU interpreter and the executor timed in one run, start times, per-op table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import conv_model, needs_opencl
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import write
from gpulint.model.build import ModelBuilder

pytestmark = needs_opencl()
runner = CliRunner()


def test_bench_json_has_both_latencies_and_the_op_table(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    r = runner.invoke(app, ["bench", str(path), "--runs", "3", "--no-start", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["cpu_interpreter_ms"] > 0 and out["executor_ms"] > 0
    assert out["ratio"] == pytest.approx(out["executor_ms"] / out["cpu_interpreter_ms"], rel=0.05)
    assert out["device"] and out["cpu_threads"] >= 1 and out["cold_start_s"] is None
    assert sorted(row["op"] for row in out["ops"]) == ["CONV_2D", "input to slices"]
    assert sum(row["share"] for row in out["ops"]) == pytest.approx(1.0, abs=0.01)


def test_bench_start_times_cached_is_faster(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    r = runner.invoke(app, ["bench", str(path), "--runs", "2"])
    assert r.exit_code == 0, r.output
    assert "LiteRT CPU interpreter (" in r.stdout and "OpenCL executor:" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "start (read, build, first run)" in ln)
    cold, cached = (float(part.split()[-2]) for part in line.split(":")[1].split(","))
    assert cached < cold  # the cached start skips compiling the kernels


def test_bench_refuses_a_bad_model(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"junk")
    r = runner.invoke(app, ["bench", str(junk)])
    assert r.exit_code == 2 and "gpulint: error:" in r.stderr


def test_bench_says_when_the_executor_output_is_all_nan(tmp_path: Path) -> None:
    """SQRT(-|x| - 1): NaN everywhere; bench times it but says the results are unusable."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    y = g.op("NEG", [g.op("ABS", [x], [1, 4, 4, 8])], [1, 4, 4, 8])
    y = g.op("ADD", [y, g.const("minus_one", np.array([-1.0], np.float32))], [1, 4, 4, 8])
    g.output(g.op("SQRT", [y], [1, 4, 4, 8], out_name="root"))
    path = tmp_path / "nan.tflite"
    write(mb.build(), path)
    r = runner.invoke(app, ["bench", str(path), "--runs", "2", "--no-start", "--format", "json"])
    assert r.exit_code == 0, r.output
    (warning,) = json.loads(r.stdout)["warnings"]
    assert warning.startswith("output root is all NaN/Inf on the executor")
    text = runner.invoke(app, ["bench", str(path), "--runs", "2", "--no-start"])
    assert "warning: output root is all NaN/Inf" in text.stdout

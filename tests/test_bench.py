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
    assert [row["op"] for row in out["ops"]] == ["CONV_2D"]  # its 3-channel input read as given: no conversion
    assert sum(row["share"] for row in out["ops"]) == pytest.approx(1.0, abs=0.01)
    # what it measured under (#41: bench shares the machine with nothing of its own, and says how busy it was)
    assert set(out["load"]) == {"before", "after", "cores"} and out["load"]["cores"] >= 1


def test_bench_start_times_cached_is_faster(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    r = runner.invoke(app, ["bench", str(path), "--runs", "2"])
    assert r.exit_code == 0, r.output
    assert "LiteRT CPU interpreter (" in r.stdout and "OpenCL executor:" in r.stdout
    assert "  measured under: load average " in r.stdout
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


def split_model(reverse: bool) -> ModelBuilder:
    """CONV_2D -> REVERSE_V2 (no GPU implementation: a CPU partition) or SOFTMAX -> CONV_2D -> CONV_2D."""
    rng = np.random.default_rng(1)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    y = g.input("x", [1, 8, 8, 4])
    opts = dict(padding="SAME", stride_w=1, stride_h=1)
    for i in range(3):
        w = g.const(f"w{i}", rng.standard_normal((4, 3, 3, 4)).astype(np.float32) * 0.3)
        y = g.op("CONV_2D", [y, w, g.const(f"b{i}", np.zeros(4, np.float32))], [1, 8, 8, 4], options=opts)
        if i == 0 and reverse:
            y = g.op("REVERSE_V2", [y, g.const("axis", np.array([2], np.int32))], [1, 8, 8, 4])
        elif i == 0:
            y = g.op("SOFTMAX", [y], [1, 8, 8, 4], options=dict(beta=1.0))
    g.output(y)
    return mb


def test_bench_times_what_the_delegate_runs_partitions_and_all(tmp_path: Path) -> None:
    """The ops check leaves on the CPU run on the interpreter, timed as their own model; the
    executor's time is the sum of its partitions' times."""
    path = tmp_path / "split.tflite"
    write(split_model(True).build(), path)
    r = runner.invoke(app, ["bench", str(path), "--runs", "3", "--no-start", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    parts = out["partitions"]
    # the classic delegate takes one partition, the larger: the first conv stays with REVERSE_V2
    assert [p["kind"] for p in parts] == ["cpu", "gpu"] and "REVERSE_V2" in parts[0]["summary"]
    assert all(p["ms"] > 0 for p in parts) and out["executor_ms"] >= 0.5 * sum(p["ms"] for p in parts)
    assert sorted(row["op_index"] for row in out["ops"] if row["op_index"] >= 0) == [2, 3]  # the model's numbers
    text = runner.invoke(app, ["bench", str(path), "--runs", "2", "--no-start"])
    assert "partition cpu" in text.stdout and "LiteRT CPU interpreter: 2 ops (CONV_2D, REVERSE_V2)" in text.stdout


def test_bench_runs_an_op_the_executor_cannot_lower_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulint.executor import ExecutorError
    from gpulint.executor.ops import LOWER

    def refuse(self: object, *args: object) -> None:
        raise ExecutorError("not lowered in this test")

    monkeypatch.setitem(LOWER, "SOFTMAX", refuse)
    path = tmp_path / "softmax.tflite"
    write(split_model(False).build(), path)
    r = runner.invoke(app, ["bench", str(path), "--runs", "2", "--no-start", "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [p["kind"] for p in out["partitions"]] == ["gpu", "cpu", "gpu"]
    assert out["warnings"] == [
        "op 1 SOFTMAX (not lowered in this test): runs on the LiteRT CPU interpreter here, "
        "though the delegate runs it on the GPU"
    ]

"""`gpulint verify --engine gl`: the classic TFLite GPU delegate's OpenGL backend (the real runtime,
from the mediapipe wheel) as the GPU side of a verification, judged by the same comparator.

The delegate runs in the oracle venv's Python (`make oracle`: mediapipe==1.2.2 and Mesa's
llvmpipe), named by GPULINT_GL_PYTHON; where that venv is missing the tests that need it skip with
the oracle's reason. The cases are issue #49's: an ADD or MUL of a runtime [1, 1] tensor and a
constant [48] computes wrong on this delegate (channels 1..47), the same ADD of a [1, 48] tensor
is exact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import needs_accelerator
from oracle import VENV, unavailable

from gpulint.engines import EngineError, EngineUnavailable, open_engine
from gpulint.engines import gl as gl_engine
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model
from gpulint.model.write import write

GPULINT = [sys.executable, "-m", "gpulint"]
HERE = Path(__file__).resolve().parent
WHEEL_PYTHON = {gl_engine.PYTHON_ENV: str(VENV / "bin" / "python")}
needs_gl = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")


def verify(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPULINT, "verify", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600
    )


def broadcast_model(op: str, runtime: list[int], channels: int = 48) -> Model:
    """`op` of a runtime tensor of shape `runtime` and a constant [channels]."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", runtime)
    c = g.const("c", np.linspace(0.5, 2.0, channels, dtype=np.float32))
    g.output(g.op(op, [x, c], [*[1] * (len(runtime) - 1), channels]))
    return mb.build()


@needs_gl
@pytest.mark.parametrize("fp16_weights", [False, True])
def test_constants_stored_after_the_flatbuffer_are_constants_on_the_gl_delegate(
    tmp_path: Path, fp16_weights: bool
) -> None:
    """The quantizer's layout (every buffer of 1 KiB or more after the flatbuffer): the engine gives the
    interpreter the model's bytes as its Allocation, as an app's loader does; without one the weights
    were never loaded (interpreter_builder.cc 756-776) and a torchvision ResNet-18 with fp16 weights
    ended in "Input tensor 44 lacks data" (measured), where it PASSes with 57 ops on the GPU."""
    from test_external_buffers import conv

    path = tmp_path / "external.tflite"
    write(conv(fp16_weights=fp16_weights), path, external_buffers=True)
    proc = verify(str(path), "--engine", "gl", "--format", "json", env=WHEEL_PYTHON)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["status"] == "PASS", answer


@needs_gl
@pytest.mark.parametrize(("op", "runtime"), [("ADD", [1, 1]), ("ADD", [1, 1, 1, 1]), ("MUL", [1, 1])])
def test_a_runtime_1x1_broadcast_against_a_constant_fails_on_the_gl_delegate(
    tmp_path: Path, op: str, runtime: list[int]
) -> None:
    path = tmp_path / "broadcast.tflite"
    write(broadcast_model(op, runtime), path)
    proc = verify(str(path), "--engine", "gl", "--format", "json", env=WHEEL_PYTHON)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "FAIL" and out["engine"] == "gl" and out["executor_ops"] == 1, out
    gl = out["outputs"][0]["executor"]
    assert gl["status"] == "FAIL" and gl["max_abs_error"] > 0.4  # channels 1..47 wrong, not a rounding
    assert "OpenGL backend" in out["device"]["why"] and "mediapipe 1.2.2" in out["device"]["why"]


@needs_gl
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_control_passes_on_the_gl_delegate(tmp_path: Path, precision: str) -> None:
    """ADD [1, 48] + const [48]: the same op with the runtime tensor at full width is exact."""
    path = tmp_path / "control.tflite"
    write(broadcast_model("ADD", [1, 48]), path)
    proc = verify(str(path), "--engine", "gl", "--precision", precision, "--runs", "2", env=WHEEL_PYTHON)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout.splitlines()[0] and "engine: gl (" in proc.stdout
    assert "partition gpu on GL delegate" in proc.stdout and "warning" not in proc.stdout
    assert ("precision loss allowed" in proc.stdout) == (precision == "fp16")


@needs_gl
@needs_accelerator()
def test_engine_all_includes_gl_and_its_fail_decides(tmp_path: Path) -> None:
    """The executor and the accelerator compute the [1, 1] broadcast right, the GL delegate does not."""
    path = tmp_path / "broadcast.tflite"
    write(broadcast_model("ADD", [1, 1]), path)
    proc = verify(str(path), "--engine", "all", "--format", "json", env=WHEEL_PYTHON)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "FAIL", proc.stdout + proc.stderr
    assert [(e["engine"], e["status"]) for e in out["engines"]] == [
        ("opencl", "PASS"),
        ("litert-gpu", "PASS"),
        ("gl", "FAIL"),
    ]


@needs_gl
def test_state_carried_from_one_run_into_the_next_is_said(tmp_path: Path) -> None:
    """The broadcast leaves channels 4..47 unwritten: they hold what the buffer held, zeros at first,
    then what the ops after it wrote on the previous run. The engine runs the first inputs twice and
    says so (issue #49's runs of one model that differ: this delegate, not llvmpipe's threads)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x, a = g.input("x", [1, 1]), g.input("a", [1, 48])
    u = g.op("ADD", [x, g.const("c", np.linspace(0.5, 2.0, 48, dtype=np.float32))], [1, 48])
    w = g.op("ADD", [g.op("MUL", [u, a], [1, 48]), a], [1, 48])
    g.output(g.op("MUL", [w, a], [1, 48]))
    path = tmp_path / "carry.tflite"
    write(mb.build(), path)
    proc = verify(str(path), "--engine", "gl", "--format", "json", env=WHEEL_PYTHON)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "FAIL", proc.stdout
    assert any("the same inputs run twice gave 44 of 48 output values different" in w for w in out["warnings"]), out


@needs_gl
def test_an_op_the_delegate_refuses_runs_on_the_cpu_and_is_said(tmp_path: Path) -> None:
    """A graph the delegate takes none of: its own execution plan says so, and the result is
    CPU-ONLY (exit 3), not a PASS."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8], "INT32")
    g.output(g.op("CUMSUM", [x, g.const("axis", np.array(1, np.int32))], [1, 8], dtype="INT32"))
    path = tmp_path / "cumsum.tflite"
    write(mb.build(), path)
    proc = verify(str(path), "--engine", "gl", "--format", "json", env=WHEEL_PYTHON)
    out = json.loads(proc.stdout)
    assert proc.returncode == 3 and out["status"] == "CPU-ONLY" and out["executor_ops"] == 0, proc.stdout


def test_without_the_wheel_one_line_names_the_extra(tmp_path: Path) -> None:
    """This test's Python has no mediapipe: one error line that names gpulint[gl] and the pin."""
    path = tmp_path / "control.tflite"
    write(broadcast_model("ADD", [1, 48]), path)
    proc = verify(str(path), "--engine", "gl", env={gl_engine.PYTHON_ENV: sys.executable})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulint: error: "), proc.stderr
    assert "gpulint[gl]" in lines[0] and "mediapipe==1.2.2" in lines[0] and "Traceback" not in proc.stderr


def test_a_python_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "control.tflite"
    write(broadcast_model("ADD", [1, 48]), path)
    proc = verify(str(path), "--engine", "gl", env={gl_engine.PYTHON_ENV: str(tmp_path / "no-python")})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "gpulint[gl]" in lines[0], proc.stderr


def test_a_delegate_that_crashes_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child dies of SIGSEGV before answering: an EngineError that says so, and gpulint lives."""
    path = tmp_path / "control.tflite"
    model = broadcast_model("ADD", [1, 48])
    write(model, path)
    monkeypatch.setattr(gl_engine, "CHILD", HERE / "engine_crash_child.py")
    monkeypatch.setenv(gl_engine.PYTHON_ENV, sys.executable)
    with pytest.raises(EngineError) as e:
        open_engine("gl", model, path, "fp32", "classic", None)
    assert not isinstance(e.value, EngineUnavailable)
    assert str(e.value).startswith("the GL delegate crashed (SIGSEGV)"), e.value


def test_a_precision_the_delegate_lacks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "control.tflite"
    model = broadcast_model("ADD", [1, 48])
    write(model, path)
    with pytest.raises(EngineError, match="no fp32-fp16 mode"):
        open_engine("gl", model, path, "fp32-fp16", "classic", None)

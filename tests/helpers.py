"""Small models and byte surgery shared by the tests."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tflite
from filelock import FileLock

from gpulint.executor import Device, ExecutorError, select_device
from gpulint.model import Model
from gpulint.model.build import ModelBuilder


@cache
def opencl_device() -> tuple[Device | None, str]:
    """The default OpenCL device (PoCL without a GPU), or None and why there is none."""
    try:
        return select_device(), ""
    except ExecutorError as e:
        return None, f"no OpenCL device: {e}"


def needs_opencl() -> pytest.MarkDecorator:
    """Skip, saying why, where no OpenCL device can be opened."""
    device, why = opencl_device()
    return pytest.mark.skipif(device is None, reason=why or "-")


def conv_model(channels: int = 8, weight_bytes: int | None = None) -> Model:
    """image [1,8,8,3] -> CONV_2D (RELU) -> [1,8,8,channels]; `weight_bytes` adds a big constant."""
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("image", [1, 8, 8, 3])
    w = g.const("w", rng.standard_normal((channels, 3, 3, 3)).astype(np.float32))
    b = g.const("b", rng.standard_normal(channels).astype(np.float32))
    y = g.op(
        "CONV_2D",
        [x, w, b],
        [1, 8, 8, channels],
        options=dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU"),
    )
    if weight_bytes:
        # A large constant added to the output (broadcast), so the interpreter really reads it.
        n = weight_bytes // 4 // channels
        big = g.const("big", rng.standard_normal((n, channels)).astype(np.float32))
        s = g.op(
            "SLICE",
            [big, g.const("begin", np.array([0, 0], np.int32)), g.const("size", np.array([1, channels], np.int32))],
            [1, channels],
        )
        y = g.op("ADD", [y, s], [1, 8, 8, channels])
    g.output(y)
    return mb.build()


def table_field_pos(table: object, vt_offset: int) -> int:
    """Absolute position of a field of a generated-accessor table (0 if absent)."""
    tab = table._tab  # type: ignore[attr-defined]
    o = tab.Offset(vt_offset)
    return tab.Pos + o if o else 0


def vector_length_pos(table: object, vt_offset: int) -> int:
    """Absolute position of the uint32 length prefix of a vector field."""
    tab = table._tab  # type: ignore[attr-defined]
    return tab.Vector(tab.Offset(vt_offset)) - 4


def patch_u32(data: bytearray, pos: int, value: int) -> bytearray:
    struct.pack_into("<I", data, pos, value)
    return data


def root(data: bytes | bytearray) -> tflite.Model:
    return tflite.Model.GetRootAs(data, 0)


# LiteRT's GPU accelerator, one process at a time on this machine: compiles have hung when several ran at
# once on Mesa's lavapipe. `make test` keeps every test that uses it on one pytest-xdist worker (conftest.py,
# the "accelerator" group) and holds this lock while each of them runs; the probe below, which every
# worker makes while collecting, holds it too. One object per process: the lock is reentrant.
ACCELERATOR_LOCK = FileLock(Path(tempfile.gettempdir()) / f"gpulint-tests-accelerator-{os.getuid()}.lock")


@cache
def accelerator_unavailable() -> str | None:
    """Why LiteRT's GPU accelerator (the litert-gpu engine) cannot run here; None when it can. A
    one-conv model compiled once per session: no WebGPU adapter, or the verify extra missing."""
    from gpulint.model.write import write

    try:
        from gpulint.engines import EngineError, EngineUnavailable, open_engine
    except ImportError as e:
        return f"LiteRT's GPU accelerator cannot start: {e}"
    with ACCELERATOR_LOCK, tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "probe.tflite")
        model = conv_model(4)
        write(model, path)
        try:
            open_engine("litert-gpu", model, path, "fp32", "litert-gpu", None).close()
        except EngineUnavailable as e:
            return str(e)
        except (EngineError, ImportError) as e:
            return f"LiteRT's GPU accelerator cannot start: {e}"
    return None


def needs_accelerator() -> pytest.MarkDecorator:
    """Skip, saying why, where LiteRT's GPU accelerator cannot run."""
    why = accelerator_unavailable()
    return pytest.mark.skipif(why is not None, reason=why or "-")


ROOT = Path(__file__).resolve().parents[1]


def copy_tracked(dst: Path, paths: list[str]) -> None:
    """The checkout's git-tracked files under `paths`, as they are in the work tree, copied into
    `dst` at the same relative paths (a file deleted in the work tree is not there to copy)."""
    listed = subprocess.run(["git", "ls-files", "-z", *paths], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.split(b"\0")):
        src = ROOT / name.decode()
        if src.is_file():
            (dst / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name.decode())


def refused_reshape(g: Any, y: int) -> int:
    """RESHAPE of [1, 4, 4, 8] `y` to a shape PACKed from its run-time batch (SHAPE ->
    STRIDED_SLICE -> PACK): a dynamic-sized tensor, so the interpreter refuses the delegate."""
    shape = g.op("SHAPE", [y], [4], dtype="INT32")
    ends = [g.const(n, np.array([v], np.int32)) for n, v in (("b", 0), ("e", 1), ("s", 1))]
    batch = g.op("STRIDED_SLICE", [shape, *ends], [], dtype="INT32", options=dict(shrink_axis_mask=1))
    n = g.const("n", np.array(128, np.int32))
    target = g.op("PACK", [batch, n], [2], dtype="INT32", options=dict(values_count=2))
    return int(g.op("RESHAPE", [y, target], [1, 128]))


def verify_status(path: Path, engine: str) -> str:
    """`gpulint verify PATH --engine ENGINE --format json`'s status (PASS, FAIL, CPU-ONLY, ...); the gl
    engine runs the oracle venv's wheel, and the runs take the accelerator's lock."""
    import json
    import sys

    from oracle import VENV as GL_VENV

    env = dict(os.environ, GPULINT_GL_PYTHON=str(GL_VENV / "bin" / "python"))
    with ACCELERATOR_LOCK:
        run = subprocess.run(
            [sys.executable, "-m", "gpulint", "verify", str(path), "--engine", engine, "--format", "json"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    assert run.returncode in (0, 1, 3), run.stdout + run.stderr
    status: str = json.loads(run.stdout)["status"]
    return status

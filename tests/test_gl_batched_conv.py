"""GPU812 (#49, TF#58402): a CONV_2D at batch above 1 on the classic delegate's OpenGL backend computes
its first image only. The rule on both sides of its condition; where the GL delegate is here, batch 2
FAILs against the CPU (zeros past the first image) and batch 1 PASSes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import verify_status
from oracle import unavailable as gl_unavailable

from gpulint.model import Model
from gpulint.model.build import ModelBuilder
from gpulint.model.write import write
from gpulint.rules import pack
from gpulint.rules.engine import Linter

TARGETS = pack.load_targets()


def conv(batch: int, k: int = 3, op: str = "CONV_2D") -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [batch, 8, 8, 4])
    opts = {"padding": "SAME", "stride_w": 1, "stride_h": 1}
    if op == "CONV_2D":
        w = g.const("w", np.random.default_rng(0).standard_normal((8, k, k, 4)).astype(np.float32))
        g.output(g.op("CONV_2D", [x, w, g.const("b", np.zeros(8, np.float32))], [batch, 8, 8, 8], options=opts))
    else:
        w = g.const("w", np.random.default_rng(0).standard_normal((1, k, k, 4)).astype(np.float32))
        opts = {**opts, "depth_multiplier": 1}
        g.output(g.op(op, [x, w, g.const("b", np.zeros(4, np.float32))], [batch, 8, 8, 4], options=opts))
    return mb.build()


def codes(m: Model, target: str = "classic", backends: tuple[str, ...] | None = None) -> list[str]:
    result = Linter(TARGETS[target], targets=TARGETS, backends=backends).lint(m)
    return [f.code for f in result.findings if f.code == "GPU812"]


@pytest.mark.parametrize(("batch", "k"), [(2, 3), (2, 1), (4, 3)])
def test_gpu812_fires_on_a_batched_conv(batch: int, k: int) -> None:
    assert codes(conv(batch, k)) == ["GPU812"]
    assert codes(conv(batch, k), "mediapipe") == ["GPU812"]


def test_gpu812_is_silent_at_batch_1_on_opencl_and_on_the_accelerator() -> None:
    assert codes(conv(1)) == []
    assert codes(conv(2), backends=("opencl",)) == []
    assert codes(conv(2), "litert-gpu") == []
    assert codes(conv(2, op="DEPTHWISE_CONV_2D")) == []  # not measured: not claimed


@pytest.mark.parametrize(("batch", "status"), [(2, "FAIL"), (1, "PASS")])
def test_the_gl_delegate_computes_the_first_image_only(tmp_path: Path, batch: int, status: str) -> None:
    if why := gl_unavailable():
        pytest.skip(why)
    write(conv(batch), tmp_path / "m.tflite")
    assert verify_status(tmp_path / "m.tflite", "gl") == status

"""Known runtime defects (GPU801-GPU805): each rule on both sides of its condition, on small
graphs built here, and only on the target that models the runtime (litert-gpu), never on classic.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpulint.model import Model, read
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Finding, Linter

TARGETS = pack.load_targets()
F32, F16, I8, I32 = np.float32, np.float16, np.int8, np.int32
POSE = Path(__file__).resolve().parents[2] / "shared" / "models" / "mediapipe" / "pose_detection.tflite"


def model(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def found(m: Model, code: str, target: str = "litert-gpu") -> list[Finding]:
    return [f for f in Linter(TARGETS[target], targets=TARGETS).lint(m).findings if f.code == code]


def test_the_family_is_warnings_that_link_a_thread_or_say_measured_here() -> None:
    rules = {c: r for c, r in pack.builtin_rules().items() if c.startswith("GPU8")}
    assert sorted(rules)[:7] == ["GPU801", "GPU802", "GPU803", "GPU804", "GPU805", "GPU806", "GPU807"]
    for code, r in rules.items():
        assert r.severity == "warning" and r.category == "runtime-defect", code
        assert r.use_instead and r.references, code
        sources = [x for x in r.references if x.startswith(("https://github.com/", "measured here: "))]
        assert sources, code
    assert rules["GPU801"].fix_pass == "densify-constants"


# -- GPU801: DENSIFY (-> DEQUANTIZE) weights made on the CPU for GPU ops (measured here) -----------


def densify_fc(dequantize: bool, sparse: bool = True) -> Callable[[SubgraphBuilder], int]:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 16])
        w = g.const("w", np.ones((6, 16), F16 if dequantize else F32))
        if sparse:
            w = g.op("DENSIFY", [w], [6, 16], dtype="FLOAT16" if dequantize else "FLOAT32")
        if dequantize:
            w = g.op("DEQUANTIZE", [w], [6, 16])
        return g.op("FULLY_CONNECTED", [x, w, -1], [1, 6])

    return build


@pytest.mark.parametrize("dequantize", [False, True], ids=["densify", "densify-dequantize"])
def test_gpu801_densified_weights_for_a_gpu_op(dequantize: bool) -> None:
    m = model(densify_fc(dequantize))
    (f,) = found(m, "GPU801")
    assert f.severity == "warning" and f.op == "FULLY_CONNECTED"
    assert f.message.startswith(
        "1 DENSIFY op(s) make weights on the CPU for 1 op(s) on the GPU (first: `FULLY_CONNECTED`"
    )
    assert "LiteRT 2.3's GPU accelerator" in f.message
    assert found(m, "GPU801", "classic") == []  # the classic delegate folds DENSIFY (MergeDensify)


@pytest.mark.parametrize("dequantize", [False, True], ids=["dense", "dequantize-only"])
def test_gpu801_dense_weights_are_not_flagged(dequantize: bool) -> None:
    assert found(model(densify_fc(dequantize, sparse=False)), "GPU801") == []


def test_gpu801_a_densify_read_only_on_the_cpu_is_not_flagged() -> None:
    def build(g: SubgraphBuilder) -> int:
        w = g.op("DENSIFY", [g.const("w", np.ones((6, 16), F32))], [6, 16])
        return g.op("ARG_MAX", [w, g.const("axis", np.array([1], I32))], [6], dtype="INT64")

    assert found(model(build), "GPU801") == []


@pytest.mark.skipif(not POSE.exists(), reason="the mediapipe corpus is not here")
def test_gpu801_pose_detection_once_and_its_densified_copy_none() -> None:
    from gpulint.passes import PassOptions, registry

    m = read(POSE)
    (f,) = found(m, "GPU801")
    assert f.fix == "densify-constants" and f.op == "CONV_2D", f
    assert registry()["densify-constants"].run(m, PassOptions()).changes
    assert found(m, "GPU801") == []


# -- GPU802: rank-3 PAD on a non-innermost axis (LiteRT#9272) ------------------------------------


def pad(shape: list[int], pads: list[list[int]]) -> Model:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", shape)
        out = [d + a + b for d, (a, b) in zip(shape, pads, strict=True)]
        return g.op("PAD", [x, g.const("pads", np.array(pads, I32))], out)

    return model(build)


@pytest.mark.parametrize(
    ("shape", "pads", "axes"),
    [([16, 32, 8], [[0, 4], [0, 0], [0, 0]], [0]), ([16, 32, 1], [[0, 0], [0, 32], [0, 0]], [1])],
    ids=["outermost", "middle"],
)
def test_gpu802_rank3_pad_off_the_innermost_axis(shape: list[int], pads: list[list[int]], axes: list[int]) -> None:
    (f,) = found(pad(shape, pads), "GPU802")
    assert f.message == (
        f"`PAD` pads axis {axes} of the rank-3 tensor `x` {shape}: LiteRT's GPU accelerator has been "
        "reported to return its rows shifted by one (google-ai-edge/LiteRT#9272)"
    )
    assert found(pad(shape, pads), "GPU802", "classic") == []


@pytest.mark.parametrize(
    ("shape", "pads"),
    [([1, 6144, 32], [[0, 0], [0, 0], [4, 0]]), ([1, 16, 32, 1], [[0, 0], [0, 0], [0, 32], [0, 0]])],
    ids=["rank3-innermost", "rank4"],
)
def test_gpu802_innermost_and_rank4_pads_are_not_flagged(shape: list[int], pads: list[list[int]]) -> None:
    assert found(pad(shape, pads), "GPU802") == []


# -- GPU803: ADD/MUL of two runtime inputs of different ranks (LiteRT#8980) ----------------------


def binary(op: str, a: list[int], b: list[int], out: list[int], const_b: bool = False) -> Model:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("a", a)
        y = g.const("b", np.ones(b, F32)) if const_b else g.input("b", b)
        return g.op(op, [x, y], out)

    return model(build)


@pytest.mark.parametrize("op", ["ADD", "MUL"])
def test_gpu803_mixed_rank_runtime_broadcast(op: str) -> None:
    m = binary(op, [1, 20, 128, 128], [20, 128, 128], [1, 20, 128, 128])
    (f,) = found(m, "GPU803")
    assert f.message == (
        f"`{op}` broadcasts FLOAT32[1,20,128,128] with FLOAT32[20,128,128], two runtime inputs of "
        "different ranks: the GPU delegate's model builder has been reported to misalign them "
        "(google-ai-edge/LiteRT#8980)"
    )
    assert found(m, "GPU803", "classic") == []


@pytest.mark.parametrize(
    ("a", "b", "const_b"),
    [([1, 20, 128, 128], [1, 20, 128, 128], False), ([1, 8, 8, 16], [16], True), ([1, 8, 8, 16], [1], False)],
    ids=["same-rank", "constant", "one-element"],
)
def test_gpu803_same_rank_constant_and_scalar_operands_are_not_flagged(
    a: list[int], b: list[int], const_b: bool
) -> None:
    assert found(binary("ADD", a, b, a, const_b), "GPU803") == []


# -- GPU804: rank-3 BATCH_MATMUL with a batch of 2 or more (LiteRT#8619) -------------------------


def bmm(a: list[int], b: list[int], out: list[int]) -> Model:
    def build(g: SubgraphBuilder) -> int:
        return g.op("BATCH_MATMUL", [g.input("q", a), g.input("k", b)], out)

    return model(build)


def test_gpu804_rank3_batch_matmul_with_heads_as_batch() -> None:
    m = bmm([8, 64, 32], [8, 32, 64], [8, 64, 64])
    (f,) = found(m, "GPU804")
    assert f.message.startswith(
        "`BATCH_MATMUL` multiplies rank-3 FLOAT32[8,64,32] by FLOAT32[8,32,64] with a batch of 8"
    )
    assert found(m, "GPU804", "classic") == []


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [([1, 64, 32], [1, 32, 64], [1, 64, 64]), ([1, 8, 64, 32], [1, 8, 32, 64], [1, 8, 64, 64])],
    ids=["batch-1", "rank-4"],
)
def test_gpu804_batch_1_and_rank_4_are_not_flagged(a: list[int], b: list[int], out: list[int]) -> None:
    assert found(bmm(a, b, out), "GPU804") == []


# -- GPU805: dynamic-range FULLY_CONNECTED on a rank-3 input read by ADD (LiteRT#9277) -----------


def drq_fc(rank: int, weights: str, add: bool) -> Model:
    def build(g: SubgraphBuilder) -> int:
        shape = [1, 8, 16] if rank == 3 else [8, 16]
        out = [*shape[:-1], 16]
        x = g.input("x", shape)
        if weights == "INT8":
            w = g.const("w", np.ones((16, 16), I8), quant=(np.full(16, 0.01, F32), np.zeros(16, np.int64)))
        else:
            w = g.const("w", np.ones((16, 16), F32))
        y = g.op("FULLY_CONNECTED", [x, w, -1], out, options={"keep_num_dims": rank == 3})
        return g.op("ADD", [y, x], out) if add else y

    return model(build)


def test_gpu805_drq_fully_connected_then_add_at_rank_3() -> None:
    m = drq_fc(3, "INT8", add=True)
    (f,) = found(m, "GPU805")
    assert f.message.startswith(
        "`FULLY_CONNECTED` on a rank-3 input [1, 8, 16] with INT8 weights (dynamic-range quantized) is read by `ADD`"
    )
    assert found(m, "GPU805", "classic") == []


@pytest.mark.parametrize(
    ("rank", "weights", "add"),
    [(2, "INT8", True), (3, "FLOAT32", True), (3, "INT8", False)],
    ids=["rank-2", "f32", "no-add"],
)
def test_gpu805_rank_2_float_weights_or_no_add_are_not_flagged(rank: int, weights: str, add: bool) -> None:
    assert found(drq_fc(rank, weights, add), "GPU805") == []

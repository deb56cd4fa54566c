"""GPU404 and the broadcast-to pass (#49, LiteRT#9191): BROADCAST_TO, which no GPU runtime parses,
written as TILE (a RESHAPE first where it adds dims). Each case on both sides of the rule's condition;
the pass exact on the CPU interpreter, the rule quiet after it and every op then on the GPU in check's
plan for LiteRT's accelerator; and, where the runtimes are here, the rewritten model PASSes on the
accelerator and (where dim 0 is not tiled) on the classic delegate's OpenGL backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import needs_accelerator, verify_status
from oracle import unavailable as gl_unavailable

from gpulint import reference
from gpulint.model import Model
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import clone
from gpulint.model.write import write
from gpulint.passes import PassOptions, registry
from gpulint.rules import pack
from gpulint.rules.engine import Linter

TARGETS = pack.load_targets()


def expand(x_shape: list[int], out: list[int], dtype: str = "FLOAT32", runtime_shape: bool = False) -> Model:
    """BROADCAST_TO(x, out), then an ADD with a graph input of the output's shape (so the graph has
    work on the GPU either way)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", x_shape, dtype)
    shape = g.input("shape", [len(out)], "INT32") if runtime_shape else g.const("shape", np.array(out, np.int32))
    y = g.op("BROADCAST_TO", [x, shape], out, dtype=dtype, version=2)
    g.output(g.op("ADD", [y, g.input("b", out, dtype)], out, dtype=dtype))
    return mb.build()


FIRES: dict[str, Callable[[], Model]] = {
    "rank4-gqa": lambda: expand([1, 4, 1, 64], [1, 4, 8, 64]),  # LiteRT#9191's repro
    "rank2-to-rank3": lambda: expand([1, 64], [2, 4, 64]),
    "rank3-rows": lambda: expand([1, 1, 8], [1, 3, 8]),  # the grid's BROADCAST_TO case
    "adds-dims-only": lambda: expand([2, 8], [1, 2, 8]),  # a RESHAPE alone
}
SILENT: dict[str, Callable[[], Model]] = {
    "runtime-shape": lambda: expand([1, 1, 8], [1, 3, 8], runtime_shape=True),  # the pass cannot tile it
    "rank5": lambda: expand([1, 2, 1, 4, 8], [1, 2, 3, 4, 8]),  # no GPU runtime takes rank 5 either way
    # lifted on the GPU a vector reads as a batch of 64: the classic OpenGL backend would fail init
    "vector": lambda: expand([64], [2, 4, 64]),
}


def codes(m: Model, target: str) -> list[str]:
    return [f.code for f in Linter(TARGETS[target], targets=TARGETS).lint(m).findings if f.code == "GPU404"]


def on_gpu(m: Model, target: str) -> list[str]:
    placed = Linter(TARGETS[target], targets=TARGETS).lint(m).ops
    return [p.op for p in placed if p.subgraph == 0 and p.placement != "gpu"]


def rewrite(m: Model) -> tuple[Model, list[str], list[str]]:
    after = clone(m)
    result = registry()["broadcast-to"].run(after, PassOptions())
    return after, result.changes, result.skipped


@pytest.mark.parametrize("name", sorted(FIRES))
def test_gpu404_fires_and_the_pass_is_exact_and_puts_it_on_the_gpu(tmp_path: Path, name: str) -> None:
    before = FIRES[name]()
    assert codes(before, "litert-gpu") == ["GPU404"]
    assert codes(before, "classic") == []  # scoped to LiteRT's accelerator (rules.yaml says why)
    assert on_gpu(before, "litert-gpu") == on_gpu(before, "classic") == ["BROADCAST_TO"]
    assert pack.builtin_rules()["GPU404"].fix_pass == "broadcast-to"
    after, changes, _ = rewrite(before)
    assert len(changes) == 1, changes
    assert rewrite(after)[1] == []  # a fixed point
    assert codes(after, "litert-gpu") == []
    assert on_gpu(after, "litert-gpu") == []
    paths = [tmp_path / "before.tflite", tmp_path / "after.tflite"]
    write(before, paths[0])
    write(after, paths[1])
    a, b = reference.run_models(paths, reference.random_inputs(before, seed=3))
    np.testing.assert_array_equal(a[0], b[0])  # TILE and RESHAPE copy: the same bits


def test_an_int8_broadcast_becomes_tile_version_2(tmp_path: Path) -> None:
    """TILE's int8 kernel is version 2 (op_version.cc): the interpreter must find it."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 1, 8], "INT8", quant=(0.1, 0))
    g.output(g.op("BROADCAST_TO", [x, g.const("s", np.array([1, 3, 8], np.int32))], [1, 3, 8], dtype="INT8", version=2))
    before = mb.build()
    after, changes, _ = rewrite(before)
    assert changes
    write(before, tmp_path / "before.tflite")
    write(after, tmp_path / "after.tflite")
    a, b = reference.run_models(
        [tmp_path / "before.tflite", tmp_path / "after.tflite"], reference.random_inputs(before)
    )
    np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("name", sorted(SILENT))
def test_the_near_miss_is_silent_and_left_alone(name: str) -> None:
    m = SILENT[name]()
    assert codes(m, "litert-gpu") == []
    assert rewrite(m)[1] == []


def test_the_pass_says_why_it_left_a_runtime_shape() -> None:
    _, changes, skipped = rewrite(SILENT["runtime-shape"]())
    assert not changes and skipped == ["subgraph 0: `broadcast_to_0`: its shape is computed at run time"], skipped


# -- on the real runtimes --------------------------------------------------------------------------


@needs_accelerator()
@pytest.mark.parametrize("name", ["rank4-gqa", "rank2-to-rank3"])
def test_the_rewritten_model_passes_on_the_accelerator(tmp_path: Path, name: str) -> None:
    write(rewrite(FIRES[name]())[0], tmp_path / "after.tflite")
    assert verify_status(tmp_path / "after.tflite", "litert-gpu") == "PASS"


@pytest.mark.parametrize("name", ["rank4-gqa", "rank3-rows"])
def test_the_rewritten_model_passes_on_the_gl_delegate(tmp_path: Path, name: str) -> None:
    if why := gl_unavailable():
        pytest.skip(why)
    write(rewrite(FIRES[name]())[0], tmp_path / "after.tflite")
    assert verify_status(tmp_path / "after.tflite", "gl") == "PASS"


@pytest.mark.parametrize(("x", "out"), [([1, 0, 8], [2, 0, 8]), ([0], [3, 0])])
def test_an_empty_dim_is_left_alone(x: list[int], out: list[int]) -> None:
    """A zero-size dim (a hostile or degenerate file) is not tiled: TILE's multiples would divide by it."""
    m = expand(x, out)
    assert codes(m, "litert-gpu") == []
    _, changes, skipped = rewrite(m)
    assert changes == [] and "empty or unknown dim" in skipped[0]

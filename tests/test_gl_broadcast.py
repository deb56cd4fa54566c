"""GPU807 and its pass, tile-broadcast: an elementwise op whose constant operand broadcasts the
runtime one computes wrong on the classic delegate's OpenGL backend. Both sides of the rule's
condition on small built graphs; the pass exact on the CPU interpreter; and, where the oracle venv
is here, both against the real GL delegate (wrong before, exact after, the near miss exact)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpulint.model import Model
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import clone
from gpulint.model.write import write
from gpulint.passes import PassOptions, registry
from gpulint.rules import pack
from gpulint.rules.engine import Linter

TARGETS = pack.load_targets()
SHARED_ORACLE = Path(__file__).resolve().parents[2] / "shared" / "oracle" / "gl_delegate.py"


def binary(op: str, runtime: list[int], const: list[int], const_first: bool = False, signature: Any = None) -> Model:
    """`op` of a runtime tensor and a constant of distinct values (0.5, 0.6, ...), then a RELU,
    so the op's output is not the graph's input or output."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", runtime, shape_signature=signature)
    c = g.const("c", (0.5 + 0.1 * np.arange(int(np.prod(const)), dtype=np.float32)).reshape(const))
    out = list(np.broadcast_shapes(tuple(runtime), tuple(const)))
    y = g.op(op, [c, x] if const_first else [x, c], out)
    r = g.op("RELU", [y], out)
    g.output(r)
    model = mb.build()
    if signature is not None:  # a dynamic batch: the op's output and the RELU's have it too
        for t in (y, r):
            model.subgraphs[0].tensors[t].shape_signature = [-1, *out[1:]]
    return model


def codes(model: Model, target: str = "classic", backends: tuple[str, ...] | None = None) -> list[str]:
    linter = Linter(TARGETS[target], backends=backends) if backends else Linter(TARGETS[target])
    return [f.code for f in linter.lint(model).findings if f.code == "GPU807"]


WRONG = [
    ("ADD", [1, 1], [48], False),
    ("ADD", [1, 1], [48], True),
    ("MUL", [1, 1, 1, 1], [48], False),
    ("SUB", [1, 1], [1, 48], True),
    ("DIV", [1, 1], [2], False),
    ("MAXIMUM", [1, 4, 4, 1], [48], False),
    ("ADD", [1, 1, 1, 1], [1, 4, 4, 1], False),
    ("ADD", [1, 1, 4, 48], [1, 4, 4, 48], False),
    ("POW", [1, 4, 1], [4], False),
]
EXACT = [
    ("ADD", [1, 48], [48]),  # the runtime operand is the output's shape
    ("ADD", [1, 4, 4, 48], [1, 1, 4, 48]),  # the constant is the smaller one
    ("MUL", [1, 48], [1]),  # a one-element constant is a uniform
]


@pytest.mark.parametrize(("op", "runtime", "const", "first"), WRONG, ids=lambda v: str(v).replace(" ", ""))
def test_gpu807_fires_where_the_constant_broadcasts_the_runtime_operand(
    op: str, runtime: list[int], const: list[int], first: bool
) -> None:
    m = binary(op, runtime, const, first)
    assert codes(m) == ["GPU807"]
    assert codes(m, "mediapipe") == ["GPU807"]
    # the OpenCL backend and LiteRT's accelerator have other shaders: not this defect
    assert codes(m, backends=("opencl",)) == [] and codes(m, "litert-gpu") == []


@pytest.mark.parametrize(("op", "runtime", "const"), EXACT, ids=lambda v: str(v).replace(" ", ""))
def test_gpu807_is_silent_where_the_runtime_operand_is_not_broadcast(
    op: str, runtime: list[int], const: list[int]
) -> None:
    assert codes(binary(op, runtime, const)) == []


def test_gpu807_is_silent_on_two_runtime_operands() -> None:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(g.op("MUL", [g.input("x", [1, 1]), g.input("y", [1, 48])], [1, 48]))
    assert codes(mb.build()) == []


def tiled(model: Model) -> tuple[Model, list[str], list[str]]:
    after = clone(model)
    result = registry()["tile-broadcast"].run(after, PassOptions())
    return after, result.changes, result.skipped


def cpu_outputs(tmp_path: Path, *models: Model) -> list[list[np.ndarray]]:
    from gpulint import reference

    paths = []
    for i, m in enumerate(models):
        paths.append(tmp_path / f"m{i}.tflite")
        write(m, paths[-1])
    return reference.run_models(paths, reference.random_inputs(models[0], seed=5))


@pytest.mark.parametrize(("op", "runtime", "const", "first"), WRONG, ids=lambda v: str(v).replace(" ", ""))
def test_tile_broadcast_is_exact_on_the_cpu_and_quiets_gpu807(
    tmp_path: Path, op: str, runtime: list[int], const: list[int], first: bool
) -> None:
    before = binary(op, runtime, const, first)
    after, changes, _ = tiled(before)
    assert len(changes) == 1 and "tiled to" in changes[0]
    names = [after.op_name(o) for _, _, o in after.operators()]
    assert names[-3:-1] == ["TILE", op] and names.count("RESHAPE") == (len(runtime) < len(const))
    a, b = cpu_outputs(tmp_path, before, after)
    np.testing.assert_array_equal(a[0], b[0])  # TILE copies: the same bits
    assert codes(after) == []


def test_tile_broadcast_keeps_a_dynamic_batch_it_does_not_tile() -> None:
    # BirdNET's metadata model: [-1, 1] + [48]; the batch is repeated once, whatever it is
    after, changes, _ = tiled(binary("ADD", [1, 1], [48], signature=[-1, 1]))
    assert len(changes) == 1
    tile = next(o for _, _, o in after.operators() if after.op_name(o) == "TILE")
    assert after.subgraphs[0].tensors[tile.outputs[0]].shape_signature == [-1, 48]
    _, changes, skipped = tiled(binary("ADD", [1, 1], [4, 48], signature=[-1, 1]))
    assert changes == [] and skipped == ["`x`: a dim it is broadcast along is only known at run time"]


# -- on the real GL delegate ------------------------------------------------------------------------


def gl_error(path: Path) -> float:
    """The GL delegate's max abs difference from the CPU on the one output (shared oracle script)."""
    from oracle import VENV

    run = subprocess.run(
        [str(VENV / "bin" / "python"), str(SHARED_ORACLE), str(path)], capture_output=True, text=True, timeout=300
    )
    answer: dict[str, Any] = json.loads(run.stdout)
    assert answer["init_ok"] and answer["invoke"]["gpu_invoke_status"] == 0, answer
    assert answer["final_delegated_nodes"] == answer["total_nodes"], answer  # every op on the GPU
    return float(answer["invoke"]["max_abs_diff_vs_cpu"][0])


@pytest.mark.parametrize(
    ("op", "runtime", "const", "first"),
    [("ADD", [1, 1], [48], False), ("SUB", [1, 1], [48], True), ("MUL", [1, 4, 4, 1], [48], False)],
    ids=["add-1x1-c48", "c48-sub-1x1", "mul-1x4x4x1-c48"],
)
def test_the_gl_delegate_computes_it_wrong_and_the_pass_makes_it_right(
    gl_oracle: Any, tmp_path: Path, op: str, runtime: list[int], const: list[int], first: bool
) -> None:
    if not SHARED_ORACLE.is_file():
        pytest.skip(f"the invoking oracle script {SHARED_ORACLE} is not here")
    before = binary(op, runtime, const, first)
    write(before, tmp_path / "before.tflite")
    assert gl_error(tmp_path / "before.tflite") > 0.1  # measured 0.27 to 5.5
    after, changes, _ = tiled(before)
    assert changes
    write(after, tmp_path / "after.tflite")
    assert gl_error(tmp_path / "after.tflite") < 1e-6  # measured 0


def test_the_gl_delegate_computes_the_near_miss_right(gl_oracle: Any, tmp_path: Path) -> None:
    if not SHARED_ORACLE.is_file():
        pytest.skip(f"the invoking oracle script {SHARED_ORACLE} is not here")
    write(binary("ADD", [1, 48], [48]), tmp_path / "same.tflite")
    assert gl_error(tmp_path / "same.tflite") < 1e-6

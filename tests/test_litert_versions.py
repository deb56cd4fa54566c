"""LiteRT 2.4 as a release of the litert-gpu target (#49): `check --target litert-gpu --litert-version 2.4`.

Measured here (AMD EPYC Zen 5, Mesa 25.0.7 lavapipe): ai-edge-litert 2.3.0's GPU accelerator against
ai-edge-litert-nightly 2.4.0.dev20261026's, the same models (PROBES below). The releases differ in one
thing: 2.4 no longer checks the type of a signature's input and output tensors (CompiledModel binds
them before the delegate chooses ops, so they are not kTfLiteArenaRw, the only tensors
IsAllAllowedTensors checks). INT32 and BOOL there no longer keep their op on the CPU; INT64 there is
taken and fails the compile ("Failed to initialize kernel", "Failed to modify graph with delegate"),
so nothing runs. The same types inside the graph are decided alike by both.

The probes' outcomes are a table (always checked), and each release's accelerator is asked again
where it is set up (`make oracle-webgpu`: tests/oracle/setup.sh --webgpu for 2.3,
tests/oracle/setup_litert24.sh for 2.4), with every placements.yaml row and grid model on 2.4 too.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from oracle import litert as litert_module
from oracle.grid import cases
from test_oracle_litert import SETTINGS, compare, predict
from test_placements import ROWS, row_id

from gpulint.check import Settings, check_file
from gpulint.model import to_bytes
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules.pack import load_targets
from gpulint.settings import LITERT_VERSIONS

RELEASES = {
    "2.3": SETTINGS,
    "2.4": Settings(target="litert-gpu", backend="webgpu", target_settings={"litert_version": "2.4"}),
}
S = [1, 8, 8, 4]


def cast(g: SubgraphBuilder, x: int, dtype: str, shape: list[int] = S) -> int:
    return g.op("CAST", [x], shape, dtype=dtype)


def binary(op: str, dtype: str) -> Callable[[SubgraphBuilder], None]:
    """Both operands graph inputs, the output a graph output: all at the boundary."""
    return lambda g: g.output(g.op(op, [g.input("a", S, dtype), g.input("b", S, dtype)], S, dtype=dtype))


def inside(op: str, dtype: str) -> Callable[[SubgraphBuilder], None]:
    """The same op on `dtype` tensors made and read inside the graph (float at the boundary)."""

    def build(g: SubgraphBuilder) -> None:
        a = cast(g, g.input("x", S), dtype)
        g.output(cast(g, g.op(op, [a, a], S, dtype=dtype), "FLOAT32"))

    return build


def input_only(g: SubgraphBuilder) -> None:
    a = g.input("a", S, "INT64")
    g.output(cast(g, g.op("ADD", [a, a], S, dtype="INT64"), "FLOAT32"))


def output_only(g: SubgraphBuilder) -> None:
    a = cast(g, g.input("x", S), "INT64")
    g.output(g.op("ADD", [a, a], S, dtype="INT64"))


def relu6(where: str) -> Callable[[SubgraphBuilder], None]:
    def build(g: SubgraphBuilder) -> None:
        x = g.input("x", S, "INT32" if where in ("io", "input") else "FLOAT32")
        a = x if where in ("io", "input") else cast(g, x, "INT32")
        y = g.op("RELU6", [a], S, dtype="INT32")
        g.output(y if where in ("io", "output") else cast(g, y, "FLOAT32"))

    return build


def tile_bool(boundary: bool) -> Callable[[SubgraphBuilder], None]:
    def build(g: SubgraphBuilder) -> None:
        m = g.const("m", np.array([1, 2, 2, 1], np.int32))
        if boundary:
            g.output(g.op("TILE", [g.input("x", [1, 2, 2, 4], "BOOL"), m], [1, 4, 4, 4], dtype="BOOL"))
            return
        x = g.input("x", [1, 2, 2, 4])
        b = g.op("GREATER", [x, g.const("z", np.zeros([1], np.float32))], [1, 2, 2, 4], dtype="BOOL")
        g.output(cast(g, g.op("TILE", [b, m], [1, 4, 4, 4], dtype="BOOL"), "FLOAT32", [1, 4, 4, 4]))

    return build


def arg_max(dtype: str) -> Callable[[SubgraphBuilder], None]:
    def build(g: SubgraphBuilder) -> None:
        axis = g.const("a", np.array([3], np.int32))
        g.output(g.op("ARG_MAX", [g.input("x", S), axis], [1, 8, 8], dtype=dtype, options={"output_type": dtype}))

    return build


def side_cast(g: SubgraphBuilder) -> None:
    """A float ADD, and an INT64 input CAST to a float output beside it."""
    x, i = g.input("x", S), g.input("i", [2], "INT64")
    g.output(g.op("ADD", [x, x], S))
    g.output(cast(g, i, "FLOAT32", [2]))


# name -> (model, {release: (outcome, nodes the accelerator took)}), as each accelerator answered here
PROBES: dict[str, tuple[Callable[[SubgraphBuilder], None], dict[str, tuple[str, int]]]] = {
    "add-int64-boundary": (binary("ADD", "INT64"), {"2.3": ("ok", 0), "2.4": ("init-failure", 1)}),
    "add-int64-inside": (inside("ADD", "INT64"), {"2.3": ("ok", 0), "2.4": ("ok", 0)}),
    "add-int64-input-only": (input_only, {"2.3": ("ok", 0), "2.4": ("ok", 0)}),
    "add-int64-output-only": (output_only, {"2.3": ("ok", 0), "2.4": ("ok", 0)}),
    "cast-to-int64-boundary": (
        lambda g: g.output(cast(g, g.input("x", S), "INT64")),
        {"2.3": ("ok", 0), "2.4": ("init-failure", 1)},
    ),
    "cast-from-int64-boundary": (
        lambda g: g.output(cast(g, g.input("x", S, "INT64"), "FLOAT32")),
        {"2.3": ("ok", 0), "2.4": ("init-failure", 1)},
    ),
    "arg-max-int64": (arg_max("INT64"), {"2.3": ("ok", 0), "2.4": ("init-failure", 1)}),
    "arg-max-int32": (arg_max("INT32"), {"2.3": ("ok", 1), "2.4": ("ok", 1)}),
    "int64-input-beside": (side_cast, {"2.3": ("ok", 1), "2.4": ("init-failure", 2)}),
    "relu6-int32-boundary": (relu6("io"), {"2.3": ("ok", 0), "2.4": ("ok", 1)}),
    "relu6-int32-inside": (relu6("inside"), {"2.3": ("ok", 1), "2.4": ("ok", 1)}),
    "relu6-int32-input-only": (relu6("input"), {"2.3": ("ok", 1), "2.4": ("ok", 1)}),
    "relu6-int32-output-only": (relu6("output"), {"2.3": ("ok", 1), "2.4": ("ok", 1)}),
    "squared-difference-int32-boundary": (binary("SQUARED_DIFFERENCE", "INT32"), {"2.3": ("ok", 0), "2.4": ("ok", 1)}),
    "tile-bool-boundary": (tile_bool(True), {"2.3": ("ok", 0), "2.4": ("ok", 1)}),
    "tile-bool-inside": (tile_bool(False), {"2.3": ("ok", 1), "2.4": ("ok", 1)}),
}


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("litert-versions")
    out = {}
    for name, (build, _) in PROBES.items():
        mb = ModelBuilder()
        build(mb.subgraph("main"))
        out[name] = folder / f"{name}.tflite"
        out[name].write_bytes(to_bytes(mb.build()))
    return out


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("name", sorted(PROBES))
def test_check_models_each_release(name: str, release: str, probes: dict[str, Path]) -> None:
    pred = predict(probes[name], RELEASES[release])
    assert (pred.outcome, pred.delegated) == PROBES[name][1][release], pred.reason


def ask(release: str) -> Callable[..., dict[str, Any]]:
    venv, pins = (
        (litert_module.VENV, litert_module.PINS)
        if release == "2.3"
        else (litert_module.NIGHTLY_VENV, litert_module.NIGHTLY_PINS)
    )
    if why := litert_module.unavailable(venv, pins):
        pytest.skip(why)
    return lambda paths: litert_module.litert_oracle(paths, venv=venv, pins=pins)


@pytest.fixture(scope="module")
def probe_answers(probes: dict[str, Path]) -> dict[str, dict[str, Any]]:
    out = {}
    for release in RELEASES:
        try:
            out[release] = ask(release)(list(probes.values()))
        except pytest.skip.Exception:
            continue
    return out


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("name", sorted(PROBES))
def test_each_release_agrees_with_its_accelerator(
    name: str, release: str, probes: dict[str, Path], probe_answers: dict[str, dict[str, Any]]
) -> None:
    if release not in probe_answers:
        ask(release)  # skips, saying why
    res = probe_answers[release][str(probes[name])]
    assert (res.outcome, res.delegated) == PROBES[name][1][release], "the table above is no longer what it answers"
    compare(f"{name} on {release}", probes[name], res, RELEASES[release])


# -- 2.4 on everything the 2.3 oracle is asked (tests/test_oracle_litert.py (b) and (c)) ---------


@pytest.fixture(scope="module")
def rows_on_2_4(oracle_row_models: dict[int, Path | str]) -> dict[str, Any]:
    return dict(ask("2.4")([p for p in oracle_row_models.values() if isinstance(p, Path)]))


@pytest.mark.parametrize("i", range(len(ROWS)), ids=[f"{i}-{row_id(r)}" for i, r in enumerate(ROWS)])
def test_placements_row_on_2_4(i: int, oracle_row_models: dict[int, Path | str], rows_on_2_4: dict[str, Any]) -> None:
    path = oracle_row_models[i]
    if not isinstance(path, Path):
        pytest.skip(f"row {i} does not build into a model ({path})")
    compare(f"placements.yaml row {i} ({row_id(ROWS[i])}) on 2.4", path, rows_on_2_4[str(path)], RELEASES["2.4"])


GRID = cases()


@pytest.fixture(scope="module")
def grid_on_2_4(oracle_grid_models: dict[str, Path]) -> dict[str, Any]:
    return dict(ask("2.4")(list(oracle_grid_models.values())))


@pytest.mark.parametrize("cid", [c.id for c in GRID])
def test_grid_model_on_2_4(cid: str, oracle_grid_models: dict[str, Path], grid_on_2_4: dict[str, Any]) -> None:
    path = oracle_grid_models[cid]
    compare(f"grid {cid} on 2.4", path, grid_on_2_4[str(path)], RELEASES["2.4"])


# -- the flag ---------------------------------------------------------------------------------


def gpulint(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulint", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_the_releases_are_the_packs() -> None:
    assert tuple(load_targets()["litert-gpu"].releases) == LITERT_VERSIONS


def test_gpu111_names_the_release(probes: dict[str, Path]) -> None:
    path = str(probes["add-int64-boundary"])
    old = gpulint("check", path, "--target", "litert-gpu")
    new = gpulint("check", path, "--target", "litert-gpu", "--litert-version", "2.4")
    assert "GPU111" in old.stdout and "ai-edge-litert 2.3.0" in old.stdout
    assert "ai-edge-litert-nightly 2.4.0.dev20261026" in new.stdout
    assert "verdict: init-failure" in new.stdout and "INT64 tensor `a`" in new.stdout


def test_the_release_from_the_configuration_file(tmp_path: Path, probes: dict[str, Path]) -> None:
    (tmp_path / "gpulint.toml").write_text('target = "litert-gpu"\nlitert-version = "2.4"\n')
    r = gpulint("check", str(probes["relu6-int32-boundary"]), cwd=tmp_path)
    assert "verdict: ready" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--target", "litert-gpu", "--litert-version", "2.5"], "--litert-version must be one of 2.3, 2.4"),
        (["--target", "classic", "--litert-version", "2.4"], "--litert-version applies to --target litert-gpu"),
    ],
)
def test_a_bad_release_is_one_line(args: list[str], words: str, probes: dict[str, Path]) -> None:
    r = gpulint("check", str(probes["tile-bool-inside"]), *args)
    assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# -- the generative corpus: 2.4 dies on what 2.3 dies on ------------------------------------------


def generative_models() -> list[Path]:
    from test_oracle_generative import corpus_models

    return corpus_models()


@pytest.fixture(scope="module")
def generative_on_2_4() -> dict[str, Any]:
    models = generative_models()
    if not models:
        pytest.skip("the generative corpus is not built here (`make converters`)")
    return dict(ask("2.4")(models))


@pytest.mark.parametrize("name", [p.stem for p in generative_models()] or ["no-corpus"])
def test_check_names_what_2_4_does_with_the_generative_corpus(name: str, generative_on_2_4: dict[str, Any]) -> None:
    path = next(p for p in generative_models() if p.stem == name)
    res = generative_on_2_4[str(path)]
    result = check_file(str(path), RELEASES["2.4"])
    if res.outcome == "crash":  # every one here, measured: SIGSEGV compiling, as on 2.3
        assert result.verdict == "init-failure" and "process dies" in result.reason, result.reason
    else:
        assert "process dies" not in result.reason, (res.outcome, res.words)


@pytest.mark.parametrize(
    ("installed", "release"), [("2.3.0", "2.3"), ("2.4.0.dev20261026", "2.4"), ("2.4.1", "2.4"), ("?", "2.3")]
)
def test_verify_holds_the_accelerator_to_the_release_installed(
    monkeypatch: pytest.MonkeyPatch, installed: str, release: str
) -> None:
    """`verify --engine litert-gpu` compares what the accelerator took with check's plan for the
    ai-edge-litert (or -nightly) it runs; a release check does not model is compared as 2.3."""
    from gpulint.engines import litert_gpu

    monkeypatch.setattr(litert_gpu, "_litert_version", lambda: installed)
    assert litert_gpu.installed_release() == release

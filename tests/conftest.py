from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ACCELERATOR_LOCK

# No test reads a result another test (or an earlier run) kept: a test that breaks the executor on
# purpose must see it broken. The result cache's own tests unset this.
os.environ["GPULINT_NO_CACHE"] = "1"

# The shared corpus sits beside the checkout (CI has it); GPULINT_CORPUS points elsewhere.
CORPUS = Path(os.environ.get("GPULINT_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "models"))
CORPUS_FILES = sorted(CORPUS.glob("*/*.tflite")) if CORPUS.is_dir() else []
NO_CORPUS = f"corpus folder {CORPUS} is absent (set GPULINT_CORPUS to run the corpus tests)"


def corpus_params() -> list[object]:
    if not CORPUS_FILES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_CORPUS), id="no-corpus")]
    return [pytest.param(p, id=p.name) for p in CORPUS_FILES]


def corpus_file(name: str) -> Path:
    matches = [p for p in CORPUS_FILES if p.name == name]
    if not matches:
        pytest.skip(f"{name}: {NO_CORPUS}" if not CORPUS_FILES else f"{name} is not in the corpus")
    return matches[0]


@pytest.fixture(scope="session")
def gl_oracle() -> object:
    """The real GPU delegate (tests/oracle): `gl_oracle(paths) -> {path: OracleResult}`.
    Skips, saying why, where `make oracle` could not set it up."""
    import oracle

    why = oracle.unavailable()
    if why:
        pytest.skip(why)
    return oracle.gl_oracle


@pytest.fixture(scope="session")
def litert_oracle() -> object:
    """LiteRT's GPU accelerator (tests/oracle/litert.py): `litert_oracle(paths) -> {path: LiteRtResult}`.
    Skips, saying why, where `make oracle-webgpu` could not set it up."""
    from oracle import litert

    why = litert.unavailable()
    if why:
        pytest.skip(why)
    return litert.litert_oracle


@pytest.fixture(scope="session")
def oracle_row_models(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path | str]:
    """Each placements.yaml row as a one-op model file (or why it does not build), for both oracles."""
    from oracle.models import placement_models

    return placement_models(tmp_path_factory.mktemp("placements"))


@pytest.fixture(scope="session")
def oracle_grid_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The generated one-op grid as model files, by case id, for both oracles."""
    from oracle.models import grid_models

    return grid_models(tmp_path_factory.mktemp("grid"))


# -- pytest-xdist (`make test` runs `pytest -n N --dist loadgroup`) ------------------------------------
# Every test that starts LiteRT's GPU accelerator runs on one worker, in the "accelerator" group, one at a
# time (with ACCELERATOR_LOCK held: helpers.py says why). A test that uses a module-scoped fixture runs on
# the worker that has that module's other such tests (a group named after the module; "accelerator" where
# the module has accelerator tests too), so each module fixture (a Ray cluster, a Model Explorer server, a
# venv, a corpus fixed or asked of an oracle) is made once, not once a worker. Other tests go where a worker
# is free. Without xdist the marks change nothing.
ACCELERATOR = "accelerator"
ACCELERATOR_MODULES = {"test_engine_litert", "test_oracle_litert", "test_accelerator_report", "test_litert_versions"}


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers it too; here for a run without xdist
    config.addinivalue_line("markers", "xdist_group(name): run on the worker that runs the group's other tests")
    config.pluginmanager.register(GroupIds(), "gpulint-xdist-group-ids")


class GroupIds:
    """pytest-xdist 3.8 tells its scheduler a test's group by appending "@group" to the node id through
    `item._nodeid`, which pytest 9.2's structured node ids no longer read: --dist loadgroup then groups
    nothing and says nothing (pytest-dev/pytest-xdist#1386, measured here: the accelerator tests ran on both
    workers). Where xdist's suffix did not take, it is set here, after xdist's own hook; a pytest or xdist
    where it takes needs nothing, and this does nothing. The summary and --junitxml then name a grouped test
    `test[params]@group]`: pytest 9.2 renders the id again from its parts on the way back from the worker."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set on an xdist worker with --dist loadgroup
            return
        for item in items:
            marks = item.iter_markers("xdist_group")
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
            suffix = "@" + "_".join(names)
            node_id = getattr(item, "_id", None)
            if names and not item.nodeid.endswith(suffix) and node_id is not None:
                item._id = type(node_id).parse(item.nodeid + suffix)


def uses_accelerator(item: pytest.Item) -> bool:
    if item.path.stem in ACCELERATOR_MODULES or "litert_oracle" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("engine") == "litert-gpu"


def uses_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    accelerated = {item.path.stem for item in items if uses_accelerator(item)}
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        name = item.path.stem
        if uses_accelerator(item):
            item.add_marker(pytest.mark.xdist_group(ACCELERATOR))
        elif uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(ACCELERATOR if name in accelerated else name))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("xdist_group")
    if marker is not None and marker.args[:1] == (ACCELERATOR,):
        with ACCELERATOR_LOCK:
            yield
    else:
        yield

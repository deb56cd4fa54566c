from __future__ import annotations

import os
from pathlib import Path

import pytest

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

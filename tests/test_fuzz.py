"""Mutated real models through every command: each succeeds or exits 2 with one clear line.

A bounded run for the suite; bench/fuzz.py runs longer, in separate processes, and measures
time and memory too.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from conftest import CORPUS_FILES, NO_CORPUS
from fuzzing import mutate, structure_positions
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import to_bytes
from gpulint.sample import sample_model

runner = CliRunner()
SMALL = [p for p in CORPUS_FILES if p.stat().st_size < 100_000]
COMMANDS = (
    ["inspect"],
    ["check", "--format", "json"],
    ["report", "--no-fix", "-o", "{out}.html"],
    ["fix", "--skip-proof", "--force", "-o", "{out}.tflite"],
)


def seeds() -> list[tuple[str, bytes]]:
    return [("sample", to_bytes(sample_model()))] + [(p.name, p.read_bytes()) for p in SMALL]


def assert_clean(command: list[str], path: Path, out: Path) -> None:
    argv = [command[0], str(path), *(a.format(out=out) for a in command[1:])]
    start = time.perf_counter()
    r = runner.invoke(app, argv)
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv, r.exception)
    assert r.exit_code in (0, 1, 2), (argv, r.exit_code, r.output)
    if r.exit_code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"gpulint: error: {path}: "), (argv, r.stderr)
    assert time.perf_counter() - start < 10


@pytest.mark.skipif(not SMALL, reason=NO_CORPUS)
@pytest.mark.parametrize("seed", range(int(os.environ.get("GPULINT_FUZZ_SEEDS", "4"))))
def test_mutated_models_through_every_command(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    models = [(data, structure_positions(data)) for _, data in seeds()]
    for case in range(40):
        data, positions = rng.choice(models)
        mutated, _ = mutate(data, positions, rng)
        path = tmp_path / f"{case}.tflite"
        path.write_bytes(mutated)
        assert_clean(rng.choice(COMMANDS), path, tmp_path / f"out{case}")


def test_mutated_models_through_fix_with_the_interpreter(tmp_path: Path) -> None:
    """fix runs the LiteRT interpreter on what it reads: a crash or a hang there is an error
    message too (the interpreter runs in a child with a memory and time limit)."""
    rng = random.Random(99)
    data = to_bytes(sample_model())
    positions = structure_positions(data)
    for case in range(6):
        mutated, _ = mutate(data, positions, rng)
        path = tmp_path / f"{case}.tflite"
        path.write_bytes(mutated)
        assert_clean(["fix", "--force", "-o", "{out}.tflite"], path, tmp_path / f"out{case}")

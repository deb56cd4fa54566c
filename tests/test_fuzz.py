"""Mutated real models through every command: each succeeds or exits 2 with one clear line.

A bounded, fixed-seed slice for the suite; bench/fuzz.py runs longer (10,000 cases) over every
corpus, in separate processes, and measures time and memory too.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import pytest
from conftest import CORPUS, CORPUS_FILES, NO_CORPUS
from fuzzing import Outcome, find_seeds, mutate, problem, run_case, structure_positions, time_bound
from helpers import ROOT, accelerator_unavailable, opencl_device
from oracle import VENV as GL_VENV
from oracle import unavailable as gl_unavailable
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.engines import gl as gl_engine
from gpulint.model import to_bytes
from gpulint.sample import sample_model

runner = CliRunner()
SMALL = [p for p in CORPUS_FILES if p.stat().st_size < 100_000]
COMMANDS = (
    ["inspect"],
    ["check", "--format", "json"],
    ["report", "--no-fix", "-o", "{out}.html"],
    ["fix", "--skip-proof", "--force", "-o", "{out}.tflite"],
    ["fix", "--unsafe-fixes", "--skip-proof", "--force", "-o", "{out}.tflite"],
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


def engine_missing(engine: str) -> str | None:
    if engine == "litert-gpu":
        return accelerator_unavailable()
    if engine == "gl":
        return gl_unavailable()
    return opencl_device()[1] or None


@pytest.mark.parametrize("engine", ["opencl", "litert-gpu", "gl"])
def test_mutated_models_through_verify_and_bench(tmp_path: Path, engine: str) -> None:
    """verify on each engine at fp32 and fp16, and bench (the executor), each case a process of its
    own under bench/fuzz.py's judge and time bound; seeds from every corpus present, the small files."""
    if why := engine_missing(engine):
        pytest.skip(why)
    corpora = find_seeds([CORPUS, ROOT / ".converter-cache"], max_bytes=100_000)
    models = [to_bytes(sample_model())] + [p.read_bytes() for ps in corpora.values() for p in ps[::4]]
    commands = [
        ["verify", "--no-cache", "--engine", engine],
        ["verify", "--no-cache", "--engine", engine, "--precision", "fp16"],
    ]
    if engine == "opencl":
        commands.append(["bench", "--runs", "1", "--no-start"])
    gpulint = str(Path(sys.executable).with_name("gpulint"))
    env = dict(os.environ, GPULINT_TRACEBACK="1", GPULINT_CACHE_DIR=str(tmp_path / "cache"))
    env[gl_engine.PYTHON_ENV] = str(GL_VENV / "bin" / "python")  # the oracle's venv has the wheel gl pins
    rng = random.Random(50)
    for case in range(8):
        data = rng.choice(models)
        mutated, what = mutate(data, structure_positions(data), rng)
        path = tmp_path / f"{case}.tflite"
        path.write_bytes(mutated)
        command = rng.choice(commands)
        bound = time_bound(command, len(mutated))
        out = run_case([gpulint, command[0], str(path), *command[1:]], bound, env)
        assert problem(command[0], out, bound) is None, (what, command, out.rc, out.stderr[-2000:])


def judged(code: str, command: str = "check", bound: float = 10.0) -> str | None:
    """bench/fuzz.py's verdict on a Python snippet standing in for `gpulint COMMAND`."""
    return problem(command, run_case([sys.executable, "-c", code], bound), bound)


def test_the_fuzz_judge_tells_bad_runs_from_clean_ones() -> None:
    assert judged("print('ok')") is None
    assert judged("import sys; print('gpulint: error: x.tflite: bad', file=sys.stderr); sys.exit(2)") is None
    assert judged("import sys; sys.exit(3)", "verify") is None  # CPU-ONLY
    assert judged("import sys; sys.exit(4)", "verify") is None  # INCONCLUSIVE
    assert judged("import sys; sys.exit(5)", "verify") == "exit code 5"
    assert judged("import sys; sys.exit(3)") == "exit code 3"
    assert judged("import sys; print('a', file=sys.stderr); print('b', file=sys.stderr); sys.exit(2)") == (
        "exit 2 with 2 stderr lines"
    )
    assert judged("raise ValueError('x')") == "traceback"
    assert judged("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == "signal SIGSEGV"
    assert judged("import time; time.sleep(30)", bound=0.5) == "still running at its bound of 0 s"
    # a child left running after the command exits: killed with the process group, and reported
    assert judged(
        "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])"
    ) == ("left a process running")
    assert problem("check", Outcome(1, "", 1.0, 1 << 20, False, False), 10.0) is None

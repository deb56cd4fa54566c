"""Mutation testing of `gpulint verify` (bench/mutation.py has the mutations and the full run).

The fast subset runs on two small corpus models; GPULINT_SLOW=1 runs every corpus model (the
numbers in README "verify" come from `bench/mutation.py`, the same code)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import CORPUS_FILES, corpus_file
from helpers import needs_opencl, opencl_device

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from mutation import KINDS, run_clean, run_mutants

needs_device = needs_opencl()
FAST = ["iris_landmark.tflite", "odd_channels_56_f32.tflite"]
SLOW = os.environ.get("GPULINT_SLOW") == "1"
MODELS = [p.name for p in CORPUS_FILES] if SLOW else FAST


@needs_device
@pytest.mark.parametrize("name", MODELS)
def test_every_mutation_beyond_tolerance_fails(name: str) -> None:
    device, _ = opencl_device()
    rows = run_mutants(corpus_file(name), device)
    missed = [r for r in rows if r["applies"] and r["should_fail"] and not r["failed"]]
    assert not missed, missed
    # A NaN in a weight of a float model always FAILs; so does a flipped output channel.
    by_kind = {r["kind"]: r for r in rows if r["applies"]}
    if "one NaN" in by_kind:
        assert by_kind["one NaN"]["failed"] and by_kind["one NaN"]["first_nonfinite"]
    assert by_kind["sign flip"]["failed"]
    assert set(by_kind) <= set(KINDS)


@needs_device
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_unmutated_model_never_fails(name: str, precision: str) -> None:
    device, _ = opencl_device()
    for distribution in ("uniform", "normal"):
        row = run_clean(corpus_file(name), device, 10 if SLOW else 2, precision, distribution)
        assert row["passed"], row["outputs"]

"""A comparison that cannot fail is not a PASS (issue #49): where an output's tolerance covers its
whole range (a near-flat output at half precision's floor), the comparison is INCONCLUSIVE, the
model's status too unless an output FAILs or nothing ran on the GPU side, and `gpulint verify`
exits 4 and says what would decide it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import needs_opencl

from gpulint import compare
from gpulint.cli.verify import EXIT_CODES, EXIT_RANK, WORST_LAST
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model
from gpulint.model.write import write
from gpulint.verify.result import OutputResult, VerifyResult

GPULINT = [sys.executable, "-m", "gpulint"]


def verify(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = subprocess.run([*GPULINT, "verify", *args, "--format", "json"], capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


def flat_model(slope: float = 1e-4) -> Model:
    """0.5 + slope * x over uniform x in [-1, 1]: a range of 2 * slope. With slope 1e-4 that is below
    half precision's floor (2^-10) and above float's (1e-5)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 64])
    y = g.op("MUL", [x, g.const("slope", np.full((1,), slope, np.float32))], [1, 64])
    g.output(g.op("ADD", [y, g.const("half", np.full((1,), 0.5, np.float32))], [1, 64]))
    return mb.build()


@needs_opencl()
def test_a_near_flat_output_at_fp16_is_inconclusive_not_pass(tmp_path: Path) -> None:
    path = tmp_path / "flat.tflite"
    write(flat_model(), path)
    code, out = verify(str(path), "--precision", "fp16")
    assert code == 4 and out["status"] == "INCONCLUSIVE", out
    o = out["outputs"][0]
    assert o["status"] == "INCONCLUSIVE" and o["executor"]["status"] == "INCONCLUSIVE"
    assert o["executor"]["cannot_fail"] is True and o["rewrite"]["status"] == "PASS"
    assert "--precision fp32" in o["executor"]["decidable"] and "--inputs" in o["executor"]["decidable"]
    text = subprocess.run([*GPULINT, "verify", str(path), "--precision", "fp16"], capture_output=True, text=True)
    assert text.returncode == 4 and text.stdout.startswith(f"{path}: INCONCLUSIVE against")
    assert "could not have failed (exit 4)" in text.stdout and "decidable with float precision" in text.stdout


@needs_opencl()
def test_the_same_model_at_fp32_passes_and_a_wide_one_at_fp16_passes(tmp_path: Path) -> None:
    """float's tolerance is below the range: decidable, PASS; a wide output at fp16 too."""
    flat, wide = tmp_path / "flat.tflite", tmp_path / "wide.tflite"
    write(flat_model(), flat)
    write(flat_model(slope=1.0), wide)
    code, out = verify(str(flat))
    assert code == 0 and out["status"] == "PASS" and out["outputs"][0]["executor"]["decidable"] is None, out
    code, out = verify(str(wide), "--precision", "fp16")
    assert code == 0 and out["status"] == "PASS", out


@needs_opencl()
def test_of_several_models_inconclusive_ranks_above_pass(tmp_path: Path) -> None:
    flat, wide = tmp_path / "flat.tflite", tmp_path / "wide.tflite"
    write(flat_model(), flat)
    write(flat_model(slope=1.0), wide)
    code, out = verify(str(flat), str(wide), "--precision", "fp16")
    assert code == 4 and out["status"] == "INCONCLUSIVE" and out["counts"] == {"INCONCLUSIVE": 1, "PASS": 1}, out


@needs_opencl()
def test_a_users_tolerance_that_covers_the_range_is_inconclusive_too(tmp_path: Path) -> None:
    path = tmp_path / "wide.tflite"
    write(flat_model(slope=1.0), path)
    code, out = verify(str(path), "--atol", "10")
    decidable = out["outputs"][0]["executor"]["decidable"]
    assert code == 4 and "a tolerance below the output's range" in decidable and "--atol" in decidable, out


def test_a_wrong_answer_under_a_range_covering_tolerance_still_fails() -> None:
    """The tolerance covers the range of the reference, not every answer: one far outside FAILs."""
    ref = [np.full((1, 64), 0.5, np.float32) + np.linspace(0, 1e-4, 64, dtype=np.float32)]
    close = compare.judge("y", ref, [ref[0] + 1e-4], compare.EXECUTOR_VS_CPU, "fp16", 1e-9)
    assert close.status == "INCONCLUSIVE" and close.passed and "--precision fp32" in close.decidable
    far = compare.judge("y", ref, [ref[0] + 1.0], compare.EXECUTOR_VS_CPU, "fp16", 1e-9)
    assert far.status == "FAIL" and not far.decidable


def _result(*statuses: str, ops: int = 1) -> VerifyResult:
    def verdict(status: str) -> compare.Verdict:
        return compare.Verdict("y", [1], "float32", compare.Tolerance(0.1), {}, status != "FAIL", "",
                               "float precision" if status == "INCONCLUSIVE" else "")  # fmt: skip

    good = verdict("PASS")
    outputs = [OutputResult(f"y{i}", [1], "float32", good, verdict(s)) for i, s in enumerate(statuses)]
    part = {"kind": "gpu", "ran_on": "x", "ops": list(range(ops)), "summary": ""}
    return VerifyResult("m", "m", {"name": "d", "driver": "", "why": ""}, "fp16", 1, [part], outputs)


def test_the_ranking_of_outputs_models_and_exit_codes() -> None:
    assert _result("PASS", "PASS").status == "PASS"
    assert _result("PASS", "INCONCLUSIVE").status == "INCONCLUSIVE"
    assert _result("INCONCLUSIVE", "FAIL").status == "FAIL"  # an output that FAILs makes the model FAIL
    assert _result("INCONCLUSIVE", ops=0).status == "CPU-ONLY"  # nothing of the GPU shown at all
    assert WORST_LAST == ["PASS", "INCONCLUSIVE", "CPU-ONLY", "FAIL"]
    assert EXIT_CODES == {"PASS": 0, "FAIL": 1, "CPU-ONLY": 3, "INCONCLUSIVE": 4}
    assert max([EXIT_CODES["PASS"], EXIT_CODES["INCONCLUSIVE"]], key=EXIT_RANK.index) == 4
    assert max([EXIT_CODES["INCONCLUSIVE"], EXIT_CODES["CPU-ONLY"], 0], key=EXIT_RANK.index) == 3
    assert max([EXIT_CODES["INCONCLUSIVE"], EXIT_CODES["FAIL"]], key=EXIT_RANK.index) == 1
    assert max([EXIT_CODES["FAIL"], 2], key=EXIT_RANK.index) == 2  # an error wins
    out = _result("PASS", "INCONCLUSIVE").to_json()
    assert [o["status"] for o in out["outputs"]] == ["PASS", "INCONCLUSIVE"]
    assert out["outputs"][1]["decidable"] == "executor: float precision" and out["outputs"][0]["decidable"] is None

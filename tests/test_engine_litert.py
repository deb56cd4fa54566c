"""`gpulint verify --engine litert-gpu`: LiteRT's real GPU accelerator (ML Drift on WebGPU) as the
GPU side of a verification, judged by the same comparator as the executor.

Runs where a WebGPU adapter exists (a GPU's Vulkan driver, or Mesa >= 24 lavapipe: `make
oracle-webgpu`); elsewhere each test skips and says why. Small models of our own, plus two of
the shared corpus; the whole corpus side by side is bench/bench_engines.py (README has its table).
The first run of a model on lavapipe compiles its shaders (Mesa's cache is kept in gpulint's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import corpus_file
from helpers import conv_model, needs_opencl
from helpers import needs_accelerator as needs_accelerator_mark

from gpulint.engines import EngineError, open_engine
from gpulint.model.build import ModelBuilder
from gpulint.model.ir import Model
from gpulint.model.write import write

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_engines import engine_mutants

GPULINT = [sys.executable, "-m", "gpulint"]
HERE = Path(__file__).resolve().parent


needs_accelerator = needs_accelerator_mark()


def verify(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPULINT, "verify", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=900
    )


def exp_model() -> Model:
    """x * 20 -> EXP -> * 0.5: exp(18) is 6.6e7, past half's 65504, so at fp16 EXP gives Inf."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    y = g.op("MUL", [x, g.const("k", np.full((1,), 20.0, np.float32))], [1, 4, 4, 8])
    z = g.op("EXP", [y], [1, 4, 4, 8])
    g.output(g.op("MUL", [z, g.const("c", np.full((1,), 0.5, np.float32))], [1, 4, 4, 8]))
    return mb.build()


@needs_accelerator
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_clean_model_passes_on_the_accelerator(tmp_path: Path, precision: str) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    proc = verify(str(path), "--engine", "litert-gpu", "--precision", precision, "--runs", "2", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "PASS" and out["engine"] == "litert-gpu"
    assert out["executor_ops"] == 1
    assert "LiteRT's GPU accelerator" in out["device"]["why"]
    assert ("enforce_f32" in out["device"]["why"]) == (precision == "fp32")
    for o in out["outputs"]:
        assert {"snr_db", "psnr_db", "cosine_similarity"} <= set(o["executor"])


@needs_accelerator
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_corpus_model_passes_on_the_accelerator(precision: str) -> None:
    proc = verify(str(corpus_file("hand_landmark_lite.tflite")), "--engine", "litert-gpu", "--precision", precision)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "engine: litert-gpu" in proc.stdout and "PASS" in proc.stdout.splitlines()[0]


@needs_accelerator
@pytest.mark.parametrize(
    ("name", "precision"), [("deeplab_like_65_f32.tflite", "fp16"), ("transformer_block_32x48_f32.tflite", "fp16")]
)
def test_tfconv_models_pass_on_the_accelerator_in_half(name: str, precision: str) -> None:
    """deeplab_like_65 is the model whose RESIZE_BILINEAR the accelerator samples at half
    coordinates: 1.9 x the fp16 tolerance before it was recalibrated on the real runtime."""
    proc = verify(str(corpus_file(name)), "--engine", "litert-gpu", "--precision", precision, "--runs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_accelerator
def test_a_runtime_defect_fails_where_check_places_it() -> None:
    """pose_detection's sparse (DENSIFY) weights: LiteRT 2.3's accelerator refuses DENSIFY and its
    DEQUANTIZE, runs the rest with CPU fallback and gets the outputs wrong (hundreds off) where
    the CPU is exact. A true FAIL, at fp32. Its placement is check's: 108 ops on the GPU, the
    DENSIFY -> DEQUANTIZE chains on the CPU (the log's count agrees, so no warning)."""
    proc = verify(str(corpus_file("pose_detection.tflite")), "--engine", "litert-gpu", "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "FAIL" and out["executor_ops"] == 108 and not out["warnings"]
    cpu = [p for p in out["partitions"] if p["kind"] == "cpu"]
    assert cpu and "DENSIFY" in cpu[0]["summary"]
    assert max(o["executor"]["max_abs_error"] for o in out["outputs"]) > 10


@needs_accelerator
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_mutants_beyond_tolerance_fail_on_the_accelerator(tmp_path: Path, precision: str) -> None:
    """Each weight mutation whose effect on the CPU is beyond the executor-vs-CPU tolerance at
    that precision, run on the accelerator against the unmutated model on the CPU, FAILs."""
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    rows = engine_mutants(path, precision)
    should = [r for r in rows if r["should_fail"]]
    assert should, rows  # the sign flip, the NaN and the large moves at least
    assert all(r["failed"] for r in should), [r for r in should if not r["failed"]]


@needs_accelerator
def test_bisect_names_the_op_that_overflows_half_and_exports_a_repro(tmp_path: Path) -> None:
    path = tmp_path / "exp.tflite"
    write(exp_model(), path)
    repro = tmp_path / "repro"
    args = [str(path), "--engine", "litert-gpu", "--precision", "fp16", "--bisect", "--export-repro", str(repro)]
    proc = verify(*args, "--format", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "FAIL"
    b = out["bisect"]
    assert (b["op"], b["op_index"], b["comparison"]) == ("EXP", 1, "litert-gpu")
    assert b["first_nonfinite"] > 0
    assert out["repro"]["ops"] == 1  # EXP alone, fed the CPU's values of x * 20
    assert (repro / "repro.tflite").exists() and (repro / "repro.npz").exists()
    # The repro fails again on its own, as its rerun line says; at fp32 it passes.
    again = out["repro"]["rerun"].split()[2:]
    assert verify(*again).returncode == 1
    assert verify(*[a if a != "fp16" else "fp32" for a in again]).returncode == 0


@needs_accelerator
@needs_opencl()
def test_all_engines_side_by_side(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(8), path)
    proc = verify(str(path), "--engine", "all", "--precision", "fp16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "side by side" in proc.stdout
    table = proc.stdout.split("side by side")[1]
    assert "opencl" in table and "litert-gpu" in table
    proc = verify(str(path), "--engine", "all", "--format", "json")
    out = json.loads(proc.stdout)
    assert out["status"] == "PASS" and [e["engine"] for e in out["engines"]] == ["opencl", "litert-gpu"]


@needs_accelerator
@needs_opencl()
def test_all_engines_export_a_repro_each(tmp_path: Path) -> None:
    """Both engines FAIL the EXP that passes 65504 at fp16; each writes its repro in a folder of its own."""
    path = tmp_path / "exp.tflite"
    write(exp_model(), path)
    repro = tmp_path / "repro"
    proc = verify(str(path), "--engine", "all", "--precision", "fp16", "--bisect", "--export-repro", str(repro))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name in ("opencl", "litert-gpu"):
        assert (repro / name / "repro.tflite").exists() and (repro / name / "repro.npz").exists(), name


def test_the_accelerator_has_no_f32_f16_mode(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(4), path)
    proc = verify(str(path), "--engine", "litert-gpu", "--precision", "fp32-fp16")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "no fp32-fp16 mode" in proc.stderr


def test_export_repro_needs_bisect(tmp_path: Path) -> None:
    proc = verify(str(tmp_path / "x.tflite"), "--export-repro", str(tmp_path / "r"))
    assert proc.returncode == 2 and "--export-repro" in proc.stderr and "--bisect" in proc.stderr


def test_no_adapter_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A machine whose Vulkan loader finds no driver: Dawn has no adapter."""
    path = tmp_path / "conv.tflite"
    write(conv_model(4), path)
    env = {"VK_ICD_FILENAMES": str(tmp_path / "none.json"), "VK_DRIVER_FILES": str(tmp_path / "none.json")}
    proc = verify(str(path), "--engine", "litert-gpu", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "no WebGPU adapter" in proc.stderr


def test_a_crashing_accelerator_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerator aborts the process on some graphs: the child dies, verify says so."""
    from gpulint.engines import litert_gpu

    path = tmp_path / "conv.tflite"
    model = conv_model(4)
    write(model, path)
    monkeypatch.setattr(litert_gpu, "CHILD", "engine_crash_child")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    with pytest.raises(EngineError, match=r"crashed \(SIGSEGV\): model.cc:1\] boom"):
        open_engine("litert-gpu", model, path, "fp16", "litert-gpu", None)

"""`gpulint check` on the shared corpus: what the delegate's rules say about real models."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CORPUS_FILES, corpus_file, corpus_params

from gpulint.check import Settings, check_file

MEDIAPIPE = [p for p in CORPUS_FILES if p.parent.name == "mediapipe"]


def ops(result: object, placement: str) -> set[str]:
    return {o.op for o in result.ops if o.placement == placement}  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", corpus_params())
def test_every_corpus_model_checks(path: Path) -> None:
    r = check_file(str(path), Settings())
    assert r.error is None and r.verdict in ("ready", "partial", "not-worth-it", "init-failure", "refused")
    assert len(r.ops) == sum(1 for _ in r.ops)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in MEDIAPIPE] or corpus_params())
def test_mediapipe_models_are_ready_for_the_mediapipe_target(path: Path) -> None:
    r = check_file(str(path), Settings(target="mediapipe"))
    assert r.verdict == "ready", r.reason
    assert [f.message for f in r.findings if f.code.startswith(("GPU1", "GPU2"))] == []


def test_selfie_segmentation_custom_op_is_supported() -> None:
    r = check_file(str(corpus_file("selfie_segmentation.tflite")), Settings())
    custom = [o for o in r.ops if o.op == "Convolution2DTransposeBias"]
    assert custom and custom[0].placement == "gpu"
    folded = [o for o in r.ops if o.op == "DEQUANTIZE"]
    assert folded and all(o.folded and o.placement == "gpu" for o in folded)


def test_pose_detection_densify_is_folded_into_convs() -> None:
    r = check_file(str(corpus_file("pose_detection.tflite")), Settings())
    densify = [o for o in r.ops if o.op == "DENSIFY"]
    assert densify and {o.placement for o in densify} == {"gpu"}


def test_pose_detection_sparse_weights_are_no_runtime_weights_on_opengl() -> None:
    # MergeDensify folds DENSIFY (-> DEQUANTIZE) into the conv's weights before the GL shaders see
    # them: no "Convolution does not support more than 1 runtime tensor" (the GL oracle agrees)
    r = check_file(str(corpus_file("pose_detection.tflite")), Settings(backend="opengl"))
    assert not [o for o in r.ops if any("more than 1 runtime tensor" in x for x in o.reasons)]
    assert r.verdict == "ready", r.reason


def test_unsupported_mix_names_what_runs_on_the_cpu() -> None:
    r = check_file(str(corpus_file("unsupported_mix_f32.tflite")), Settings())
    assert {"TOPK_V2", "ARG_MAX", "CAST"} <= ops(r, "cpu")
    messages = {f.op: f.message for f in r.findings if f.code.startswith("GPU1")}
    assert messages["TOPK_V2"] == "`TOPK_V2` has no GPU delegate implementation and runs on the CPU"
    assert messages["ARG_MAX"] == "`ARG_MAX` has no GPU delegate implementation and runs on the CPU"
    assert "Not supported Cast case. Input type: INT64" in messages["CAST"]
    # The OpenGL backend has no CUMSUM shader: it fails at init where OpenCL builds the partition.
    assert r.verdict == "init-failure" and "No shader implementation for cumsum" in r.reason
    assert r.backends["opencl"]["init"] == "ok" and r.backends["opengl"]["init"] == "init-failure"
    assert check_file(str(corpus_file("unsupported_mix_f32.tflite")), Settings(backend="opencl")).verdict == "partial"


@pytest.mark.parametrize("name", ["deeplab_like_65_f32.tflite", "deeplab_like_65_f16.tflite"])
def test_deeplab_reports_the_atrous_pattern_and_its_partitions(name: str) -> None:
    r = check_file(str(corpus_file(name)), Settings())
    codes = [f.code for f in r.findings]
    assert codes.count("GPU402") == 1
    assert "GPU601" in codes
    plan = r.plans[0]
    assert len(plan.gpu_partitions) == 3 and len(plan.cpu_partitions) == 2
    assert r.verdict == "not-worth-it"


@pytest.mark.parametrize(
    "name", ["mobilenet_v1_025_224_int8.tflite", "odd_channels_56_int8.tflite", "pixel_shuffle_64_int8.tflite"]
)
def test_int8_models_follow_the_quantized_flag(name: str) -> None:
    on = check_file(str(corpus_file(name)), Settings(quantized=True))
    off = check_file(str(corpus_file(name)), Settings(quantized=False))
    taken = ("gpu", "refused")  # placed on the GPU, or would be but for the graph's refusal
    assert len([o for o in on.ops if o.placement in taken]) > len([o for o in off.ops if o.placement in taken])
    assert any(f.code == "GPU107" and "INT8" in f.message for f in off.findings)
    # The MobileNet keeps a dynamic batch: the interpreter refuses the delegate whatever it places.
    assert off.verdict == ("refused" if name.startswith("mobilenet") else "not-worth-it")
    assert any(f.code == "GPU501" for f in on.findings)


def test_lstm_reports_while() -> None:
    r = check_file(str(corpus_file("lstm_seq16_f32.tflite")), Settings())
    codes = {(f.code, f.op) for f in r.findings}
    assert ("GPU101", "WHILE") in codes and ("GPU505", "WHILE") in codes
    assert len(r.plans) == 3


def test_decoder_reports_rank_5_ops() -> None:
    r = check_file(str(corpus_file("decoder_5d_reshape_f32.tflite")), Settings())
    rank5 = sorted((f.op_index, f.op) for f in r.findings if f.code == "GPU108")
    assert [op for _, op in rank5] == ["RESHAPE", "TRANSPOSE", "RESHAPE"]

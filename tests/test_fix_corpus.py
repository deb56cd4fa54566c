"""`gpulint fix` on the shared corpus: every result loads, matches, and loses the findings its
passes address."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import corpus_file, corpus_params

from gpulint.fix import fix_model, select_passes
from gpulint.model import Model, read, write
from gpulint.passes import PassOptions
from gpulint.rules import pack
from gpulint.rules.engine import Linter

TARGETS = pack.load_targets()


def findings(model: Model) -> Counter[str]:
    return Counter(f.code for f in Linter(TARGETS["classic"], targets=TARGETS).lint(model).findings)


def fixed(name: str, **options: bool) -> Model:
    path = corpus_file(name)
    model, report = fix_model(path, read(path), select_passes(None, False), PassOptions(**options))
    assert report.verified and not report.rejected
    return model


def ops(model: Model) -> Counter[str]:
    return Counter(model.op_name(op) for _, _, op in model.operators())


@pytest.mark.parametrize("path", corpus_params())
def test_fix_every_corpus_model(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = read(path)
    after, report = fix_model(path, before, select_passes(None, False), PassOptions())
    assert report.verified, report.rejected
    assert all(e <= 1e-5 * 1000 for e in report.max_error)
    write(after, tmp_path / "fixed.tflite")
    assert read(tmp_path / "fixed.tflite") == after
    lost = findings(before) - findings(after)
    gained = findings(after) - findings(before)
    with capsys.disabled():
        print(
            f"\n{path.name}: passes {[a.name for a in report.applied]}; findings lost {dict(lost)}"
            + (f"; new {dict(gained)}" if gained else "")
        )
    # A fix never adds op-support errors. Except where it lifts the interpreter's refusal (GPU202):
    # a refused graph runs nothing on the GPU and has no partitions, so its ops are only judged once
    # static-shapes makes it static (lstm_seq16: a RESHAPE outside the delegated partition, and the
    # DYNAMIC_UPDATE_SLICE that replaced its loop body's dynamic SLICEs, both on the CPU).
    if not lost["GPU202"]:
        assert not [c for c in gained if c.startswith(("GPU1", "GPU2"))]


def test_deeplab_loses_the_space_to_batch_pair() -> None:
    model = fixed("deeplab_like_65_f32.tflite")
    assert not {"SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"} & set(ops(model))
    assert findings(model)["GPU402"] == 0


@pytest.mark.parametrize(
    "name",
    [
        "face_detection_short_range.tflite",
        "face_landmark.tflite",
        "hand_landmark_lite.tflite",
        "palm_detection_lite.tflite",
        "pose_detection.tflite",
        "selfie_segmentation.tflite",
    ],
)
def test_fp16_mediapipe_models_lose_their_constant_dequantize(name: str) -> None:
    assert ops(read(corpus_file(name)))["DEQUANTIZE"] > 0
    assert ops(fixed(name))["DEQUANTIZE"] == 0
    assert ops(fixed(name, keep_fp16=True))["DEQUANTIZE"] > 0


def test_pose_detection_loses_densify() -> None:
    assert ops(fixed("pose_detection.tflite"))["DENSIFY"] == 0


def test_odd_channels_inner_tensors_are_multiples_of_4() -> None:
    model = fixed("odd_channels_56_f32.tflite")
    sg = model.subgraphs[0]
    interface = set(sg.inputs) | set(sg.outputs)
    produced = [t for op in sg.operators for t in op.outputs if t not in interface]
    readers = {t for op in sg.operators for t in op.inputs}
    # Inner tensors between convs, pools and the mean; the classifier head (FULLY_CONNECTED ->
    # SOFTMAX -> output) keeps its 3 classes, since SOFTMAX mixes the channels it would pad.
    inner = [
        sg.tensors[t]
        for t in produced
        if t in readers and model.op_name(next(op for op in sg.operators if t in op.outputs)) != "FULLY_CONNECTED"
    ]
    assert inner and all(t.shape[-1] % 4 == 0 for t in inner), [(t.name, t.shape) for t in inner]

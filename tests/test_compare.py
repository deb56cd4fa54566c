"""gpulint.compare: the one comparator behind `fix`'s proof and `verify` (no device needed)."""

from __future__ import annotations

import numpy as np
import pytest

from gpulint import compare
from gpulint.compare import EXECUTOR_VS_CPU, PRECISION_REWRITE, REWRITE_PROOF, Tolerance, judge, metrics, tolerance

RNG = np.random.default_rng(3)


def test_identical_outputs_pass_and_classifier_metrics() -> None:
    a = RNG.standard_normal((1, 20)).astype(np.float32)
    v = judge("y", [a], [a.copy()], EXECUTOR_VS_CPU, "fp32", 0.0)
    assert v.passed and v.metrics["max_abs_error"] == 0
    assert v.metrics["top1_agreement"] == 1.0 and v.metrics["top5_agreement"] == 1.0


def test_metrics_report_what_would_pass() -> None:
    a = np.array([1.0, 2.0, -4.0], np.float32)
    b = np.array([1.0, 2.5, -4.0], np.float32)
    m = metrics(a, b)
    assert m["max_abs_error"] == pytest.approx(0.5) and m["required_atol"] == pytest.approx(0.5)
    assert m["required_rtol"] == pytest.approx(0.25) and m["mean_abs_error"] == pytest.approx(0.5 / 3)
    m = metrics(a, b, Tolerance(0.1, 0.1))
    assert m["worst"]["index"] == [1] and m["worst"]["error_over_tolerance"] == pytest.approx(0.5 / 0.3)
    assert m["required_atol"] == pytest.approx(0.3)  # with rtol 0.1: 0.5 - 0.1 * 2


def test_tolerance_is_a_multiple_of_noise_with_a_floor() -> None:
    t = tolerance(EXECUTOR_VS_CPU, "fp32", 4e-4)
    assert t.atol == pytest.approx(4e-3) and t.rtol == 1e-5 and "CPU noise" in t.source
    assert tolerance(EXECUTOR_VS_CPU, "fp32", 0.0).atol == 1e-5  # both CPU kernels agree bit for bit
    assert tolerance(EXECUTOR_VS_CPU, "fp32", None).atol == 1e-5  # not measured
    assert tolerance(EXECUTOR_VS_CPU, "fp32-fp16", 0.0).atol == compare.FP16_EPS
    assert tolerance(EXECUTOR_VS_CPU, "fp32-fp16", 1e-5).atol == pytest.approx(2**15 * 1e-5)
    assert tolerance(REWRITE_PROOF, "fp16", 1e-3).atol == pytest.approx(1e-2)  # a CPU policy: fp32 only


def test_half_rounding_flips_widen_a_quantized_tolerance_in_half_only() -> None:
    """Issue 18: in half precision an int8 result near a grid midpoint lands one step off, and the
    ops after it carry the step; verify measures how many steps on the CPU (half_steps) and adds them."""
    t = tolerance(EXECUTOR_VS_CPU, "fp16", 0.0, step=0.5, half_steps=6.0)
    assert t.atol == pytest.approx((3 + 6) * 0.5) and "6 steps from half rounding flips" in t.source
    assert tolerance(EXECUTOR_VS_CPU, "fp16", 0.0, step=0.5).atol == pytest.approx(1.5)
    ref = np.zeros((1, 8), np.int8)
    got = ref.copy()
    got[0, 3] = 5
    assert not judge("kp", [ref], [got], EXECUTOR_VS_CPU, "fp16", 0.0, 1.0).passed
    assert judge("kp", [ref], [got], EXECUTOR_VS_CPU, "fp16", 0.0, 1.0, half_steps=6.0).passed


def test_a_single_element_output_near_zero_does_not_collapse() -> None:
    """The issue's presence flag: sigmoid of a large negative logit, 1e-10, off by 1e-13."""
    ref = np.array([[6.1e-10]], np.float32)
    got = ref + np.float32(1e-13)
    assert judge("flag", [ref], [got], EXECUTOR_VS_CPU, "fp32", 0.0).passed
    assert not judge("flag", [ref], [ref + np.float32(0.3)], EXECUTOR_VS_CPU, "fp32", 0.0).passed


def test_no_part_of_an_output_hides_behind_another_parts_range() -> None:
    """A YOLO head: box pixels 0..640 and class scores below 2e-4 in one tensor. The boxes'
    noise sets atol; a score that moved to 0.5 still FAILs, element by element."""
    ref = np.concatenate([RNG.uniform(0, 640, (1, 4, 100)), RNG.uniform(0, 2e-4, (1, 80, 100))], axis=1)
    ref = ref.astype(np.float32)
    cpu2 = ref + (RNG.standard_normal(ref.shape) * 6e-5 * (ref > 1)).astype(np.float32)  # box noise only
    n = compare.noise([ref], [cpu2])
    got = ref.copy()
    got[0, 10, 5] = 0.5
    v = judge("head", [ref], [got], EXECUTOR_VS_CPU, "fp32", n)
    assert not v.passed and "1 of 8400" in v.reason and v.metrics["worst"]["index"] == [0, 0, 10, 5]
    assert judge("head", [ref], [cpu2], EXECUTOR_VS_CPU, "fp32", n).passed


def test_nan_fails_and_all_nan_has_no_error_numbers() -> None:
    ref = np.ones(4, np.float32)
    got = ref.copy()
    got[1] = np.nan
    v = judge("y", [ref], [got], EXECUTOR_VS_CPU, "fp32", 0.0, sides=("CPU interpreter", "executor"))
    assert not v.passed and "1 NaN/Inf in the executor where the CPU interpreter has a number" in v.reason
    v = judge("y", [ref], [np.full(4, np.nan, np.float32)], EXECUTOR_VS_CPU, "fp32", 0.0)
    assert not v.passed and v.metrics["max_abs_error"] is None and v.metrics["compared"] == 0
    v = judge("y", [np.full(4, np.nan, np.float32)], [ref], EXECUTOR_VS_CPU, "fp32", 0.0)
    assert not v.passed and "in the reference where the candidate has a number" in v.reason
    same = np.array([np.nan, np.inf, 1.0], np.float32)
    assert judge("y", [same], [same.copy()], EXECUTOR_VS_CPU, "fp32", 0.0).passed  # the same NaN/Inf: equal


def test_shape_and_quantized_steps_and_user_tolerance() -> None:
    ref = np.zeros(4, np.float32)
    assert "shape" in judge("y", [ref], [np.zeros(5, np.float32)], EXECUTOR_VS_CPU).reason
    q = np.array([10, 20, 30], np.int8)
    assert judge("q", [q], [q + 3], EXECUTOR_VS_CPU, "fp32", 0.0, step=1.0).passed  # 3 steps
    assert not judge("q", [q], [q + 4], EXECUTOR_VS_CPU, "fp32", 0.0, step=1.0).passed
    # quantized -> float: the mean error, 16 steps
    far = q.copy()
    far[0] += 40
    assert judge("q", [q], [far], PRECISION_REWRITE, "fp32", 0.0, step=1.0).passed  # mean 13.3 steps
    assert not judge("q", [q], [far], REWRITE_PROOF, "fp32", 0.0, step=1.0).passed
    assert judge("y", [ref], [ref + 0.5], EXECUTOR_VS_CPU, "fp32", 0.0, tol=Tolerance(0.5)).passed


def test_noise_ignores_nonfinite_and_takes_the_worst_run() -> None:
    a = [np.array([1.0, np.nan]), np.array([2.0, 3.0])]
    b = [np.array([1.5, 0.0]), np.array([2.0, 3.25])]
    assert compare.noise(a, b) == pytest.approx(0.5)


def packed_head(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A YOLO-like [1, 84, 100] head: 4 rows of box pixels (0..640, CPU noise 6e-5) and 80 rows of
    class scores below 2e-4 (CPU noise 1e-11); the second CPU opinion of it."""
    ref = np.concatenate([rng.uniform(0, 640, (1, 4, 100)), rng.uniform(0, 2e-4, (1, 80, 100))], axis=1)
    noise = rng.standard_normal(ref.shape) * np.where(ref > 1, 6e-5, 1e-11)
    return ref.astype(np.float32), (ref + noise).astype(np.float32)


@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
def test_packed_scores_are_judged_on_their_own_noise(precision: str) -> None:
    """Issue 22 item 3: one noise per tensor gave the scores the boxes' tolerance (2^14 x 6e-5 = 1
    at fp16), so every score moved to 0.5 PASSed. Per slice, the score rows get their own."""
    ref, cpu2 = packed_head(np.random.default_rng(1))
    n = compare.noise_map([ref], [cpu2])
    got = ref.copy()
    got[:, 4:, :] = 0.5
    v = judge("head", [ref], [got], EXECUTOR_VS_CPU, precision, n)
    assert not v.passed and "8000 of 8400" in v.reason
    assert v.tolerance.axis == 1 and v.tolerance.atol_map is not None and v.tolerance.atol_map.shape == (1, 84, 1)
    assert "by slice along axis 1, 84 slices" in v.tolerance.source and "by slice along axis 1" in v.tolerance.rule()
    if precision != "fp32":  # the one-number tolerance hid them
        assert judge("head", [ref], [got], EXECUTOR_VS_CPU, precision, n.total).passed
    # Unmutated, and each part moved within its own noise: PASS.
    assert judge("head", [ref], [cpu2], EXECUTOR_VS_CPU, precision, n).passed
    boxes = ref.copy()
    boxes[:, :4, :] += np.float32(5e-4 if precision == "fp32" else 0.5)
    assert judge("head", [ref], [boxes], EXECUTOR_VS_CPU, precision, n).passed
    j = v.to_json()
    assert j["atol_axis"] == 1 and len(j["atol_by_slice"]) == 84 and j["atol_min"] < j["atol"]
    assert j["decides"].startswith("every element within atol")


def test_slices_of_one_kind_keep_the_outputs_noise() -> None:
    """A sigmoid map whose columns peak at 0.2 .. 1 is one kind of value: a column whose own
    noise probe saw little keeps the output's noise (selfie_segmentation, normal inputs)."""
    rng = np.random.default_rng(2)
    ref = rng.uniform(0, 1, (1, 64, 64, 1)) * np.linspace(0.2, 1.0, 64)[None, None, :, None]
    cpu2 = ref + rng.standard_normal(ref.shape) * 1e-6 * (np.arange(64) > 32)[None, None, :, None]
    n = compare.noise_map([ref], [cpu2])
    t = compare.tolerance(EXECUTOR_VS_CPU, "fp32", n)
    assert t.atol_map is None and t.atol == pytest.approx(10 * n.total) and "one noise" in t.source
    # A probe that measures the noise itself (XNNPACK vs builtin kernels, gap 1): each slice its own
    # (palm_detection_lite's fields), never below the output's noise scaled by the slice's range.
    n = compare.noise_map([ref], [cpu2], gap=1.0)
    t = compare.tolerance(EXECUTOR_VS_CPU, "fp32", n)
    assert t.atol_map is not None and t.axis == 2 and t.atol == pytest.approx(10 * n.total)
    assert float(t.atol_map.min()) == 1e-5  # a quiet column: its noise x 10 is below the floor


def test_tiny_and_one_element_outputs_do_not_collapse_with_noise_maps() -> None:
    flag = np.array([[6.1e-10]], np.float32)
    n = compare.noise_map([flag], [flag])  # both CPU kernels agree bit for bit
    assert judge("flag", [flag], [flag + np.float32(1e-13)], EXECUTOR_VS_CPU, "fp32", n).passed
    for half in ("fp32-fp16", "fp16"):
        assert judge("flag", [flag], [flag + np.float32(1e-13)], EXECUTOR_VS_CPU, half, n).passed
        assert not judge("flag", [flag], [flag + np.float32(0.3)], EXECUTOR_VS_CPU, half, n).passed
    zeros = np.zeros((1, 128, 4), np.float32)  # a range of 0, slices and all
    n = compare.noise_map([zeros], [zeros])
    assert compare.tolerance(EXECUTOR_VS_CPU, "fp32", n).atol == 1e-5
    assert judge("z", [zeros], [zeros + np.float32(5e-6)], EXECUTOR_VS_CPU, "fp32", n).passed
    # A slice of zeros beside large values: its own noise (0), never below the floor.
    mixed = np.concatenate([np.full((1, 128, 1), 500.0), np.zeros((1, 128, 1))], axis=2).astype(np.float32)
    n = compare.noise_map([mixed], [mixed + np.float32(1e-4) * (mixed > 0)])
    t = compare.tolerance(EXECUTOR_VS_CPU, "fp32", n)
    assert t.atol_map is not None and float(t.atol_map.min()) == 1e-5 and t.atol == pytest.approx(10 * n.total)

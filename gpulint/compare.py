"""One comparator for every "are these outputs the same?" question gpulint asks.

`judge(name, refs, gots, policy, precision, noise, step)` compares a reference output with a
candidate's, element by element, with allclose semantics: element e passes when
|got_e - ref_e| <= atol + rtol * |ref_e|. Each element is judged against its own magnitude, so
no part of an output hides behind another part's range (a YOLO head packs box pixels in the
hundreds and class scores below 1e-3 into one tensor), and no tolerance collapses because an
output has one element or a range of 0.

atol comes from measured noise: how far two trusted CPU implementations (XNNPACK against the
interpreter's builtin kernels) disagree on the same inputs, times the policy's multiple, never
below the policy's floor. That scale is the network's own: it grows with depth and with how much
the model amplifies rounding, which an output's range does not tell. The noise is measured
where it is, not once per output: per slice along the output's axis with the most distinct
scales (a YOLO head's [1, 84, N]: one noise per row, so the four box rows' noise, in pixels,
does not become the class scores' tolerance), each slice's noise at least the output's noise
scaled by the slice's range against the output's. An output with no axis whose slices hold
LOCAL_MIN_SLICE values or more (a [1, 63] landmark vector, a [1, 1] flag) keeps one noise.

The policies (all numbers measured on the corpus, see docs/how-we-know/precision.md):
- EXECUTOR_VS_CPU: the executor against the CPU interpreter on the same model, by precision
  (executor/precision.py). fp32: 10 x noise; the executor's worst was 5.4 x noise
  (hand_landmark_lite's [1,1] output). Both half precisions: 2^15 x noise (half rounds 2^13
  times coarser than float). Measured (bench/f16_errors.py) on 109 models (8 MediaPipe, 16
  tfconv, the 40 YOLO and 45 PyTorch converter exports), 3 seeds each of uniform and normal
  inputs, the multiple each float output needs with rtol 2^-9 and floor 2^-10: fp16 (F16, half
  arithmetic and sums) 16215 x at worst (palm_detection_lite's boxes, normal inputs), then
  14192 x (dilated_conv_32); fp32-fp16 (F32_F16, half arithmetic, float sums in convs) 9834 x
  (palm_detection_lite's boxes, normal inputs), then 5292 x. 2^15 leaves 2.0x and 3.3x. (fp32-fp16 had 2^14
  while it computed in float: 8073 x at worst.) No output went NaN/Inf in half. fp16 is 2^17 since
  LiteRT's real GPU accelerator (verify --engine litert-gpu, bench/bench_engines.py) joined the
  judged: its half arithmetic reaches 1.9 x the 2^15 tolerance on the corpus's deeplab_like_65
  exports, because ML Drift computes RESIZE_BILINEAR's sampling coordinates in half (the
  interpolation fraction quantized to the coordinate's half ulp, 1/32 at 32..64; an emulation with
  half coordinates is within 1 half ulp of it), and half is what phones ship. rtol 1e-5
  (fp32) / 2^-9 (both half precisions: four half epsilons) per element; floor 1e-5 / 2^-10.
- REWRITE_PROOF: a rewritten model against the original, both on the CPU interpreter: a safe
  rewrite only reorders fp32 arithmetic, so the fp32 numbers above apply.
- PRECISION_REWRITE: a rewrite that drops quantization (quantized -> float) cannot match the
  quantized model's rounding and saturation; quantized outputs are held to a mean error of 16
  steps (measured on the corpus int8 models: 0.0, 9.4, 11.3), float outputs as REWRITE_PROOF.
Quantized outputs (int8, or float made by a DEQUANTIZE) are judged in quantization steps: 3, plus
the steps the CPU's two implementations disagree by, plus in half precision the steps half's
rounding flips add (`half_steps`): the delegate rounds each int8 result on half values at F32_F16
and F16 alike, so a value within half's rounding of a grid midpoint lands one step off, and the
ops after it carry that step (a pose export's keypoints: 1 step before the MUL by the stride is 3-5
at the output). How far is the model's own: verify measures it on the CPU, the int8 twin run again
with every value an int8 rounding reads moved by one half rounding (2^-11, up and down;
verify.twins.half_probe_twins). On the corpus's 29 int8 models the executor in half was never more
than 0.04 steps beyond that probe (yolov8n-pose int8io32: 3.04 against 3), 3 steps below the
tolerance. verify judges an int8 model's delegated ops
against the delegate's computation of them (float on dequantized weights, each int8 result
rounded to its grid: reference.fake_quant_twin); LiteRT's int8 kernels are 0-2 steps from that on
the 29 int8 models of the corpora, and verify reports that gap beside the verdict, never in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulint.model.ir import Model

FP16_EPS = 2.0**-10  # one fp16 epsilon at magnitude 1

# The executor's precisions (executor/precision.py), in the GPU delegate's words, for reports.
PRECISION_WORDS = {
    "fp32": "F32: float storage and arithmetic",
    "fp32-fp16": "F32_F16: half storage and arithmetic, float sums in convs",
    "fp16": "F16: half storage and half arithmetic",
}


# Said of a comparison whose tolerance reaches the output's whole range: any answer of the right
# shape inside that range would pass it (a near-flat output judged at half precision's floor, say).
# Such a comparison is INCONCLUSIVE, not PASS (Verdict.status; `gpulint verify` exits 4).
CANNOT_FAIL = "the tolerance is at least the output's range: this comparison cannot fail and proves nothing about it"


def precision_text(name: str) -> str:
    """`fp16 (F16: half storage and half arithmetic)`; an unknown name as it is."""
    return f"{name} ({PRECISION_WORDS[name]})" if name in PRECISION_WORDS else name


@dataclass(frozen=True)
class Policy:
    name: str
    noise_multiple: dict[str, float]  # by precision
    atol_floor: dict[str, float]
    rtol: dict[str, float]
    quant_steps: float
    quant_statistic: str  # "max": every element; "mean": the mean error


# fp32's floor, 1e-5, is about 100 fp32 epsilons at magnitude 1: intermediate values of order 1
# round that much into any output, however small the output itself (a presence flag of 1e-10).
EXECUTOR_VS_CPU = Policy(
    "executor-vs-cpu",
    noise_multiple={"fp32": 10.0, "fp32-fp16": 2.0**15, "fp16": 2.0**17},
    atol_floor={"fp32": 1e-5, "fp32-fp16": FP16_EPS, "fp16": FP16_EPS},
    rtol={"fp32": 1e-5, "fp32-fp16": 2.0**-9, "fp16": 2.0**-9},
    quant_steps=3.0,
    quant_statistic="max",
)
REWRITE_PROOF = Policy("rewrite-proof", {"fp32": 10.0}, {"fp32": 1e-5}, {"fp32": 1e-5}, 3.0, "max")
PRECISION_REWRITE = Policy("precision-rewrite", {"fp32": 10.0}, {"fp32": 1e-5}, {"fp32": 1e-5}, 16.0, "mean")


@dataclass
class Tolerance:
    atol: float  # the largest atol any element gets
    rtol: float = 0.0
    source: str = "default"
    statistic: str = "max"  # "max": every element within atol + rtol*|ref|; "mean": the mean error
    # Per slice: atol for each index along `axis` (the output's other axes have size 1 here), or None.
    atol_map: np.ndarray | None = None
    axis: int | None = None

    def atol_at(self, shape: tuple[int, ...]) -> np.ndarray | float:
        """atol for every element of an array of `shape` (the output's shape, or runs x it)."""
        return self.atol if self.atol_map is None else np.broadcast_to(self.atol_map, shape)

    def rule(self) -> str:
        """The statistic that decides, in words."""
        if self.statistic == "mean":
            return f"mean error <= {self.atol:.3g}"
        if self.atol_map is None:
            atol = f"atol {self.atol:.3g}"
        else:
            n = self.atol_map.size
            low = float(self.atol_map.min())
            atol = f"atol {low:.3g}..{self.atol:.3g} by slice along axis {self.axis} ({n} slices)"
        return f"every element within {atol} + rtol {self.rtol:.3g} x |ref|"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"atol": self.atol, "rtol": self.rtol, "tolerance_source": self.source}
        out["statistic"] = self.statistic
        out["decides"] = self.rule()
        if self.atol_map is not None:
            out["atol_axis"] = self.axis
            out["atol_min"] = float(self.atol_map.min())
            if self.atol_map.size <= 256:
                out["atol_by_slice"] = [float(x) for x in self.atol_map.ravel()]
        return out


# A slice (the values that share one index along an axis) must hold this many values, over one
# run, for its own noise to be measured: fewer (a [1, 2254, 12] head's 12 values per anchor, a
# [1, 63] vector's single values) sample the noise too thinly.
LOCAL_MIN_SLICE = 64
# A slice whose values are this many times smaller than the output's largest is a different kind
# of value (see Noise.local).
LOCAL_SCALE_GAP = 16.0


@dataclass
class Noise:
    """How far two CPU implementations disagree on one output, element by element: the largest
    |a - b| over every run where both are finite (`diff`), and the largest |a| there (`scale`)."""

    diff: np.ndarray
    scale: np.ndarray
    # How far below the output's range a slice must lie to be held to its own noise: 1 for a
    # probe that measures the noise itself (XNNPACK against the builtin kernels), LOCAL_SCALE_GAP
    # for one that only samples it (inputs one ulp away; see Noise.local).
    gap: float = LOCAL_SCALE_GAP

    @staticmethod
    def larger(a: Noise | None, b: Noise | None) -> Noise | None:
        """Element by element the larger of two measurements of one output (either may be None;
        of two that do not have the same shape, the first)."""
        if a is None or b is None or a.diff.shape != b.diff.shape:
            return a if a is not None else b
        return Noise(np.maximum(a.diff, b.diff), np.maximum(a.scale, b.scale), max(a.gap, b.gap))

    @property
    def total(self) -> float:
        return float(self.diff.max(initial=0.0))

    def local(self) -> tuple[np.ndarray | float, int | None, str]:
        """(noise per slice, keepdims-shaped; or the one number), the axis, and how it was made.

        A slice is held to its own noise, and to no less than the output's noise x `gap` x its
        range / the output's range. With a probe that measures the noise (XNNPACK against the
        builtin kernels, gap 1) every slice is: palm_detection_lite's 18 fields, 55 .. 487 px,
        get 2.1e-4 .. 9.5e-4. With a probe that only samples it (inputs one ulp away, gap 16), a
        slice within 16x of the output's range keeps the output's noise: the nudge missed the
        noise of selfie_segmentation's columns of sigmoid values up to 0.21 (normal inputs: the
        executor's fp32 error there was 10x the column's nudge noise). Either way a different
        kind of value packed into the same tensor (a YOLO head's class scores beside its box
        pixels) gets its own. Of the axes whose slices hold LOCAL_MIN_SLICE values or more, the
        one whose slices' noise spreads most is used.
        """
        total, shape = self.total, self.diff.shape
        axes = [a for a in range(len(shape)) if shape[a] >= 2 and self.diff.size // shape[a] >= LOCAL_MIN_SLICE]
        if not axes or total == 0.0:
            why = "one noise for the output"
            why += "" if total == 0.0 else f" (no axis has slices of {LOCAL_MIN_SLICE}+ values)"
            return total, None, why
        ratio = self.gap / max(float(self.scale.max()), np.finfo(np.float64).tiny)
        best: tuple[float, int, np.ndarray] | None = None
        for a in axes:
            others = tuple(k for k in range(len(shape)) if k != a)
            own = self.diff.max(axis=others, keepdims=True)
            per = np.maximum(own, total * np.minimum(1.0, ratio * self.scale.max(axis=others, keepdims=True)))
            spread = float(per.max()) / max(float(np.median(per)), total * 1e-9)
            if best is None or spread > best[0]:
                best = (spread, a, per)
        assert best is not None
        spread, axis, per = best
        if float(per.min()) >= total:
            return total, None, f"one noise for the output (no slice is {self.gap:g}x below its range)"
        return per, axis, f"by slice along axis {axis}, {per.size} slices, noise {float(per.min()):.3g}..{total:.3g}"


def noise_map(a: list[np.ndarray], b: list[np.ndarray], gap: float = LOCAL_SCALE_GAP) -> Noise:
    """Per element, over every run: how far two CPU implementations' results for one output are
    apart where both are finite, and the first's magnitude. `gap`: see Noise."""
    diff: np.ndarray | None = None
    scale: np.ndarray | None = None
    for x, y in zip(a, b, strict=True):
        x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
        with np.errstate(invalid="ignore"):
            d = np.abs(x64 - y64)
        d = np.where(np.isfinite(d), d, 0.0)
        m = np.where(np.isfinite(x64), np.abs(x64), 0.0)
        diff = d if diff is None else np.maximum(diff, d)
        scale = m if scale is None else np.maximum(scale, m)
    assert diff is not None and scale is not None, "no runs"
    return Noise(diff, scale, gap)


def tolerance(
    policy: Policy, precision: str, noise: float | Noise | None, step: float | None = None, half_steps: float = 0.0
) -> Tolerance:
    """The tolerance `policy` gives an output whose CPU noise is `noise` (None: not measured; a
    Noise: measured per element, and judged by slice, see Noise.local). `step`: the size of one
    quantization step, for an output judged in steps. `half_steps`: the steps half precision's
    rounding flips move it by on the CPU (verify.twins.half_probe_twins), added in half precision."""
    if isinstance(noise, Noise):
        if step is not None:
            noise = noise.total
        else:
            return _local_tolerance(policy, precision, noise)
    if step is not None:
        # The CPU's own two integer kernels can disagree by a step too (pixel_shuffle_64_int8: 1);
        # that disagreement is added, so a model whose CPU kernels disagree is not held tighter
        # than they agree with each other.
        extra = noise or 0.0
        what = f"{policy.quant_steps:g} quantization steps"
        what += f" + CPU noise {extra / step:.3g} steps" if extra else ""
        what += f" + {half_steps:.3g} steps from half rounding flips, probed on the CPU" if half_steps else ""
        what += f" ({policy.name}, mean error)" if policy.quant_statistic == "mean" else f" ({policy.name})"
        return Tolerance((policy.quant_steps + half_steps) * step + extra, 0.0, what, policy.quant_statistic)
    prec = precision if precision in policy.noise_multiple else "fp32"
    k, floor, rtol = policy.noise_multiple[prec], policy.atol_floor[prec], policy.rtol[prec]
    if noise is None:
        return Tolerance(floor, rtol, f"floor {floor:.3g} ({policy.name}, {prec}; CPU noise not measured)")
    if k * noise <= floor:
        return Tolerance(floor, rtol, f"floor {floor:.3g} ({policy.name}, {prec}; CPU noise {noise:.3g} is below it)")
    return Tolerance(k * noise, rtol, f"{k:g} x CPU noise {noise:.3g} ({policy.name}, {prec})")


def _local_tolerance(policy: Policy, precision: str, noise: Noise) -> Tolerance:
    per, axis, how = noise.local()
    if axis is None:
        tol = tolerance(policy, precision, float(per))
        tol.source += "; " + how if "CPU noise" in tol.source and "below" not in tol.source else ""
        return tol
    assert isinstance(per, np.ndarray)
    prec = precision if precision in policy.noise_multiple else "fp32"
    k, floor, rtol = policy.noise_multiple[prec], policy.atol_floor[prec], policy.rtol[prec]
    atol = np.maximum(k * per, floor)
    if float(atol.max()) <= floor:
        why = f"floor {floor:.3g} ({policy.name}, {prec}; CPU noise {noise.total:.3g} is below it)"
        return Tolerance(floor, rtol, why)
    at_floor = int(np.sum(k * per <= floor))
    source = f"{k:g} x CPU noise {how} ({policy.name}, {prec}"
    source += f"; floor {floor:.3g} in {at_floor} of them)" if at_floor else ")"
    return Tolerance(float(atol.max()), rtol, source, "max", atol, axis)


def noise(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """The largest difference between two CPU implementations' results for one output, over
    every run, where both are finite."""
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        d = np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))
        worst = max(worst, float(np.max(d[np.isfinite(d)], initial=0.0)))
    return worst


def quant_step(model: Model, position: int) -> float | None:
    """One quantization step of output `position` in the output's own units: 1 for an integer
    output (compared as raw integers), the source's scale for a float output that DEQUANTIZE
    makes from a quantized tensor, None for a float output."""
    sg = model.subgraphs[0]
    t = sg.tensors[sg.outputs[position]]
    if t.type in ("INT8", "UINT8", "INT16"):
        return 1.0 if t.quantization is not None and t.quantization.scale else None
    op = next((op for op in sg.operators if sg.outputs[position] in op.outputs), None)
    if op is None or model.op_name(op) != "DEQUANTIZE":
        return None
    src = sg.tensors[op.inputs[0]]
    q = src.quantization
    return float(q.scale[0]) if src.type in ("INT8", "UINT8", "INT16") and q is not None and q.scale else None


@dataclass
class Verdict:
    name: str
    shape: list[int]
    dtype: str
    tolerance: Tolerance
    metrics: dict[str, Any] = field(default_factory=dict)
    passed: bool = True  # False: FAIL; True: PASS, or INCONCLUSIVE where `decidable` is set
    reason: str = ""
    decidable: str = ""  # a comparison that could not fail: what would make it one that can

    @property
    def status(self) -> str:
        """FAIL, INCONCLUSIVE (within a tolerance that covers the output's range: nothing shown), or PASS."""
        if not self.passed:
            return "FAIL"
        return "INCONCLUSIVE" if self.decidable else "PASS"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": self.shape,
            "dtype": self.dtype,
            **self.tolerance.to_json(),
            "status": self.status,
            "reason": self.reason,
            "decidable": self.decidable or None,
            **self.metrics,
        }


def metrics(ref: np.ndarray, got: np.ndarray, tol: Tolerance | None = None) -> dict[str, Any]:
    """Error statistics over the elements finite on both sides; None where there is none."""
    a = ref.astype(np.float64).ravel()
    b = got.astype(np.float64).ravel()
    both = np.isfinite(a) & np.isfinite(b)
    same_nonfinite = ~np.isfinite(a) & ~np.isfinite(b) & ((a == b) | (np.isnan(a) & np.isnan(b)))
    err = np.abs(a[both] - b[both])
    fa, fb = a[both], b[both]
    nonzero = np.abs(fa) > 0
    rel = err[nonzero] / np.abs(fa[nonzero])
    # numpy's pairwise sums, not BLAS's dot: the same digits whatever threads BLAS has (a Ray
    # worker runs with one), so a result is the same on every process that computes it.
    norm = float(np.sqrt(np.sum(fa * fa)) * np.sqrt(np.sum(fb * fb)))
    any_pair = bool(both.any())
    cosine = float(np.sum(fa * fb) / norm) if norm > 0 else (1.0 if not fa.any() and not fb.any() else 0.0)
    out: dict[str, Any] = {
        "compared": int(both.sum()),
        "max_abs_error": float(err.max()) if any_pair else None,
        "mean_abs_error": float(err.mean()) if any_pair else None,
        "std_error": float((fa - fb).std()) if any_pair else None,
        "max_rel_error": float(rel.max(initial=0.0)) if any_pair else None,
        "cosine_similarity": cosine if any_pair else None,
        "nonfinite_in_reference": int(np.sum(~np.isfinite(a) & ~same_nonfinite)),
        "nonfinite_in_candidate": int(np.sum(~np.isfinite(b) & ~same_nonfinite)),
        "nonfinite_on_both": int(same_nonfinite.sum()),  # the same NaN/Inf on both sides: agreed, yet said
        "values": int(a.size),
    }
    out["nonfinite_mismatch"] = int(np.sum(~both & ~same_nonfinite))
    # As the accuracy tools report them: SNR of the reference over the error, PSNR over the
    # reference's range (None where the error is 0: no noise to measure).
    if any_pair:
        err_power = float(np.sum(err**2))
        span = float(fa.max() - fa.min()) if fa.size else 0.0
        out["snr_db"] = float(10 * np.log10(max(float(np.sum(fa**2)), 1e-300) / err_power)) if err_power else None
        mse = err_power / err.size
        out["psnr_db"] = float(10 * np.log10(span**2 / mse)) if err_power and span > 0 else None
    out["required_atol"] = out["max_abs_error"]
    zero_err = err[~nonzero]
    out["required_rtol"] = (float("inf") if zero_err.any() else out["max_rel_error"]) if any_pair else None
    if tol is not None and any_pair:
        atol = tol.atol_at(ref.shape)
        atol = np.ravel(atol)[both] if isinstance(atol, np.ndarray) else atol
        bound = atol + tol.rtol * np.abs(fa)
        ratio = err / np.maximum(bound, np.finfo(np.float64).tiny)
        worst = int(np.argmax(ratio))
        idx = np.flatnonzero(both)[worst]
        out["worst"] = {
            "index": [int(i) for i in np.unravel_index(idx, ref.shape)] if ref.ndim else [],
            "reference": float(fa[worst]),
            "got": float(fb[worst]),
            "tolerance": float(bound[worst]),
            "error_over_tolerance": float(ratio[worst]),
        }
        # The one atol that passes every element with this rtol (what --tolerance would need).
        out["required_atol"] = float(np.max(err - tol.rtol * np.abs(fa), initial=0.0))
        span = float(fa.max() - fa.min())
        out["tolerance_over_range"] = float(np.min(bound)) / span if span > 0 else None
        out["cannot_fail"] = bool(span > 0 and float(np.min(bound)) >= span)
    if ref.ndim >= 1 and ref.shape[-1] >= 10 and ref.size // ref.shape[-1] <= 16 and both.all():  # classifier-like
        ra = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
        rb = got.reshape(-1, ref.shape[-1]).astype(np.float64)
        top_ref = np.argsort(-ra, axis=1, kind="stable")
        top_got = np.argsort(-rb, axis=1, kind="stable")
        out["top1_agreement"] = float(np.mean(top_ref[:, 0] == top_got[:, 0]))
        out["top5_agreement"] = float(
            np.mean([len(set(x[:5]) & set(y[:5])) / 5 for x, y in zip(top_ref, top_got, strict=True)])
        )
    return out


def judge(
    name: str,
    refs: list[np.ndarray],
    gots: list[np.ndarray],
    policy: Policy,
    precision: str = "fp32",
    noise: float | Noise | None = None,
    step: float | None = None,
    tol: Tolerance | None = None,
    sides: tuple[str, str] = ("reference", "candidate"),
    half_steps: float = 0.0,
) -> Verdict:
    """One output over every run. `tol` (a user's --tolerance) overrides the policy's. `noise`:
    the CPU noise of this output, one number or per element (noise_map). `half_steps`: see tolerance."""
    ref, got = np.stack(refs), np.stack([np.asarray(g) for g in gots])
    shape, dtype = list(refs[0].shape), str(refs[0].dtype)
    if ref.shape != got.shape:
        why = f"shape {list(gots[0].shape)}, not {shape}"
        return Verdict(name, shape, dtype, tol or Tolerance(0.0), {}, False, why)
    integer = ref.dtype.kind in "iu" and step is not None
    user_tol = tol is not None
    tol = tol or tolerance(policy, precision, noise, step, half_steps)
    m = metrics(ref, got, tol)
    if integer:
        m["max_abs_error_steps"] = m["max_abs_error"]
    verdict = Verdict(name, shape, dtype, tol, m)
    if m["nonfinite_mismatch"]:
        verdict.passed = False
        parts = []
        if m["nonfinite_in_candidate"]:
            parts.append(f"{m['nonfinite_in_candidate']} NaN/Inf in the {sides[1]} where the {sides[0]} has a number")
        if m["nonfinite_in_reference"]:
            parts.append(f"{m['nonfinite_in_reference']} NaN/Inf in the {sides[0]} where the {sides[1]} has a number")
        verdict.reason = "; ".join(parts)
        return verdict
    if not m["compared"]:
        return verdict  # both sides NaN/Inf in the same places
    with np.errstate(invalid="ignore"):  # inf - inf where both sides have the same Inf
        err = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    finite = np.isfinite(err)
    if tol.statistic == "mean":
        mean = float(err[finite].mean())
        if mean > tol.atol:
            verdict.passed = False
            verdict.reason = f"mean error {mean:.3g} is beyond {tol.atol:.3g} ({tol.source})"
        return verdict
    bound = tol.atol_at(ref.shape) + tol.rtol * np.abs(ref.astype(np.float64))
    over = int(np.sum(finite & (err > bound)))
    if over:
        verdict.passed = False
        w = m["worst"]
        verdict.reason = (
            f"{over} of {err.size} values beyond atol + rtol x |ref|; worst at {w['index']}: "
            f"{w['got']:.6g} vs {w['reference']:.6g}, {w['error_over_tolerance']:.3g} x its tolerance "
            f"{w['tolerance']:.3g}"
        )
    elif m.get("cannot_fail"):
        fp32 = None if user_tol or precision == "fp32" else tolerance(policy, "fp32", noise, step)
        verdict.decidable = decidable(ref, fp32, user_tol)
    return verdict


def decidable(ref: np.ndarray, fp32: Tolerance | None, user_tol: bool) -> str:
    """What would let a comparison whose tolerance covers the output's range (`ref`, every run)
    fail: float precision, where its tolerance would be below the range (`fp32`: the policy's
    fp32 tolerance, for a half-precision comparison), or inputs that spread the output wider
    than the tolerance, or (`user_tol`) a tolerance the user gave below the range."""
    r64 = ref.astype(np.float64)
    fin = r64[np.isfinite(r64)]
    span = float(fin.max() - fin.min())
    spread = (
        f"inputs that spread this output beyond its tolerance (its range here is {span:.3g}): real data with "
        "--inputs, or inputs of a smaller range, whose smaller CPU noise makes a smaller tolerance"
    )
    if user_tol:
        return f"a tolerance below the output's range {span:.3g} (--atol / --tolerance), or {spread}"
    if fp32 is None:
        return spread
    bound = float(np.min(fp32.atol_at(ref.shape) + fp32.rtol * np.abs(r64)))
    if bound < span:
        at = f"its tolerance would be {bound:.3g}, {bound / span:.2g} of the range"
        return f"float precision (at --precision fp32 {at}), or {spread}"
    return f"{spread} (at --precision fp32 the tolerance, {bound:.3g}, would still cover the range)"

"""The executor's half arithmetic against a numpy reference that rounds every step as the
delegate's kernels do (README "Precision"): F16 (`"fp16"`) and F32_F16 (`"fp32-fp16"`) are
emulations, and this is what holds them to their definitions.

The reference computes each step in float32 on half operands and rounds the result to half
(numpy's float32 -> float16 conversion: nearest, ties to even, overflow to Inf), in the order
the kernels take. Conv-family sums run from zero, kernel rows, columns, then input channels; the
bias is added to the sum made a half at the end. At F16 the sum is a half, one rounding per
multiply-add (a depthwise product rounded first, as DepthwiseConv's `r += TO_ACCUM_TYPE(src *
weight)`); at F32_F16 the sum is float, and what is added to it a half: an input slice's four
products summed in half (ConvGeneric's `r += TO_ACCUM_TYPE(s.x * f0 + ... + s.w * f3)`), a
depthwise product. Elementwise steps are halves at both. A half times a half is exact in
float32, so each step matches the kernel's bit for bit: sums and elementwise arithmetic are
asserted bit-exact. Functions (exp, tanh, ...) are float32 on the device and in numpy, which
may differ in the last float bit: within one half ULP. Ops whose sums the delegate keeps in
float (pools, MEAN, SUM, SOFTMAX; tasks/reduce.cc's GetAccumType) round once at the store:
within one half ULP of the exact result.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import opencl_device

from gpulint.executor import Executor
from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder

DEVICE, NO_DEVICE = opencl_device()
pytestmark = pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE or "no OpenCL device")
RNG = np.random.default_rng(18)


def h(x: Any) -> np.ndarray:
    """x rounded to the nearest half, as float32."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def half_ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many halves apart a and b (both halves) are; 0 for +0 and -0."""

    def ordered(x: np.ndarray) -> np.ndarray:
        bits = np.asarray(x, np.float32).astype(np.float16).view(np.uint16).astype(np.int32)
        return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)

    return np.abs(ordered(a) - ordered(b))


def single(build: Callable[[SubgraphBuilder], int]) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


HALF_MODES = ["fp16", "fp32-fp16"]  # F16, F32_F16


def run(model: Model, inputs: list[np.ndarray], mode: str = "fp16") -> np.ndarray:
    return Executor(model, DEVICE, mode).run(inputs)[0]


def assert_exact(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    far = half_ulps(got, want)
    assert int(far.max(initial=0)) == 0, f"{int((far > 0).sum())} of {far.size} differ, up to {far.max()} half ULPs"


def assert_within_one_ulp(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    far = half_ulps(got, want)
    assert int(far.max(initial=0)) <= 1, f"up to {far.max()} half ULPs apart"


def randn(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def pads(size: int, k: int, stride: int, dilation: int, padding: str) -> tuple[int, int]:
    """(output size, leading padding) as TFLite computes them."""
    eff = (k - 1) * dilation + 1
    out = -(-size // stride) if padding == "SAME" else (size - eff) // stride + 1
    return out, max((out - 1) * stride + eff - size, 0) // 2


def taps(x: np.ndarray, k: int, stride: int, dilation: int, padding: str) -> tuple[np.ndarray, int, int]:
    """Every kernel tap's input window, zero outside the input: [ky, kx, N, oh, ow, C]."""
    n, hh, ww, c = x.shape
    oh, py = pads(hh, k, stride, dilation, padding)
    ow, px = pads(ww, k, stride, dilation, padding)
    span_y, span_x = (oh - 1) * stride + (k - 1) * dilation + 1, (ow - 1) * stride + (k - 1) * dilation + 1
    xp = np.pad(x, ((0, 0), (py, max(0, span_y - py - hh)), (px, max(0, span_x - px - ww)), (0, 0)))
    out = np.zeros((k, k, n, oh, ow, c), np.float32)
    for ky, kx in itertools.product(range(k), range(k)):
        y0, x0 = ky * dilation, kx * dilation
        out[ky, kx] = xp[:, y0 : y0 + (oh - 1) * stride + 1 : stride, x0 : x0 + (ow - 1) * stride + 1 : stride]
    return out, oh, ow


ACTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "NONE": lambda v: v,
    "RELU": lambda v: np.maximum(v, 0),
    "RELU6": lambda v: np.clip(v, 0, 6),
}


def slice_sums(products: list[np.ndarray], start: np.ndarray, mode: str) -> np.ndarray:
    """start plus the products, in order, as a conv-family kernel sums them:
    F16 one half rounding per multiply-add; F32_F16 each input slice's (4 in a row) products
    summed in half, that added to a float sum."""
    acc = start
    for s0 in range(0, len(products), 4):
        if mode == "fp16":
            for p in products[s0 : s0 + 4]:
                acc = h(acc + p)
        else:
            part = h(products[s0])
            for p in products[s0 + 1 : s0 + 4]:
                part = h(part + p)
            acc = (acc + part).astype(np.float32)
    return acc


def biased(acc: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The sum made a half, plus the bias, in half (`TO_FLT4(r) + bias_val`)."""
    return h(h(acc) + bias)


def conv_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, dilation: int, padding: str, act: str, mode: str
) -> np.ndarray:
    """CONV_2D: w [O, k, k, I]."""
    x, w, b = h(x), h(w), h(b)
    k = w.shape[1]
    t, oh, ow = taps(x, k, stride, dilation, padding)
    acc = np.zeros((x.shape[0], oh, ow, w.shape[0]), np.float32)
    for ky, kx in itertools.product(range(k), range(k)):
        acc = slice_sums([t[ky, kx][..., ci : ci + 1] * w[:, ky, kx, ci] for ci in range(x.shape[3])], acc, mode)
    return ACTS[act](biased(acc, b))


def depthwise_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, dilation: int, padding: str, act: str, mode: str
) -> np.ndarray:
    """DEPTHWISE_CONV_2D: w [1, k, k, C * multiplier]; output channel o reads input o // multiplier."""
    x, w, b = h(np.repeat(x, w.shape[3] // x.shape[3], axis=3)), h(w), h(b)
    k = w.shape[1]
    t, oh, ow = taps(x, k, stride, dilation, padding)
    acc = np.zeros((x.shape[0], oh, ow, x.shape[3]), np.float32)
    for ky, kx in itertools.product(range(k), range(k)):
        product = h(t[ky, kx] * w[0, ky, kx])
        acc = h(acc + product) if mode == "fp16" else (acc + product).astype(np.float32)
    return ACTS[act](biased(acc, b))


def matmul_ref(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    """a [.., M, K] x b [.., K, N], the sum over k in order (FULLY_CONNECTED, BATCH_MATMUL),
    before the bias."""
    a, b = h(a), h(b)
    acc = np.zeros(np.broadcast_shapes((*a.shape[:-1], 1), (*b.shape[:-2], 1, b.shape[-1])), np.float32)
    return slice_sums([a[..., k : k + 1] * b[..., k : k + 1, :] for k in range(a.shape[-1])], acc, mode)


def conv_model(cin: int, cout: int, k: int, stride: int, dilation: int, padding: str, act: str) -> tuple[Model, list]:
    size = 9
    o, _ = pads(size, k, stride, dilation, padding)
    wt, bias = randn(cout, k, k, cin), randn(cout)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, size, size, cin])
        options = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function=act)
        options |= dict(dilation_w_factor=dilation, dilation_h_factor=dilation)
        return g.op("CONV_2D", [x, g.const("w", wt), g.const("b", bias)], [1, o, o, cout], options=options)

    return single(build), [wt, bias]


CONV_GRID = [
    c
    for c in itertools.product(
        [1, 3, 4, 9, 17], [1, 4, 6, 17], [1, 3], [1, 2], [1, 2], ["SAME", "VALID"], ["NONE", "RELU6"]
    )
    if not (c[3] > 1 and c[4] > 1)  # TFLite refuses strided dilated convs
]


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize(("cin", "cout", "k", "stride", "dilation", "padding", "act"), CONV_GRID[::5])
def test_conv2d(cin: int, cout: int, k: int, stride: int, dilation: int, padding: str, act: str, mode: str) -> None:
    model, (wt, bias) = conv_model(cin, cout, k, stride, dilation, padding, act)
    x = randn(1, 9, 9, cin, scale=2)
    assert_exact(run(model, [x], mode), conv_ref(x, wt, bias, stride, dilation, padding, act, mode))


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize(
    ("cin", "cout", "groups", "stride", "padding"),
    [(8, 8, 2, 1, "SAME"), (16, 24, 4, 2, "VALID"), (8, 8, 8, 1, "SAME")],
)
def test_grouped_conv2d(cin: int, cout: int, groups: int, stride: int, padding: str, mode: str) -> None:
    """Four input channels per group: ConvGeneric's grouped sums, group by group; one per group
    (YOLO11's positional conv): the delegate makes it a DEPTHWISE_CONV_2D (model_builder.cc)."""
    wt, bias = randn(cout, 3, 3, cin // groups), randn(cout)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 9, 9, cin])
        o, _ = pads(9, 3, stride, 1, padding)
        options = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function="RELU")
        return g.op("CONV_2D", [x, g.const("w", wt), g.const("b", bias)], [1, o, o, cout], options=options)

    x = randn(1, 9, 9, cin, scale=2)
    if groups == cin:
        want = depthwise_ref(x, wt.transpose(3, 1, 2, 0), bias, stride, 1, padding, "RELU", mode)
    else:
        ci, co = cin // groups, cout // groups
        parts = [
            conv_ref(x[..., i * ci : (i + 1) * ci], wt[i * co : (i + 1) * co], bias[i * co : (i + 1) * co], stride, 1,
                     padding, "RELU", mode)
            for i in range(groups)
        ]  # fmt: skip
        want = np.concatenate(parts, axis=-1)
    assert_exact(run(single(build), [x], mode), want)


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize("cout", [4, 8, 16])
def test_conv2d_on_a_wide_plane_of_1x1(cout: int, mode: str) -> None:
    """conv1x1's 8-position blocks, one, two and four output slices per item."""
    wt, bias = randn(cout, 1, 1, 24), randn(cout)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 6, 11, 24])
        options = dict(padding="VALID", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [x, g.const("w", wt), g.const("b", bias)], [1, 6, 11, cout], options=options)

    x = randn(1, 6, 11, 24, scale=3)
    ex = Executor(single(build), DEVICE, mode)
    assert [ln.kernel.split("_")[0] for ln in ex.launches] == ["conv1x1"]
    assert_exact(ex.run([x])[0], conv_ref(x, wt, bias, 1, 1, "VALID", "NONE", mode))


@pytest.mark.parametrize(
    ("c", "k", "stride", "padding", "width", "dilation", "m"),
    [
        (8, 3, 1, "SAME", 20, 1, 1),
        (5, 5, 2, "SAME", 23, 1, 1),
        (6, 3, 2, "VALID", 19, 1, 1),
        (4, 3, 1, "SAME", 12, 2, 1),
        (7, 4, 1, "VALID", 15, 1, 1),
        (3, 3, 2, "SAME", 13, 1, 2),
    ],
)
@pytest.mark.parametrize("mode", HALF_MODES)
def test_depthwise_conv2d(
    c: int, k: int, stride: int, padding: str, width: int, dilation: int, m: int, mode: str
) -> None:
    """The blocked kernels (3x3 and 5x5 windows, strides 1 and 2, two rows per item at stride 1,
    any window), and the one for a multiplier `m` above 1."""
    height = width - 4
    oh, _ = pads(height, k, stride, dilation, padding)
    ow, _ = pads(width, k, stride, dilation, padding)
    wt, bias = randn(1, k, k, c * m), randn(c * m)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, height, width, c])
        options = dict(
            padding=padding, stride_w=stride, stride_h=stride, depth_multiplier=m, fused_activation_function="RELU"
        )
        options |= dict(dilation_w_factor=dilation, dilation_h_factor=dilation)
        return g.op("DEPTHWISE_CONV_2D", [x, g.const("w", wt), g.const("b", bias)], [1, oh, ow, c * m], options=options)

    x = randn(1, height, width, c, scale=2)
    assert_exact(run(single(build), [x], mode), depthwise_ref(x, wt, bias, stride, dilation, padding, "RELU", mode))


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize(("rows", "inputs", "outputs"), [(1, 7, 5), (3, 64, 10), (2, 300, 9)])
def test_fully_connected(rows: int, inputs: int, outputs: int, mode: str) -> None:
    """A long sum in half: 300 products (its error grows with the length, which F16 must show)."""
    wt, bias = randn(outputs, inputs), randn(outputs)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [rows, inputs])
        return g.op("FULLY_CONNECTED", [x, g.const("w", wt), g.const("b", bias)], [rows, outputs])

    x = randn(rows, inputs)
    assert_exact(run(single(build), [x], mode), biased(matmul_ref(x, wt.T, mode), h(bias)))


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "adj_x", "adj_y", "out"),
    [
        ([2, 5, 7], [2, 7, 6], False, False, [2, 5, 6]),
        ([1, 5, 9], [1, 6, 9], False, True, [1, 5, 6]),
        ([5, 13], [13, 6], False, False, [5, 6]),
        ([1, 10, 5], [1, 10, 6], True, False, [1, 5, 6]),
    ],
)
def test_batch_matmul(
    a_shape: list[int], b_shape: list[int], adj_x: bool, adj_y: bool, out: list[int], mode: str
) -> None:
    """F16 with adj_y: B's rows run along K as A's do, a sum per lane (k mod 4), then the four
    lanes' sums added in order, each step a half (kernels/matmul.cl). F32_F16 as ConvGeneric,
    which the delegate runs it on: four k's products in half, then the float sum."""

    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", a_shape), g.input("b", b_shape)
        return g.op("BATCH_MATMUL", [a, b], out, options=dict(adj_x=adj_x, adj_y=adj_y))

    a, b = randn(*a_shape), randn(*b_shape)
    am = np.swapaxes(a, -1, -2) if adj_x else a
    bm = np.swapaxes(b, -1, -2) if adj_y else b
    if mode == "fp16" and adj_y:
        k = am.shape[-1]
        lanes = [matmul_ref(am[..., j::4], bm[..., j::4, :], mode) if j < k else 0 for j in range(4)]
        want = h(h(h(lanes[0] + lanes[1]) + lanes[2]) + lanes[3])
    else:
        want = h(matmul_ref(am, bm, mode))
    assert_exact(run(single(build), [a, b], mode), want)


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "padding"), [(3, 5, 3, 2, "SAME"), (8, 4, 4, 2, "VALID"), (5, 2, 3, 1, "SAME")]
)
def test_transpose_conv(cin: int, cout: int, k: int, stride: int, padding: str, mode: str) -> None:
    """Output (y, x) sums its kernel rows and columns in order (ky, kx ascending), input
    channels innermost."""
    hh, ww = 4, 5
    oh, ow = ((n * stride, (n - 1) * stride + k)[padding == "VALID"] for n in (hh, ww))
    wt = randn(cout, k, k, cin)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, hh, ww, cin])
        shape = g.const("shape", np.array([1, oh, ow, cout], np.int32))
        return g.op(
            "TRANSPOSE_CONV",
            [shape, g.const("w", wt), x],
            [1, oh, ow, cout],
            options=dict(padding=padding, stride_w=stride, stride_h=stride),
        )

    x = randn(1, hh, ww, cin, scale=2)
    xh, wh = h(x), h(wt)
    pad_y, pad_x = (max((n - 1) * stride + k - o, 0) // 2 for n, o in ((hh, oh), (ww, ow)))
    want = np.zeros((1, oh, ow, cout), np.float32)
    for y, xo in itertools.product(range(oh), range(ow)):
        acc = np.zeros(cout, np.float32)
        for ky, kx in itertools.product(range(k), range(k)):
            iy, ix = y + pad_y - ky, xo + pad_x - kx
            if iy % stride or ix % stride or not (0 <= iy // stride < hh and 0 <= ix // stride < ww):
                continue
            pixel = xh[0, iy // stride, ix // stride]
            acc = slice_sums([pixel[ci] * wh[:, ky, kx, ci] for ci in range(cin)], acc, mode)
        want[0, y, xo] = h(acc)
    assert_exact(run(single(build), [x], mode), want)


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": lambda a, b: h(a + b),
    "SUB": lambda a, b: h(a - b),
    "MUL": lambda a, b: h(a * b),
    "DIV": lambda a, b: h(a / b),
    "SQUARED_DIFFERENCE": lambda a, b: h(h(a - b) * h(a - b)),
    "MAXIMUM": np.maximum,
}


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(op: str, mode: str) -> None:
    """Operands near 300: squares pass 65504 (Inf), as half arithmetic gives them (F16 and
    F32_F16 alike: elementwise code runs on FLT4)."""
    shape = [1, 4, 5, 6]
    a, b = randn(*shape, scale=300), randn(*shape, scale=300)
    got = run(single(lambda g: g.op(op, [g.input("a", shape), g.input("b", shape)], shape)), [a, b], mode)
    want = BINARY[op](h(a), h(b))
    assert_exact(got, want)
    if op == "SQUARED_DIFFERENCE":
        assert np.isinf(got).any()  # what F16 is for: values past 65504


UNARY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], bool]] = {  # reference, exact
    "HARD_SWISH": (lambda x: h(x * np.clip(h(h(x * h(0.16666667)) + 0.5), 0, 1)), True),
    "SQUARE": (lambda x: h(x * x), True),
    "LOGISTIC": (lambda x: h(1 / (1 + np.exp(-x.astype(np.float64)))), False),
    "TANH": (lambda x: h(np.tanh(x.astype(np.float64))), False),
    "EXP": (lambda x: h(np.exp(x.astype(np.float64))), False),
    "ELU": (lambda x: np.where(x < 0, h(np.expm1(x.astype(np.float64))), x), False),
    "RELU": (lambda x: np.maximum(x, 0), True),
}


@pytest.mark.parametrize("mode", HALF_MODES)
@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op: str, mode: str) -> None:
    shape = [1, 3, 4, 6]
    x = h(randn(*shape, scale=3))
    reference, exact = UNARY[op]
    got = run(single(lambda g: g.op(op, [g.input("x", shape)], shape)), [x], mode)
    (assert_exact if exact else assert_within_one_ulp)(got, reference(x))


@pytest.mark.parametrize("mode", HALF_MODES)
def test_a_fused_add_rounds_the_conv_then_the_sum(mode: str) -> None:
    """CONV_2D -> ADD run as one kernel (the ADD in the conv's epilogue) round as two ops."""
    wt, bias = randn(8, 3, 3, 5), randn(8)

    def build(g: SubgraphBuilder) -> int:
        x, other = g.input("x", [1, 7, 7, 5]), g.input("other", [1, 7, 7, 8])
        conv = g.op(
            "CONV_2D",
            [x, g.const("w", wt), g.const("b", bias)],
            [1, 7, 7, 8],
            options=dict(padding="SAME", stride_w=1, stride_h=1),
        )
        return g.op("ADD", [conv, other], [1, 7, 7, 8])

    model = single(build)
    ex = Executor(model, DEVICE, mode)
    assert len(ex.launches) == 1, [ln.kernel for ln in ex.launches]  # fused: the case this test is about
    x, other = randn(1, 7, 7, 5, scale=2), randn(1, 7, 7, 8)
    want = h(conv_ref(x, wt, bias, 1, 1, "SAME", "NONE", mode) + h(other))
    assert_exact(ex.run([x, other])[0], want)


@pytest.mark.parametrize(
    ("op", "shape", "reference"),
    [
        ("MEAN", [1, 6, 6, 5], lambda x: x.mean(axis=(1, 2), keepdims=True)),
        ("SUM", [1, 4, 4, 7], lambda x: x.sum(axis=3, keepdims=True)),
        (
            "SOFTMAX",
            [2, 3, 17],
            lambda x: (
                np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)
            ),
        ),
    ],
)
@pytest.mark.parametrize("mode", HALF_MODES)
def test_float_sums_round_once(
    op: str, shape: list[int], reference: Callable[[np.ndarray], np.ndarray], mode: str
) -> None:
    """The delegate keeps these sums in float at F16 too: the result is the exact one, rounded once."""
    x = h(randn(*shape, scale=4))

    def build(g: SubgraphBuilder) -> int:
        src = g.input("x", shape)
        if op == "SOFTMAX":
            return g.op(op, [src], shape, options=dict(beta=1.0))
        axes = [1, 2] if op == "MEAN" else [3]
        out = [d if i not in axes else 1 for i, d in enumerate(shape)]
        return g.op(op, [src, g.const("axes", np.array(axes, np.int32))], out, options=dict(keep_dims=True))

    assert_within_one_ulp(run(single(build), [x], mode), h(reference(x.astype(np.float64))))


def test_fp32_fp16_sums_in_float() -> None:
    """F32_F16 (fp32-fp16) sums in float what it sums in half four products at a time; F16's
    sum is a half: a 300-long FULLY_CONNECTED is further from the exact result there, and the
    float sum's rounding is not what F32_F16 differs from the exact result by."""
    wt, x = randn(4, 300), randn(2, 300)

    def build(g: SubgraphBuilder) -> int:
        return g.op(
            "FULLY_CONNECTED", [g.input("x", [2, 300]), g.const("w", wt), g.const("b", np.zeros(4, np.float32))], [2, 4]
        )

    model = single(build)
    exact = h(x).astype(np.float64) @ h(wt).T.astype(np.float64)
    mixed = run(model, [x], "fp32-fp16")
    assert_exact(mixed, h(matmul_ref(x, wt.T, "fp32-fp16")))
    assert float(half_ulps(mixed, h(exact)).max()) > 0  # the half partial sums show
    f16 = run(model, [x])
    assert float(np.abs(f16 - exact).max()) > 2 * float(np.abs(mixed - exact).max())

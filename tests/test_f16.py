"""F16 (`Executor(..., "fp16")`) against a numpy reference that rounds every step as the
delegate's F16 kernels do (README "Precision"): the executor's F16 is an emulation, and this is
what holds it to its definition.

The reference computes each step in float32 on half operands and rounds the result to half
(numpy's float32 -> float16 conversion: nearest, ties to even, overflow to Inf), in the order
the kernels take: conv-family sums from zero, one rounding per multiply-add (a depthwise
product is rounded first, as DepthwiseConv's `r += TO_ACCUM_TYPE(src * weight)`), input
channels innermost, the bias added to the half sum at the end. A half times a half is exact in
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


def run_f16(model: Model, inputs: list[np.ndarray]) -> np.ndarray:
    return Executor(model, DEVICE, "fp16").run(inputs)[0]


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


def conv_f16(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, dilation: int, padding: str, act: str
) -> np.ndarray:
    """CONV_2D at F16: w [O, k, k, I]."""
    x, w, b = h(x), h(w), h(b)
    k = w.shape[1]
    t, oh, ow = taps(x, k, stride, dilation, padding)
    acc = np.zeros((x.shape[0], oh, ow, w.shape[0]), np.float32)
    for ky, kx, ci in itertools.product(range(k), range(k), range(x.shape[3])):
        acc = h(acc + t[ky, kx][..., ci : ci + 1] * w[:, ky, kx, ci])
    return ACTS[act](h(acc + b))


def depthwise_f16(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, dilation: int, padding: str, act: str
) -> np.ndarray:
    """DEPTHWISE_CONV_2D at F16: w [1, k, k, C * multiplier]; output channel o reads input o // multiplier."""
    x, w, b = h(np.repeat(x, w.shape[3] // x.shape[3], axis=3)), h(w), h(b)
    k = w.shape[1]
    t, oh, ow = taps(x, k, stride, dilation, padding)
    acc = np.zeros((x.shape[0], oh, ow, x.shape[3]), np.float32)
    for ky, kx in itertools.product(range(k), range(k)):
        acc = h(acc + h(t[ky, kx] * w[0, ky, kx]))
    return ACTS[act](h(acc + b))


def matmul_f16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [.., M, K] x b [.., K, N], the sum over k in order (FULLY_CONNECTED, BATCH_MATMUL)."""
    a, b = h(a), h(b)
    acc = np.zeros(np.broadcast_shapes((*a.shape[:-1], 1), (*b.shape[:-2], 1, b.shape[-1])), np.float32)
    for k in range(a.shape[-1]):
        acc = h(acc + a[..., k : k + 1] * b[..., k : k + 1, :])
    return acc


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


@pytest.mark.parametrize(("cin", "cout", "k", "stride", "dilation", "padding", "act"), CONV_GRID[::5])
def test_conv2d(cin: int, cout: int, k: int, stride: int, dilation: int, padding: str, act: str) -> None:
    model, (wt, bias) = conv_model(cin, cout, k, stride, dilation, padding, act)
    x = randn(1, 9, 9, cin, scale=2)
    assert_exact(run_f16(model, [x]), conv_f16(x, wt, bias, stride, dilation, padding, act))


@pytest.mark.parametrize("cout", [4, 8, 16])
def test_conv2d_on_a_wide_plane_of_1x1(cout: int) -> None:
    """conv1x1's 8-position blocks, one, two and four output slices per item."""
    wt, bias = randn(cout, 1, 1, 24), randn(cout)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 6, 11, 24])
        options = dict(padding="VALID", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [x, g.const("w", wt), g.const("b", bias)], [1, 6, 11, cout], options=options)

    x = randn(1, 6, 11, 24, scale=3)
    ex = Executor(single(build), DEVICE, "fp16")
    assert [ln.kernel.split("_")[0] for ln in ex.launches] == ["conv1x1"]
    assert_exact(ex.run([x])[0], conv_f16(x, wt, bias, 1, 1, "VALID", "NONE"))


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
def test_depthwise_conv2d(c: int, k: int, stride: int, padding: str, width: int, dilation: int, m: int) -> None:
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
    assert_exact(run_f16(single(build), [x]), depthwise_f16(x, wt, bias, stride, dilation, padding, "RELU"))


@pytest.mark.parametrize(("rows", "inputs", "outputs"), [(1, 7, 5), (3, 64, 10), (2, 300, 9)])
def test_fully_connected(rows: int, inputs: int, outputs: int) -> None:
    """A long sum in half: 300 products (its error grows with the length, which F16 must show)."""
    wt, bias = randn(outputs, inputs), randn(outputs)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [rows, inputs])
        return g.op("FULLY_CONNECTED", [x, g.const("w", wt), g.const("b", bias)], [rows, outputs])

    x = randn(rows, inputs)
    assert_exact(run_f16(single(build), [x]), h(matmul_f16(x, wt.T) + h(bias)))


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "adj_y", "out"),
    [
        ([2, 5, 7], [2, 7, 6], False, [2, 5, 6]),
        ([1, 5, 9], [1, 6, 9], True, [1, 5, 6]),
        ([5, 13], [13, 6], False, [5, 6]),
    ],
)
def test_batch_matmul(a_shape: list[int], b_shape: list[int], adj_y: bool, out: list[int]) -> None:
    """With adj_y B's rows run along K as A's do: a sum per lane (k mod 4), then the four lanes'
    sums added in order, each step a half (kernels/matmul.cl)."""

    def build(g: SubgraphBuilder) -> int:
        return g.op("BATCH_MATMUL", [g.input("a", a_shape), g.input("b", b_shape)], out, options=dict(adj_y=adj_y))

    a, b = randn(*a_shape), randn(*b_shape)
    if not adj_y:
        want = matmul_f16(a, b)
    else:
        bt = np.swapaxes(b, -1, -2)
        k = a.shape[-1]
        lanes = [matmul_f16(a[..., j::4], bt[..., j::4, :]) if j < k else 0 for j in range(4)]
        want = h(h(h(lanes[0] + lanes[1]) + lanes[2]) + lanes[3])
    assert_exact(run_f16(single(build), [a, b]), want)


@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "padding"), [(3, 5, 3, 2, "SAME"), (8, 4, 4, 2, "VALID"), (5, 2, 3, 1, "SAME")]
)
def test_transpose_conv(cin: int, cout: int, k: int, stride: int, padding: str) -> None:
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
            for ci in range(cin):
                acc = h(acc + xh[0, iy // stride, ix // stride, ci] * wh[:, ky, kx, ci])
        want[0, y, xo] = acc
    assert_exact(run_f16(single(build), [x]), want)


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": lambda a, b: h(a + b),
    "SUB": lambda a, b: h(a - b),
    "MUL": lambda a, b: h(a * b),
    "DIV": lambda a, b: h(a / b),
    "SQUARED_DIFFERENCE": lambda a, b: h(h(a - b) * h(a - b)),
    "MAXIMUM": np.maximum,
}


@pytest.mark.parametrize("op", list(BINARY))
def test_binary(op: str) -> None:
    """Operands near 300: squares pass 65504 (Inf), as F16 gives them."""
    shape = [1, 4, 5, 6]
    a, b = randn(*shape, scale=300), randn(*shape, scale=300)
    got = run_f16(single(lambda g: g.op(op, [g.input("a", shape), g.input("b", shape)], shape)), [a, b])
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


@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op: str) -> None:
    shape = [1, 3, 4, 6]
    x = h(randn(*shape, scale=3))
    reference, exact = UNARY[op]
    got = run_f16(single(lambda g: g.op(op, [g.input("x", shape)], shape)), [x])
    (assert_exact if exact else assert_within_one_ulp)(got, reference(x))


def test_a_fused_add_rounds_the_conv_then_the_sum() -> None:
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
    ex = Executor(model, DEVICE, "fp16")
    assert len(ex.launches) == 1, [ln.kernel for ln in ex.launches]  # fused: the case this test is about
    x, other = randn(1, 7, 7, 5, scale=2), randn(1, 7, 7, 8)
    want = h(conv_f16(x, wt, bias, 1, 1, "SAME", "NONE") + h(other))
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
def test_float_sums_round_once(op: str, shape: list[int], reference: Callable[[np.ndarray], np.ndarray]) -> None:
    """The delegate keeps these sums in float at F16 too: the result is the exact one, rounded once."""
    x = h(randn(*shape, scale=4))

    def build(g: SubgraphBuilder) -> int:
        src = g.input("x", shape)
        if op == "SOFTMAX":
            return g.op(op, [src], shape, options=dict(beta=1.0))
        axes = [1, 2] if op == "MEAN" else [3]
        out = [d if i not in axes else 1 for i, d in enumerate(shape)]
        return g.op(op, [src, g.const("axes", np.array(axes, np.int32))], out, options=dict(keep_dims=True))

    assert_within_one_ulp(run_f16(single(build), [x]), h(reference(x.astype(np.float64))))


def test_fp32_fp16_keeps_float_sums() -> None:
    """fp32-fp16 (F32_F16) stores in half and sums in float: a 300-long FULLY_CONNECTED is one
    rounding from the exact result there, and F16's half sum is further."""
    wt, x = randn(4, 300), randn(2, 300)

    def build(g: SubgraphBuilder) -> int:
        return g.op(
            "FULLY_CONNECTED", [g.input("x", [2, 300]), g.const("w", wt), g.const("b", np.zeros(4, np.float32))], [2, 4]
        )

    model = single(build)
    exact = h(x).astype(np.float64) @ h(wt).T.astype(np.float64)
    mixed = Executor(model, DEVICE, "fp32-fp16").run([x])[0]
    assert_within_one_ulp(mixed, h(exact))
    f16 = run_f16(model, [x])
    assert float(np.abs(f16 - exact).max()) > 2 * float(np.abs(mixed - exact).max())

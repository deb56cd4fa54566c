"""The OpenCL executor against the LiteRT CPU interpreter: single ops over a grid, whole models.

Runs on whatever OpenCL device is there (PoCL from pocl-binary-distribution on a machine
without a GPU; GPULINT_CL_DEVICE picks another) and skips, saying why, when there is none.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS_FILES, NO_CORPUS
from helpers import opencl_device

from gpulint.executor import Executor, ExecutorError, layout
from gpulint.executor import program as program_module
from gpulint.executor.ops import conv as conv_module
from gpulint.executor.ops import reduce as reduce_module
from gpulint.model import Model, read, to_bytes
from gpulint.model.build import ModelBuilder, SubgraphBuilder

DEVICE, NO_DEVICE = opencl_device()

pytestmark = pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE or "no OpenCL device")
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded_per_test(request: pytest.FixtureRequest) -> None:
    """Each test draws the same numbers whatever ran before it on its worker (xdist orders tests
    differently from run to run), so a failure reproduces with the test alone."""
    RNG.bit_generator.state = np.random.default_rng(zlib.crc32(request.node.nodeid.encode())).bit_generator.state


def litert(model: Model, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The reference, in-process: these are small models the builder made, not hostile files."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=to_bytes(model))
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def assert_matches(model: Model, inputs: list[np.ndarray] | None = None, precision: str = "fp32") -> None:
    """Max abs error <= 1e-5 x output scale in fp32, 2e-3 x scale in fp16 (the issue's bounds)."""
    sg = model.subgraphs[0]
    if inputs is None:
        inputs = [RNG.uniform(-2, 2, sg.tensors[t].shape).astype(np.float32) for t in sg.inputs]
    expected = litert(model, inputs)
    got = Executor(model, DEVICE, precision).run(inputs)
    factor = 1e-5 if precision == "fp32" else 2e-3
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape
        np.testing.assert_allclose(g, e, rtol=0, atol=factor * max(1.0, float(np.abs(e).max())))


def single(build: Any) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def out_size(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    eff = (k - 1) * dilation + 1
    return -(-size // stride) if padding == "SAME" else (size - eff) // stride + 1


CONV_GRID = list(
    itertools.product(
        [1, 3, 4, 5, 9, 16, 17], [1, 4, 6, 17], [1, 3], [1, 2], [1, 2], ["SAME", "VALID"], ["NONE", "RELU6"]
    )
)


@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "dilation", "padding", "act"), CONV_GRID[:: max(1, len(CONV_GRID) // 60)]
)
def test_conv2d(cin: int, cout: int, k: int, stride: int, dilation: int, padding: str, act: str) -> None:
    assert_matches(conv_model(cin, cout, k, stride, dilation, padding, act))


@pytest.mark.parametrize(("cin", "cout", "k", "stride"), [(3, 8, 3, 2), (5, 17, 3, 1), (16, 16, 1, 1), (9, 4, 5, 1)])
def test_conv2d_fp16(cin: int, cout: int, k: int, stride: int) -> None:
    """fp16 mode: tensors and weights stored as half (any device can: vload_half is core). No
    fused clamp: half rounding scales with the pre-activation sum, which RELU6 would hide from
    the output scale the bound is measured against."""
    assert_matches(conv_model(cin, cout, k, stride, 1, "SAME", "NONE"), precision="fp32-fp16")


@pytest.mark.parametrize(
    ("axis", "exclusive", "reverse"), list(itertools.product([0, 1, 2, 3, -1], [False, True], [False, True]))
)
def test_cumsum(axis: int, exclusive: bool, reverse: bool) -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [2, 3, 5, 6])
        return g.op(
            "CUMSUM",
            [x, g.const("axis", np.array(axis, np.int32))],
            [2, 3, 5, 6],
            options=dict(exclusive=exclusive, reverse=reverse),
        )

    assert_matches(single(build))


def _fp16_cases() -> dict[str, Any]:
    def depthwise(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 9, 9, 6])
        opts = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
        return g.op(
            "DEPTHWISE_CONV_2D", [x, g.const("w", w(1, 3, 3, 6)), g.const("b", w(6))], [1, 9, 9, 6], options=opts
        )

    def add_broadcast(g: SubgraphBuilder) -> int:
        return g.op("ADD", [g.input("a", [1, 4, 5, 7]), g.const("b", w(7))], [1, 4, 5, 7])

    def mul(g: SubgraphBuilder) -> int:
        return g.op("MUL", [g.input("a", [1, 4, 5, 9]), g.input("b", [1, 4, 5, 9])], [1, 4, 5, 9])

    def softmax(g: SubgraphBuilder) -> int:
        return g.op("SOFTMAX", [g.input("x", [1, 17])], [1, 17], options=dict(beta=1.0))

    def pool(g: SubgraphBuilder) -> int:
        opts = dict(padding="SAME", stride_w=2, stride_h=2, filter_width=3, filter_height=3)
        return g.op("AVERAGE_POOL_2D", [g.input("x", [1, 8, 8, 5])], [1, 4, 4, 5], options=opts)

    def mean(g: SubgraphBuilder) -> int:
        axes = g.const("axes", np.array([1, 2], np.int32))
        return g.op("MEAN", [g.input("x", [1, 6, 6, 16]), axes], [1, 16], options=dict(keep_dims=False))

    def resize(g: SubgraphBuilder) -> int:
        size = g.const("size", np.array([8, 8], np.int32))
        return g.op("RESIZE_BILINEAR", [g.input("x", [1, 4, 4, 3]), size], [1, 8, 8, 3])

    def logistic(g: SubgraphBuilder) -> int:
        return g.op("LOGISTIC", [g.input("x", [1, 3, 4, 5])], [1, 3, 4, 5])

    return {f.__name__: f for f in (depthwise, add_broadcast, mul, softmax, pool, mean, resize, logistic)}


@pytest.mark.parametrize("name", list(_fp16_cases()))
def test_ops_in_fp16(name: str) -> None:
    """fp16 storage: within 2e-3 x output scale of the fp32 interpreter."""
    assert_matches(single(_fp16_cases()[name]), precision="fp32-fp16")


def conv_model(
    cin: int, cout: int, k: int, stride: int, dilation: int, padding: str, act: str, groups: int = 1
) -> Model:
    """One CONV_2D on a 9x9 input; `groups` > 1 makes its filter [cout, k, k, cin / groups]."""
    if stride > 1 and dilation > 1:
        pytest.skip("TFLite refuses strided dilated convs")
    size = 9
    o = out_size(size, k, stride, dilation, padding)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, size, size, cin])
        return g.op(
            "CONV_2D",
            [x, g.const("w", w(cout, k, k, cin // groups)), g.const("b", w(cout))],
            [1, o, o, cout],
            options=dict(
                padding=padding,
                stride_w=stride,
                stride_h=stride,
                dilation_w_factor=dilation,
                dilation_h_factor=dilation,
                fused_activation_function=act,
            ),
        )

    return single(build)


@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "padding", "width"),
    [
        (3, 24, 3, 2, "SAME", 33),
        (3, 32, 5, 2, "SAME", 40),
        (3, 16, 5, 1, "VALID", 23),
        (4, 8, 3, 1, "SAME", 26),
        (5, 6, 5, 2, "VALID", 31),
        (3, 8, 3, 2, "VALID", 19),
    ],
)
def test_conv2d_on_wide_rows(cin: int, cout: int, k: int, stride: int, padding: str, width: int) -> None:
    """Network stems and rows wide enough for blocks inside the row and at both borders."""
    height = width - 5
    oh, ow = (out_size(n, k, stride, 1, padding) for n in (height, width))

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, height, width, cin])
        opts = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function="RELU6")
        return g.op(
            "CONV_2D", [x, g.const("w", w(cout, k, k, cin)), g.const("b", w(cout))], [1, oh, ow, cout], options=opts
        )

    assert_matches(single(build))


@pytest.mark.parametrize("cin", [1, 2, 3, 4])
@pytest.mark.parametrize(
    ("batch", "size", "k", "stride", "padding", "pad_op"), [(2, 13, 3, 2, "SAME", False), (1, 9, 5, 1, "VALID", True)]
)
def test_a_first_conv_reads_the_input_as_given(
    cin: int, batch: int, size: int, k: int, stride: int, padding: str, pad_op: bool
) -> None:
    """A graph input whose one reader is a conv (through a merged PAD too) is not converted to
    slices first: conv_o's `_raw` kernel reads it as the caller gives it, lanes past its
    channels as zero. Against LiteRT, and with a NaN in the second batch's first value, which a
    conv reading past the first batch's last pixel would spread to the first batch."""
    o = out_size(size + (2 if pad_op else 0), k, stride, 1, padding)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [batch, size, size, cin])
        if pad_op:
            paddings = g.const("p", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
            x = g.op("PAD", [x, paddings], [batch, size + 2, size + 2, cin])
        opts = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function="RELU6")
        return g.op("CONV_2D", [x, g.const("w", w(8, k, k, cin)), g.const("b", w(8))], [batch, o, o, 8], options=opts)

    model = single(build)
    ex = Executor(model, DEVICE)
    assert ex.input_launches == [] and [ln.kernel.split("_raw")[1] for ln in ex.launches] in (["_fused"], [""])
    x = RNG.uniform(-2, 2, [batch, size, size, cin]).astype(np.float32)
    assert_matches(model, [x])
    if batch == 2:  # batch 1's first value: read past its last pixel's channels, batch 0's outputs would be NaN
        x[1, 0, 0, 0] = np.nan
        got, expected = ex.run([x])[0], litert(model, [x])[0]
        assert np.isnan(expected[1]).any() and not np.isnan(expected[0]).any()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))


@pytest.mark.parametrize("case", ["two_readers", "pointwise", "grouped", "half", "split"])
def test_an_input_a_conv_cannot_read_as_given_is_converted(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the `_raw` kernel does not apply, the input is put in slices first: at the start
    (two readers, a grouped conv run as a depthwise one, half storage) or by the conv itself,
    just before it (a 1x1 conv, a GPU's split sum)."""
    if case == "split":
        monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (1, 1))
        monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: 2)
    cin, k = (4, 1) if case == "pointwise" else (4, 3)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 9, 9, cin])
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        filter_in = 1 if case == "grouped" else cin
        conv = g.op("CONV_2D", [x, g.const("w", w(4, k, k, filter_in)), g.const("b", w(4))], [1, 9, 9, 4], options=opts)
        return g.op("ADD", [conv, x], [1, 9, 9, 4]) if case == "two_readers" else conv

    model = single(build)
    precision = "fp32-fp16" if case == "half" else "fp32"
    assert_matches(model, precision=precision)
    ex = Executor(model, DEVICE, precision)
    kernels = [ln.kernel for ln in ex.launches]
    assert not any("_raw" in name for name in kernels)
    converted_first = case in ("two_readers", "grouped", "half")
    assert [ln.kernel for ln in ex.input_launches] == (["input_to_slices"] if converted_first else [])
    assert (kernels[0] == "input_to_slices") == (not converted_first)


@pytest.mark.parametrize(
    ("batch", "height", "width", "cin", "cout", "padding"),
    [(1, 3, 3, 5, 7, "VALID"), (2, 2, 4, 8, 17, "VALID"), (1, 6, 6, 3, 1, "VALID"), (1, 1, 1, 9, 6, "SAME")],
)
def test_a_conv_over_its_whole_input_runs_as_a_1x1(
    batch: int, height: int, width: int, cin: int, cout: int, padding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's last layers: one output position whose window is the whole input runs as a 1x1
    conv over the input's slices, with the weights in the buffer's order (its sum not split, as
    a GPU would: test_conv1x1_split_as_a_gpu_runs_it)."""
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: 1)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [batch, height, width, cin])
        opts = dict(padding=padding, stride_w=2, stride_h=1, fused_activation_function="RELU")
        wt = g.const("w", w(cout, height, width, cin))
        return g.op("CONV_2D", [x, wt, g.const("b", w(cout))], [batch, 1, 1, cout], options=opts)

    assert_matches(single(build))
    launches = Executor(single(build), DEVICE).launches  # a 1x1 conv puts an input of <= 4 channels in slices
    assert [ln.kernel.split("_fused")[0] for ln in launches if ln.kernel != "input_to_slices"] == [
        f"conv1x1_o{conv_module.conv_blocking(DEVICE.cpu, -(-cout // 4), 1, batch * 4 * -(-height * width * cin // 4))[0]}_p1"
    ]


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("cout", [5, 16, 17])
def test_conv2d_as_a_gpu_runs_it(k: int, cout: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU's blocking (one output slice and position per item) and plain kernel (nothing
    fuses: a constant the output's shape is no fusable operand), on whatever device this is;
    its sums not split (test_conv_split_as_a_gpu_runs_it)."""
    monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (1, 1))
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: 1)
    monkeypatch.setattr(program_module, "epilogue_loop", lambda device: True)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 7, 9, 6])
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
        conv = g.op(
            "CONV_2D", [x, g.const("w", w(cout, k, k, 6)), g.const("b", w(cout))], [1, 7, 9, cout], options=opts
        )
        return g.op("ADD", [conv, g.const("r", w(1, 7, 9, cout))], [1, 7, 9, cout])

    assert_matches(single(build))
    kernels = [ln.kernel for ln in Executor(single(build), DEVICE).launches]
    assert kernels == [f"conv{'1x1' if k == 1 else ''}_o1{'_p1' if k == 1 else ''}", "binary"]


@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
@pytest.mark.parametrize("looped", [False, True], ids=["inline", "looped"])
@pytest.mark.parametrize(
    ("shape", "cin", "cout", "splits"),
    [
        ([1, 7, 7], 40, 9, 4),  # 49 positions: a second group of 32 lanes mostly idle; 10 slices over 4 splits
        ([2, 3, 5], 64, 4, 8),  # batch 2; 15 positions in a group of 16 lanes, 16 slices over 8
        ([1, 1, 1], 100, 6, 2),  # one position (a FULLY_CONNECTED's row)
    ],
)
def test_conv1x1_split_as_a_gpu_runs_it(
    shape: list[int], cin: int, cout: int, splits: int, looped: bool, precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU's 1x1 conv with its sum over input slices split across a work group's items
    (conv1x1_split), with a fused ADD and activation, on whatever device this is."""
    monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (1, 1))
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: splits)
    monkeypatch.setattr(program_module, "epilogue_loop", lambda device: looped)
    out = [*shape, cout]

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [*shape, cin])
        opts = dict(padding="VALID", stride_w=1, stride_h=1, fused_activation_function="RELU6")
        conv = g.op("CONV_2D", [x, g.const("w", w(cout, 1, 1, cin)), g.const("b", w(cout))], out, options=opts)
        return g.op("ADD", [conv, g.input("r", out)], out, options=dict(fused_activation_function="RELU"))

    model = single(build)
    split = Executor(model, DEVICE, precision)
    if precision == "fp16":  # F16 sums one rounding per step in the delegate's order: never split
        assert [ln.kernel for ln in split.launches] == ["conv1x1_o1_p1_fused"]
        return
    assert [ln.kernel for ln in split.launches] == ["conv1x1_split_fused"]
    if precision == "fp32":
        assert_matches(model)
        return
    # Half steps' rounding is past the bound against LiteRT's float at 40 channels, with or
    # without the split: held against the unsplit kernel at the same precision instead.
    x = [RNG.uniform(-2, 2, [*shape, cin]).astype(np.float32), RNG.uniform(-2, 2, out).astype(np.float32)]
    got = split.run(x)[0]
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: 1)
    whole = Executor(model, DEVICE, precision)
    assert [ln.kernel for ln in whole.launches] == ["conv1x1_o1_p1_fused"]
    expected = whole.run(x)[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16"])
@pytest.mark.parametrize("looped", [False, True], ids=["inline", "looped"])
@pytest.mark.parametrize(
    ("size", "cin", "k", "stride", "padding", "splits"),
    [
        (4, 64, 3, 1, "SAME", 8),  # 16 slices over 8 splits; every column's window at an edge
        (11, 20, 3, 2, "SAME", 4),  # 5 slices over 4: one split sums two, three one
        (13, 9, 5, 1, "VALID", 2),  # a partial slice; interior columns take the fixed-distance path
    ],
)
def test_conv_split_as_a_gpu_runs_it(
    size: int,
    cin: int,
    k: int,
    stride: int,
    padding: str,
    splits: int,
    looped: bool,
    precision: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A GPU's windowed conv with its sum over input slices split across a work group's items
    (conv_split), a fused ADD and activation, on whatever device this is."""
    monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (1, 1))
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: splits)
    monkeypatch.setattr(program_module, "epilogue_loop", lambda device: looped)
    o = out_size(size, k, stride, 1, padding)
    out = [2, o, o, 6]

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [2, size, size, cin])
        opts = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function="RELU")
        conv = g.op("CONV_2D", [x, g.const("w", w(6, k, k, cin)), g.const("b", w(6))], out, options=opts)
        return g.op("ADD", [conv, g.input("r", out)], out)

    model = single(build)
    assert [ln.kernel for ln in Executor(model, DEVICE, precision).launches] == ["conv_split_fused"]
    assert [ln.kernel for ln in Executor(model, DEVICE, "fp16").launches] == ["conv_o1_fused"]  # F16: never split
    if precision == "fp32":
        assert_matches(model)
        return
    x = [RNG.uniform(-2, 2, [2, size, size, cin]).astype(np.float32), RNG.uniform(-2, 2, out).astype(np.float32)]
    got = Executor(model, DEVICE, precision).run(x)[0]
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: 1)
    expected = Executor(model, DEVICE, precision).run(x)[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3 * max(1.0, float(np.abs(expected).max())))


class FakeGPU:
    """What gpu_splits reads of a device: an H100's 132 compute units."""

    cpu = False

    class device:  # pyopencl's attribute name
        max_compute_units = 132


@pytest.mark.parametrize(
    ("outputs", "in_slices", "taps", "lanes", "expected"),
    [
        (7 * 7 * 48, 288, 1, 32, 8),  # pose_detection's 7x7 1x1, 1152 -> 192: 2,352 items, split 8 (the group's 256)
        (16, 288, 1, 1, 64),  # a FULLY_CONNECTED row of 1152 -> 64: 4 or more slices per item
        (14 * 14 * 48, 12, 1, 32, 2),  # 12 slices: 6 per item at 2 splits, 3 at 4
        (128 * 128 * 8, 64, 1, 32, 1),  # 131,072 items already: no split
        (32, 16, 9, 1, 16),  # iris_landmark's 2x2 3x3 conv, 64 -> 64: 32 items, a slice (9 taps) per split
        (32, 1, 9, 1, 1),  # one input slice: nothing to split
    ],
)
def test_gpu_splits_only_where_a_gpu_has_too_few_items(
    outputs: int, in_slices: int, taps: int, lanes: int, expected: int
) -> None:
    assert conv_module.gpu_splits(FakeGPU(), outputs, in_slices, taps, lanes) == expected  # type: ignore[arg-type]
    cpu = FakeGPU()
    cpu.cpu = True  # a CPU device never splits: its items already loop over blocks
    assert conv_module.gpu_splits(cpu, outputs, in_slices, taps, lanes) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("c", "multiplier", "k", "stride", "padding", "width", "dilation"),
    [
        (1, 1, 3, 1, "SAME", 8, 1),
        (5, 1, 3, 2, "SAME", 8, 1),
        (8, 1, 5, 1, "VALID", 8, 1),
        (3, 2, 3, 1, "SAME", 8, 1),
        (1, 4, 3, 1, "VALID", 8, 1),
        (17, 1, 3, 2, "VALID", 8, 1),
        (9, 1, 1, 1, "SAME", 8, 1),
        # rows wide enough for items inside the row as well as at its borders, odd heights
        (5, 1, 5, 1, "SAME", 21, 1),
        (6, 1, 3, 1, "SAME", 30, 1),
        (4, 1, 5, 1, "VALID", 27, 1),
        (8, 1, 5, 1, "SAME", 14, 1),
        (3, 1, 3, 1, "SAME", 7, 1),
        (2, 1, 3, 2, "SAME", 19, 1),
        (6, 1, 5, 2, "SAME", 23, 1),
        (4, 1, 5, 2, "VALID", 30, 1),
        (4, 1, 3, 1, "SAME", 20, 2),
        (6, 1, 1, 1, "VALID", 21, 1),  # 1x1 windows (a per-channel scale), stride 1 and 2
        (5, 1, 1, 2, "SAME", 23, 1),
    ],
)
def test_depthwise_conv2d(
    c: int, multiplier: int, k: int, stride: int, padding: str, width: int, dilation: int
) -> None:
    height = 8 if width == 8 else width - 4
    oh, ow = (out_size(n, k, stride, dilation, padding) for n in (height, width))

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, height, width, c])
        return g.op(
            "DEPTHWISE_CONV_2D",
            [x, g.const("w", w(1, k, k, c * multiplier)), g.const("b", w(c * multiplier))],
            [1, oh, ow, c * multiplier],
            options=dict(
                padding=padding,
                stride_w=stride,
                stride_h=stride,
                dilation_w_factor=dilation,
                dilation_h_factor=dilation,
                depth_multiplier=multiplier,
                fused_activation_function="RELU",
            ),
        )

    assert_matches(single(build))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("k", [3, 4])  # the window kernel (3x3) and the any-size one
def test_an_inf_input_stays_in_its_window(k: int, precision: str) -> None:
    """DEPTHWISE_CONV_2D with two output rows per work item: the rows outside an output's window
    are skipped, not multiplied by a zero weight, so an Inf in the input (F16 overflows) makes
    Inf exactly in the outputs whose window holds it, and NaN nowhere. (The reference is the
    sum itself: LiteRT's XNNPACK kernels give NaN next to the window for a 4x4 filter.)"""
    c, hh, ww = 8, 12, 16
    wt, bias = w(1, k, k, c), w(c)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, hh, ww, c])
        options = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
        options |= dict(dilation_w_factor=1, dilation_h_factor=1)
        return g.op("DEPTHWISE_CONV_2D", [x, g.const("w", wt), g.const("b", bias)], [1, hh, ww, c], options=options)

    x = RNG.uniform(-1, 1, (1, hh, ww, c)).astype(np.float32)
    x[0, 5, 7, 2] = np.inf
    top = (k - 1) // 2  # SAME padding ahead of the input
    padded = np.pad(x[0].astype(np.float64), ((top, k - 1 - top), (top, k - 1 - top), (0, 0)))
    with np.errstate(invalid="ignore"):
        expected = sum(padded[i : i + hh, j : j + ww] * wt[0, i, j] for i in range(k) for j in range(k)) + bias
    ex = Executor(single(build), DEVICE, precision)
    assert any(ln.kernel.startswith("depthwise_x8_r2") for ln in ex.launches)
    (got,) = ex.run([x])
    got = got[0]
    assert np.isinf(expected).sum() == k * k and not np.isnan(expected).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(expected))


@pytest.mark.parametrize("shape", [[1, 7], [3, 7], [1, 2, 2, 3]])
def test_fully_connected(shape: list[int]) -> None:
    i = int(np.prod(shape[1:])) if len(shape) > 2 else shape[-1]
    rows = int(np.prod(shape)) // i

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", shape)
        return g.op("FULLY_CONNECTED", [x, g.const("w", w(5, i)), g.const("b", w(5))], [rows, 5])

    assert_matches(single(build))


@pytest.mark.parametrize(
    ("op", "a", "b"),
    [
        ("ADD", [1, 4, 4, 5], [1, 4, 4, 5]),
        ("MUL", [1, 4, 4, 6], [6]),
        ("SUB", [1, 4, 4, 3], [1, 1, 1, 3]),
        ("MAXIMUM", [1, 4, 4, 9], [1, 4, 4, 1]),
        ("MINIMUM", [2, 3, 5], [3, 5]),
        ("SQUARED_DIFFERENCE", [1, 5, 7], [1, 5, 7]),
        ("DIV", [1, 4, 4, 4], [1, 4, 4, 4]),
        ("ADD", [1, 8], [1, 8]),
    ],
)
@pytest.mark.parametrize("const_b", [False, True])
def test_binary(op: str, a: list[int], b: list[int], const_b: bool) -> None:
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))

    def build(g: SubgraphBuilder) -> int:
        x = g.input("a", a)
        y = g.const("b", w(*b) + (3 if op == "DIV" else 0)) if const_b else g.input("b", b)
        return g.op(op, [x, y], out)

    model = single(build)
    inputs = [RNG.uniform(-2, 2, a).astype(np.float32)]
    if not const_b:
        inputs.append((RNG.uniform(-2, 2, b) + (3 if op == "DIV" else 0)).astype(np.float32))
    assert_matches(model, inputs)


@pytest.mark.parametrize(("rows", "inputs", "units"), [(1, 5, 6), (2, 3, 8), (3, 16, 5)])
def test_lstm_basic_kernel(rows: int, inputs: int, units: int) -> None:
    def build(g: SubgraphBuilder) -> int:
        x, h, c = g.input("x", [rows, inputs]), g.input("h", [rows, units]), g.input("c", [rows, units])
        weights, bias = g.const("w", 0.5 * w(4 * units, inputs + units)), g.const("b", 0.5 * w(4 * units))
        shapes = [[rows, units], [rows, units], [rows, inputs + units], [rows, 4 * units]]
        options = dict(fused_activation_function="TANH", kernel_type="BASIC")
        activation, state, _, _ = g.op("LSTM", [x, h, weights, bias, c], shapes=shapes, options=options)
        g.output(activation)
        return state

    assert_matches(single(build))


@pytest.mark.parametrize("op", ["EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"])
@pytest.mark.parametrize(("a", "b"), [([1, 3, 4, 5], [1, 3, 4, 5]), ([1, 3, 4, 6], [6]), ([2, 5], [1])])
def test_comparisons_give_bool(op: str, a: list[int], b: list[int]) -> None:
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))
    model = single(lambda g: g.op(op, [g.input("a", a), g.input("b", b)], out, dtype="BOOL"))
    # whole numbers in a small range, so that equal values occur
    inputs = [RNG.integers(-2, 3, s).astype(np.float32) for s in (a, b)]
    (got,) = Executor(model, DEVICE).run(inputs)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, litert(model, inputs)[0])


@pytest.mark.parametrize("op", ["LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT"])
def test_logical_ops(op: str) -> None:
    shape = [1, 3, 4, 6]
    names = ["a"] if op == "LOGICAL_NOT" else ["a", "b"]
    model = single(lambda g: g.op(op, [g.input(n, shape, "BOOL") for n in names], shape, dtype="BOOL"))
    inputs = [RNG.integers(0, 2, shape).astype(bool) for _ in names]
    np.testing.assert_array_equal(Executor(model, DEVICE).run(inputs)[0], litert(model, inputs)[0])


@pytest.mark.parametrize(
    ("src", "dst"),
    [("FLOAT32", "INT32"), ("INT32", "FLOAT32"), ("FLOAT32", "BOOL"), ("BOOL", "FLOAT32"), ("INT32", "BOOL")],
)
def test_cast(src: str, dst: str) -> None:
    shape = [1, 2, 3, 5]
    model = single(lambda g: g.op("CAST", [g.input("x", shape, src)], shape, dtype=dst))
    values = {
        "FLOAT32": RNG.uniform(-3, 3, shape).astype(np.float32),  # negative: truncation toward 0
        "INT32": RNG.integers(-3, 4, shape).astype(np.int32),
        "BOOL": RNG.integers(0, 2, shape).astype(bool),
    }
    inputs = [values[src]]
    values["FLOAT32"][0, 0, 0, :2] = [0.0, -0.0]
    got, expected = Executor(model, DEVICE).run(inputs)[0], litert(model, inputs)[0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "op",
    [
        "RELU",
        "RELU6",
        "RELU_N1_TO_1",
        "LOGISTIC",
        "TANH",
        "EXP",
        "NEG",
        "ABS",
        "SQUARE",
        "HARD_SWISH",
        "GELU",
        "ELU",
        "LEAKY_RELU",
    ],
)
@pytest.mark.parametrize("c", [1, 5, 8])
def test_unary(op: str, c: int) -> None:
    options = {"alpha": 0.2} if op == "LEAKY_RELU" else None
    assert_matches(single(lambda g: g.op(op, [g.input("x", [1, 3, 4, c])], [1, 3, 4, c], options=options)))


@pytest.mark.parametrize(
    ("op", "k", "stride", "padding"),
    [
        ("AVERAGE_POOL_2D", 2, 2, "VALID"),
        ("AVERAGE_POOL_2D", 3, 1, "SAME"),
        ("MAX_POOL_2D", 3, 2, "SAME"),
        ("MAX_POOL_2D", 2, 2, "VALID"),
    ],
)
def test_pool(op: str, k: int, stride: int, padding: str) -> None:
    o = out_size(8, k, stride, 1, padding)
    assert_matches(
        single(
            lambda g: g.op(
                op,
                [g.input("x", [1, 8, 8, 6])],
                [1, o, o, 6],
                options=dict(padding=padding, stride_w=stride, stride_h=stride, filter_width=k, filter_height=k),
            )
        )
    )


@pytest.mark.parametrize(
    ("shape", "axes", "keep", "op"),
    [
        ([1, 6, 6, 5], [1, 2], False, "MEAN"),
        ([1, 6, 6, 5], [1, 2], True, "MEAN"),
        ([1, 32, 48], [-1], True, "MEAN"),
        ([1, 4, 4, 7], [3], True, "SUM"),
        ([1, 4, 4, 7], [1], False, "REDUCE_MAX"),
    ],
)
def test_reduce(shape: list[int], axes: list[int], keep: bool, op: str) -> None:
    out = [1 if (i in [a % len(shape) for a in axes]) else d for i, d in enumerate(shape)]
    if not keep:
        out = [d for i, d in enumerate(shape) if i not in [a % len(shape) for a in axes]]
    assert_matches(
        single(
            lambda g: g.op(
                op, [g.input("x", shape), g.const("axes", np.array(axes, np.int32))], out, options=dict(keep_dims=keep)
            )
        )
    )


@pytest.mark.parametrize(
    ("shape", "axes", "op"),
    [
        ([1, 16, 16, 6], [1, 2], "MEAN"),  # 256 cells: a full group
        ([1, 9, 11, 5], [1, 2], "SUM"),  # 99 cells: a group of 128, some items idle
        ([2, 40, 3, 7], [0, 1], "REDUCE_MAX"),
        ([1, 3, 80, 4], [2], "REDUCE_MIN"),
        ([1, 70, 3], [1], "REDUCE_PROD"),
        ([1, 33, 40, 9], [1, 2], "MEAN"),  # more cells than items: each item loops
    ],
)
def test_reduce_as_a_gpu_runs_it(shape: list[int], axes: list[int], op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU's work-group reduction (reduce_wg), on whatever device this is."""
    monkeypatch.setattr(reduce_module, "work_groups", lambda device: True)
    out = [1 if i in axes else d for i, d in enumerate(shape)]
    x = np.random.default_rng(0).uniform(0.9, 1.1 if op == "REDUCE_PROD" else 3.0, shape).astype(np.float32)

    def build(g: SubgraphBuilder) -> int:
        axes_t = g.const("axes", np.array(axes, np.int32))
        return g.op(op, [g.input("x", shape), axes_t], out, options=dict(keep_dims=True))

    assert_matches(single(build), [x])
    assert [ln.kernel for ln in Executor(single(build), DEVICE).launches] == ["reduce_wg"]


@pytest.mark.parametrize("act", ["NONE", "RELU"])
def test_global_average_pool_is_a_mean(act: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delegate's GlobalPoolingToReduceOp: an unpadded window over the whole input is a MEAN
    over H and W (a GPU's work-group reduction); with a fused activation it stays a pool."""
    monkeypatch.setattr(reduce_module, "work_groups", lambda device: True)

    def build(g: SubgraphBuilder) -> int:
        opts = dict(padding="VALID", stride_w=24, stride_h=20, filter_width=24, filter_height=20)
        return g.op(
            "AVERAGE_POOL_2D",
            [g.input("x", [1, 20, 24, 10])],
            [1, 1, 1, 10],
            options=opts | dict(fused_activation_function=act),
        )

    assert_matches(single(build))
    kernels = [ln.kernel for ln in Executor(single(build), DEVICE).launches]
    assert kernels == (["reduce_wg"] if act == "NONE" else ["pool2d"])


@pytest.mark.parametrize("shape", [[1, 10], [1, 4, 4, 6], [2, 3, 17]])
def test_softmax(shape: list[int]) -> None:
    assert_matches(single(lambda g: g.op("SOFTMAX", [g.input("x", shape)], shape, options=dict(beta=1.0))))


@pytest.mark.parametrize(
    ("op", "align", "half"),
    [
        ("RESIZE_BILINEAR", False, False),
        ("RESIZE_BILINEAR", True, False),
        ("RESIZE_BILINEAR", False, True),
        ("RESIZE_NEAREST_NEIGHBOR", False, False),
        ("RESIZE_NEAREST_NEIGHBOR", True, False),
        ("RESIZE_NEAREST_NEIGHBOR", False, True),
    ],
)
@pytest.mark.parametrize(("batch", "channels"), [(1, 6), (2, 21)])  # a work item takes 4 slices
def test_resize(op: str, align: bool, half: bool, batch: int, channels: int) -> None:
    assert_matches(
        single(
            lambda g: g.op(
                op,
                [g.input("x", [batch, 5, 7, channels]), g.const("size", np.array([10, 13], np.int32))],
                [batch, 10, 13, channels],
                options=dict(align_corners=align, half_pixel_centers=half),
            )
        )
    )


MOVES: list[tuple[str, list[int], list[Any], list[int], dict[str, Any]]] = [
    ("RESHAPE", [1, 4, 4, 6], [np.array([1, 16, 6], np.int32)], [1, 16, 6], {}),
    ("RESHAPE", [1, 2, 2, 8], [np.array([1, 32], np.int32)], [1, 32], {}),
    ("TRANSPOSE", [1, 3, 4, 5], [np.array([0, 3, 1, 2], np.int32)], [1, 5, 3, 4], {}),
    ("PAD", [1, 3, 3, 5], [np.array([[0, 0], [1, 2], [2, 1], [0, 3]], np.int32)], [1, 6, 6, 8], {}),
    (
        "MIRROR_PAD",
        [1, 4, 4, 2],
        [np.array([[0, 0], [1, 1], [2, 2], [0, 0]], np.int32)],
        [1, 6, 8, 2],
        {"mode": "REFLECT"},
    ),
    ("DEPTH_TO_SPACE", [1, 3, 3, 12], [], [1, 6, 6, 3], {"block_size": 2}),
    ("SPACE_TO_DEPTH", [1, 6, 6, 3], [], [1, 3, 3, 12], {"block_size": 2}),
    (
        "SPACE_TO_BATCH_ND",
        [1, 6, 6, 3],
        [np.array([2, 2], np.int32), np.array([[1, 1], [1, 1]], np.int32)],
        [4, 4, 4, 3],
        {},
    ),
    (
        "BATCH_TO_SPACE_ND",
        [4, 4, 4, 3],
        [np.array([2, 2], np.int32), np.array([[1, 1], [0, 2]], np.int32)],
        [1, 6, 6, 3],
        {},
    ),
    (
        "STRIDED_SLICE",
        [1, 6, 6, 5],
        [np.array([0, 1, 0, 1], np.int32), np.array([1, 5, 6, 4], np.int32), np.array([1, 2, 1, 1], np.int32)],
        [1, 2, 6, 3],
        {},
    ),
    ("SLICE", [1, 6, 6, 5], [np.array([0, 1, 2, 0], np.int32), np.array([1, 3, 2, 5], np.int32)], [1, 3, 2, 5], {}),
]


@pytest.mark.parametrize(("op", "shape", "params", "out", "options"), MOVES, ids=[m[0] for m in MOVES])
def test_data_movement(op: str, shape: list[int], params: list[Any], out: list[int], options: dict[str, Any]) -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", shape)
        return g.op(op, [x, *(g.const(f"p{i}", p) for i, p in enumerate(params))], out, options=options or None)

    assert_matches(single(build))


def _copy_offsets(dst_shape: list[int], index: np.ndarray, src_shape: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Element offsets of a copy: dst element e gets src element index[e] (-1: not written)."""
    flat = index.ravel()
    kept = flat >= 0
    return layout.offsets(dst_shape)[kept], layout.offsets(src_shape)[flat[kept]]


def test_whole_slice_copies_only_where_no_lane_changes_its_meaning() -> None:
    from gpulint.executor.ops.copy import whole_slices as _whole_slices

    src = np.arange(4 * 4 * 3).reshape(1, 4, 4, 3)
    padded = np.full((1, 6, 6, 3), -1)
    padded[:, 1:5, 1:5, :] = src  # spatial PAD of 3 channels: lane 3 is padding on both sides
    assert _whole_slices(*_copy_offsets([1, 6, 6, 3], padded, [1, 4, 4, 3]), [1, 6, 6, 3], [1, 4, 4, 3]) is not None
    channels = np.full((1, 4, 4, 4), -1)
    channels[..., :2] = np.arange(32).reshape(1, 4, 4, 2)  # 2 + 2 channel concat: lanes 2-3 belong to another
    assert _whole_slices(*_copy_offsets([1, 4, 4, 4], channels, [1, 4, 4, 2]), [1, 4, 4, 4], [1, 4, 4, 2]) is None
    shifted = np.arange(16 * 5).reshape(1, 4, 4, 5)[..., 1:]  # SLICE from channel 1: lanes move
    assert _whole_slices(*_copy_offsets([1, 4, 4, 4], shifted, [1, 4, 4, 5]), [1, 4, 4, 4], [1, 4, 4, 5]) is None


def _conv(g: SubgraphBuilder, x: int, cin: int, cout: int, k: int = 1, act: str = "NONE") -> int:
    opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function=act)
    return g.op(
        "CONV_2D", [x, g.const(f"w{x}", w(cout, k, k, cin)), g.const(f"b{x}", w(cout))], [1, 6, 7, cout], options=opts
    )


def _depthwise(g: SubgraphBuilder, x: int, c: int) -> int:
    opts = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1)
    return g.op(
        "DEPTHWISE_CONV_2D", [x, g.const(f"dw{x}", w(1, 3, 3, c)), g.const(f"db{x}", w(c))], [1, 6, 7, c], options=opts
    )


def _scale_shift(g: SubgraphBuilder, x: int, c: int, act: str = "NONE") -> int:
    """A 1x1 depthwise conv: the per-channel scale and shift a converter leaves of a batch norm."""
    opts = dict(padding="VALID", stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=act)
    ins = [x, g.const(f"sw{x}", w(1, 1, 1, c)), g.const(f"sb{x}", w(c))]
    return g.op("DEPTHWISE_CONV_2D", ins, [1, 6, 7, c], options=opts)


def _fusion_cases() -> dict[str, tuple[Any, list[str]]]:
    """Graphs on x [1, 6, 7, 5], and the launches they should lower to."""
    shape = [1, 6, 7]

    def prelu(g: SubgraphBuilder, x: int) -> int:  # per-channel constant, as in BlazeFace
        return g.op("PRELU", [_conv(g, x, 5, 6, 3), g.const("a", w(1, 1, 6))], [*shape, 6])

    def residual(g: SubgraphBuilder, x: int) -> int:  # conv + the block's input, then RELU
        return g.op("RELU", [g.op("ADD", [_conv(g, x, 5, 5), x], [*shape, 5])], [*shape, 5])

    def swapped(g: SubgraphBuilder, x: int) -> int:  # operand first; the binary op's own activation
        relu6 = dict(fused_activation_function="RELU6")
        return g.op("SUB", [x, _depthwise(g, x, 5)], [*shape, 5], options=relu6)

    def scalar(g: SubgraphBuilder, x: int) -> int:  # a scalar constant, then a unary op
        half = g.op("MUL", [_conv(g, x, 5, 9), g.const("k", np.array([0.5], np.float32))], [*shape, 9])
        return g.op("TANH", [half], [*shape, 9])

    def excite(g: SubgraphBuilder, x: int) -> int:  # squeeze-and-excite scales, a runtime per-channel operand
        axes = g.const("axes", np.array([1, 2], np.int32))
        mean = g.op("MEAN", [x, axes], [1, 1, 1, 5], options=dict(keep_dims=True))
        scales = g.op("LOGISTIC", [mean], [1, 1, 1, 5])
        return g.op("MUL", [_conv(g, x, 5, 5), scales], [*shape, 5])

    def hoisted(g: SubgraphBuilder, x: int) -> int:  # the residual's channel PAD comes after the conv
        conv = _conv(g, x, 5, 8)
        padded = g.op("PAD", [x, g.const("p", np.array([[0, 0], [0, 0], [0, 0], [0, 3]], np.int32))], [*shape, 8])
        return g.op("ADD", [conv, padded], [*shape, 8])

    def widened(g: SubgraphBuilder, x: int) -> int:  # BlazeFace's residual: whole zero slices after a partial one
        padded = g.op("PAD", [x, g.const("p", np.array([[0, 0], [0, 0], [0, 0], [0, 11]], np.int32))], [*shape, 16])
        return g.op("RELU", [g.op("ADD", [padded, _conv(g, x, 5, 16)], [*shape, 16])], [*shape, 16])

    def pad_read_twice(g: SubgraphBuilder, x: int) -> int:  # the padded tensor has another reader: the PAD stays
        padded = g.op("PAD", [x, g.const("p", np.array([[0, 0], [0, 0], [0, 0], [0, 3]], np.int32))], [*shape, 8])
        return g.op("ADD", [g.op("ADD", [_conv(g, x, 5, 8), padded], [*shape, 8]), padded], [*shape, 8])

    def upsample(g: SubgraphBuilder, x: int) -> int:  # a transposed conv's mask, as in selfie_segmentation
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        out = [*shape, 3]
        y = g.op(
            "TRANSPOSE_CONV", [g.const("s", np.array(out, np.int32)), g.const("w", w(3, 3, 3, 5)), x], out, options=opts
        )
        return g.op("LOGISTIC", [y], out)

    def silu(g: SubgraphBuilder, x: int) -> int:  # YOLO's conv + SiLU, then a residual ADD
        conv = _conv(g, x, 5, 5)
        gated = g.op("MUL", [conv, g.op("LOGISTIC", [conv], [*shape, 5])], [*shape, 5])
        return g.op("ADD", [gated, x], [*shape, 5])

    def gate_first(g: SubgraphBuilder, x: int) -> int:  # the gate's result as the first operand
        dw = _depthwise(g, x, 5)
        return g.op("SUB", [g.op("TANH", [dw], [*shape, 5]), dw], [*shape, 5])

    def read_thrice(g: SubgraphBuilder, x: int) -> int:  # the conv's output has a third reader: no gate,
        # but the LOGISTIC's kernel runs the MUL and the ADD
        conv = _conv(g, x, 5, 5)
        gated = g.op("MUL", [conv, g.op("LOGISTIC", [conv], [*shape, 5])], [*shape, 5])
        return g.op("ADD", [gated, conv], [*shape, 5])

    def shared(g: SubgraphBuilder, x: int) -> int:  # the unary op's result is read twice: only the ADDs fuse
        conv = _conv(g, x, 5, 5)
        relu = g.op("RELU", [conv], [*shape, 5])
        return g.op("ADD", [g.op("ADD", [relu, conv], [*shape, 5]), relu], [*shape, 5])

    def batch_norm(g: SubgraphBuilder, x: int) -> int:  # PRELU, then a batch norm (hand_recrop's blocks)
        return _scale_shift(g, g.op("PRELU", [_conv(g, x, 5, 6, 3), g.const("a", w(1, 1, 6))], [*shape, 6]), 6)

    def batch_norm_first(g: SubgraphBuilder, x: int) -> int:  # its own RELU6, then a step after it
        return g.op("TANH", [_scale_shift(g, _conv(g, x, 5, 5), 5, act="RELU6")], [*shape, 5])

    def windowed(g: SubgraphBuilder, x: int) -> int:  # a 3x3 depthwise conv is no step
        return _depthwise(g, _conv(g, x, 5, 5), 5)

    def add_then(g: SubgraphBuilder, x: int) -> int:  # steps after a binary op: its PRELU and a batch norm
        added = g.op("ADD", [x, g.const("c", w(1, 6, 7, 5))], [*shape, 5])
        return _scale_shift(g, g.op("PRELU", [added, g.const("a", w(1, 1, 5))], [*shape, 5]), 5)

    def unary_then(g: SubgraphBuilder, x: int) -> int:  # a batch norm after a unary op
        return _scale_shift(g, g.op("TANH", [x], [*shape, 5]), 5)

    def shift_read_twice(g: SubgraphBuilder, x: int) -> int:  # the conv's output has two readers: the batch
        conv = _conv(g, x, 5, 5)  # norm runs its own kernel, with the ADD after it
        return g.op("ADD", [_scale_shift(g, conv, 5), conv], [*shape, 5])

    return {
        "prelu": (prelu, ["CONV_2D+PRELU"]),
        "batch_norm": (batch_norm, ["CONV_2D+PRELU+DEPTHWISE_CONV_2D"]),
        "batch_norm_first": (batch_norm_first, ["CONV_2D+DEPTHWISE_CONV_2D+TANH"]),
        "windowed": (windowed, ["CONV_2D", "DEPTHWISE_CONV_2D"]),
        "add_then": (add_then, ["ADD+PRELU+DEPTHWISE_CONV_2D"]),
        "unary_then": (unary_then, ["TANH+DEPTHWISE_CONV_2D"]),
        "shift_read_twice": (shift_read_twice, ["CONV_2D", "DEPTHWISE_CONV_2D+ADD"]),
        "residual": (residual, ["CONV_2D+ADD+RELU"]),
        "swapped": (swapped, ["DEPTHWISE_CONV_2D+SUB"]),
        "scalar": (scalar, ["CONV_2D+MUL+TANH"]),
        "excite": (excite, ["MEAN", "LOGISTIC", "CONV_2D+MUL"]),
        "hoisted": (hoisted, ["CONV_2D+ADD"]),  # PAD moved ahead of the conv, then merged into the ADD
        "widened": (widened, ["CONV_2D+ADD+RELU"]),
        "pad_read_twice": (pad_read_twice, ["PAD", "CONV_2D+ADD+ADD"]),
        "upsample": (upsample, ["TRANSPOSE_CONV+LOGISTIC"]),
        "silu": (silu, ["CONV_2D+LOGISTIC+MUL+ADD"]),
        "gate_first": (gate_first, ["DEPTHWISE_CONV_2D+TANH+SUB"]),
        "read_thrice": (read_thrice, ["CONV_2D", "LOGISTIC+MUL+ADD"]),
        "shared": (shared, ["CONV_2D", "RELU", "ADD+ADD"]),
    }


@pytest.mark.parametrize("looped", [False, True], ids=["inline", "looped"])
@pytest.mark.parametrize("op", ["CONV_2D", "DEPTHWISE_CONV_2D"])
def test_tanh_as_a_fused_activation(op: str, looped: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """TANH as a fused activation, which LiteRT refuses on these ops: against the executor's
    own output without the activation. Compiled into the `_fused` kernel (CPU devices), and
    as a GPU runs it, in the plain kernel's loop after its stores."""
    monkeypatch.setattr(program_module, "epilogue_loop", lambda device: looped)
    depthwise = op == "DEPTHWISE_CONV_2D"
    weights, bias = (w(1, 3, 3, 5), w(5)) if depthwise else (w(6, 3, 3, 5), w(6))

    def build(activation: str) -> Model:
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function=activation)
        if depthwise:
            opts["depth_multiplier"] = 1
        return single(
            lambda g: g.op(
                op,
                [g.input("x", [1, 6, 9, 5]), g.const("w", weights), g.const("b", bias)],
                [1, 6, 9, 5 if depthwise else 6],
                options=opts,
            )
        )

    x = [RNG.uniform(-2, 2, [1, 6, 9, 5]).astype(np.float32)]
    (plain,) = Executor(build("NONE"), DEVICE).run(x)
    (activated,) = Executor(build("TANH"), DEVICE).run(x)
    np.testing.assert_allclose(activated, np.tanh(plain), rtol=0, atol=1e-6)


def _pad_cases() -> dict[str, tuple[Any, list[str]]]:
    """Graphs on x [1, 9, 11, 6] with a PAD before a conv, and the launches they lower to."""
    spatial = np.array([[0, 0], [1, 2], [2, 1], [0, 0]], np.int32)

    def padded(g: SubgraphBuilder, x: int, pads: np.ndarray, op: str = "PAD", fill: float | None = None) -> int:
        shape = [1 + int(pads[0].sum()), 9 + int(pads[1].sum()), 11 + int(pads[2].sum()), 6 + int(pads[3].sum())]
        inputs = [x, g.const(f"p{x}", pads)] + (
            [g.const("fill", np.array([fill], np.float32))] if fill is not None else []
        )
        return g.op(op, inputs, shape)

    def depthwise_valid(g: SubgraphBuilder, x: int) -> int:  # pose_detection's pattern before a stride 2
        opts = dict(padding="VALID", stride_w=2, stride_h=2, depth_multiplier=1)
        p = padded(g, x, spatial)
        return g.op(
            "DEPTHWISE_CONV_2D", [p, g.const("w", w(1, 3, 3, 6)), g.const("b", w(6))], [1, 5, 6, 6], options=opts
        )

    def conv_same(g: SubgraphBuilder, x: int) -> int:  # the conv's own SAME padding adds to the PAD's
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        p = padded(g, x, spatial, "PADV2", 0.0)
        return g.op("CONV_2D", [p, g.const("w", w(4, 3, 3, 6)), g.const("b", w(4))], [1, 12, 14, 4], options=opts)

    def channels(g: SubgraphBuilder, x: int) -> int:  # a channel PAD stays a copy
        p = padded(g, x, np.array([[0, 0], [1, 1], [1, 1], [0, 2]], np.int32))
        return g.op(
            "CONV_2D",
            [p, g.const("w", w(4, 3, 3, 8)), g.const("b", w(4))],
            [1, 9, 11, 4],
            options=dict(padding="VALID", stride_w=1, stride_h=1),
        )

    def filled(g: SubgraphBuilder, x: int) -> int:  # PADV2 with a value that is not zero stays a copy
        p = padded(g, x, spatial, "PADV2", 0.5)
        return g.op(
            "CONV_2D",
            [p, g.const("w", w(4, 3, 3, 6)), g.const("b", w(4))],
            [1, 10, 12, 4],
            options=dict(padding="VALID", stride_w=1, stride_h=1),
        )

    return {
        "depthwise_valid": (depthwise_valid, ["DEPTHWISE_CONV_2D"]),
        "conv_same": (conv_same, ["CONV_2D"]),
        "channels": (channels, ["PAD", "CONV_2D"]),
        "filled": (filled, ["PADV2", "PADV2", "CONV_2D"]),  # the copy, then the fill value
    }


@pytest.mark.parametrize("case", list(_pad_cases()))
def test_a_zero_pad_merges_into_the_conv_that_reads_it(case: str) -> None:
    build, launches = _pad_cases()[case]
    model = single(lambda g: build(g, g.input("x", [1, 9, 11, 6])))
    assert_matches(model)
    assert [ln.op for ln in Executor(model, DEVICE).launches] == launches


@pytest.mark.parametrize("looped", [False, True], ids=["inline", "looped"])
@pytest.mark.parametrize("precision", ["fp32", "fp32-fp16", "fp16"])
@pytest.mark.parametrize("case", list(_fusion_cases()))
def test_elementwise_ops_fuse_into_the_conv_that_feeds_them(
    case: str, precision: str, looped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both forms of fused kernel on this device: steps at each store (CPU devices) and in a
    loop after the stores (GPUs). fp32 against the CPU; in half, where every step ends in a half
    fused or not (the delegate's FLT4), the fused kernels' output is the unfused ops' bit for bit."""
    monkeypatch.setattr(program_module, "epilogue_loop", lambda device: looped)
    build, launches = _fusion_cases()[case]
    model = single(lambda g: build(g, g.input("x", [1, 6, 7, 5])))
    if precision == "fp32":
        assert_matches(model, precision=precision)
    else:
        x = RNG.uniform(-2, 2, [1, 6, 7, 5]).astype(np.float32)
        fused = Executor(model, DEVICE, precision).run([x])[0]
        np.testing.assert_array_equal(fused, Executor(model, DEVICE, precision, keep_intermediates=True).run([x])[0])
    assert [ln.op for ln in Executor(model, DEVICE).launches] == launches
    # keep_intermediates (bisect) needs every tensor: one launch per op, in the file's order
    unfused = [ln.op for ln in Executor(model, DEVICE, keep_intermediates=True).launches]
    merged = ["PAD"] if case in ("hoisted", "widened") else []  # a channel PAD the ADD reads through
    assert sorted(unfused) == sorted([n for op in launches for n in op.split("+")] + merged)


def test_concatenation_of_runtime_and_constant_tensors() -> None:
    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [1, 4, 4, 3]), g.input("b", [1, 4, 4, 6])
        return g.op("CONCATENATION", [a, b, g.const("c", w(1, 4, 4, 2))], [1, 4, 4, 11], options=dict(axis=3))

    assert_matches(single(build))


@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "padding"),
    [(6, 5, 3, 2, "SAME"), (16, 1, 2, 2, "VALID"), (3, 9, 4, 2, "SAME"), (5, 4, 3, 1, "SAME"), (4, 8, 5, 3, "VALID")],
)
def test_transpose_conv(cin: int, cout: int, k: int, stride: int, padding: str) -> None:
    def out_size(n: int) -> int:  # TFLite's: n * stride for SAME, (n - 1) * stride + k for VALID
        return n * stride if padding == "SAME" else (n - 1) * stride + k

    def tconv(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4, 5, cin])
        out = [1, out_size(4), out_size(5), cout]
        return g.op(
            "TRANSPOSE_CONV",
            [g.const("shape", np.array(out, np.int32)), g.const("w", w(cout, k, k, cin)), x],
            out,
            options=dict(padding=padding, stride_w=stride, stride_h=stride),
        )

    assert_matches(single(tconv))


def test_batch_matmul() -> None:
    def matmul(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [2, 5, 7]), g.input("b", [2, 7, 6])
        return g.op("BATCH_MATMUL", [a, b], [2, 5, 6])

    assert_matches(single(matmul))


def test_an_op_it_cannot_run_is_named() -> None:
    model = single(
        lambda g: g.op("ARG_MAX", [g.input("x", [1, 8]), g.const("a", np.array([1], np.int32))], [1], dtype="INT64")
    )
    with pytest.raises(ExecutorError, match=r"the executor cannot run: ARG_MAX"):
        Executor(model, DEVICE)


FLOAT_MODELS = [p for p in CORPUS_FILES if not p.stem.endswith(("_int8", "_int8io32", "_dr8"))]
EXPECTED_MISSING = {"decoder_5d_reshape_f32": "RESHAPE", "lstm_seq16_f32": "WHILE", "unsupported_mix_f32": "ARG_MAX"}


@pytest.mark.skipif(not FLOAT_MODELS, reason=NO_CORPUS)
@pytest.mark.parametrize("path", FLOAT_MODELS, ids=[p.name for p in FLOAT_MODELS])
def test_float_corpus_models_match_litert(path: Path) -> None:
    from gpulint import reference

    model = read(path)
    if path.stem in EXPECTED_MISSING:
        with pytest.raises(ExecutorError, match=EXPECTED_MISSING[path.stem]):
            Executor(model, DEVICE)
        return
    inputs = reference.random_inputs(model, seed=0)
    expected = reference.run(path, inputs)
    got = Executor(model, DEVICE).run(inputs)
    for e, g in zip(expected, got, strict=True):
        span = float(np.ptp(e.astype(np.float64))) or 1.0
        assert float(np.abs(g - e).max()) <= 1e-4 * span


def test_inputs_are_put_in_slices_on_the_device_and_checked_for_size() -> None:
    """Inputs go up as given and a kernel lays them out (op -1 in the timings); a wrong-sized
    one is an error, not a partial copy."""
    model = single(lambda g: g.op("RELU", [g.input("x", [2, 3, 5, 7])], [2, 3, 5, 7]))
    ex = Executor(model, DEVICE)
    x = RNG.uniform(-1, 1, [2, 3, 5, 7]).astype(np.float32)
    (y,) = ex.run([x], profile=True)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert [t.op for t in ex.timings] == ["input to slices", "RELU"] and ex.timings[0].op_index == -1
    with pytest.raises(ExecutorError, match=r"input x has 105 values, not shape \[2, 3, 5, 7\]"):
        ex.run([x[:1]])


def test_a_second_process_reuses_the_compiled_kernels(tmp_path: Path) -> None:
    """The second process compiles nothing: it loads gpulint's program binaries, or on PoCL,
    which keeps its own cache (in GPULINT_CACHE_DIR/pocl when POCL_CACHE_DIR is not set), finds
    every program there. Counted, not timed: a driver's own cache (NVIDIA's, pyopencl's) can
    make a first compile as fast as a load."""
    code = (
        "import pyopencl as cl; from gpulint.executor import select_device\n"
        "from gpulint.executor.program import kernel, keeps_own_cache\n"
        "from gpulint.executor.precision import precision\n"
        "sources = []; init = cl.Program.__init__\n"
        "def counting(self, *args): sources.append(isinstance(args[1], str)); init(self, *args)\n"
        "cl.Program.__init__ = counting\n"
        "d = select_device(); fp32 = precision('fp32'); kernel(d, fp32, 'conv_o4'); kernel(d, fp32, 'copy_slices')\n"
        "print(sum(sources), keeps_own_cache(d))"
    )
    env = {k: v for k, v in os.environ.items() if k != "POCL_CACHE_DIR"}
    env |= {"GPULINT_CACHE_DIR": str(tmp_path / "gpulint"), "CUDA_CACHE_PATH": str(tmp_path / "nv")}
    env |= {"PYOPENCL_NO_CACHE": "1"}

    def cached() -> list[tuple[str, int]]:
        files = (p for p in (tmp_path / "gpulint").rglob("*") if p.is_file())
        return sorted((str(p), p.stat().st_size) for p in files if not p.name.startswith("tempfile_"))  # PoCL's scratch

    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    after_first = cached()
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert after_first, "nothing was cached"
    if first.stdout.split()[-1] == "True":  # PoCL: its cache, under ours, gained nothing the second time
        assert (tmp_path / "gpulint" / "pocl").is_dir()
        assert cached() == after_first
    else:
        assert any((tmp_path / "gpulint").rglob("*.bin"))
        assert (first.stdout.split()[-2], second.stdout.split()[-2]) == ("2", "0")


def test_buffers_are_reused_by_lifetime_without_changing_results() -> None:
    """A chain of 4-channel convs (no padding lanes) with a PAD in it: the pool reuses buffers,
    never the PAD output's (its border must start at zero), and the outputs do not change."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    y = g.input("x", [1, 8, 8, 4])
    opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
    for i in range(4):
        y = g.op("CONV_2D", [y, g.const(f"w{i}", w(4, 3, 3, 4)), g.const(f"b{i}", w(4))], [1, 8, 8, 4], options=opts)
        if i == 1:
            pads = g.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
            y = g.op("PAD", [y, pads], [1, 10, 10, 4])
            y = g.op(
                "AVERAGE_POOL_2D",
                [y],
                [1, 8, 8, 4],
                options=dict(padding="VALID", stride_w=1, stride_h=1, filter_width=3, filter_height=3),
            )
    g.output(y)
    model = mb.build()
    x = [RNG.uniform(-2, 2, (1, 8, 8, 4)).astype(np.float32)]
    pooled, kept = Executor(model, DEVICE), Executor(model, DEVICE, keep_intermediates=True)
    assert pooled.pool is not None and pooled.pool.allocated < pooled.pool.requested
    for _ in range(2):  # a second run sees the buffers the first left behind
        np.testing.assert_array_equal(pooled.run(x)[0], kept.run(x)[0])
    assert_matches(model, x)
    with pytest.raises(ExecutorError, match="keep_intermediates"):
        pooled.intermediates()
    assert len(kept.intermediates()) == 6


# -- grouped CONV_2D (issue #15 item 1, #22 item 2) ------------------------------------------


@pytest.mark.parametrize(
    ("cin", "cout", "groups", "k", "stride", "dilation", "padding", "act"),
    [
        (8, 8, 2, 3, 1, 1, "SAME", "RELU"),  # 4 channels per group: the delegate's grouped ConvGeneric
        (32, 32, 2, 3, 1, 1, "SAME", "NONE"),  # the Conv2d(32, 32, 3, groups=2)
        (16, 24, 4, 3, 2, 1, "VALID", "RELU6"),
        (12, 6, 2, 1, 1, 1, "VALID", "NONE"),  # 6 -> 3: not slice-aligned, the delegate splits it
        (6, 12, 3, 3, 1, 2, "SAME", "RELU"),
        (8, 8, 8, 3, 1, 1, "SAME", "NONE"),  # groups = channels, [C, 3, 3, 1]: YOLO11's positional conv
        (5, 5, 5, 3, 2, 1, "SAME", "RELU"),
        (7, 7, 7, 3, 1, 2, "VALID", "NONE"),
        (4, 8, 4, 3, 1, 1, "SAME", "NONE"),  # groups = in channels, 2 outputs each: a depthwise multiplier
    ],
)
def test_grouped_conv2d(
    cin: int, cout: int, groups: int, k: int, stride: int, dilation: int, padding: str, act: str
) -> None:
    assert_matches(conv_model(cin, cout, k, stride, dilation, padding, act, groups))
    # fp16's bound is relative to the accumulation's scale; a clamped output (RELU6) understates
    # it, so the half-precision run is on the same conv without the clamp, as test_conv2d_fp16's is.
    assert_matches(conv_model(cin, cout, k, stride, dilation, padding, "NONE", groups), precision="fp32-fp16")


@pytest.mark.parametrize("groups", [2, 8])
def test_grouped_conv2d_fuses_what_follows_it(groups: int) -> None:
    """A grouped conv with an ADD after it, groups = channels and not: the epilogue runs once."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 6, 6, 8])
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        y = g.op("CONV_2D", [x, g.const("w", w(8, 3, 3, 8 // groups)), g.const("b", w(8))], [1, 6, 6, 8], options=opts)
        return g.op("ADD", [y, x], [1, 6, 6, 8])

    assert_matches(single(build))


def test_grouped_conv2d_with_int8_weights() -> None:
    """Dynamic-range weights (int8, per-channel scales) of a groups = channels conv, dequantized
    once as the delegate does: compared against the same conv on float weights."""
    c = 8
    weights = w(c, 3, 3, 1)
    scales = np.abs(weights).reshape(c, -1).max(axis=1) / 127
    q = np.round(weights / scales[:, None, None, None]).astype(np.int8)
    bias = w(c)

    def build(quantized: bool) -> Model:
        mb = ModelBuilder()
        g = mb.subgraph("main")
        x = g.input("x", [1, 7, 7, c])
        wt = (
            g.const("w", q, quant=(scales, np.zeros(c, np.int64)), quant_dim=0)
            if quantized
            else g.const("w", q.astype(np.float32) * scales[:, None, None, None])
        )
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        g.output(g.op("CONV_2D", [x, wt, g.const("b", bias)], [1, 7, 7, c], options=opts))
        return mb.build()

    x = [RNG.uniform(-2, 2, (1, 7, 7, c)).astype(np.float32)]
    expected = litert(build(False), x)
    got = Executor(build(True), DEVICE).run(x)
    np.testing.assert_allclose(got[0], expected[0], rtol=0, atol=1e-5 * max(1.0, float(np.abs(expected[0]).max())))


# -- FULLY_CONNECTED and BATCH_MATMUL on runtime operands (issue #22 item 1) --------------------


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "keep", "bias", "act"),
    [
        ([4, 8], [6, 8], False, False, "NONE"),
        ([4, 8], [6, 8], True, True, "RELU"),
        ([2, 5, 8], [3, 8], True, False, "NONE"),  # onnx2tf's unfolded attention: rank 3, keep_num_dims
        ([2, 5, 8], [3, 8], False, True, "NONE"),
        ([1, 3, 4, 6], [5, 6], True, True, "RELU6"),
    ],
)
def test_fully_connected_with_runtime_weights(
    x_shape: list[int], w_shape: list[int], keep: bool, bias: bool, act: str
) -> None:
    rows = int(np.prod(x_shape[:-1]))
    out = [*x_shape[:-1], w_shape[0]] if keep else [rows, w_shape[0]]

    def build(g: SubgraphBuilder) -> int:
        x, wt = g.input("x", x_shape), g.input("w", w_shape)
        ins = [x, wt, g.const("b", w(w_shape[0]))] if bias else [x, wt, -1]
        return g.op("FULLY_CONNECTED", ins, out, options=dict(keep_num_dims=keep, fused_activation_function=act))

    assert_matches(single(build))
    assert_matches(single(build), precision="fp32-fp16")


def test_fully_connected_whose_weights_an_op_makes() -> None:
    """SPLIT -> FULLY_CONNECTED with an activation as weights -> PACK, as onnx2tf unfolds a
    BATCH_MATMUL (Ultralytics' float exports)."""

    def build(g: SubgraphBuilder) -> int:
        a, b = g.input("a", [2, 5, 8]), g.input("b", [2, 6, 8])
        axis = g.const("axis", np.array(0, np.int32))
        a0, a1 = g.op("SPLIT", [axis, a], shapes=[[1, 5, 8], [1, 5, 8]], options=dict(num_splits=2))
        b0, b1 = g.op("SPLIT", [axis, b], shapes=[[1, 6, 8], [1, 6, 8]], options=dict(num_splits=2))
        shape = g.const("shape", np.array([6, 8], np.int32))
        rows = []
        for ai, bi in ((a0, b0), (a1, b1)):
            bw = g.op("RESHAPE", [bi, shape], [6, 8])
            rows.append(g.op("FULLY_CONNECTED", [ai, bw, -1], [1, 5, 6], options=dict(keep_num_dims=True)))
        return g.op("CONCATENATION", rows, [2, 5, 6], options=dict(axis=0))

    assert_matches(single(build))


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "adj_x", "adj_y", "out"),
    [
        ([2, 5, 7], [2, 7, 6], True, False, [2, 5, 6]),
        ([2, 5, 7], [2, 7, 6], False, True, [2, 5, 6]),
        ([2, 5, 7], [2, 7, 6], True, True, [2, 5, 6]),
        ([5, 7], [7, 6], False, False, [5, 6]),
        ([1, 5, 7], [3, 7, 6], False, False, [3, 5, 6]),  # broadcast batch
        ([2, 3, 5, 7], [3, 7, 6], False, False, [2, 3, 5, 6]),  # rank 4 x rank 3
        ([2, 3, 5, 7], [7, 6], False, False, [2, 3, 5, 6]),
        ([4, 5, 7], [1, 4, 7, 9], False, False, [1, 4, 5, 9]),
        ([2, 1, 5, 7], [1, 3, 7, 6], True, True, [2, 3, 5, 6]),
    ],
)
def test_batch_matmul_variants(
    a_shape: list[int], b_shape: list[int], adj_x: bool, adj_y: bool, out: list[int]
) -> None:
    def matmul(g: SubgraphBuilder) -> int:
        sa = [*a_shape[:-2], a_shape[-1], a_shape[-2]] if adj_x else a_shape
        sb = [*b_shape[:-2], b_shape[-1], b_shape[-2]] if adj_y else b_shape
        a, b = g.input("a", sa), g.input("b", sb)
        return g.op("BATCH_MATMUL", [a, b], out, options=dict(adj_x=adj_x, adj_y=adj_y))

    assert_matches(single(matmul))
    assert_matches(single(matmul), precision="fp32-fp16")


@pytest.mark.parametrize("blocking", ["cpu", "gpu", "gpu_split"])
@pytest.mark.parametrize(("c", "groups", "k"), [(16, 2, 1), (32, 4, 3), (8, 2, 3), (16, 2, 3)])
def test_slice_aligned_groups_read_only_their_slices(
    c: int, groups: int, k: int, blocking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups of whole slices run as the delegate's grouped ConvGeneric: weights of one group's
    inputs, each output block reading its group's input slices (gs = slices per group), with
    a CPU's blocking (up to 4 output slices per item, cut to what a group holds) and a GPU's,
    with its sums split over two items or not (whatever the device is)."""
    splits = 2 if blocking == "gpu_split" else 1
    monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: splits)
    if blocking.startswith("gpu"):
        monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (1, 1))
        monkeypatch.setattr(program_module, "epilogue_loop", lambda device: True)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 7, 9, c])
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
        return g.op(
            "CONV_2D", [x, g.const("w", w(c, k, k, c // groups)), g.const("b", w(c))], [1, 7, 9, c], options=opts
        )

    assert_matches(single(build))
    (launch,) = Executor(single(build), DEVICE).launches  # input_launches hold the input's conversion
    assert ("split" in launch.kernel) == (blocking == "gpu_split")
    gs = launch.args[7]
    assert (int(gs["x"]), int(gs["y"])) == (c // groups // 4, c // groups // 4)


@pytest.mark.parametrize("blocking", ["cpu", "gpu", "gpu_split"])
@pytest.mark.parametrize(
    ("cin", "cout", "k", "stride", "padding"), [(6, 5, 1, 1, "VALID"), (8, 16, 3, 1, "SAME"), (5, 9, 3, 2, "VALID")]
)
def test_conv2d_with_runtime_weights(
    cin: int, cout: int, k: int, stride: int, padding: str, blocking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights that are an input: put in the kernel's order by a copy on the device each run
    (with a GPU's blocking, its sums split over two items or not)."""
    if blocking.startswith("gpu"):
        monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (1, 1))
        monkeypatch.setattr(program_module, "epilogue_loop", lambda device: True)
        splits = 2 if blocking == "gpu_split" else 1
        monkeypatch.setattr(conv_module, "gpu_splits", lambda device, outputs, s, taps, lanes=1: splits)
    o = out_size(9, k, stride, 1, padding)

    def build(g: SubgraphBuilder) -> int:
        x, wt = g.input("x", [1, 9, 9, cin]), g.input("w", [cout, k, k, cin])
        opts = dict(padding=padding, stride_w=stride, stride_h=stride, fused_activation_function="RELU")
        return g.op("CONV_2D", [x, wt, g.const("b", w(cout))], [1, o, o, cout], options=opts)

    assert_matches(single(build))
    assert_matches(single(build), precision="fp32-fp16")


@pytest.mark.parametrize(("c", "multiplier", "k", "stride"), [(6, 1, 3, 1), (8, 1, 5, 2), (3, 2, 3, 1)])
def test_depthwise_conv2d_with_runtime_weights(c: int, multiplier: int, k: int, stride: int) -> None:
    o = out_size(9, k, stride, 1, "SAME")

    def build(g: SubgraphBuilder) -> int:
        x, wt = g.input("x", [1, 9, 9, c]), g.input("w", [1, k, k, c * multiplier])
        opts = dict(padding="SAME", stride_w=stride, stride_h=stride, depth_multiplier=multiplier)
        return g.op(
            "DEPTHWISE_CONV_2D", [x, wt, g.const("b", w(c * multiplier))], [1, o, o, c * multiplier], options=opts
        )

    assert_matches(single(build))


@pytest.mark.parametrize(
    ("cout", "cin", "k", "size", "blocking"),
    [
        (4, 32, 1, 8, 4),
        (4, 32, 1, 32, 1),
        (12, 32, 1, 32, 2),
        (8, 8, 3, 8, 4),
        (8, 8, 3, 16, 2),
        (4, 8, 3, 16, 1),
        (8, 3, 3, 4, 4),  # a graph input of 3 channels, read as given (conv_o*_raw)
        (8, 3, 3, 32, 2),
    ],
)
def test_a_narrow_output_shares_the_4_slice_kernel_unless_that_wastes_much(
    cout: int, cin: int, k: int, size: int, blocking: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU device 1-3 output slices run in the 4-slice kernel, their empty lanes computed
    for nothing, where that is little work (here under 100,000 multiply-adds); a layer whose
    empty lanes would be more keeps a kernel that fits it. The outputs match either way."""
    if not DEVICE.cpu:
        pytest.skip("a GPU's blocking is one slice per item")
    monkeypatch.setattr(conv_module, "NARROW_WORK", 100_000)

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, size, size, cin])
        opts = dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU")
        wt, b = g.const("w", w(cout, k, k, cin)), g.const("b", w(cout))
        return g.op("CONV_2D", [x, wt, b], [1, size, size, cout], options=opts)

    assert_matches(single(build))
    (launch,) = Executor(single(build), DEVICE).launches
    assert launch.kernel.startswith(f"conv1x1_o{blocking}_" if k == 1 else f"conv_o{blocking}")
    assert ("_raw" in launch.kernel) == (cin <= 4)


def test_an_ungrouped_conv_keeps_its_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 output slices blocked 4 per item (the last item half empty): only a grouped conv cuts
    its blocking to what a group holds."""
    monkeypatch.setattr(conv_module, "conv_blocking", lambda cpu, slices, positions, work: (4, 1))

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 7, 9, 8])
        opts = dict(padding="SAME", stride_w=1, stride_h=1)
        return g.op("CONV_2D", [x, g.const("w", w(20, 3, 3, 8)), g.const("b", w(20))], [1, 7, 9, 20], options=opts)

    assert_matches(single(build))
    (launch,) = Executor(single(build), DEVICE).launches
    assert launch.kernel.startswith("conv_o4")


# -- int8 models: each int8 result rounded to its grid, as the delegate does ------------------------


def int8_model(op: str, out_scale: float, out_zero: int, weight_scale: float = 1 / 8) -> tuple[Model, np.ndarray]:
    """x float [1, 4, 4, 8] -> QUANTIZE (scale 1/16) -> `op` (CONV_2D 1x1 or FULLY_CONNECTED, int8
    weights of scale `weight_scale`, int32 bias) -> int8 (out_scale, out_zero) -> DEQUANTIZE -> y.
    Inputs, weights and bias are dyadic, so the op's float result is exact: the test sees only the
    rounding. Returns the model and the weights as floats ([out, in])."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.op("QUANTIZE", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8], dtype="INT8", quant=(1 / 16, 0), out_name="x_q")
    wq = rng.integers(-16, 17, (8, 8)).astype(np.int8)
    bq = rng.integers(-64, 65, 8).astype(np.int32)
    ws = [weight_scale] * 8
    shape = [1, 1, 1, 8] if op == "CONV_2D" else [8, 8]
    w = g.const("w", wq.reshape([8, *shape[1:]]), quant=(ws, [0] * 8), quant_dim=0)
    b = g.const("b", bq, quant=([weight_scale / 16] * 8, [0] * 8))
    if op == "FULLY_CONNECTED":
        x = g.op("RESHAPE", [x, g.const("s", np.array([16, 8], np.int32))], [16, 8], dtype="INT8", quant=(1 / 16, 0))
        out = [16, 8]
    else:
        out = [1, 4, 4, 8]
    opts = dict(padding="VALID", stride_w=1, stride_h=1) if op == "CONV_2D" else {}
    t = g.op(op, [x, w, b], out, dtype="INT8", quant=(out_scale, out_zero), options=opts, out_name="computed")
    g.output(g.op("DEQUANTIZE", [t], out, out_name="y"))
    return mb.build(), np.concatenate([wq * np.float64(weight_scale), bq[:, None] * (weight_scale / 16)], axis=1)


def exact_result(x: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The op's float result on the QUANTIZE's grid (1/16, clamped to int8), in float64: exact here."""
    xq = np.clip(np.floor(x.astype(np.float64) * 16 + 0.5), -128, 127) / 16
    return xq.reshape(-1, 8) @ weights[:, :8].T + weights[:, 8]


def delegate_rounding(v: np.ndarray, scale: float, zero: int) -> np.ndarray:
    """quantize_and_dequantize.cc's formula with model_builder_helper.cc's min and max, in float64."""
    low, high = scale * (-128 - zero), scale * (127 - zero)
    return np.floor((np.clip(v, low, high) - low) / scale + 0.5) * scale + low


@pytest.mark.parametrize("op", ["CONV_2D", "FULLY_CONNECTED"])
def test_an_int8_result_is_rounded_and_clamped_as_the_delegate_does(op: str) -> None:
    """Issue 15 (full int8): the delegate computes an int8 op in float and puts a
    QUANTIZE_AND_DEQUANTIZE after it (add_quant_adjustments.cc): clamp to [scale (-128 - zp),
    scale (127 - zp)], round to the grid. A conv runs it in its epilogue, a FULLY_CONNECTED as a
    launch of its own; both give the formula's values, results between grid points and beyond
    the range alike."""
    scale, zero = 0.02, 3
    model, weights = int8_model(op, scale, zero)
    x = np.random.default_rng(4).uniform(-1, 1, (1, 4, 4, 8)).astype(np.float32)
    exact = exact_result(x, weights)
    expected = delegate_rounding(exact, scale, zero)
    frac = (exact - scale * (-128 - zero)) / scale % 1
    clear = np.abs(frac - 0.5) > 1e-3  # not a tie, where float32's last bit decides
    low, high = scale * (-128 - zero), scale * (127 - zero)
    assert ((exact < low) | (exact > high)).sum() >= 8 and (clear & (exact > low) & (exact < high)).sum() >= 64
    executor = Executor(model, DEVICE)
    (got,) = executor.run([x])
    np.testing.assert_allclose(got.reshape(-1, 8)[clear], expected[clear], rtol=0, atol=1e-6)
    names = [launch.op for launch in executor.launches]
    if op == "CONV_2D":  # the rounding is the conv's epilogue, and the QUANTIZE its own launch
        assert names == ["QUANTIZE_AND_DEQUANTIZE", "CONV_2D+QUANTIZE_AND_DEQUANTIZE"], names
    else:
        assert names == ["QUANTIZE_AND_DEQUANTIZE", "RESHAPE", "FULLY_CONNECTED", "QUANTIZE_AND_DEQUANTIZE"], names
    kept = Executor(model, DEVICE, keep_intermediates=True)
    kept.run([x])
    tensors = kept.intermediates()  # the op's float result, then the rounding's (the DEQUANTIZE's output, y)
    np.testing.assert_allclose(tensors["computed/float"].reshape(-1, 8), exact, rtol=0, atol=1e-6)
    np.testing.assert_allclose(tensors["y"].reshape(-1, 8)[clear], expected[clear], rtol=0, atol=1e-6)


def delegate_rounding_fp16(v: np.ndarray, scale: float, zero: int) -> np.ndarray:
    """quantize_and_dequantize.cc's formula at fp16, where its code runs on FLT4 = half4 (F16 and
    F32_F16 alike, cl_operation.cc): v a half, min, max and scale halves (AddHalf; the scale
    floored at 0.000062 first), each step's result a half (numpy's float16 arithmetic rounds each
    result once to half, as half arithmetic does), round() away from zero as OpenCL's."""
    h = np.float16
    s32 = np.float32(scale)
    low, high = h(s32 * np.float32(-128 - zero)), h(s32 * np.float32(127 - zero))
    step = h(max(s32, np.float32(0.000062)))
    quotient = (np.clip(np.asarray(v).astype(h), low, high) - low) / step
    k = np.floor(quotient.astype(np.float64) + 0.5).astype(h)  # quotient >= 0
    return (k * step + low).astype(np.float32)


def test_fp16_floors_a_tiny_scale_as_the_delegate_does() -> None:
    """At fp16 the delegate passes min, max and scale as half and floors a scale below the smallest
    normal half at 0.000062 (quantize_and_dequantize.cc): a 2e-5 grid becomes a 6.2e-5 one from
    the same min. The executor computes that, with no NaN, to the bit (the conv's result is exact
    here, so its half is known); rounding with the half scale itself (a subnormal) would give
    other values."""
    scale, zero = 2e-5, 0
    model, weights = int8_model("CONV_2D", scale, zero, weight_scale=1 / 8 / 1024)
    x = np.random.default_rng(5).uniform(-1, 1, (1, 4, 4, 8)).astype(np.float32)
    xq = delegate_rounding_fp16(x.astype(np.float16), 1 / 16, 0).reshape(-1, 8)  # the QUANTIZE, at fp16
    exact = (xq.astype(np.float64) @ weights[:, :8].T + weights[:, 8]).astype(np.float16)
    floored = delegate_rounding_fp16(exact, scale, zero)
    unfloored = np.float16(np.round((exact.astype(np.float64) - np.float16(scale * -128)) / np.float16(scale)))
    assert (floored != unfloored * np.float16(scale) + np.float16(scale * -128)).mean() > 0.5
    (got,) = Executor(model, DEVICE, "fp32-fp16").run([x])
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got.reshape(-1, 8), floored)


def test_fp16_rounds_in_half_as_the_delegate_does() -> None:
    """Issue #22: at fp16 the delegate's QUANTIZE_AND_DEQUANTIZE runs on halves (FLT4): it rounds
    the half the op it is linked to computed (here a MUL's), min, max and scale are halves, and
    each step ends in a half, so values whose quotient is near a midpoint take another grid point
    than float arithmetic gives them. x -> QUANTIZE (1/64) -> MUL(x_q, x_q) -> int8 (4/255 from
    0, quotients up to 255, 0.125 apart in half above 128) -> DEQUANTIZE: the executor's fp16
    values are the formula's to the bit, with the rounding in the MUL's kernel and without it.
    Rounding the MUL's float result in float (the kernel before this fix) differs on some of them."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    shape = [1, 8, 8, 16]
    xq = g.op("QUANTIZE", [g.input("x", shape)], shape, dtype="INT8", quant=(1 / 64, 0), out_name="x_q")
    t = g.op("MUL", [xq, xq], shape, dtype="INT8", quant=(4 / 255, -128), out_name="square")
    g.output(g.op("DEQUANTIZE", [t], shape, out_name="y"))
    model = mb.build()
    x = np.random.default_rng(8).uniform(-2, 2, shape).astype(np.float32)
    x_q = delegate_rounding_fp16(x.astype(np.float16), 1 / 64, 0)
    square = (x_q * x_q).astype(np.float16)  # the MUL in half
    expected = delegate_rounding_fp16(square, 4 / 255, -128)
    h = np.float16
    step, low = np.float32(h(np.float32(4 / 255))), np.float32(0)
    in_float = h(np.floor((x_q * x_q - low) / step + np.float32(0.5)) * step + low).astype(np.float32)
    assert (in_float != expected).sum() >= 10  # what rounding the float product in float gives
    fused = Executor(model, DEVICE, "fp32-fp16")
    assert [launch.op for launch in fused.launches] == ["QUANTIZE_AND_DEQUANTIZE", "MUL+QUANTIZE_AND_DEQUANTIZE"]
    np.testing.assert_array_equal(fused.run([x])[0], expected)
    np.testing.assert_array_equal(Executor(model, DEVICE, "fp32-fp16", keep_intermediates=True).run([x])[0], expected)


def test_add_quant_adjustments_rounds_what_the_delegate_rounds() -> None:
    """The prepare step: a QUANTIZE becomes the rounding, an op whose int8 result another op reads
    gets one after it (keeping the tensor's name), a RESHAPE on its input's grid gets none, the
    DEQUANTIZE of a rounded tensor goes, and a graph output no op reads is left to the host."""
    from gpulint.executor.prepare import prepare

    model, _ = int8_model("FULLY_CONNECTED", 0.02, 3)
    prepared = prepare(model, fusing=True).model
    sg = prepared.subgraphs[0]
    ops = [(prepared.op_name(op), [sg.tensors[t].name for t in op.outputs]) for op in sg.operators]
    assert [name for name, _ in ops] == [
        "QUANTIZE_AND_DEQUANTIZE",
        "RESHAPE",
        "FULLY_CONNECTED",
        "QUANTIZE_AND_DEQUANTIZE",
    ], ops
    assert ops[2][1] == ["computed/float"] and ops[3][1] == ["y"]  # the DEQUANTIZE's output, now written directly
    assert all(t.type in ("FLOAT32", "INT32") for t in sg.tensors)


def test_an_int8_op_it_cannot_run_is_named_by_its_own_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The op that computes under `<name>/float` is named by `<name>` when the executor cannot run
    it, so the partitioned runner moves that op alone to the CPU, not its whole partition."""
    from gpulint.executor import Unlowered
    from gpulint.executor.ops import LOWER
    from gpulint.partitioned import PartitionedRunner

    def refuse(*args: Any) -> None:
        raise ExecutorError("not lowered in this test")

    monkeypatch.setitem(LOWER, "FULLY_CONNECTED", refuse)
    model, _ = int8_model("FULLY_CONNECTED", 0.02, 3)
    with pytest.raises(Unlowered) as e:
        Executor(model, DEVICE)
    assert e.value.ops == [(["computed"], "FULLY_CONNECTED", "not lowered in this test")]
    assert DEVICE is not None
    runner = PartitionedRunner(model, DEVICE)
    try:
        assert [(p.kind, p.ops) for p in runner.parts] == [("gpu", [0, 1]), ("cpu", [2]), ("gpu", [3])], runner.parts
    finally:
        runner.close()


def test_a_unary_and_a_binary_op_round_in_their_own_kernels() -> None:
    """x -> QUANTIZE -> LOGISTIC (int8, 1/256 from 0) -> ADD (x_q, int8) -> DEQUANTIZE: each
    rounding runs in the kernel of the op before it (a fused step), with the formula's values;
    the ADD does not join the LOGISTIC's kernel, where its own rounding would not fit."""
    scale, zero = 0.02, 3
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.op("QUANTIZE", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8], dtype="INT8", quant=(1 / 16, 0), out_name="x_q")
    s = g.op("LOGISTIC", [x], [1, 4, 4, 8], dtype="INT8", quant=(1 / 256, -128), out_name="s")
    t = g.op("ADD", [s, x], [1, 4, 4, 8], dtype="INT8", quant=(scale, zero), out_name="sum")
    g.output(g.op("DEQUANTIZE", [t], [1, 4, 4, 8], out_name="y"))
    model = mb.build()
    x_in = np.random.default_rng(6).uniform(-2, 2, (1, 4, 4, 8)).astype(np.float32)
    xq = np.clip(np.floor(x_in.astype(np.float64) * 16 + 0.5), -128, 127) / 16
    logistic = 1 / (1 + np.exp(-xq))
    sq = np.floor(np.clip(logistic, 0, 255 / 256) * 256 + 0.5) / 256  # min 0: the formula with zp -128
    exact = sq + xq
    expected = delegate_rounding(exact, scale, zero)
    frac = (logistic * 256 % 1, (np.clip(exact, scale * (-128 - zero), scale * (127 - zero)) / scale + 131) % 1)
    clear = (np.abs(frac[0] - 0.5) > 1e-3) & (np.abs(frac[1] - 0.5) > 1e-3)
    assert clear.sum() >= 100 and (exact > scale * (127 - zero)).any()
    executor = Executor(model, DEVICE)
    (got,) = executor.run([x_in])
    assert [launch.op for launch in executor.launches] == [
        "QUANTIZE_AND_DEQUANTIZE",
        "LOGISTIC+QUANTIZE_AND_DEQUANTIZE",
        "ADD+QUANTIZE_AND_DEQUANTIZE",
    ]
    np.testing.assert_allclose(got[clear], expected[clear], rtol=0, atol=1e-6)


def test_a_quantized_graph_output_that_an_op_reads_is_rounded_for_that_op() -> None:
    """x -> QUANTIZE -> x_q, a graph output that an ADD also reads: the ADD reads x_q rounded (the
    QUANTIZE runs as the rounding), and the host quantizes the output as before."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    xq = g.op("QUANTIZE", [g.input("x", [1, 2, 2, 8])], [1, 2, 2, 8], dtype="INT8", quant=(0.1, 0), out_name="x_q")
    t = g.op("ADD", [xq, xq], [1, 2, 2, 8], dtype="INT8", quant=(0.07, 0), out_name="sum")
    g.output(xq, g.op("DEQUANTIZE", [t], [1, 2, 2, 8], out_name="y"))
    model = mb.build()
    x = np.random.default_rng(7).uniform(-5, 5, (1, 2, 2, 8)).astype(np.float32)
    q = np.clip(np.floor(x.astype(np.float64) * 10 + 0.5), -128, 127)
    clear = (np.abs(x * 10 % 1 - 0.5) > 1e-3) & (np.abs((2 * q / 10 + 128 * 0.07) / 0.07 % 1 - 0.5) > 1e-3)
    expected = delegate_rounding(2 * q / 10, 0.07, 0)
    assert (expected != delegate_rounding(2 * x.astype(np.float64), 0.07, 0))[clear].sum() >= 4  # x_q matters
    got_q, got_y = Executor(model, DEVICE).run([x])
    assert got_q.dtype == np.int8 and (got_q[clear] == q[clear]).all()
    np.testing.assert_allclose(got_y[clear], expected[clear], rtol=0, atol=1e-6)

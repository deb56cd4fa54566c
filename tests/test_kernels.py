"""The kernel sources as program.py assembles them, read without a device: every kernel is
found by the per-kernel splitter, the kernels are those the executor asks for, and the op
numbers the kernels name are opcodes.py's."""

from __future__ import annotations

import itertools
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from helpers import needs_opencl, opencl_device

from gpulint.executor import opcodes, program
from gpulint.executor.device import host_converts_half
from gpulint.executor.ops import conv
from gpulint.model import schema

VARIANTS = list(itertools.product([False, True], repeat=3))  # half, fp16 extension, epilogue loop


def kernel_text(name: str) -> str:
    return resources.files("gpulint").joinpath("kernels", name).read_text("utf-8")


def asked_for(half: bool) -> set[str]:
    """Every kernel name the executor's lowering can form (ops/*.py, lowering.py)."""
    names = {
        "input_to_slices",
        "copy_pairs",
        "copy_pairs_to_float",
        "copy_slices",
        "unary",
        "binary",
        "depthwise_conv2d",
    }
    names.add("quantize_dequantize")  # ops/quantize.py: an int8 result rounded to its grid
    names |= {
        "transpose_conv",
        "batch_matmul",
        "lstm_cell",
        "pool2d",
        "reduce",
        "reduce_wg",
        "softmax",
        "cumsum",
        "resize",
    }
    for ob, fused in itertools.product((1, 2, 4), ("", "_fused")):
        names.add(f"conv_o{ob}{fused}")
        if not half:  # a first conv reading the graph input as given: floats only
            names.add(f"conv_o{ob}_raw{fused}")
        names |= {f"conv1x1_o{ob}_p{px}{fused}" for px in (1, conv.PX)}
        names |= {f"conv1x1_split{fused}", f"conv_split{fused}"}  # a GPU's split sums: one output slice per item
    for rows, registers, fused in itertools.product(
        (1, 2), ("", "_k1s1", "_k3s1", "_k5s1", "_k1s2", "_k3s2", "_k5s2"), ("", "_fused")
    ):
        names.add(f"depthwise_x8_r{rows}{registers}{fused}")
    return names


@pytest.mark.parametrize(("half", "extension", "looped"), VARIANTS)
def test_every_kernel_is_split_into_a_program_of_its_own(half: bool, extension: bool, looped: bool) -> None:
    flavour = program.Flavour(half, extension, looped)
    source = program.kernel_source(flavour)
    programs = program.kernel_sources(flavour)
    assert len(programs) == source.count("__kernel void "), "a kernel the splitter did not find"
    assert set(programs) == asked_for(half)
    for name, text in programs.items():
        assert text.count("__kernel void ") == 1 and f"__kernel void {name}(" in text
        assert text.endswith("\n}\n"), f"{name}: a kernel ends at a line holding only }}"


def test_a_rendered_source_is_kept_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path))
    flavour = program.Flavour(True, half_math=True)
    rendered = program._render(flavour)
    program.kernel_source.cache_clear()
    assert program.kernel_source(flavour) == rendered
    assert len(list((tmp_path / "sources").iterdir())) == 1
    program.kernel_source.cache_clear()  # a new process: the kept source, not rendered again
    with monkeypatch.context() as m:
        m.setattr(program, "_render", lambda _: pytest.fail("rendered again"))
        assert program.kernel_source(flavour) == rendered
    # Anything the rendering reads is in the key: other op codes, another source kept beside
    program.kernel_source.cache_clear()
    monkeypatch.setattr(program.opcodes, "defines", lambda: "#define UNARY_ABS 99\n")
    assert "#define UNARY_ABS 99\n" in program.kernel_source(flavour)
    assert len(list((tmp_path / "sources").iterdir())) == 2
    program.kernel_source.cache_clear()


def test_a_source_that_cannot_be_kept_is_still_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path / "file"))  # a file where a folder should be
    program.kernel_source.cache_clear()
    assert program.kernel_source(program.Flavour(False)) == program._render(program.Flavour(False))
    program.kernel_source.cache_clear()


def test_every_kernel_file_is_read() -> None:
    files = program.kernel_files()
    assert "conv.cl.j2" in files and "prelude.cl.j2" not in files
    folder = resources.files("gpulint").joinpath("kernels")
    assert sorted(f.name for f in folder.iterdir() if ".cl" in f.name) == sorted([*files, program.PRELUDE])


def test_op_numbers_in_kernels_are_opcodes_defines() -> None:
    defined = set(re.findall(r"#define (\w+) ", opcodes.defines()))
    used = set()
    for name in [*program.kernel_files(), program.PRELUDE]:
        used |= set(re.findall(r"\b(?:UNARY|BINARY|REDUCE|CAST_TO|ACT|FORM)_[A-Z0-9_]+\b", kernel_text(name)))
    assert used <= defined, sorted(used - defined)
    switches = kernel_text("elementwise.cl")
    for prefix, table in (("UNARY", opcodes.UNARY), ("BINARY", opcodes.BINARY)):
        for op in table:
            assert f"case {prefix}_{op}:" in switches, f"unary4/binary4 has no case for {op}"
    source = program.kernel_source(program.Flavour(False))
    assert "#define UNARY_HARD_SWISH 12\n" in source and "#define CAST_TO_FLOAT32 (-1)\n" in source


def test_activation_numbers_are_the_schemas() -> None:
    for name, code in opcodes.ACTIVATION.items():
        if name != "SIGMOID":  # the C API's kTfLiteActSigmoid; the flatbuffer enum stops at SIGN_BIT
            assert schema.enum_value("ActivationFunctionType", name) == code


def test_codes_are_unique_per_kernel() -> None:
    unary = [*opcodes.UNARY.values(), opcodes.GELU_APPROXIMATE, *opcodes.CAST.values()]
    assert len(set(unary)) == len(unary)  # CAST shares unary4 with UNARY
    for table in (opcodes.BINARY, opcodes.REDUCE, opcodes.ACTIVATION, opcodes.FORM):
        assert len(set(table.values())) == len(table)


HALF_IO = """
__kernel void half_io(__global const FLT* h, __global float* f1, __global float* f4, __global float* f16,
                      __global const float* g, __global FLT* o1, __global FLT* o4, __global float* f8) {
  int i = get_global_id(0);
  f1[i] = LOAD1(i, h);
  STORE1(g[i], i, o1);
  if (i % 4 == 0) {
    vstore4(LOAD4(i / 4, h), i / 4, f4);
    STORE4(vload4(i / 4, g), i / 4, o4);
  }
  if (i % 16 == 0) ((__global float16*)f16)[i / 16] = LOAD16(i / 16, h);
  if (i % 8 == 0) vstore8(LOAD8(i / 8, h), i / 8, f8);
}
"""


def _same_halves(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, except that any NaN matches any NaN (payloads differ by converter)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(
        got[~nan].view(np.uint16 if got.dtype == np.float16 else np.uint32),
        want[~nan].view(np.uint16 if want.dtype == np.float16 else np.uint32),
    )


def floats_with_edges(n: int = 1 << 16) -> np.ndarray:
    """n float32s: random bit patterns (every exponent, NaNs, Infs), and first the edges of half's
    range and rounding (the largest half and the midpoint above it, the smallest normal and
    subnormal and the midpoints around them, ties next to 1), each with both signs."""
    rng = np.random.default_rng(0)
    edges = [
        65504,
        65519.996,
        65520,
        65535.99,
        65536,
        1e9,
        6.1035156e-05,
        6.097555e-05,
        5.9604645e-08,
        2.9802322e-08,
        2.9802326e-08,
        1e-30,
        0.0,
        1.0009766,
        1.0004883,
        1.0014648,
        np.inf,
        np.nan,
    ]
    floats = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32).copy()
    floats[: 2 * len(edges)] = np.array(edges + [-e for e in edges], np.float32)
    return floats


# How half storage converts: a CPU device's integer arithmetic, its F16C instructions (where the
# host has them: Device.converts_half), a GPU's vload_half/vstore_half.
CONVERSIONS = pytest.mark.parametrize(
    ("looped", "f16c"), [(False, False), (False, True), (True, False)], ids=["cpu-integer", "cpu-f16c", "gpu"]
)


def skip_without_f16c(f16c: bool) -> None:
    if f16c and not host_converts_half():
        pytest.skip("this CPU has no half conversion instructions (F16C)")
    device, _ = opencl_device()
    if f16c and device is not None and not device.cpu:
        # Device.converts_half: only a CPU device compiles the F16C flavour (on an H100 its
        # conversions read halves wrong: it is the CPU's instructions, not OpenCL C's).
        pytest.skip("the F16C flavour is compiled for CPU devices only, and this device is a GPU")


@needs_opencl()
@CONVERSIONS
def test_half_storage_converts_exactly(looped: bool, f16c: bool) -> None:
    """Half storage's loads and stores, as a CPU device (integer conversions or F16C) and a GPU
    (vload_half) compile them: every half to float exactly, and floats to half rounding to
    nearest even, overflow to Inf, subnormals kept, as numpy converts."""
    import pyopencl as cl

    skip_without_f16c(f16c)
    device, _ = opencl_device()
    assert device is not None
    common, _ = program.kernel_parts(program.Flavour(True, epilogue_loop=looped, f16c=f16c))
    built = cl.Program(device.context, common + HALF_IO).build(program.BUILD_OPTIONS)
    n = 1 << 16
    halves = np.arange(n, dtype=np.uint16).view(np.float16)
    floats = floats_with_edges()
    with np.errstate(over="ignore", invalid="ignore"):
        want_halves = floats.astype(np.float16)
    mf = cl.mem_flags
    h_buf = cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=halves)
    g_buf = cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=floats)
    # LOAD1, LOAD4, LOAD16 (f1, f4, f16), STORE1, STORE4 (o1, o4), LOAD8 (f8)
    outs = [np.empty(n, np.float32) for _ in range(3)] + [np.empty(n, np.float16) for _ in range(2)]
    outs.append(np.empty(n, np.float32))
    bufs = [cl.Buffer(device.context, mf.WRITE_ONLY, o.nbytes) for o in outs]
    built.half_io(device.queue, (n,), None, h_buf, *bufs[:3], g_buf, *bufs[3:])
    for o, b in zip(outs, bufs, strict=True):
        cl.enqueue_copy(device.queue, o, b)
    for got in [*outs[:3], outs[5]]:
        _same_halves(got, halves.astype(np.float32))
    for got in outs[3:5]:
        _same_halves(got, want_halves)


NEAREST = """
__kernel void nearest(__global const float* g, __global float* r1, __global float* r4, __global float* r16) {
  int i = get_global_id(0);
  r1[i] = nearest_half(g[i]);
  if (i % 4 == 0) vstore4(nearest_half4(vload4(i / 4, g)), i / 4, r4);
  if (i % 16 == 0) ((__global float16*)r16)[i / 16] = nearest_half16(((__global const float16*)g)[i / 16]);
}
"""


@needs_opencl()
@CONVERSIONS
def test_rounding_to_half_is_numpys(looped: bool, f16c: bool) -> None:
    """F16's per-step rounding (nearest_half, behind the RH macros): a float to the nearest half
    and back, bit for bit as numpy's float32 -> float16 -> float32 (ties to even, overflow to
    Inf, subnormals kept, NaN stays NaN), scalar and vector."""
    import pyopencl as cl

    skip_without_f16c(f16c)
    device, _ = opencl_device()
    assert device is not None
    common, _ = program.kernel_parts(program.Flavour(True, epilogue_loop=looped, half_math=True, f16c=f16c))
    built = cl.Program(device.context, common + NEAREST).build(program.BUILD_OPTIONS)
    # Every tie: the midpoint of each pair of adjacent finite halves, and the floats next to it.
    finite = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mid = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)
    near = [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))]
    floats = np.concatenate([floats_with_edges(), *near, *(-m for m in near)])
    floats = np.pad(floats, (0, -floats.size % 16))  # whole float16 vectors
    with np.errstate(over="ignore", invalid="ignore"):
        want = floats.astype(np.float16).astype(np.float32)
    mf = cl.mem_flags
    g_buf = cl.Buffer(device.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=floats)
    outs = [np.empty(floats.size, np.float32) for _ in range(3)]
    bufs = [cl.Buffer(device.context, mf.WRITE_ONLY, o.nbytes) for o in outs]
    built.nearest(device.queue, (floats.size,), None, g_buf, *bufs)
    for o, b in zip(outs, bufs, strict=True):
        cl.enqueue_copy(device.queue, o, b)
        _same_halves(o, want)

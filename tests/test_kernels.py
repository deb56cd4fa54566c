"""The kernel sources as program.py assembles them, read without a device: every kernel is
found by the per-kernel splitter, the kernels are those the executor asks for, and the op
numbers the kernels name are opcodes.py's."""

from __future__ import annotations

import itertools
import re
from importlib import resources

import pytest

from gpulint.executor import opcodes, program
from gpulint.model import schema

VARIANTS = list(itertools.product([False, True], repeat=3))  # half, fp16 extension, epilogue loop


def kernel_text(name: str) -> str:
    return resources.files("gpulint").joinpath("kernels", name).read_text("utf-8")


def asked_for() -> set[str]:
    """Every kernel name the executor's lowering can form (ops/*.py, lowering.py)."""
    names = {"input_to_slices", "copy_pairs", "copy_slices", "unary", "binary", "depthwise_conv2d"}
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
        names |= {f"conv1x1_o{ob}_p{px}{fused}" for px in (1, 8)}
    for rows, registers, fused in itertools.product((1, 2), ("", "_k3s1", "_k5s1", "_k3s2", "_k5s2"), ("", "_fused")):
        names.add(f"depthwise_x8_r{rows}{registers}{fused}")
    return names


@pytest.mark.parametrize(("half", "extension", "looped"), VARIANTS)
def test_every_kernel_is_split_into_a_program_of_its_own(half: bool, extension: bool, looped: bool) -> None:
    source = program.kernel_source(half, extension, looped)
    programs = program.kernel_sources(half, extension, looped)
    assert len(programs) == source.count("__kernel void "), "a kernel the splitter did not find"
    assert set(programs) == asked_for()
    for name, text in programs.items():
        assert text.count("__kernel void ") == 1 and f"__kernel void {name}(" in text
        assert text.endswith("\n}\n"), f"{name}: a kernel ends at a line holding only }}"


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
    source = program.kernel_source(False)
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

"""Bad cases bench/fuzz.py found, each as a small model built here: the command ends cleanly.

Issue #50: a mutated shape (dims of 2**31 - 1 at a high rank) made the estimated MACs an
integer too large to print, and `check --format json` and `report` died in json / the report
template with `ValueError: Exceeds the limit (4300 digits) for integer string conversion`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import needs_opencl
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.executor import movement
from gpulint.executor.context import pads
from gpulint.executor.errors import ExecutorError
from gpulint.model import to_bytes, write
from gpulint.model.build import ModelBuilder
from gpulint.rules.partition import MAX_ESTIMATE

runner = CliRunner()


def relu_of(shape: list[int], tmp_path: Path) -> Path:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", shape)
    g.output(g.op("RELU", [x], shape))
    path = tmp_path / f"relu_rank{len(shape)}.tflite"
    path.write_bytes(to_bytes(mb.build()))
    return path


def huge_conv(tmp_path: Path) -> Path:
    """A GPU-supported CONV_2D whose claimed sizes multiply past any real model's: the estimate
    and the transfers' bytes saturate instead of growing."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 0x7FFFFFFF, 0x7FFFFFFF, 4])
    w = g.const("w", np.zeros((4, 1, 1, 4), np.float32))
    y = g.op(
        "CONV_2D", [x, w, -1], [1, 0x7FFFFFFF, 0x7FFFFFFF, 4], options=dict(padding="SAME", stride_w=1, stride_h=1)
    )
    g.output(y)
    path = tmp_path / "conv.tflite"
    path.write_bytes(to_bytes(mb.build()))
    return path


def test_check_json_and_report_of_a_shape_of_rank_600_say_so_in_one_line(tmp_path: Path) -> None:
    """The issue's two cases: 2**31 - 1 at rank 600 is about 5,600 digits of elements. The reader
    refuses a rank past numpy's 64 (no real model comes near; TFLite's kernels stop at 6-8)."""
    path = relu_of([0x7FFFFFFF] * 600, tmp_path)
    for argv in (
        ["check", str(path), "--format", "json"],
        ["report", str(path), "--no-fix", "-o", str(tmp_path / "r.html")],
    ):
        line = one_error_line(argv)
        assert line == f"gpulint: error: {path}: subgraph 0 tensor 0: rank 600, past the 64 dims gpulint reads"


def test_check_json_and_report_of_the_largest_shape_read_give_a_bounded_estimate(tmp_path: Path) -> None:
    """2**31 - 1 at rank 64: 598 digits of elements, saturated at MAX_ESTIMATE where the MACs are
    estimated (and which a JSON reader's int64 holds)."""
    path = relu_of([0x7FFFFFFF] * 64, tmp_path)
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code in (0, 1), r.output
    plans = [p for f in json.loads(r.stdout)["files"] for p in f["partitions"]]
    assert [p["estimated_macs"] for p in plans] == [MAX_ESTIMATE]
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(path), "--no-fix", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert f"{MAX_ESTIMATE:,}" in out.read_text()  # the partition's estimated MACs, saturated


def test_a_huge_delegated_conv_saturates_macs_and_transfer_bytes(tmp_path: Path) -> None:
    path = huge_conv(tmp_path)
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    (plan,) = [p for f in json.loads(r.stdout)["files"] for p in f["partitions"]]
    assert plan["estimated_macs"] == MAX_ESTIMATE
    assert plan["transfers"] and all(t["bytes"] <= MAX_ESTIMATE for t in plan["transfers"])
    r = runner.invoke(app, ["report", str(path), "--no-fix", "-o", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output


@needs_opencl()
def test_verify_at_fp16_of_constants_past_half_range_prints_no_numpy_warning(tmp_path: Path) -> None:
    """A constant past half's largest value is inf in half storage, as on the GPU, and verify says
    so in its verdict; numpy's 'overflow encountered in cast' on stderr made the one error line of
    a fuzzed yolov8n-pose three lines (seed 1, case 36)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    y = g.op("ADD", [x, g.const("c", np.full((1, 4, 4, 4), 1e6, np.float32))], [1, 4, 4, 4])
    w, b = g.const("w", np.full((4, 1, 1, 4), 1e6, np.float32)), g.const("b", np.zeros(4, np.float32))
    g.output(g.op("CONV_2D", [y, w, b], [1, 4, 4, 4], options=dict(padding="SAME", stride_w=1, stride_h=1)))
    path = tmp_path / "big_constants.tflite"
    path.write_bytes(to_bytes(mb.build()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = runner.invoke(app, ["verify", str(path), "--no-cache", "--precision", "fp16"])
    assert r.exit_code == 1, r.output  # FAIL: the executor's half storage overflows where the CPU does not
    assert "overflowed" in r.stdout
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]


def one_error_line(argv: list[str]) -> str:
    """Run gpulint; it must exit 2 with one `gpulint: error:` line, which is returned."""
    r = runner.invoke(app, argv)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("gpulint: error: "), line
    return line


@needs_opencl()
def test_an_intermediate_claiming_terabytes_is_refused_before_numpy_is_asked(tmp_path: Path) -> None:
    """A fuzzed face_landmark (seed 1, case 76) had a conv output of 1.13 TiB: the executor asked
    numpy for it (ArrayMemoryError). The buffer is checked against the device's largest first.
    (An ADD here: a conv's output is now checked against its window first.)"""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    big = [1, 200_000, 200_000, 4]
    y = g.op("ADD", [x, x], big)
    g.output(g.op("RELU", [y], [1, 4, 4, 4]))
    path = tmp_path / "big_intermediate.tflite"
    path.write_bytes(to_bytes(mb.build()))
    for precision in ("fp32", "fp16"):
        line = one_error_line(["verify", str(path), "--no-cache", "--precision", precision])
        assert "more than the device's largest" in line
    assert "more than the device's largest" in one_error_line(["bench", str(path), "--runs", "1", "--no-start"])


@needs_opencl()
def test_bench_of_an_input_claiming_terabytes_says_so(tmp_path: Path) -> None:
    """bench drew random inputs of any claimed shape: 298 GiB asked of numpy (MemoryError)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    big = [1, 100_000, 100_000, 4]
    g.output(g.op("RELU", [g.input("x", big)], big))
    path = tmp_path / "big_input.tflite"
    path.write_bytes(to_bytes(mb.build()))
    line = one_error_line(["bench", str(path), "--runs", "1", "--no-start"])
    assert "input 'x' of shape [1, 100000, 100000, 4] needs more than" in line


@needs_opencl()
def test_a_tile_claiming_terabytes_is_refused_before_numpy_is_asked(tmp_path: Path) -> None:
    """A TILE to [1, 200000, 200000, 4]: the executor's index arrays for the copy asked numpy for
    1.16 TiB (ArrayMemoryError in verify and bench); a tensor past MAX_MOVED elements is refused."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    big = [1, 200_000, 200_000, 4]
    y = g.op("TILE", [x, g.const("m", np.array([1, 50_000, 50_000, 1], np.int32))], big)
    g.output(g.op("RELU", [y], big))
    path = tmp_path / "big_tile.tflite"
    path.write_bytes(to_bytes(mb.build()))
    one_error_line(["verify", str(path), "--no-cache"])
    one_error_line(["bench", str(path), "--runs", "1", "--no-start"])


def test_movement_refuses_multiples_and_paddings_past_its_bound() -> None:
    """Multiples or paddings that claim more than the declared output are checked before np.tile
    or np.pad allocate their result."""
    x = np.arange(64).reshape(1, 4, 4, 4)
    tile = [None, np.array([1, 50_000, 50_000, 1])]
    with pytest.raises(ExecutorError, match="more than the 268,435,456 elements"):
        movement.apply("TILE", [x, None], tile, {}, [[1, 4, 4, 4]])
    pads = [None, np.array([[0, 0], [100_000, 100_000], [100_000, 0], [0, 0]])]
    with pytest.raises(ExecutorError, match="PAD: a tensor of shape \\[1, 200004, 100004, 4\\]"):
        movement.apply("PAD", [x, None], pads, {}, [[1, 4, 4, 4]])
    assert movement.apply("TILE", [x, None], [None, np.array([1, 2, 1, 1])], {}, [[1, 8, 4, 4]])[0].shape == (
        1,
        8,
        4,
        4,
    )


@needs_opencl()
def test_bench_under_a_memory_limit_says_the_host_ran_out(tmp_path: Path) -> None:
    """Seed 50, case 93 of the 10,000-case run: a fuzzed transformer_block's BATCH_MATMUL output
    of 2**31 - 1 columns. Its 8 GiB bias of zeros fits the device's largest buffer, not the 4 GiB
    address space the fuzzer gives a case (nor a user's ulimit -v): a MemoryError traceback. The
    executor says the host ran out, naming the op."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4])
    g.output(g.op("BATCH_MATMUL", [x, x], [1, 4, 0x7FFFFFFF]))
    path = tmp_path / "wide_matmul.tflite"
    path.write_bytes(to_bytes(mb.build()))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    gpulint = str(Path(sys.executable).with_name("gpulint"))
    env = dict(os.environ, GPULINT_TRACEBACK="1", GPULINT_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run(
        [gpulint, "bench", str(path), "--runs", "1", "--no-start"],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"gpulint: error: {path}: op 0 BATCH_MATMUL: the host has no memory left for its buffers"
    ]


def test_split_reduction_of_an_absurd_mean_ends_at_once(tmp_path: Path) -> None:
    """A MEAN over [2**31 - 1, 2**31 - 1]: split-reduction (fix --unsafe-fixes) looked for the
    divisors of n = 2**62 by trial up to its square root, billions of steps. It leaves alone a
    reduction over more values than an int32 holds."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 0x7FFFFFFF, 0x7FFFFFFF, 4])
    axes = g.const("a", np.array([1, 2], np.int32))
    g.output(g.op("MEAN", [x, axes], [1, 1, 1, 4], options=dict(keep_dims=True)))
    path = tmp_path / "absurd_mean.tflite"
    path.write_bytes(to_bytes(mb.build()))
    start = time.perf_counter()
    argv = ["fix", str(path), "--passes", "split-reduction", "--skip-proof", "-o", str(tmp_path / "out.tflite")]
    r = runner.invoke(app, argv)
    assert r.exit_code == 0, r.output
    assert "more values than an int32 holds" in r.output
    assert time.perf_counter() - start < 10


def test_a_window_whose_output_disagrees_with_its_stride_is_refused() -> None:
    """Seed 1, case 58 of a 150-case run: a fuzzed face_landmark CONV_2D with stride_w 1868783461
    and the [1, 48, 48, 32] output it had before. The conv kernel indexed its input from that
    output: far outside it (SIGSEGV under the fuzzer's memory limit, garbage without one). A
    window whose output is not the size TFLite computes is refused (the op runs on the CPU)."""
    x, y = [1, 8, 8, 4], [1, 6, 6, 4]
    assert pads(x, y, (3, 3), (1, 1), (1, 1), "VALID") is not None
    with pytest.raises(ExecutorError, match="an output width of 6 where VALID padding with stride 1868783461"):
        pads(x, y, (3, 3), (1, 1868783461), (1, 1), "VALID")
    with pytest.raises(ExecutorError, match="stride 0"):
        pads(x, [1, 8, 8, 4], (3, 3), (0, 1), (1, 1), "SAME")
    with pytest.raises(ExecutorError, match="dilation 2147483647"):
        pads(x, [1, 8, 8, 4], (3, 3), (1, 1), (2**31 - 1, 1), "SAME")
    # seed 50, case 1409 of the 10,000-case run: a fuzzed odd_channels_56_int8 MAX_POOL_2D whose
    # output became [2] (IndexError in the window check, and in the padding before it)
    with pytest.raises(ExecutorError, match="a window from rank 4 to rank 1"):
        pads(x, [2], (2, 2), (2, 2), (1, 1), "VALID")


@needs_opencl()
def test_verify_of_a_conv_with_an_absurd_stride_ends_cleanly(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 4])
    w, b = g.const("w", np.ones((4, 3, 3, 4), np.float32)), g.const("b", np.zeros(4, np.float32))
    options = dict(padding="VALID", stride_w=1868783461, stride_h=1)
    g.output(g.op("CONV_2D", [x, w, b], [1, 6, 6, 4], options=options))
    path = tmp_path / "absurd_stride.tflite"
    path.write_bytes(to_bytes(mb.build()))
    r = runner.invoke(app, ["verify", str(path), "--no-cache"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code in (0, 1, 2, 3, 4), r.output
    if r.exit_code == 2:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_inspect_of_a_shape_of_64_dims_prints_one_short_line(tmp_path: Path) -> None:
    """A shape of many dims (the reader takes up to 64) is shown as its first eight and its rank."""
    shape = [65535] * 64
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", shape)
    g.output(g.op("MUL", [x, x], shape))
    path = tmp_path / "long_shape.tflite"
    path.write_bytes(to_bytes(mb.build()))
    r = runner.invoke(app, ["inspect", str(path)])
    assert r.exit_code == 0, r.output
    assert "[65535, 65535, 65535, 65535, 65535, 65535, 65535, 65535, ...] (rank 64)" in r.stdout
    assert len(r.stdout) < 2000


@needs_opencl()
def test_verify_of_a_pool_to_rank_1_ends_cleanly(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 4])
    options = dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    g.output(g.op("MAX_POOL_2D", [x], [2], options=options))
    path = tmp_path / "pool_to_rank1.tflite"
    path.write_bytes(to_bytes(mb.build()))
    for precision in ("fp32", "fp16"):
        r = runner.invoke(app, ["verify", str(path), "--no-cache", "--precision", precision])
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
        assert r.exit_code in (0, 1, 2, 3, 4), r.output
        if r.exit_code == 2:
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@needs_opencl()
def test_an_op_without_outputs_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """10,000-case run at 3b0f39d, case 4327: a u32 zeroed in palm_detection_lite made an ADD's output
    vector empty, and the executor's fusion planning indexed its first output (IndexError). Now such an
    op is one the executor cannot lower, and the interpreter's own refusal is the one line."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    y = g.op("RELU", [x], [1, 4, 4, 8])
    g.op("ADD", [y, y], out=[])
    g.output(y)
    path = tmp_path / "no_output.tflite"
    write(mb.build(), path)
    result = CliRunner().invoke(app, ["verify", str(path), "--no-cache"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "NumOutputs(node) != 1" in result.stderr


@needs_opencl()
def test_a_constant_graph_output_is_given_back_as_the_interpreter_gives_it(tmp_path: Path) -> None:
    """10,000-case run at 3b0f39d, case 6861: a mutated log_softmax export listed SUM's axis constant as its
    output; the partitioned runner looked it up among what the parts made (KeyError in verify and bench).
    A constant graph output is its value, as on the interpreter."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8])
    axis = g.const("axis", np.array([1], np.int32))
    g.output(g.op("SUM", [g.op("EXP", [x], [1, 8]), axis], [1, 1], options=dict(keep_dims=True)), axis)
    path = tmp_path / "const_output.tflite"
    write(mb.build(), path)
    for args in (["verify", str(path), "--no-cache"], ["bench", str(path), "--runs", "1", "--no-start"]):
        result = CliRunner().invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.exit_code == 0, (args, result.output)


def test_a_damaged_zip_after_the_model_is_its_size_not_a_traceback() -> None:
    """10,000-case run at 3b0f39d, cases 8530 and 8874: a YOLO export's appended zip (Ultralytics' metadata)
    with a word of its deflate stream set to 0x80000000 raised zlib.error out of fix's summary of it."""
    import io
    import zipfile

    from gpulint.summary import describe_appended

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", json.dumps({"names": {str(i): f"class {i}" for i in range(200)}}))
    data = bytearray(buf.getvalue())
    start = data.index(b"PK\x03\x04") + 30 + len("metadata.json")
    data[start + 8 : start + 12] = (0x80000000).to_bytes(4, "little")  # inside the compressed stream
    info = describe_appended(bytes(data))
    assert info is not None and info["bytes"] == len(data) and info["metadata_json_keys"] is None


def test_an_axis_outside_the_tensor_is_an_op_the_executor_cannot_lower() -> None:
    """10,000-case run at 3b0f39d, case 9708: a masked mean's SUM axis mutated past its tensor's rank
    was an IndexError in the executor's layout (bench); now the op is one it cannot lower, named."""
    from gpulint.executor.layout import bhwc_axis

    assert [bhwc_axis(3, a) for a in (0, 1, 2, -1)] == [0, 2, 3, 3]
    for axis in (3, 4, -4):
        with pytest.raises(ExecutorError, match=f"axis {axis} is outside a rank-3 tensor"):
            bhwc_axis(3, axis)


@needs_opencl()
@pytest.mark.parametrize(
    ("x_shape", "out_shape", "words"),
    [
        ([1, 4, 4, 8], [1, 4, 40], "RESHAPE: its inputs make 128 elements, its output declares 160"),
        ([1, 4, 4, -8], [1, 4, 40], r"RESHAPE: input 0 has the shape \[1, 4, 4, -8\]"),
    ],
)
def test_a_move_whose_shapes_disagree_is_an_op_the_executor_cannot_lower(
    x_shape: list[int], out_shape: list[int], words: str
) -> None:
    """10,000-case run at d0c0515, case 9074: a yolov8n-pose RESHAPE whose input dim was mutated to
    -2^31 made the copy's index map another size than its output (IndexError in verify at fp16); a
    move whose inputs and declared output disagree, or with a negative dim, is now an op the
    executor cannot lower, named (verify then runs it on the CPU, where the interpreter says why)."""
    from helpers import opencl_device

    from gpulint.executor import Executor

    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    y = g.op("ADD", [x, x], x_shape)  # the declared shape a damaged file may carry
    g.output(g.op("RESHAPE", [y, g.const("s", np.array(out_shape, np.int32))], out_shape))
    device, _ = opencl_device()
    with pytest.raises(ExecutorError, match=words):
        Executor(mb.build(), device)


@needs_opencl()
def test_a_conv_with_one_input_is_an_op_the_executor_cannot_lower() -> None:
    """Second 10,000-case run at bc33086, case 9221: a yolo11n-cls conv left with one input by a swapped
    offset was an IndexError in the executor's fusion plan and lowering (verify at fp16)."""
    from helpers import opencl_device

    from gpulint.executor import Executor

    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 8])
    g.output(g.op("CONV_2D", [x], [1, 4, 4, 8], options=dict(padding="SAME", stride_w=1, stride_h=1)))
    device, _ = opencl_device()
    with pytest.raises(ExecutorError, match=r"CONV_2D with 1 input\(s\)"):
        Executor(mb.build(), device)


@needs_opencl()
def test_a_damaged_output_scale_is_saturated_without_a_warning() -> None:
    """Second 10,000-case run, case 9560: a yolov8n-seg int8 output whose scale a mutation made 0 printed
    numpy's overflow and cast warnings, 5 lines where bench says one; requantizing saturates quietly."""
    from helpers import opencl_device

    from gpulint.executor import Executor

    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 4])
    g.output(g.op("QUANTIZE", [g.op("RELU", [x], [1, 4, 4, 4])], [1, 4, 4, 4], dtype="INT8", quant=(0.0, 0)))
    device, _ = opencl_device()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = Executor(mb.build(), device).run([np.ones((1, 4, 4, 4), np.float32)])
    assert out.dtype == np.int8 and int(out.max()) == 127

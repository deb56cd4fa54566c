"""The model builder makes models the LiteRT interpreter runs, and they round-trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import corpus_params

from gpulint import reference
from gpulint.model import Quantization, read, read_buffer, to_bytes, write
from gpulint.model.build import ModelBuilder, options_table_for
from gpulint.sample import sample_model


def test_while_loop_over_three_subgraphs(tmp_path: Path) -> None:
    """main: WHILE(i < 3) { i += 1; x *= 2 }, so the output is 8 * x."""
    mb = ModelBuilder()
    main, cond, body = mb.subgraph("main"), mb.subgraph("cond"), mb.subgraph("body")

    ci = cond.input("i", [], "INT32")
    cond.input("x", [1, 4])  # the loop state the condition receives but does not use
    cond.output(cond.op("LESS", [ci, cond.const("limit", np.array(3, np.int32))], [], dtype="BOOL"))

    bi, bx = body.input("i", [], "INT32"), body.input("x", [1, 4])
    i1 = body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [], dtype="INT32")
    x2 = body.op("MUL", [bx, body.const("two", np.array([2.0], np.float32))], [1, 4])
    body.output(i1, x2)

    x = main.input("x", [1, 4])
    i0 = main.const("i0", np.array(0, np.int32))
    outs = main.op("WHILE", [i0, x], shapes=[[], [1, 4]], options=dict(cond_subgraph_index=1, body_subgraph_index=2))
    main.sg.tensors[outs[0]].type = "INT32"
    main.output(outs[1])
    model = mb.build()

    path = tmp_path / "while.tflite"
    write(model, path)
    assert read(path) == model
    x_in = np.array([[1, -2, 0.5, 3]], np.float32)
    (out,) = reference.run(path, [x_in])
    np.testing.assert_array_equal(out, 8 * x_in)


def test_per_channel_int8_conv_runs_and_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 4, 4, 3], "INT8", quant=(0.05, -3))
    w_scales = [0.01, 0.02, 0.03, 0.04]
    w = g.const("w", rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), quant=(w_scales, [0, 0, 0, 0]))
    b = g.const("b", np.zeros(4, np.int32), quant=([0.05 * s for s in w_scales], [0, 0, 0, 0]))
    y = g.op(
        "CONV_2D",
        [x, w, b],
        [1, 4, 4, 4],
        dtype="INT8",
        quant=(0.1, 2),
        version=3,
        options=dict(padding="SAME", stride_w=1, stride_h=1),
    )
    g.output(y)
    model = mb.build()
    wq = model.subgraphs[0].tensors[w].quantization
    assert isinstance(wq, Quantization) and wq.per_channel and wq.quantized_dimension == 0
    path = tmp_path / "int8.tflite"
    write(model, path)
    assert read(path) == model
    (out,) = reference.run(path, reference.random_inputs(model, seed=0))
    assert out.dtype == np.int8 and out.shape == (1, 4, 4, 4)


def test_sample_model_round_trips_with_signature_and_metadata(tmp_path: Path) -> None:
    model = sample_model()
    again = read_buffer(to_bytes(model))
    assert again == model
    assert again.signature_defs is not None and again.signature_defs[0].signature_key == "serving_default"
    assert again.metadata is not None and again.metadata[0].name == "min_runtime_version"
    names = [again.op_name(op) for _, _, op in again.operators()]
    assert names == [
        "DEQUANTIZE",
        "CONV_2D",
        "DEPTHWISE_CONV_2D",
        "SPACE_TO_BATCH_ND",
        "CONV_2D",
        "BATCH_TO_SPACE_ND",
        "MEAN",
        "FULLY_CONNECTED",
        "SOFTMAX",
    ]


def test_builder_refuses_options_for_an_op_without_a_table() -> None:
    g = ModelBuilder().subgraph()
    x = g.input("x", [1])
    with pytest.raises(ValueError, match="LOGISTIC has no options table"):
        g.op("LOGISTIC", [x], [1], options={"beta": 1.0})


def test_raw_bytes_constant_needs_type_and_shape() -> None:
    g = ModelBuilder().subgraph()
    with pytest.raises(ValueError, match="raw bytes need dtype= and shape="):
        g.const("int4", b"\x12\x34")
    t = g.const("int4", b"\x12\x34", "INT4", shape=[4])
    assert g.sg.tensors[t].type == "INT4"


@pytest.mark.parametrize("path", corpus_params())
def test_options_table_for_matches_real_files(path: Path) -> None:
    model = read(path)
    for _, _, op in model.operators():
        if op.builtin_options is not None:
            assert options_table_for(model.op_name(op)) == op.builtin_options.type

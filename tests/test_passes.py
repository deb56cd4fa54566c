"""Each rewrite pass on small built models: the op list it leaves, and the same outputs on the
LiteRT CPU interpreter as the model it started from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpulint import reference
from gpulint.model import Model, read, write
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.model.ir import DimensionMetadata, IndexVector, Sparsity, clone
from gpulint.passes import PassOptions, registry
from gpulint.sample import sample_model

PASSES = registry()
RNG = np.random.default_rng(0)


def weights(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ops(model: Model) -> list[str]:
    return [model.op_name(op) for _, _, op in model.operators()]


def apply(model: Model, name: str, **options: bool) -> tuple[Model, list[str], list[str]]:
    after = clone(model)
    result = PASSES[name].run(after, PassOptions(**options))
    return after, result.changes, result.skipped


def outputs(tmp_path: Path, *models: Model, extra_channel: bool = False) -> list[list[np.ndarray]]:
    paths = []
    for i, m in enumerate(models):
        paths.append(tmp_path / f"m{i}.tflite")
        write(m, paths[-1])
    inputs = reference.random_inputs(models[0], seed=3)
    if not extra_channel:
        return reference.run_models(paths, inputs)
    first = reference.run(paths[0], inputs)
    grown = [np.concatenate([x, RNG.uniform(-9, 9, (*x.shape[:-1], 1)).astype(x.dtype)], -1) for x in inputs]
    return [first, reference.run(paths[1], grown)]


def assert_same(tmp_path: Path, before: Model, after: Model, extra_channel: bool = False) -> None:
    a, b = outputs(tmp_path, before, after, extra_channel=extra_channel)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-5 * max(1.0, float(np.abs(x).max())))


def conv(g: SubgraphBuilder, x: int, cin: int, cout: int, hw: int, act: str = "NONE", name: str = "") -> int:
    w = g.const(f"{name}w", weights(cout, 3, 3, cin))
    b = g.const(f"{name}b", weights(cout))
    return g.op(
        "CONV_2D",
        [x, w, b],
        [1, hw, hw, cout],
        out_name=name or None,
        options=dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function=act),
    )


# -- remove-identity ---------------------------------------------------------------------------


def test_remove_identity(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 4, 4, 8])
    a = g.op("RESHAPE", [x, g.const("s0", np.array([1, 4, 4, 8], np.int32))], [1, 4, 4, 8])
    a = g.op("TRANSPOSE", [a, g.const("perm", np.array([0, 1, 2, 3], np.int32))], [1, 4, 4, 8])
    a = g.op("CAST", [a], [1, 4, 4, 8])
    a = g.op("PAD", [a, g.const("pads", np.zeros((4, 2), np.int32))], [1, 4, 4, 8])
    a = g.op("RELU", [a], [1, 4, 4, 8])
    a = g.op("RESHAPE", [a, g.const("s1", np.array([1, 16, 8], np.int32))], [1, 16, 8])
    a = g.op("RESHAPE", [a, g.const("s2", np.array([1, 128], np.int32))], [1, 128])
    g.output(a)
    before = mb.build()
    after, changes, _ = apply(before, "remove-identity")
    assert ops(after) == ["RELU", "RESHAPE"]
    assert len(changes) == 5
    assert_same(tmp_path, before, after)


def test_remove_identity_keeps_an_op_that_writes_a_model_output() -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8])
    g.output(g.op("RESHAPE", [x, g.const("s", np.array([1, 8], np.int32))], [1, 8], out_name="logits"))
    after, changes, _ = apply(mb.build(), "remove-identity")
    assert changes == [] and ops(after) == ["RESHAPE"]


# -- fuse-activations ----------------------------------------------------------------------------


def test_fuse_activations(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    a = g.op("RELU6", [conv(g, x, 4, 4, 8, name="c0")], [1, 8, 8, 4])
    b = g.op("RELU", [g.op("ADD", [a, x], [1, 8, 8, 4])], [1, 8, 8, 4])
    c = conv(g, b, 4, 4, 8, name="c1")
    t = g.op("TANH", [c], [1, 8, 8, 4])  # not fused: the CPU CONV_2D refuses a fused TANH
    shared = conv(g, t, 4, 4, 8, name="c2")
    g.output(g.op("RELU", [shared], [1, 8, 8, 4]), shared)  # not fused: `shared` is read twice
    before = mb.build()
    after, changes, _ = apply(before, "fuse-activations")
    assert ops(after) == ["CONV_2D", "ADD", "CONV_2D", "TANH", "CONV_2D", "RELU"]
    acts = [op.builtin_options["fused_activation_function"] for _, _, op in after.operators() if op.builtin_options]
    assert acts == ["RELU6", "RELU", "NONE", "NONE"]
    assert len(changes) == 2
    assert_same(tmp_path, before, after)


# -- dequantize-constants --------------------------------------------------------------------------


def dequantize_model() -> Model:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    w16 = g.const("w16", weights(8, 3, 3, 4).astype(np.float16))
    w = g.op("DEQUANTIZE", [w16], [8, 3, 3, 4])
    y = g.op(
        "CONV_2D",
        [x, w, g.const("bias", weights(8))],
        [1, 8, 8, 8],
        options=dict(padding="SAME", stride_w=1, stride_h=1),
    )
    scales = [0.01, 0.02, 0.05]
    q = g.const("fc_q", RNG.integers(-127, 128, (3, 8)).astype(np.int8), quant=(scales, [0, 0, 0]))
    fw = g.op("DEQUANTIZE", [q], [3, 8], version=5)  # per-channel int8
    m = g.op("MEAN", [y, g.const("axes", np.array([1, 2], np.int32))], [1, 8], options=dict(keep_dims=False))
    g.output(g.op("FULLY_CONNECTED", [m, fw, -1], [1, 3]))
    return mb.build()


def test_dequantize_constants(tmp_path: Path) -> None:
    before = dequantize_model()
    after, changes, _ = apply(before, "dequantize-constants")
    assert ops(after) == ["CONV_2D", "MEAN", "FULLY_CONNECTED"]
    assert len(changes) == 2
    types = {t.name: t.type for t in after.subgraphs[0].tensors}
    assert "w16" not in types and "fc_q" not in types  # the quantized buffers are gone
    assert_same(tmp_path, before, after)


def test_dequantize_constants_keep_fp16() -> None:
    after, changes, _ = apply(dequantize_model(), "dequantize-constants", keep_fp16=True)
    assert ops(after) == ["DEQUANTIZE", "CONV_2D", "MEAN", "FULLY_CONNECTED"]
    assert len(changes) == 1


# -- densify-constants -----------------------------------------------------------------------------


def csr(dense: np.ndarray) -> tuple[bytes, Sparsity]:
    """dim 0 DENSE, dim 1 SPARSE_CSR."""
    segments, indices, values = [0], [], []
    for row in dense:
        nz = np.flatnonzero(row)
        indices.extend(nz.tolist())
        values.extend(row[nz].tolist())
        segments.append(len(indices))
    sp = Sparsity(
        [0, 1],
        None,
        [
            DimensionMetadata("DENSE", dense.shape[0]),
            DimensionMetadata(
                "SPARSE_CSR",
                0,
                IndexVector("Int32Vector", np.array(segments)),
                IndexVector("Uint8Vector", np.array(indices)),
            ),
        ],
    )
    return np.array(values, np.float32).tobytes(), sp


def block_sparse(dense: np.ndarray, block: int) -> tuple[bytes, Sparsity]:
    """Rows DENSE, columns in blocks of `block`, only nonzero blocks stored (as the converter does)."""
    rows, cols = dense.shape
    segments, indices, values = [0], [], []
    for r in range(rows):
        for cb in range(cols // block):
            chunk = dense[r, cb * block : (cb + 1) * block]
            if np.any(chunk):
                indices.append(cb)
                values.extend(chunk.tolist())
        segments.append(len(indices))
    sp = Sparsity(
        [0, 1, 2],
        [1],
        [
            DimensionMetadata("DENSE", rows),
            DimensionMetadata(
                "SPARSE_CSR",
                0,
                IndexVector("Int32Vector", np.array(segments)),
                IndexVector("Int32Vector", np.array(indices)),
            ),
            DimensionMetadata("DENSE", block),
        ],
    )
    return np.array(values, np.float32).tobytes(), sp


@pytest.mark.parametrize("encode", [csr, lambda d: block_sparse(d, 4)], ids=["csr", "block4"])
def test_densify_constants_against_the_interpreters_densify(tmp_path: Path, encode: object) -> None:
    dense = weights(6, 16) * (RNG.random((6, 16)) < 0.3)
    dense[:, 8:12] = 0  # an all-zero block
    data, sp = encode(dense)  # type: ignore[operator]
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 16])
    w = g.const("sparse_w", data, "FLOAT32", shape=[6, 16], sparsity=sp)
    dw = g.op("DENSIFY", [w], [6, 16])
    g.output(g.op("FULLY_CONNECTED", [x, dw, -1], [1, 6]))
    before = mb.build()
    after, changes, _ = apply(before, "densify-constants")
    assert ops(after) == ["FULLY_CONNECTED"] and len(changes) == 1
    folded = next(t for t in after.subgraphs[0].tensors if t.sparsity is None and t.shape == [6, 16])
    np.testing.assert_array_equal(after.tensor_data(folded), dense)
    assert_same(tmp_path, before, after)


# -- fold-atrous -----------------------------------------------------------------------------------


def atrous(op: str, pads: list[list[int]], crops: list[list[int]], inner: str, size: int = 16, block: int = 2) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, size, size, 4])
    b = g.const("block", np.array([block, block], np.int32))
    padded = size + pads[0][0] + pads[0][1]
    s = g.op(
        "SPACE_TO_BATCH_ND",
        [x, b, g.const("pads", np.array(pads, np.int32))],
        [block * block, padded // block, padded // block, 4],
    )
    inner_out = padded // block - (2 if inner == "VALID" else 0)
    if op == "CONV_2D":
        w = g.const("w", weights(4, 3, 3, 4))
        c = g.op(
            op,
            [s, w, g.const("bias", weights(4))],
            [block * block, inner_out, inner_out, 4],
            options=dict(padding=inner, stride_w=1, stride_h=1, fused_activation_function="RELU"),
        )
    else:
        w = g.const("w", weights(1, 3, 3, 4))
        c = g.op(
            op,
            [s, w, g.const("bias", weights(4))],
            [block * block, inner_out, inner_out, 4],
            options=dict(padding=inner, stride_w=1, stride_h=1, depth_multiplier=1),
        )
    out = inner_out * block - crops[0][0] - crops[0][1]
    g.output(g.op("BATCH_TO_SPACE_ND", [c, b, g.const("crops", np.array(crops, np.int32))], [1, out, out, 4]))
    return mb.build()


@pytest.mark.parametrize(
    ("op", "pads", "crops", "inner", "padding"),
    [
        ("CONV_2D", [[2, 2], [2, 2]], [[0, 0], [0, 0]], "VALID", "SAME"),
        ("DEPTHWISE_CONV_2D", [[2, 2], [2, 2]], [[0, 0], [0, 0]], "VALID", "SAME"),
        ("CONV_2D", [[0, 0], [0, 0]], [[0, 0], [0, 0]], "VALID", "VALID"),
        ("CONV_2D", [[0, 0], [0, 0]], [[0, 0], [0, 0]], "SAME", "SAME"),
    ],
)
def test_fold_atrous(
    tmp_path: Path, op: str, pads: list[list[int]], crops: list[list[int]], inner: str, padding: str
) -> None:
    before = atrous(op, pads, crops, inner)
    after, changes, _ = apply(before, "fold-atrous")
    assert ops(after) == [op] and len(changes) == 1
    opts = after.subgraphs[0].operators[0].builtin_options
    assert opts is not None
    assert (opts["padding"], opts["dilation_h_factor"], opts["dilation_w_factor"]) == (padding, 2, 2)
    assert_same(tmp_path, before, after)


def test_fold_atrous_leaves_a_pattern_it_cannot_express() -> None:
    # Padding 1 on each side: a dilated 3x3 conv would need 2 for SAME and 0 for VALID.
    before = atrous("CONV_2D", [[1, 1], [1, 1]], [[0, 0], [0, 0]], "VALID", size=14)
    after, changes, skipped = apply(before, "fold-atrous")
    assert changes == [] and ops(after) == ops(before)
    assert skipped == [
        "subgraph 0 op 0: paddings [[1, 1], [1, 1]] and crops [[0, 0], [0, 0]] are neither SAME nor VALID "
        "for a 3x3 kernel with dilation [2, 2]"
    ]


def test_fold_atrous_with_the_converters_extra_padding(tmp_path: Path) -> None:
    """Converters pad to a multiple of the block and crop the extra rows off again: still SAME."""
    before = atrous("CONV_2D", [[2, 4], [2, 4]], [[0, 2], [0, 2]], "VALID", size=14)
    after, changes, _ = apply(before, "fold-atrous")
    assert ops(after) == ["CONV_2D"] and len(changes) == 1
    assert_same(tmp_path, before, after)


# -- dense-grouped-conv ----------------------------------------------------------------------------


def grouped(kernel: int, groups: int, dtype: str = "FLOAT32") -> Model:
    """x [1, 8, 8, 16] through a CONV_2D of 16 outputs in `groups` groups, then a RELU."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 16])
    w = weights(16, kernel, kernel, 16 // groups)
    if dtype == "FLOAT16":
        wt = g.op("DEQUANTIZE", [g.const("w16", w.astype(np.float16))], list(w.shape))
    else:
        wt = g.const("w", w)
    opts = dict(padding="SAME", stride_w=1, stride_h=1)
    y = g.op("CONV_2D", [x, wt, g.const("b", weights(16))], [1, 8, 8, 16], options=opts)
    g.output(g.op("RELU", [y], [1, 8, 8, 16]))
    return mb.build()


@pytest.mark.parametrize("kernel, groups", [(1, 2), (3, 4)])
def test_dense_grouped_conv_gives_the_same_outputs(tmp_path: Path, kernel: int, groups: int) -> None:
    before = grouped(kernel, groups)
    after, changes, _ = apply(before, "dense-grouped-conv")
    assert changes == [
        f"`w`: {groups} groups of {16 // groups} channels -> dense [16, {kernel}, {kernel}, 16] ({groups}x the weights and MACs)"
    ]
    conv = next(op for _, sg, op in after.operators() if after.op_name(op) == "CONV_2D")
    assert after.subgraphs[0].tensors[conv.inputs[1]].shape == [16, kernel, kernel, 16]
    assert_same(tmp_path, before, after)
    # the defect rule the pass answers goes quiet (GPU806: the grouped 1x1 conv on OpenGL)
    from gpulint.rules import pack
    from gpulint.rules.engine import Linter

    codes = [f.code for f in Linter(pack.load_targets()["classic"]).lint(after).findings]
    assert "GPU806" not in codes


def test_dense_grouped_conv_leaves_depthwise_and_fp16_weights() -> None:
    # one input channel per group with as many outputs: a depthwise conv to the delegate
    _, changes, skipped = apply(grouped(3, 16), "dense-grouped-conv")
    assert changes == [] and skipped == ["`w`: one input channel per group, a depthwise conv to the delegate"]
    _, changes, _ = apply(grouped(1, 2, "FLOAT16"), "dense-grouped-conv")
    assert changes == []  # the weights are a DEQUANTIZE's output, not a constant


# -- pad-channels ----------------------------------------------------------------------------------


def odd_channels() -> Model:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("image", [1, 8, 8, 3])
    a = conv(g, x, 3, 5, 8, act="RELU", name="c5")
    a = g.op(
        "DEPTHWISE_CONV_2D",
        [a, g.const("dw", weights(1, 3, 3, 5)), g.const("dwb", weights(5))],
        [1, 8, 8, 5],
        options=dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=1),
    )
    a = g.op("ADD", [a, g.const("shift", weights(5))], [1, 8, 8, 5])
    a = g.op("HARD_SWISH", [a], [1, 8, 8, 5])
    a = conv(g, a, 5, 6, 8, name="c6")
    a = g.op(
        "MAX_POOL_2D",
        [a],
        [1, 4, 4, 6],
        options=dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2),
    )
    a = g.op("MEAN", [a, g.const("axes", np.array([1, 2], np.int32))], [1, 6], options=dict(keep_dims=False))
    g.output(g.op("FULLY_CONNECTED", [a, g.const("fc", weights(3, 6)), -1], [1, 3]))
    return mb.build()


def test_pad_channels(tmp_path: Path) -> None:
    before = odd_channels()
    after, changes, _ = apply(before, "pad-channels")
    assert ops(after) == ops(before)
    assert changes == [
        "subgraph 0: 4 tensors from 5 to 8 channels (starting at `c5`; 1 consumer gets zero weights)",
        "subgraph 0: 3 tensors from 6 to 8 channels (starting at `c6`; 1 consumer gets zero weights)",
    ]
    sg = after.subgraphs[0]
    inner = [sg.tensors[t] for op in sg.operators[:-1] for t in op.outputs]
    assert [t.shape[-1] for t in inner] == [8, 8, 8, 8, 8, 8, 8]
    assert [sg.tensors[t].shape for t in sg.inputs + sg.outputs] == [[1, 8, 8, 3], [1, 3]]
    assert_same(tmp_path, before, after)


def test_pad_channels_stops_at_concatenation() -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    a = conv(g, x, 4, 5, 8, name="c5")
    g.output(g.op("CONCATENATION", [a, x], [1, 8, 8, 9], options=dict(axis=3)))
    _, changes, skipped = apply(mb.build(), "pad-channels")
    assert changes == []
    assert skipped == [
        "subgraph 0: `c5` keeps 5 channels: CONCATENATION op 1 is not one the pass carries channels through"
    ]


def test_gpu301_offers_pad_channels_only_where_the_pass_pads() -> None:
    """#40 item 6: GPU301 offered `pad-channels` for a model output the pass never changes. The
    offer is the pass's own reach: c5 and the RELU after it are padded; a model output (c6), a
    region the pass stops at (c7 into a CONCATENATION) and the CONCATENATION are not. Running the
    pass clears every finding that offered it and no other."""
    from gpulint.rules import pack
    from gpulint.rules.engine import Linter

    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    a = g.op("RELU", [conv(g, x, 4, 5, 8, name="c5")], [1, 8, 8, 5], out_name="relu5")
    g.output(conv(g, conv(g, a, 5, 8, 8, name="c8"), 8, 6, 8, name="c6"))
    g.output(g.op("CONCATENATION", [conv(g, x, 4, 7, 8, name="c7"), x], [1, 8, 8, 11], options=dict(axis=3)))
    model = mb.build()
    targets = pack.load_targets()

    def offers(m: Model) -> dict[str, str | None]:
        found = Linter(targets["classic"], targets=targets).lint(m).findings
        return {f.tensors[0]: f.fix for f in found if f.code == "GPU301" and f.tensors}

    concat = model.subgraphs[0].tensors[model.subgraphs[0].outputs[1]].name
    assert offers(model) == {"c5": "pad-channels", "relu5": "pad-channels", "c6": None, "c7": None, concat: None}
    after, changes, _ = apply(model, "pad-channels")
    assert changes and offers(after) == {"c6": None, "c7": None, concat: None}


# -- rgba-input ------------------------------------------------------------------------------------


def test_rgba_input(tmp_path: Path) -> None:
    before = odd_channels()
    after, changes, _ = apply(before, "rgba-input")
    sg = after.subgraphs[0]
    assert sg.tensors[sg.inputs[0]].shape == [1, 8, 8, 4]
    assert changes == ["input `image` is now 4 channels (RGBA); the CONV_2D that reads it ignores the 4th"]
    assert_same(tmp_path, before, after, extra_channel=True)


def padded_stem(channel_pad: int = 0, fp16: bool = True) -> Model:
    """litert-torch's stem: the conv's padding as an explicit PAD, then a VALID conv (fp16 weights)."""
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("image", [1, 8, 8, 3])
    pads = np.array([[0, 0], [1, 1], [1, 1], [0, channel_pad]], np.int32)
    p = g.op("PAD", [x, g.const("pads", pads)], [1, 10, 10, 3 + channel_pad])
    w = weights(6, 3, 3, 3 + channel_pad)
    if fp16:
        w = g.op("DEQUANTIZE", [g.const("w16", w.astype(np.float16))], [6, 3, 3, 3 + channel_pad], version=3)
    else:
        w = g.const("w", w)
    y = g.op(
        "CONV_2D", [p, w, g.const("b", weights(6))], [1, 8, 8, 6], options=dict(padding="VALID", stride_w=1, stride_h=1)
    )
    side = g.op(
        "CONV_2D",
        [x, g.const("w2", weights(2, 1, 1, 3)), g.const("b2", weights(2))],
        [1, 8, 8, 2],
        options=dict(stride_w=1, stride_h=1),
    )
    g.output(side, y)
    return mb.build()


@pytest.mark.parametrize("fp16", [True, False], ids=["fp16-weights", "float32-weights"])
def test_rgba_input_through_a_spatial_pad(tmp_path: Path, fp16: bool) -> None:
    from gpulint.passes.rgba_input import refusal

    before = padded_stem(fp16=fp16)
    assert refusal(before, before.subgraphs[0], 0) is None
    after, changes, skipped = apply(before, "rgba-input")
    assert skipped == [] and changes == [
        "input `image` is now 4 channels (RGBA); the 2 CONV_2D ops that read it ignore the 4th (behind 1 PAD)"
    ]
    sg = after.subgraphs[0]
    assert sg.tensors[sg.inputs[0]].shape == [1, 8, 8, 4]
    assert ops(after) == ["PAD", *(["DEQUANTIZE"] if fp16 else []), "CONV_2D", "CONV_2D"]
    if fp16:  # still fp16 weights, widened, behind a DEQUANTIZE the delegate folds
        dq = sg.operators[1]
        assert sg.tensors[dq.inputs[0]].type == "FLOAT16" and sg.tensors[dq.inputs[0]].shape == [6, 3, 3, 4]
    assert_same(tmp_path, before, after, extra_channel=True)
    assert PASSES["rgba-input"].run(clone(after), PassOptions()).changes == []  # a fixed point


def test_rgba_input_hint_only_where_the_pass_applies() -> None:
    """GPU302 offers rgba-input exactly where the pass would apply (the same predicate)."""
    from gpulint.check import Settings, check_model

    for model, applies in ((padded_stem(), True), (padded_stem(channel_pad=1), False)):
        _, changes, skipped = apply(model, "rgba-input")
        assert bool(changes) is applies
        if not applies:
            assert skipped == ["input `image` stays 3 channels: `PAD` (op 0) pads the channels"]
        (found,) = [f for f in check_model(model, "m.tflite", Settings()).findings if f.code == "GPU302"]
        assert found.fix == ("rgba-input" if applies else None)


# -- quantized-to-float ----------------------------------------------------------------------------


def test_quantized_to_float_keeps_the_interface(tmp_path: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4], "INT8", quant=(0.05, 0))
    ws = [0.01, 0.02, 0.015, 0.01]
    w = g.const("w", RNG.integers(-2, 3, (4, 3, 3, 4)).astype(np.int8), quant=(ws, [0] * 4))
    b = g.const("b", RNG.integers(-50, 50, 4).astype(np.int32), quant=([0.05 * s for s in ws], [0] * 4))
    y = g.op(
        "CONV_2D",
        [x, w, b],
        [1, 8, 8, 4],
        dtype="INT8",
        quant=(0.1, 3),
        version=3,
        options=dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU"),
    )
    g.output(
        g.op(
            "AVERAGE_POOL_2D",
            [y],
            [1, 4, 4, 4],
            dtype="INT8",
            quant=(0.1, 3),
            version=2,
            options=dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2),
        )
    )
    before = mb.build()
    after, _, _ = apply(before, "quantized-to-float")
    assert ops(after) == ["DEQUANTIZE", "CONV_2D", "AVERAGE_POOL_2D", "QUANTIZE"]
    sg = after.subgraphs[0]
    assert [sg.tensors[t].type for t in sg.inputs + sg.outputs] == ["INT8", "INT8"]
    assert {sg.tensors[t].type for op in sg.operators[1:3] for t in op.inputs + op.outputs} == {"FLOAT32"}
    assert all(after.opcode(op).version == 1 for op in sg.operators)
    a, b2 = outputs(tmp_path, before, after)
    # Small weights keep this model away from int8 saturation: the float model stays within a
    # step of the int8 one (rounding of the conv output before the pool).
    assert np.abs(a[0].astype(int) - b2[0].astype(int)).max() <= 1
    again, more, _ = apply(after, "quantized-to-float")
    assert more == [] and ops(again) == ops(after)


def test_quantized_to_float_matches_the_float_model_the_int8_one_came_from(tmp_path: Path) -> None:
    from conftest import corpus_file

    int8, f32 = corpus_file("odd_channels_56_int8.tflite"), corpus_file("odd_channels_56_f32.tflite")
    before = read(int8)
    after, _, _ = apply(before, "quantized-to-float")
    sg = before.subgraphs[0]
    qi = sg.tensors[sg.inputs[0]].quantization
    qo = sg.tensors[sg.outputs[0]].quantization
    assert qi is not None and qi.scale and qo is not None and qo.scale
    write(after, tmp_path / "float.tflite")
    # Raw int8 values over the whole range: past what the model was calibrated on, so its int8
    # activations saturate (random_inputs stays inside the calibrated range instead).
    shape = sg.tensors[sg.inputs[0]].shape
    x8 = [np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8)]
    xf = [((x8[0].astype(np.float32) - qi.zero_point[0]) * qi.scale[0]).astype(np.float32)]
    q8, ours = reference.run_models([int8, tmp_path / "float.tflite"], x8)
    (ref,) = reference.run_models([f32], xf)

    def steps(v: np.ndarray) -> np.ndarray:
        return np.abs((v.astype(np.float32) - qo.zero_point[0]) * qo.scale[0] - ref[0]) / qo.scale[0]

    assert steps(ours[0]).max() < 1.0  # the float model is within a step of the Keras float model
    assert steps(q8[0]).max() > 5.0  # where the int8 model is not


def test_passes_leave_the_sample_loadable(tmp_path: Path) -> None:
    before = sample_model()
    after = clone(before)
    for name in ("dequantize-constants", "fold-atrous", "fuse-activations", "pad-channels"):
        PASSES[name].run(after, PassOptions())
    assert "SPACE_TO_BATCH_ND" not in ops(after) and "DEQUANTIZE" not in ops(after)
    assert_same(tmp_path, before, after)

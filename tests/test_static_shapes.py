"""The static-shapes pass: graphs the interpreter refuses for the GPU delegate become static.

Built models first (each: refused before, find_refusal is None after, the same outputs on the LiteRT
interpreter at the pinned shapes), then the corpus: every model `check` calls refused is fixed by
`fix`'s default passes, and the real GL delegate (tests/oracle) accepts the fixed model and takes
the ops `check` says it takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS_FILES, NO_CORPUS

from gpulint import reference
from gpulint.check import Settings, check_file
from gpulint.fix import FixError, fix_model, select_passes
from gpulint.model import Model, read, write
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.model.ir import clone
from gpulint.passes import PassOptions, PassResult, registry
from gpulint.passes.static_shapes.pin import bad_input_shapes, parse_input_shape
from gpulint.rules.prepare import find_refusal

I32 = np.int32
PASS = registry()["static-shapes"]


def model(build: Any) -> Model:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def ops(m: Model, si: int = 0) -> list[str]:
    return [m.op_name(op) for op in m.subgraphs[si].operators]


def run_pass(m: Model, **options: Any) -> tuple[Model, PassResult]:
    after = clone(m)
    return after, PASS.run(after, PassOptions(**options))


def same_outputs(tmp_path: Path, before: Model, after: Model) -> None:
    """Both models on the after-model's input shapes (the original resized to them): the same
    outputs within fp32 rounding."""
    write(before, tmp_path / "before.tflite")
    write(after, tmp_path / "after.tflite")
    inputs = reference.random_inputs(after, seed=5)
    a = reference.run(tmp_path / "before.tflite", inputs)
    b = reference.run(tmp_path / "after.tflite", inputs)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        # fp32 rounding, as fix's proof: a MEAN whose axes became constant runs on XNNPACK, which
        # sums in another order than the builtin kernel that ran it with runtime axes (1 ulp here).
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-6 * max(1.0, float(np.abs(x).max())))


def batch_of(g: SubgraphBuilder, x: int) -> int:
    shape = g.op("SHAPE", [x], [4], dtype="INT32", out_name="shape", options=dict(out_type="INT32"))
    b, e, s = (g.const(n, np.array([v], I32)) for n, v in (("b", 0), ("e", 1), ("s", 1)))
    return g.op(
        "STRIDED_SLICE", [shape, b, e, s], [], dtype="INT32", out_name="batch", options=dict(shrink_axis_mask=1)
    )


def dynamic_batch_head(g: SubgraphBuilder) -> int:
    """A Keras head with a dynamic batch: SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE."""
    x = g.input("x", [1, 4, 4, 8], shape_signature=[-1, 4, 4, 8])
    y = g.op("RELU", [x], [1, 4, 4, 8])
    target = g.op(
        "PACK", [batch_of(g, y), g.const("n", np.array(128, I32))], [2], dtype="INT32", options=dict(values_count=2)
    )
    flat = g.op("RESHAPE", [y, target], [1, 128])
    return g.op("SOFTMAX", [flat], [1, 128], options=dict(beta=1.0))


def test_dynamic_batch_reshape_gets_a_constant_shape(tmp_path: Path) -> None:
    before = model(dynamic_batch_head)
    assert find_refusal(before) is not None
    after, result = run_pass(before)
    assert find_refusal(after) is None
    assert ops(after) == ["RELU", "RESHAPE", "SOFTMAX"]
    sg = after.subgraphs[0]
    x = sg.tensors[sg.inputs[0]]
    assert x.shape == [1, 4, 4, 8] and x.shape_signature == [1, 4, 4, 8]
    reshape = sg.operators[1]
    shape = after.tensor_data(sg.tensors[reshape.inputs[1]])
    assert shape is not None and shape.tolist() == [1, 128]
    assert not any(t.is_dynamic for t in sg.tensors)
    # The default pin is said, and how to choose another.
    assert any("[-1,4,4,8] -> [1,4,4,8]" in c and "--input-shape" in c for c in result.changes)
    assert any("RESHAPE (op 1) now reads constant [1,128]" in c for c in result.changes)
    same_outputs(tmp_path, before, after)


def test_pinned_batch_propagates_through_the_graph(tmp_path: Path) -> None:
    before = model(dynamic_batch_head)
    after, result = run_pass(before, input_shapes=(("x", (3, 4, 4, 8)),))
    assert find_refusal(after) is None
    sg = after.subgraphs[0]
    assert [sg.tensors[t].shape for t in sg.outputs] == [[3, 128]]
    assert sg.tensors[sg.inputs[0]].shape_signature == [3, 4, 4, 8]
    assert any("[-1,4,4,8] -> [3,4,4,8] (--input-shape)" in c for c in result.changes)
    same_outputs(tmp_path, before, after)


def test_shape_arithmetic_through_gather_cast_concat_and_arithmetic(tmp_path: Path) -> None:
    """RESHAPE, PAD and MEAN all sized by runtime shape math: GATHER, REDUCE_PROD, CAST, FLOOR_DIV,
    MUL, SUB, RANGE, CONCATENATION over SHAPE and RANK."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 6, 6, 4], shape_signature=[-1, 6, 6, 4])
        shape = g.op("SHAPE", [x], [4], dtype="INT32", options=dict(out_type="INT32"))
        hw = g.op("GATHER", [shape, g.const("hw_at", np.array([1, 2], I32))], [2], dtype="INT32")
        area = g.op(
            "REDUCE_PROD", [hw, g.const("ax0", np.array([0], I32))], [1], dtype="INT32", options=dict(keep_dims=True)
        )
        as_f = g.op("CAST", [area], [1], dtype="FLOAT32")
        back = g.op("CAST", [as_f], [1], dtype="INT32")
        chans = g.op(
            "FLOOR_DIV",
            [g.op("SLICE", [shape, *begin_size(g, [3], [1])], [1], dtype="INT32"), one(g)],
            [1],
            dtype="INT32",
        )
        target = g.op("CONCATENATION", [g.const("m1", np.array([-1], I32)), back, chans], [3], dtype="INT32")
        flat = g.op("RESHAPE", [x, target], [1, 36, 4])
        # PAD: paddings [[0,0],[1,1],[0,0]] times batch // batch (FLOOR_DIV and MUL at run time).
        batch = batch_of(g, x)
        unit = g.op("FLOOR_DIV", [batch, batch], [], dtype="INT32")
        pads = g.op("MUL", [g.const("p", np.array([[0, 0], [1, 1], [0, 0]], I32)), unit], [3, 2], dtype="INT32")
        padded = g.op("PAD", [flat, pads], [1, 38, 4])
        # MEAN over axes RANGE(1, RANK - 1): [1] for a rank-3 tensor.
        rank = g.op("RANK", [padded], [], dtype="INT32")
        last = g.op("SUB", [rank, g.const("two", np.array(2, I32))], [], dtype="INT32")
        axes = g.op(
            "RANGE",
            [
                g.const("start", np.array(1, I32)),
                g.op("ADD", [last, g.const("o", np.array(1, I32))], [], dtype="INT32"),
                g.const("d", np.array(1, I32)),
            ],
            [1],
            dtype="INT32",
        )
        return g.op("MEAN", [padded, axes], [1, 4], options=dict(keep_dims=False))

    before = model(build)
    assert find_refusal(before) is not None
    after, result = run_pass(before)
    assert find_refusal(after) is None, result.skipped
    assert ops(after) == ["RESHAPE", "PAD", "MEAN"]
    sg = after.subgraphs[0]
    consts = [after.tensor_data(sg.tensors[op.inputs[1]]) for op in sg.operators]
    assert [c.tolist() for c in consts if c is not None] == [[-1, 36, 4], [[0, 0], [1, 1], [0, 0]], [1]]
    same_outputs(tmp_path, before, after)


def begin_size(g: SubgraphBuilder, begin: list[int], size: list[int]) -> list[int]:
    return [
        g.const(f"begin{len(g.sg.tensors)}", np.array(begin, I32)),
        g.const(f"size{len(g.sg.tensors)}", np.array(size, I32)),
    ]


def one(g: SubgraphBuilder) -> int:
    return g.const(f"one{len(g.sg.tensors)}", np.array([1], I32))


def test_data_dependent_size_is_left_alone_with_the_reason() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("ids", [8], dtype="INT32")
        values, _ = g.op("UNIQUE", [x], shapes=[[8], [8]], dtype="INT32", options=dict(idx_out_type="INT32"))
        g.sg.tensors[values].shape_signature = [-1]
        return g.op("RESHAPE", [values, g.const("s", np.array([-1, 1], I32))], [8, 1], dtype="INT32")

    before = model(build)
    assert find_refusal(before) is not None
    after, result = run_pass(before)
    assert not result.changes and after == before
    (why,) = result.skipped
    assert "left the model as it is" in why and "UNIQUE" in why
    assert "number of distinct values" in why and "no input shape makes it static" in why


def test_a_graph_that_is_not_refused_keeps_its_interface_unless_asked() -> None:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 4], shape_signature=[-1, 4])
        return g.op("RELU", [x], [1, 4])

    before = model(build)
    assert find_refusal(before) is None
    after, result = run_pass(before)
    assert not result.changes and after == before
    after, result = run_pass(before, pin_shapes=True)
    assert after.subgraphs[0].tensors[0].shape_signature == [1, 4]
    assert result.changes and not PASS.run(after, PassOptions(pin_shapes=True)).changes  # a fixed point


def loop_model(body_shape_math: bool = False) -> Model:
    """main: acc = WHILE(i < 4) { acc[i] = 2 * x[i]; i += 1 }: a TensorList write the converter
    lowers to CONCATENATION(SLICE(acc, 0, [i, -1, -1]), row, SLICE(acc, [i + 1, 0, 0], -1))."""
    mb = ModelBuilder()
    main, cond, body = mb.subgraph("main"), mb.subgraph("cond"), mb.subgraph("body")
    n, shape = 4, [4, 1, 3]

    ci = cond.input("i", [], "INT32")
    cond.input("acc", shape)
    cond.input("x", shape)
    cond.output(cond.op("LESS", [ci, cond.const("n", np.array(n, I32))], [], dtype="BOOL"))

    bi, acc, bx = body.input("i", [], "INT32"), body.input("acc", shape), body.input("x", shape)
    row = body.op("GATHER", [bx, bi], [1, 3])
    row = body.op("MUL", [row, body.const("two", np.array([2.0], np.float32))], [1, 3])
    if body_shape_math:  # the row's shape from SHAPE -> PACK: runtime shape math inside the body
        sh = body.op("SHAPE", [row], [2], dtype="INT32", options=dict(out_type="INT32"))
        b, e, _ = (body.const(f"c{v}", np.array([v], I32)) for v in (0, 1, 1))
        rows = body.op(
            "STRIDED_SLICE",
            [sh, b, e, body.const("s1", np.array([1], I32))],
            [],
            dtype="INT32",
            options=dict(shrink_axis_mask=1),
        )
        target = body.op(
            "PACK",
            [rows, body.const("one", np.array(1, I32)), body.const("w", np.array(3, I32))],
            [3],
            dtype="INT32",
            options=dict(values_count=3),
        )
    else:
        target = body.const("row_shape", np.array([1, 1, 3], I32))
    row = body.op("RESHAPE", [row, target], [1, 1, 3])
    index = body.op("RESHAPE", [bi, body.const("as_vec", np.array([1], I32))], [1], dtype="INT32")
    size = body.op("CONCATENATION", [index, body.const("rest", np.array([-1, -1], I32))], [3], dtype="INT32")
    before_rows = body.op("SLICE", [acc, body.const("zeros", np.array([0, 0, 0], I32)), size], [1, 1, 3])
    body.sg.tensors[before_rows].shape_signature = [-1, -1, -1]
    i1 = body.op("ADD", [bi, body.const("inc", np.array(1, I32))], [], dtype="INT32")
    next_at = body.op("RESHAPE", [i1, body.const("as_vec2", np.array([1], I32))], [1], dtype="INT32")
    begin = body.op("CONCATENATION", [next_at, body.const("zz", np.array([0, 0], I32))], [3], dtype="INT32")
    after_rows = body.op("SLICE", [acc, begin, body.const("all", np.array([-1, -1, -1], I32))], [1, 1, 3])
    body.sg.tensors[after_rows].shape_signature = [-1, 1, 3]
    acc1 = body.op("CONCATENATION", [before_rows, row, after_rows], shape, options=dict(axis=0))
    body.output(i1, acc1, bx)

    x = main.input("x", shape)
    outs = main.op(
        "WHILE",
        [main.const("i0", np.array(0, I32)), main.const("acc0", np.zeros(shape, np.float32)), x],
        shapes=[[], shape, shape],
        options=dict(cond_subgraph_index=1, body_subgraph_index=2),
    )
    main.sg.tensors[outs[0]].type = "INT32"
    main.output(main.op("RELU", [outs[1]], shape))
    return mb.build()


def test_tensor_list_write_in_a_loop_body_becomes_dynamic_update_slice(tmp_path: Path) -> None:
    before = loop_model()
    r = find_refusal(before)
    assert r is not None and r.op == "WHILE" and "subgraph 2" in r.why
    after, result = run_pass(before)
    assert find_refusal(after) is None, result.skipped
    assert "DYNAMIC_UPDATE_SLICE" in ops(after, 2) and "SLICE" not in ops(after, 2)
    assert any("TensorList write" in c and "DYNAMIC_UPDATE_SLICE" in c for c in result.changes)
    same_outputs(tmp_path, before, after)
    x = reference.random_inputs(after, seed=1)
    (y,) = reference.run(tmp_path / "after.tflite", x)
    np.testing.assert_array_equal(y, np.maximum(2 * x[0], 0))


def test_shape_math_inside_a_loop_body_is_folded(tmp_path: Path) -> None:
    before = loop_model(body_shape_math=True)
    assert "SHAPE" in ops(before, 2)
    after, result = run_pass(before)
    assert find_refusal(after) is None, result.skipped
    assert not {"SHAPE", "STRIDED_SLICE", "SLICE"} & set(ops(after, 2))
    assert ops(after, 2).count("PACK") == 1  # DYNAMIC_UPDATE_SLICE's start indices, not the shape's
    assert any("subgraph 2: RESHAPE" in c and "now reads constant [1,1,3]" in c for c in result.changes)
    same_outputs(tmp_path, before, after)


def test_shape_math_in_a_nested_subgraph_is_reported_not_folded() -> None:
    """The loop of loop_model moved one level down: main -> IF -> WHILE. Its body is not called by the
    main subgraph, so its shape arithmetic has no values to fold to."""
    inner = loop_model(body_shape_math=True)
    mb = ModelBuilder()
    main, branch = mb.subgraph("main"), mb.subgraph("then")
    x = main.input("x", [4, 1, 3])
    flag = main.const("flag", np.array(True))
    y = main.op("IF", [flag, x], [4, 1, 3], options=dict(then_subgraph_index=1, else_subgraph_index=1))
    main.output(y)
    bx = branch.input("x", [4, 1, 3])
    m = mb.build()
    # The branch is inner's main subgraph (its WHILE now calls subgraphs 2 and 3).
    loop_main = inner.subgraphs[0]
    for op in loop_main.operators:
        if op.builtin_options is not None and "body_subgraph_index" in op.builtin_options.values:
            op.builtin_options.values.update(cond_subgraph_index=2, body_subgraph_index=3)
    del bx
    m.subgraphs[1] = loop_main
    loop_main.name = "then"
    m.subgraphs += inner.subgraphs[1:]
    m.buffers, offset = m.buffers + inner.buffers, len(m.buffers)
    codes = {}
    for sg in m.subgraphs[1:]:
        for t in sg.tensors:
            t.buffer = t.buffer + offset if t.buffer else 0
        for op in sg.operators:
            code = inner.operator_codes[op.opcode_index]
            op.opcode_index = codes.setdefault(op.opcode_index, m.opcode_index(code.name, code.version))
    assert find_refusal(m) is not None
    after, result = run_pass(m)
    assert not result.changes and after == m
    why = " ".join(result.skipped)
    assert "left the model as it is" in why and "called from another one" in why


def test_input_shape_option_is_parsed_and_checked() -> None:
    assert parse_input_shape("serving_default_x:0=1,224,224,3") == ("serving_default_x:0", (1, 224, 224, 3))
    for bad in ("1,2,3", "x=1,a", "x=0,4"):
        with pytest.raises(ValueError):
            parse_input_shape(bad)
    m = model(dynamic_batch_head)
    assert bad_input_shapes(m, (("x", (2, 4, 4, 8)),)) is None
    assert "no input `y`" in (bad_input_shapes(m, (("y", (2, 4, 4, 8)),)) or "")
    assert "rank 4" in (bad_input_shapes(m, (("x", (2, 128)),)) or "")
    assert "fixed at 4" in (bad_input_shapes(m, (("x", (2, 5, 4, 8)),)) or "")


def test_fix_runs_the_pass_by_default_on_a_refused_graph_and_proves_it(tmp_path: Path) -> None:
    before = model(dynamic_batch_head)
    write(before, tmp_path / "m.tflite")
    after, report = fix_model(tmp_path / "m.tflite", before, select_passes(None, False), PassOptions())
    assert "static-shapes" in [a.name for a in report.applied] and not report.rejected
    assert find_refusal(after) is None and report.max_error == [0.0]
    # Pinned to batch 2: proven on batch-2 inputs, the original resized to them.
    options = PassOptions(input_shapes=(("x", (2, 4, 4, 8)),), pin_shapes=True)
    after, report = fix_model(tmp_path / "m.tflite", before, select_passes(["static-shapes"], False), options)
    assert report.verified and report.max_error == [0.0]
    assert after.subgraphs[0].tensors[after.subgraphs[0].outputs[0]].shape == [2, 128]
    with pytest.raises(FixError, match="no input"):
        fix_model(
            tmp_path / "m.tflite", before, select_passes(None, False), PassOptions(input_shapes=(("nope", (1,)),))
        )


# -- the corpus, and the real delegate ---------------------------------------------------------


def refused_corpus() -> list[Any]:
    refused = [p for p in CORPUS_FILES if check_file(str(p), Settings()).verdict == "refused"]
    if not refused:
        reason = NO_CORPUS if not CORPUS_FILES else "no corpus model is refused"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="none")]
    return [pytest.param(p, id=p.stem) for p in refused]


REFUSED = refused_corpus()


@pytest.fixture(scope="module")
def fixed_models(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, tuple[Path, Any]]:
    """Each refused corpus model through `fix`'s default passes: (written file, fix report)."""
    out = tmp_path_factory.mktemp("fixed")
    done = {}
    for param in REFUSED:
        (path,) = param.values
        if path is None:
            continue
        fixed, report = fix_model(path, read(path), select_passes(None, False), PassOptions())
        dst = out / path.name
        write(fixed, dst)
        done[path] = (dst, report)
    return done


@pytest.mark.parametrize("path", REFUSED)
def test_refused_corpus_model_is_fixed(path: Path, fixed_models: dict[Path, tuple[Path, Any]]) -> None:
    dst, report = fixed_models[path]
    assert "static-shapes" in [a.name for a in report.applied], report.skipped
    assert not [r for r in report.rejected if r.startswith("static-shapes")]
    assert report.verified and max(report.max_error) == 0.0
    assert find_refusal(read(dst)) is None
    assert check_file(str(dst), Settings()).verdict != "refused"


@pytest.mark.parametrize("path", REFUSED)
def test_oracle_accepts_the_fixed_corpus_model(
    path: Path, fixed_models: dict[Path, tuple[Path, Any]], gl_oracle: Any
) -> None:
    from test_oracle_fidelity import predict

    dst, _ = fixed_models[path]
    answers = gl_oracle([path, dst])
    before, after = answers[str(path)], answers[str(dst)]
    assert before.outcome == "refused"
    assert after.outcome in ("ok", "init-failure"), after.words
    expected = predict(dst)
    assert after.outcome == expected.outcome, after.words
    assert after.primary() == expected.delegated, after.words
    if "int8" not in path.stem:  # the oracle runs with quantized ops off: an int8 model delegates nothing there
        assert after.primary(), after.words


@pytest.mark.parametrize("path", REFUSED)
def test_litert_accelerator_agrees_on_the_fixed_corpus_model(
    path: Path, fixed_models: dict[Path, tuple[Path, Any]], litert_oracle: Any
) -> None:
    """LiteRT's GPU accelerator refused the original too; the fixed file runs there, and check
    --target litert-gpu predicts its node count (the LSTM included: its loop body runs 15 of 21
    ops there, where the OpenGL backend fails to build the time-major RESHAPE)."""
    from test_oracle_litert import compare

    dst, _ = fixed_models[path]
    answers = litert_oracle([path, dst])
    assert answers[str(path)].outcome == "refused", answers[str(path)].words
    assert answers[str(dst)].outcome == "ok", answers[str(dst)].words
    compare(dst.name, dst, answers[str(dst)])


def test_fix_help_names_every_pass_with_its_safety() -> None:
    from typer.testing import CliRunner

    from gpulint.cli import app
    from gpulint.passes import registry

    text = " ".join(CliRunner().invoke(app, ["fix", "--help"], env={"COLUMNS": "400"}).stdout.split())
    safe, _, rest = text.partition("unsafe:")
    unsafe, _, opt_in = rest.partition("Opt-in")  # safe, run when named: the half-precision ones, dense-grouped-conv
    for p in registry().values():
        assert p.name in (opt_in if p.opt_in else safe if p.safe else unsafe), p.name


def test_gpu504s_own_fix_command_pins_a_graph_the_delegate_takes(tmp_path: Path) -> None:
    """GPU504 (a -1 in an input's signature) names static-shapes as its fix, unsafe (the interface
    changes); `gpulint fix` alone leaves a graph the delegate does not refuse as it is, and the
    rule's own command pins it and clears the finding (#40 item 6: the rule said "none automatic")."""
    from typer.testing import CliRunner

    from gpulint.cli import app

    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(g.op("RELU", [g.input("x", [1, 4, 4, 8], shape_signature=[-1, 4, 4, 8])], [1, 4, 4, 8]))
    path = tmp_path / "dyn.tflite"
    write(mb.build(), path)

    def gpu504(p: Path) -> list[Any]:
        return [f for f in check_file(p, Settings()).findings if f.code == "GPU504"]

    (finding,) = gpu504(path)
    assert finding.fix == "static-shapes"
    doc = CliRunner().invoke(app, ["rule", "GPU504"]).stdout
    assert "\nFix\n  gpulint fix --passes static-shapes (unsafe)\n" in doc
    plain, pinned = tmp_path / "plain.tflite", tmp_path / "pinned.tflite"
    assert CliRunner().invoke(app, ["fix", str(path), "-o", str(plain)]).exit_code == 0
    assert len(gpu504(plain)) == 1  # not refused: the interface is left alone by default
    r = CliRunner().invoke(app, ["fix", str(path), "--passes", "static-shapes", "-o", str(pinned)])
    assert r.exit_code == 0, r.output
    assert gpu504(pinned) == []

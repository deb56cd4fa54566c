"""fix --passes inline-composites (issue #47): STABLEHLO_COMPOSITE ops become their decompositions'
ops, which LiteRT 2.3's accelerator then compiles where it died on the composites themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from flatbuffers import flexbuffers
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import Model, read, write
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.model.ir import Operator, Options
from gpulint.passes import PassOptions
from gpulint.passes.inline_composites import run

runner = CliRunner()
SHAPE = [1, 8, 16]


def rms_body(mb: ModelBuilder) -> int:
    """odml.rms_norm's decomposition, as litert-torch writes it: x * rsqrt(mean(x^2) + eps) * w."""
    b = mb.subgraph("odml.rms_norm.impl")
    x, w = b.input("x", SHAPE), b.input("w", SHAPE[-1:])
    sq = b.op("MUL", [x, x], SHAPE)
    mean = b.op("MEAN", [sq, b.const("axis", np.array([-1], np.int32))], [1, 8, 1], options=dict(keep_dims=True))
    r = b.op("RSQRT", [b.op("ADD", [mean, b.const("eps", np.array(1e-6, np.float32))], [1, 8, 1])], [1, 8, 1])
    b.output(b.op("MUL", [b.op("MUL", [x, r], SHAPE), w], SHAPE))
    return len(mb.model.subgraphs) - 1


def composite(g: SubgraphBuilder, name: str, inputs: list[int], body: int) -> int:
    out = g.tensor(f"{name}_out", SHAPE)
    options = Options.of(
        "StableHLOCompositeOptions",
        name=name,
        decomposition_subgraph_index=body,
        composite_attributes=list(flexbuffers.Dumps({"epsilon": 1e-6})),
    )
    g.sg.operators.append(
        Operator(g.mb.model.opcode_index("STABLEHLO_COMPOSITE"), inputs, [out], builtin_options_2=options)
    )
    return out


def two_norms() -> Model:
    """x -> rms_norm -> RELU -> rms_norm, the two composites sharing one decomposition."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    body = rms_body(mb)
    x = g.input("x", SHAPE)
    w = g.const("w", np.linspace(0.5, 1.5, SHAPE[-1], dtype=np.float32))
    y = composite(g, "odml.rms_norm", [g.op("RELU", [composite(g, "odml.rms_norm", [x, w], body)], SHAPE), w], body)
    g.output(y)
    mb.signature("serving_default", 0, {"x": x}, {"y": y})
    return mb.build()


def test_the_composites_become_their_decomposition() -> None:
    model = two_norms()
    result = run(model, PassOptions())
    assert [c.split(": ", 1)[1] for c in result.changes[:2]] == ["inlined `odml.rms_norm` (op 0, 6 ops)"] * 1 + [
        "inlined `odml.rms_norm` (op 7, 6 ops)"
    ]
    assert result.changes[-1] == "dropped 1 decomposition subgraph(s) nothing calls any more"
    assert len(model.subgraphs) == 1
    names = [model.op_name(op) for op in model.subgraphs[0].operators]
    assert names == ["MUL", "MEAN", "ADD", "RSQRT", "MUL", "MUL", "RELU", "MUL", "MEAN", "ADD", "RSQRT", "MUL", "MUL"]
    assert (model.signature_defs or [])[0].subgraph_index == 0


def test_a_composite_whose_decomposition_is_missing_is_left(tmp_path: Path) -> None:
    model = two_norms()
    model.subgraphs[0].operators[0].builtin_options_2.values["decomposition_subgraph_index"] = 9  # type: ignore[union-attr]
    result = run(model, PassOptions())
    assert result.skipped == ["subgraph 0 op 0 `odml.rms_norm`: its decomposition subgraph 9 is not one of the model's"]
    assert [model.op_name(op) for op in model.subgraphs[0].operators].count("STABLEHLO_COMPOSITE") == 1


def test_fix_proves_it_on_the_interpreter_and_check_no_longer_sees_the_death(tmp_path: Path) -> None:
    src, out = tmp_path / "norms.tflite", tmp_path / "fixed.tflite"
    write(two_norms(), src)
    before = json.loads(runner.invoke(app, ["check", str(src), "--target", "litert-gpu", "--format", "json"]).stdout)
    assert "process dies" in before["files"][0]["reason"]
    result = runner.invoke(app, ["fix", str(src), "-o", str(out), "--passes", "inline-composites"])
    assert result.exit_code == 0, result.output
    assert "verified on the LiteRT CPU interpreter" in result.output
    after = json.loads(runner.invoke(app, ["check", str(out), "--target", "litert-gpu", "--format", "json"]).stdout)
    assert "process dies" not in after["files"][0]["reason"]
    assert all(read(out).op_name(op) != "STABLEHLO_COMPOSITE" for op in read(out).subgraphs[0].operators)


def test_fix_leaves_composites_unless_asked(tmp_path: Path) -> None:
    src, out = tmp_path / "norms.tflite", tmp_path / "fixed.tflite"
    write(two_norms(), src)
    runner.invoke(app, ["fix", str(src), "-o", str(out)])
    assert len(read(out).subgraphs) == 2


def test_the_accelerator_compiles_what_it_died_on(litert_oracle: Any, tmp_path: Path) -> None:
    src, out = tmp_path / "norms.tflite", tmp_path / "fixed.tflite"
    write(two_norms(), src)
    assert runner.invoke(app, ["fix", str(src), "-o", str(out), "--passes", "inline-composites"]).exit_code == 0
    answers = litert_oracle([src, out])
    assert answers[str(src)].outcome == "crash", answers[str(src)].words
    assert answers[str(out)].outcome == "ok", answers[str(out)].words

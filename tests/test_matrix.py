"""`gpulint check --matrix`: one row per model, one column per device family, in text, JSON and HTML;
and the CLI around the iOS targets (`--coreml-version`, `--coreml-all-devices`, `rules --target`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from litert_backends import FcCase
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.matrix import COLUMNS, matrix_row
from gpulint.model import Model, write
from gpulint.model.build import ModelBuilder

runner = CliRunner()
X = [1, 4, 4, 8]


def relu_chain(extra: str | None = None) -> Model:
    """x -> RELU -> RELU (-> `extra`)."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    t = g.op("RELU", [g.op("RELU", [g.input("x", X)], X)], X)
    if extra == "TRANSPOSE":
        t = g.op("TRANSPOSE", [t, g.const("perm", np.array([0, 2, 1, 3], np.int32))], X)
    elif extra == "RESHAPE":
        t = g.op("RESHAPE", [t, g.const("shape", np.array([1, 16, 8], np.int32))], [1, 16, 8])
    elif extra == "PAD":  # runtime paddings: a dynamic-sized output
        t = g.op("PAD", [t, g.input("p", [4, 2], "INT32")], X)
    g.output(t)
    return mb.build()


def outcomes(m: Model, **settings: object) -> dict[str, str]:
    return {k: c.outcome for k, c in matrix_row(m, "m.tflite", True, dict(settings)).cells.items()}


def test_a_model_every_delegate_takes_is_ready_everywhere() -> None:
    row = matrix_row(relu_chain(), "m.tflite", True, {})
    assert list(row.cells) == [c.id for c in COLUMNS]
    assert all((c.outcome, c.gpu_ops, c.ops, c.partitions) == ("ready", 2, 2, 1) for c in row.cells.values())


def test_columns_differ_where_the_delegates_do() -> None:
    got = outcomes(relu_chain("TRANSPOSE"))
    # the OpenGL backend has no TRANSPOSE shader; Core ML has no TRANSPOSE (the RELUs still go)
    assert got == {
        "android-opencl": "ready",
        "android-opengl": "init-failure",
        "litert-opencl": "ready",
        "litert-metal": "ready",
        "litert-gpu": "ready",
        "ios-metal": "ready",
        "ios-coreml": "partial",
    }
    row = matrix_row(relu_chain("TRANSPOSE"), "m.tflite", True, {})
    assert "transpose" in row.cells["android-opengl"].reason
    assert row.cells["ios-coreml"].reason.startswith("`TRANSPOSE` (op 2)")


def test_litert_backends_have_a_column_each_and_differ_where_ml_drift_does() -> None:
    """LiteRT's accelerator: one column per backend (OpenCL on Android, Metal on Apple, WebGPU on
    desktops and browsers). A dynamic-range int8 FULLY_CONNECTED [1, 8, 16] -> [8, 16] fails to build
    on OpenCL and Metal ("Unable to parse bc coord for BATCH axis", google-ai-edge/LiteRT#9277) and
    builds on WebGPU (8 rows; the oracle, tests/test_oracle_litert.py); at 64 rows every LiteRT column
    fails; at rank 2 every column is ready."""
    ids = [c.id for c in COLUMNS if c.target == "litert-gpu"]
    assert ids == ["litert-opencl", "litert-metal", "litert-gpu"]
    assert [c.backend for c in COLUMNS if c.target == "litert-gpu"] == ["opencl", "metal", "webgpu"]
    row = matrix_row(FcCase((1, 8, 16), False, add=True).model(), "m.tflite", True, {})
    got = {k: row.cells[k].outcome for k in ids}
    assert got == {"litert-opencl": "init-failure", "litert-metal": "init-failure", "litert-gpu": "ready"}
    assert "Unable to parse bc coord for BATCH axis" in row.cells["litert-opencl"].reason
    assert row.cells["litert-metal"].reason == row.cells["litert-opencl"].reason
    flat = matrix_row(FcCase((8, 16), True, add=True).model(), "m.tflite", True, {})
    assert {flat.cells[k].outcome for k in ids} == {"ready"}
    many = matrix_row(FcCase((1, 64, 16), False, add=True).model(), "m.tflite", True, {})
    assert {many.cells[k].outcome for k in ids} == {"init-failure"}


def test_matrix_text_names_the_litert_backends_that_fail(tmp_path: Path) -> None:
    p = tmp_path / "drq.tflite"
    write(FcCase((1, 8, 16), False, add=True).model(), p)
    r = runner.invoke(app, ["check", "--matrix", str(p)])
    assert r.exit_code == 0, r.output  # the matrix's predictions fail nothing; its gates do
    head = r.output.splitlines()[0]
    assert "LiteRT OpenCL (Android)" in head and "LiteRT Metal (Apple)" in head and "LiteRT GPU accelerator" in head
    assert "drq.tflite / LiteRT OpenCL (Android), LiteRT Metal (Apple): init-failure: " in r.output
    doc = json.loads(runner.invoke(app, ["check", "--matrix", "--format", "json", str(p)]).output)
    cells = doc["rows"][0]["cells"]
    assert [cells[k]["outcome"] for k in ("litert-opencl", "litert-metal", "litert-gpu")] == [
        "init-failure",
        "init-failure",
        "ready",
    ]
    assert {"id": "litert-gpu", "title": "LiteRT GPU accelerator", "target": "litert-gpu", "backend": "webgpu"} in (
        doc["columns"]
    )


def test_core_ml_settings_reach_the_core_ml_column() -> None:
    assert outcomes(relu_chain("RESHAPE"))["ios-coreml"] == "partial"
    assert outcomes(relu_chain("RESHAPE"), coreml_version=2)["ios-coreml"] == "ready"


def test_a_refused_graph_is_refused_in_every_column() -> None:
    assert set(outcomes(relu_chain("PAD")).values()) == {"refused"}


def models(tmp_path: Path) -> list[str]:
    paths = []
    for name in ("plain", "TRANSPOSE"):
        p = tmp_path / f"{name}.tflite"
        write(relu_chain(None if name == "plain" else name), p)
        paths.append(str(p))
    return paths


def test_cli_matrix_text_json_and_html(tmp_path: Path) -> None:
    paths = models(tmp_path)
    r = runner.invoke(app, ["check", "--matrix", *paths])
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    assert all(c.title in head for c in COLUMNS)
    assert "TRANSPOSE.tflite / Android OpenGL ES: init-failure: No shader implementation for transpose" in r.output

    r = runner.invoke(app, ["check", "--matrix", "--format", "json", *paths])
    doc = json.loads(r.output)
    assert [c["id"] for c in doc["columns"]] == [c.id for c in COLUMNS]
    cell = doc["rows"][0]["cells"]["ios-metal"]
    assert (cell["outcome"], cell["gpu_op_share"], cell["partitions"]) == ("ready", 1.0, 1)

    html = tmp_path / "m.html"
    r = runner.invoke(app, ["check", "--matrix", "--html", str(html), *paths])
    assert r.exit_code == 0, r.output
    page = html.read_text()
    assert 'id="matrix"' in page and "iOS Core ML" in page and "not checked on a device" in page


def test_cli_matrix_errors(tmp_path: Path) -> None:
    paths = models(tmp_path)
    r = runner.invoke(app, ["check", "--matrix", "--format", "sarif", *paths])
    assert r.exit_code == 2 and "--matrix writes text or json" in r.output
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a model")
    r = runner.invoke(app, ["check", "--matrix", str(bad), paths[0]])
    assert r.exit_code == 2 and "bad.tflite" in r.output and "plain.tflite" in r.output


def test_cli_coreml_flags(tmp_path: Path) -> None:
    p = tmp_path / "r.tflite"
    write(relu_chain("RESHAPE"), p)
    r = runner.invoke(app, ["check", "--target", "coreml", "--coreml-version", "4", str(p)])
    assert r.exit_code == 2 and "must be 2 or 3" in r.output
    r = runner.invoke(app, ["check", "--coreml-version", "2", str(p)])
    assert r.exit_code == 2 and "apply to --target coreml" in r.output
    r = runner.invoke(app, ["check", "--target", "coreml", "--exit-zero", str(p)])
    assert "RESHAPE is not delegated with Core ML 3" in r.output and "GPU110" in r.output
    r = runner.invoke(app, ["check", "--target", "coreml", "--coreml-version", "2", "--coreml-all-devices", str(p)])
    assert "RESHAPE" not in r.output and "GPU110" not in r.output and "verdict: ready" in r.output


def test_cli_rules_for_a_target_list_every_op_with_its_source() -> None:
    from gpulint.rules.pack import load_targets

    for name in ("coreml", "metal"):
        r = runner.invoke(app, ["rules", "--target", name])
        assert r.exit_code == 0, r.output
        for op in load_targets()[name].ops:
            assert f"  {op} " in r.output
        assert r.output.count("source:") >= len(load_targets()[name].ops)
    r = runner.invoke(app, ["rules", "--target", "coreml"])
    assert "partitions: no limit, at least 2 node(s) each" in r.output and "coreml_version=3" in r.output
    r = runner.invoke(app, ["rule", "GPU110"])
    assert r.exit_code == 0 and "Neural Engine" in r.output
    r = runner.invoke(app, ["rules", "--target", "nope"])
    assert r.exit_code == 2 and "unknown target" in r.output

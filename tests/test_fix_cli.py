"""`gpulint fix` from the command line: outputs, safety flags, nothing lost on errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import read, write
from gpulint.sample import sample_model

runner = CliRunner()


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    path = tmp_path / "sample.tflite"
    write(sample_model(), path)
    return path


def ops(path: Path) -> list[str]:
    m = read(path)
    return [m.op_name(op) for _, _, op in m.operators()]


def test_fix_writes_a_verified_model(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixed.tflite"
    r = runner.invoke(app, ["fix", str(sample), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "fold-atrous: subgraph 0: folded SPACE_TO_BATCH_ND -> CONV_2D -> BATCH_TO_SPACE_ND" in r.stdout
    assert "verified on the LiteRT CPU interpreter: max abs error per output" in r.stdout
    assert "1 unsafe pass(es) would apply: rgba-input (--unsafe-fixes)" in r.stdout
    # the size before and after, always: a pass may grow a model (#40 item 5)
    before, after = sample.stat().st_size, out.stat().st_size
    growth = f"{(after - before) / before:+.0%}"
    assert f"{sample}: wrote {out} ({before:,} -> {after:,} bytes, {growth})" in r.stdout
    assert ops(out) == ["DEQUANTIZE", "CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "MEAN", "FULLY_CONNECTED", "SOFTMAX"]
    check = runner.invoke(app, ["check", str(out), "--format", "json"])
    assert check.exit_code == 0  # no errors left: the atrous pattern and its CPU partitions are gone


def test_diff_and_dry_run(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixed.tflite"
    r = runner.invoke(app, ["fix", str(sample), "-o", str(out), "--dry-run", "--diff"])
    assert r.exit_code == 0 and not out.exists()
    assert f"  {'SPACE_TO_BATCH_ND':<24} {1:>4} -> 0" in r.stdout.splitlines()
    assert "check findings gone: GPU101 x2, GPU109 x3, GPU301 x1, GPU402 x1, GPU601 x1, GPU602 x1" in r.stdout


def test_passes_and_unsafe_fixes(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.tflite"
    r = runner.invoke(app, ["fix", str(sample), "-o", str(out), "--passes", "dequantize-constants", "--fold-fp16"])
    assert r.exit_code == 0
    assert ops(out)[:2] == ["CONV_2D", "DEPTHWISE_CONV_2D"] and "SPACE_TO_BATCH_ND" in ops(out)
    r = runner.invoke(app, ["fix", str(sample), "-o", str(out), "--force", "--passes", "rgba-input"])
    assert r.exit_code == 2 and "rgba-input changes the interface or precision; add --unsafe-fixes" in r.stderr
    r = runner.invoke(app, ["fix", str(sample), "-o", str(out), "--force", "--unsafe-fixes"])
    assert r.exit_code == 0
    sg = read(out).subgraphs[0]
    assert sg.tensors[sg.inputs[0]].shape == [1, 64, 64, 4]
    r = runner.invoke(app, ["fix", str(sample), "-o", str(out), "--force", "--passes", "nope"])
    assert r.exit_code == 2 and "unknown pass nope" in r.stderr


def test_fp16_weights_stay_fp16_unless_asked(sample: Path, tmp_path: Path) -> None:
    """The delegate folds fp16 DEQUANTIZE itself (FP16GraphPartitionHelper): folding doubles the weights for nothing."""
    out = tmp_path / "o.tflite"
    assert runner.invoke(app, ["fix", str(sample), "-o", str(out)]).exit_code == 0
    m = read(out)
    dq = m.subgraphs[0].operators[0]
    assert m.op_name(dq) == "DEQUANTIZE" and m.subgraphs[0].tensors[dq.inputs[0]].type == "FLOAT16"
    assert runner.invoke(app, ["fix", str(sample), "-o", str(out), "--force", "--keep-fp16"]).exit_code == 0
    assert ops(out)[0] == "DEQUANTIZE"
    assert runner.invoke(app, ["fix", str(sample), "-o", str(out), "--force", "--fold-fp16"]).exit_code == 0
    assert ops(out)[0] == "CONV_2D"


def test_int8_weights_are_dequantized(tmp_path: Path) -> None:
    """A constant int8 DEQUANTIZE becomes a CONSTANT node whose output the conv takes as run-time
    weights (model_builder.cc DequantizeOperationParser), which the OpenGL backend cannot build."""
    import numpy as np

    from gpulint.model.build import ModelBuilder

    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8, 8, 8])
    w = g.op("DEQUANTIZE", [g.const("w_int8", np.ones((8, 3, 3, 8), np.int8), quant=(0.1, 0))], [8, 3, 3, 8])
    b = g.const("b", np.zeros(8, np.float32))
    y = g.op("CONV_2D", [x, w, b], [1, 8, 8, 8], options=dict(padding="SAME", stride_w=1, stride_h=1))
    g.output(y)
    src, out = tmp_path / "int8w.tflite", tmp_path / "o.tflite"
    write(mb.build(), src)
    assert "opengl: init-failure" in runner.invoke(app, ["check", str(src)]).stdout
    r = runner.invoke(app, ["fix", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert ops(out) == ["CONV_2D"]
    assert "verdict: ready" in runner.invoke(app, ["check", str(out)]).stdout


def test_output_safety(sample: Path, tmp_path: Path) -> None:
    original = sample.read_bytes()
    r = runner.invoke(app, ["fix", str(sample), "-o", str(sample)])
    assert r.exit_code == 2 and r.stderr.strip() == (
        f"gpulint: error: {sample}: is the input model; add --force to overwrite it"
    )
    assert sample.read_bytes() == original
    other = tmp_path / "exists.tflite"
    other.write_bytes(b"keep me")
    r = runner.invoke(app, ["fix", str(sample), "-o", str(other)])
    assert r.exit_code == 2 and "exists; add --force" in r.stderr and other.read_bytes() == b"keep me"
    r = runner.invoke(app, ["fix", str(sample)])
    assert r.exit_code == 2 and "give --output FILE (or --dry-run)" in r.stderr
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"nonsense" * 10)
    r = runner.invoke(app, ["fix", str(bad), "-o", str(tmp_path / "never.tflite")])
    assert r.exit_code == 2 and not (tmp_path / "never.tflite").exists()
    assert r.stderr.startswith(f"gpulint: error: {bad}: not a TFLite model")
    r = runner.invoke(app, ["fix", str(sample), "-o", str(sample), "--force"])
    assert r.exit_code == 0 and "SPACE_TO_BATCH_ND" not in ops(sample)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_appended_metadata_zip_survives_fix(sample: Path, tmp_path: Path) -> None:
    """Ultralytics appends a zip with metadata.json after the flatbuffer: every file fix writes keeps it."""
    import json
    import zipfile

    from test_roundtrip_appended import META, ultralytics_zip

    zipped = ultralytics_zip()
    model = tmp_path / "yolo.tflite"
    model.write_bytes(sample.read_bytes() + zipped)
    r = runner.invoke(app, ["inspect", str(model)])
    assert (
        f"appended after the model: {len(zipped):,} bytes (a zip: metadata.json; "
        "metadata.json keys: task, imgsz, stride, names, kpt_shape)" in r.stdout
    )
    fixed, again = tmp_path / "fixed.tflite", tmp_path / "again.tflite"
    for src, out in ((model, fixed), (fixed, again)):  # a change, then nothing to change
        r = runner.invoke(app, ["fix", str(src), "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert f"kept the {len(zipped)} bytes (a zip: metadata.json;" in r.stdout
        assert out.read_bytes().endswith(zipped)
        with zipfile.ZipFile(out) as z:
            assert json.loads(z.read("metadata.json")) == META
    assert again.read_bytes() == fixed.read_bytes()
    assert read(fixed).appended == zipped


def test_nothing_to_change_copies_the_input_bytes(sample: Path, tmp_path: Path) -> None:
    fixed, again = tmp_path / "fixed.tflite", tmp_path / "again.tflite"
    assert runner.invoke(app, ["fix", str(sample), "-o", str(fixed)]).exit_code == 0
    before = fixed.read_bytes() + b"\0\0\0\0"  # bytes a rewrite would not reproduce
    fixed.write_bytes(before)
    r = runner.invoke(app, ["fix", str(fixed), "-o", str(again)])
    assert r.exit_code == 0 and "nothing to change" in r.stdout and "copied to" in r.stdout
    assert again.read_bytes() == before
    stamp = fixed.stat().st_mtime_ns
    r = runner.invoke(app, ["fix", str(fixed), "-o", str(fixed), "--force"])
    assert r.exit_code == 0 and f"{fixed}: left as it is" in r.stdout
    assert fixed.read_bytes() == before and fixed.stat().st_mtime_ns == stamp
    r = runner.invoke(app, ["fix", str(fixed), "--dry-run", "--diff"])
    assert "ops:" not in r.stdout.splitlines() and "ops: unchanged" in r.stdout


def test_diff_and_html_check_with_the_settings_check_uses(sample: Path, tmp_path: Path) -> None:
    """fix --diff counted findings of the classic target with every rule, and --html used default
    settings, whatever gpulint.toml said; both now check as `check` would (the one resolver)."""
    import os

    (tmp_path / "gpulint.toml").write_text('ignore = ["GPU1"]\n')
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        r = runner.invoke(app, ["fix", str(sample), "--dry-run", "--diff", "--html", str(tmp_path / "f.html")])
        assert r.exit_code == 0, r.output
        assert "check findings gone: GPU301 x1, GPU402 x1, GPU601 x1, GPU602 x1" in r.stdout
        html = (tmp_path / "f.html").read_text()
        assert "GPU402</span>" in html and "GPU101</span>" not in html
        r = runner.invoke(app, ["fix", str(sample), "--dry-run", "--diff", "--target", "nope"])
        assert r.exit_code == 2 and "unknown target `nope`" in r.stderr
    finally:
        os.chdir(old)

"""Bad cases bench/fuzz.py found, each as a small model built here: the command ends cleanly.

Issue #50: a mutated shape (dims of 2**31 - 1 at a high rank) made the estimated MACs an
integer too large to print, and `check --format json` and `report` died in json / the report
template with `ValueError: Exceeds the limit (4300 digits) for integer string conversion`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import to_bytes
from gpulint.model.build import ModelBuilder
from gpulint.rules.partition import MAX_ESTIMATE

runner = CliRunner()
HUGE = [0x7FFFFFFF] * 600  # 2**31 - 1 at rank 600: about 5,600 digits of elements


def huge_relu(tmp_path: Path) -> Path:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", HUGE)
    g.output(g.op("RELU", [x], HUGE))
    path = tmp_path / "huge.tflite"
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


def test_check_json_of_a_huge_shape_gives_a_bounded_estimate(tmp_path: Path) -> None:
    r = runner.invoke(app, ["check", str(huge_relu(tmp_path)), "--format", "json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code in (0, 1), r.output
    plans = [p for f in json.loads(r.stdout)["files"] for p in f["partitions"]]
    assert [p["estimated_macs"] for p in plans] == [MAX_ESTIMATE]


def test_report_of_a_huge_shape_is_written(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = runner.invoke(app, ["report", str(huge_relu(tmp_path)), "--no-fix", "-o", str(out)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
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

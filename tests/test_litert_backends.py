"""`--target litert-gpu --backend opencl|metal|webgpu` (#38): the backends of LiteRT's GPU accelerator.

ML Drift builds the partition on OpenCL (Android), Metal (Apple) or WebGPU (desktop, browser). All
three choose ops with the same GetOpsToReplace call (ml_drift_delegate/delegate/delegate_opencl.cc
455-495, delegate_metal.mm 227-249, delegate_webgpu.cc 534-575 at google-ai-edge/LiteRT@f67457790c9c),
so placement is the same on each and they differ only in what they fail to build. The one known
difference: a dynamic-range int8 FULLY_CONNECTED whose output puts its input's rows on the BATCH
axis ([1, N, K] -> [N, C]) fails on OpenCL and Metal ("Unable to parse bc coord for BATCH axis",
google-ai-edge/LiteRT#9277) from 2 rows and on WebGPU from 17 (measured: tests/test_oracle_litert.py
holds the WebGPU side against the real accelerator, tests/litert_backends.py has the cases).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from litert_backends import D2S_CASES, FC_CASES, DepthToSpaceCase, FcCase
from typer.testing import CliRunner

from gpulint.check import Settings, check_file
from gpulint.cli import app
from gpulint.model import write
from gpulint.rules import pack
from gpulint.rules.engine import Linter
from gpulint.settings import Overrides, SettingsError, resolve

TARGETS = pack.load_targets()
BACKENDS = ("opencl", "metal", "webgpu")
BATCH = "Unable to parse bc coord for BATCH axis"
runner = CliRunner()


def test_the_target_has_three_backends_each_citing_its_source() -> None:
    t = TARGETS["litert-gpu"]
    assert tuple(t.backends) == BACKENDS
    for b in t.backends.values():
        assert b.source and "ml_drift_delegate/delegate/delegate_" in b.source
    assert {name: list(b.init_checks) for name, b in t.backends.items()} == {
        "opencl": ["FULLY_CONNECTED", "DEPTH_TO_SPACE"],
        "metal": ["FULLY_CONNECTED"],
        "webgpu": ["FULLY_CONNECTED"],
    }
    (webgpu,) = t.backends["webgpu"].init_checks["FULLY_CONNECTED"]
    assert dict(webgpu.params) == {"min_rows": 17}
    assert all(not b.no_kernel and not b.graph_checks for b in t.backends.values())
    # LiteRT 2.x's Metal stack is not the classic iOS delegate (`--target metal`, metal_delegate.mm)
    assert "tflite/delegates/gpu/metal_delegate.mm" in TARGETS["metal"].backends["metal"].source
    assert "ml_drift_delegate/delegate/delegate_metal.mm" in t.backends["metal"].source


def test_the_classic_ios_metal_target_builds_the_drq_fully_connected() -> None:
    # the classic iOS delegate has no such report: the difference is ML Drift's, not Metal's
    r = Linter(TARGETS["metal"], targets=TARGETS).lint(FcCase((1, 64, 16), False, add=True).model())
    assert r.backends == {"metal": {"init": "ok", "reason": ""}}


@pytest.mark.parametrize("case", FC_CASES, ids=lambda c: c.id)
def test_each_backend_on_both_sides_of_the_drq_fully_connected(case: FcCase) -> None:
    m = case.model()
    for backend in BACKENDS:
        r = Linter(TARGETS["litert-gpu"], targets=TARGETS, backends=(backend,)).lint(m)
        fails = case.fails_on(backend)
        fc = r.ops[0]
        assert fc.op == "FULLY_CONNECTED"
        # the same placement and partition on every backend: only the build differs
        assert len(r.plans[0].delegated) == len(r.ops), (backend, r.reason)
        if fails:
            assert (r.verdict, r.backends[backend]["init"]) == ("init-failure", "init-failure")
            assert fc.placement == "init-failure" and BATCH in fc.backend_failures[backend]
            assert f"puts the {case.rows} rows of its input" in r.reason
        else:
            assert (r.verdict, r.backends[backend]["init"]) == ("ready", "ok"), (backend, r.reason)
            assert fc.placement == "gpu"


def test_explicit_dequantize_fails_alike_on_every_backend() -> None:
    # int8 weights behind a DEQUANTIZE: not dynamic range, so not this backend difference; a rank-2
    # constant DEQUANTIZE of first dimension 16 fails every backend with ML Drift's shared "Shape
    # mismatch" (md_const_dequantize_layout; google-ai-edge/LiteRT#9523 names Metal, OpenCL and WebGPU)
    r = Linter(TARGETS["litert-gpu"], targets=TARGETS).lint(FcCase((1, 8, 16), False, "DEQUANTIZE", True).model())
    assert r.verdict == "init-failure"
    assert {o["init"] for o in r.backends.values()} == {"init-failure"}
    assert all(BATCH not in o["reason"] and "Shape mismatch" in o["reason"] for o in r.backends.values())


def test_default_asks_every_backend_and_says_which_fail(tmp_path: Path) -> None:
    p = tmp_path / "drq.tflite"
    write(FcCase((1, 8, 16), False, add=True).model(), p)
    for backend in ("both", "all"):
        r = check_file(str(p), Settings(target="litert-gpu", backend=backend))
        assert r.verdict == "init-failure"
        assert {b: o["init"] for b, o in r.backends.items()} == {
            "opencl": "init-failure",
            "metal": "init-failure",
            "webgpu": "ok",
        }
        assert r.reason.startswith("initializes on the ML Drift WebGPU backend (desktop, browser) but fails on the ")
        assert "ML Drift OpenCL backend (Android)" in r.reason and "ML Drift Metal backend (Apple)" in r.reason
    # text: one line per backend where they differ; JSON: the backend asked and each outcome
    out = runner.invoke(app, ["check", "--target", "litert-gpu", str(p)]).output
    assert f"{p}: opencl: init-failure ({'Failed to create DelegateKernelLiteRt: INVALID_ARGUMENT: ' + BATCH}" in out
    assert f"{p}: metal: init-failure" in out and f"{p}: webgpu: ok" in out
    assert "GPU203 [error] `FULLY_CONNECTED` fails to initialize on the ML Drift OpenCL backend (Android)" in out
    r = runner.invoke(app, ["check", "--target", "litert-gpu", "--backend", "metal", "--format", "json", str(p)])
    doc = json.loads(r.output)
    assert r.exit_code == 1 and doc["backend"] == "metal"
    (f,) = doc["files"]
    assert f["verdict"] == "init-failure" and list(f["backends"]) == ["metal"]
    r = runner.invoke(app, ["check", "--target", "litert-gpu", "--backend", "webgpu", "--format", "json", str(p)])
    (f,) = json.loads(r.output)["files"]
    assert r.exit_code == 0 and f["verdict"] == "ready" and f["backends"] == {"webgpu": {"init": "ok", "reason": ""}}
    assert not any(x["code"] == "GPU203" for x in f["findings"])


def test_a_backend_applies_only_to_the_targets_that_have_it(tmp_path: Path) -> None:
    assert resolve(Overrides(target="litert-gpu", backend="webgpu"), tmp_path).backend == "webgpu"
    assert resolve(Overrides(target="litert-gpu", backend="all"), tmp_path).backend == "all"
    assert resolve(Overrides(target="classic", backend="all"), tmp_path).backend == "all"
    with pytest.raises(SettingsError, match=r"backend `opengl` does not apply to target `litert-gpu` \(its backends: "):
        resolve(Overrides(target="litert-gpu", backend="opengl"), tmp_path)
    with pytest.raises(SettingsError, match="backend `webgpu` does not apply to target `classic`"):
        resolve(Overrides(target="classic", backend="webgpu"), tmp_path)
    with pytest.raises(SettingsError, match="unknown backend `vulkan`"):
        resolve(Overrides(target="litert-gpu", backend="vulkan"), tmp_path)
    cfg = tmp_path / "gpulint.toml"
    cfg.write_text('target = "litert-gpu"\nbackend = "metal"\n')
    assert resolve(Overrides(), tmp_path).backend == "metal"


def test_rules_lists_each_backend_of_the_target() -> None:
    out = runner.invoke(app, ["rules", "--target", "litert-gpu"]).output
    for title in (
        "ML Drift OpenCL backend (Android)",
        "ML Drift Metal backend (Apple)",
        "ML Drift WebGPU backend (desktop, browser)",
    ):
        assert f"({title})" in out


def test_many_rows_fail_on_every_backend_in_the_same_words(tmp_path: Path) -> None:
    # 64 rows (a ViT's tokens; litert-torch's vit_dr8 export fails so on WebGPU here): all three fail
    p = tmp_path / "vit.tflite"
    write(FcCase((1, 64, 16), False, add=True).model(), p)
    r = check_file(str(p), Settings(target="litert-gpu"))
    assert {o["init"] for o in r.backends.values()} == {"init-failure"}
    assert r.reason.startswith("the delegate fails to initialize on Failed to create DelegateKernelLiteRt: ")
    assert "puts the 64 rows of its input [1, 64, 16] on the BATCH axis" in r.reason


@pytest.mark.parametrize("case", D2S_CASES, ids=lambda c: c.id)
def test_batched_depth_to_space_fails_on_opencl_only(case: DepthToSpaceCase) -> None:
    # google-ai-edge/LiteRT#8459: the OpenCL kernel's source does not compile for a batch above 1
    for backend in BACKENDS:
        r = Linter(TARGETS["litert-gpu"], targets=TARGETS, backends=(backend,)).lint(case.model())
        outcome = r.backends[backend]["init"]
        assert outcome == ("init-failure" if case.fails_on(backend) else "ok"), (backend, r.reason)
        if case.fails_on(backend):
            assert "clBuildProgram" in r.reason and "LiteRT#8459" in r.reason

"""A cold start on PoCL compiles a model's kernels in two processes before its first run
(gpulint/executor/warmup.py), and a failure there loses nothing."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import opencl_device

from gpulint.executor import Executor, program, warmup
from gpulint.executor import executor as executor_module
from gpulint.executor.precision import precision
from gpulint.model import Model, write
from gpulint.model.build import ModelBuilder

DEVICE, NO_DEVICE = opencl_device()
RNG = np.random.default_rng(0)


def pocl_with_two_cores() -> pytest.MarkDecorator:
    usable = DEVICE is not None and DEVICE.cpu and program.keeps_own_cache(DEVICE) and warmup._cores() >= 2
    return pytest.mark.skipif(not usable, reason=NO_DEVICE or "compiling ahead is for PoCL on two or more cores")


def many_kernels() -> Model:
    """Convs of three shapes, a depthwise, pools, a resize, elementwise ops: more kernel
    variants than program.SPLIT_AT."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 16, 16, 8])
    same = dict(padding="SAME", stride_w=1, stride_h=1)
    numbers = itertools.count()

    def wt(*shape: int) -> Any:
        return g.const(f"w{next(numbers)}", RNG.uniform(-0.3, 0.3, shape).astype(np.float32))

    y = g.op(
        "CONV_2D", [x, wt(8, 3, 3, 8), wt(8)], [1, 16, 16, 8], options=same | dict(fused_activation_function="RELU")
    )
    y = g.op("DEPTHWISE_CONV_2D", [y, wt(1, 3, 3, 8), wt(8)], [1, 16, 16, 8], options=same | dict(depth_multiplier=1))
    y = g.op("CONV_2D", [y, wt(16, 1, 1, 8), wt(16)], [1, 16, 16, 16], options=same)
    y = g.op("LOGISTIC", [y], [1, 16, 16, 16])
    pool = dict(padding="VALID", stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    y = g.op("MAX_POOL_2D", [y], [1, 8, 8, 16], options=pool)
    z = g.op("AVERAGE_POOL_2D", [y], [1, 8, 8, 16], options=same | dict(filter_width=3, filter_height=3))
    y = g.op("MUL", [y, g.op("TANH", [z], [1, 8, 8, 16])], [1, 8, 8, 16])
    y = g.op("CONV_2D", [y, wt(4, 5, 5, 16), wt(4)], [1, 8, 8, 4], options=same)
    size = g.const("size", np.array([16, 16], np.int32))
    y = g.op("RESIZE_BILINEAR", [y, size], [1, 16, 16, 4])
    y = g.op("CONCATENATION", [y, x], [1, 16, 16, 12], options=dict(axis=3))
    g.output(g.op("HARD_SWISH", [y], [1, 16, 16, 12], out_name="y"))
    return mb.build()


def _variants(ex: Executor) -> list[tuple[str, str]]:
    return sorted({(ln.kernel, ln.defines) for ln in ex.input_launches + ex.launches})


CHILD = """
import json, os, sys
from pathlib import Path
import numpy as np
from gpulint.executor import Executor, select_device, warmup
from gpulint.model import read

spawned = []
spawn = warmup._spawn
warmup._spawn = lambda *a: spawned.append(1) or spawn(*a)
device = select_device()  # sets POCL_CACHE_DIR
cache = Path(os.environ["POCL_CACHE_DIR"])
ex = Executor(read(sys.argv[1]), device)
before = sorted(p.name for p in cache.rglob("*.so"))
np.save(sys.argv[3], ex.run([np.load(sys.argv[2])])[0])
after = sorted(p.name for p in cache.rglob("*.so"))
print(json.dumps({"spawned": len(spawned), "before": before, "after": after}))
"""


@pocl_with_two_cores()
def test_a_cold_start_compiles_every_kernel_before_the_first_run(tmp_path: Path) -> None:
    """With empty caches, every variant's kernel is in PoCL's cache before the first run, the run
    compiles nothing more and gives this process's result bit for bit; the next process finds the
    marker and starts no child. The flavour's first use compiles both halves in two children
    (guard.py); once it is known good, a cold PoCL cache starts one child and compiles the other
    half here."""
    model = many_kernels()
    path, x = tmp_path / "m.tflite", RNG.uniform(-1, 1, (1, 16, 16, 8)).astype(np.float32)
    write(model, path)
    np.save(tmp_path / "x.npy", x)
    ex = Executor(model, DEVICE)
    variants = _variants(ex)
    assert len(variants) >= program.SPLIT_AT
    env = {k: v for k, v in os.environ.items() if k != "POCL_CACHE_DIR"}
    env |= {"GPULINT_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for i in range(3):
        if i == 2:  # PoCL's cache emptied, the flavour's record kept
            shutil.rmtree(tmp_path / "cache" / "pocl")
        args = [sys.executable, "-c", CHILD, str(path), str(tmp_path / "x.npy"), str(tmp_path / f"y{i}.npy")]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout))
        np.testing.assert_array_equal(np.load(tmp_path / f"y{i}.npy"), ex.run([x])[0])
    names = {f"{name}__{i}.so" for i, (name, _) in enumerate(variants)}
    first, warm, cold = runs
    assert first["spawned"] == 2 and set(first["before"]) == names and first["after"] == first["before"]
    assert warm["spawned"] == 0 and warm["after"] == first["after"]
    assert cold["spawned"] == 1 and set(cold["before"]) == names and cold["after"] == cold["before"]
    assert len(list((tmp_path / "cache" / "pocl" / "gpulint-compiled").iterdir())) == 1


@pocl_with_two_cores()
@pytest.mark.parametrize("failing", ["child", "hung child", "parent"])
def test_a_failed_warm_up_loses_nothing(failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that dies or hangs (killed at the time limit), or a launch of this process's half
    that fails: no marker is left (the next process tries again), and the executor still builds
    and runs right."""
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))  # the marker's folder; PoCL keeps its own
    monkeypatch.setattr(program, "_PROGRAMS", {})
    children: list[subprocess.Popen[bytes]] = []
    if failing in ("child", "hung child"):
        code = "raise SystemExit(3)" if failing == "child" else "import time; time.sleep(600)"
        monkeypatch.setattr(warmup, "CHILD_TIMEOUT_S", 1)
        monkeypatch.setattr(
            warmup, "_spawn", lambda *a: children.append(subprocess.Popen([sys.executable, "-c", code])) or children[-1]
        )
    else:

        def broken(*a: Any) -> None:
            raise RuntimeError("a launch failed")

        monkeypatch.setattr(warmup, "run_specs", broken)
    model = many_kernels()
    x = RNG.uniform(-1, 1, (1, 16, 16, 8)).astype(np.float32)
    (y,) = Executor(model, DEVICE).run([x])
    assert not (tmp_path / "gpulint-compiled").exists()
    assert all(child.poll() is not None for child in children)  # none left running
    monkeypatch.setattr(program, "_PROGRAMS", {})
    monkeypatch.setattr(warmup, "compile_ahead", lambda *a: None)
    np.testing.assert_array_equal(y, Executor(model, DEVICE).run([x])[0])


@pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE or "-")
def test_specs_name_every_variant_once_with_its_arguments() -> None:
    """One spec per variant and work-group size, each buffer by its size, scalars and vectors
    (int4, float2) as their bytes."""
    ex = Executor(many_kernels(), DEVICE)
    launches = ex.input_launches + ex.launches
    variants = _variants(ex)
    names = {v: f"{v[0]}__{i}" for i, v in enumerate(variants)}
    specs = warmup._specs(launches, names)
    assert sorted(s["kernel"] for s in specs) == sorted(names.values())
    first = {names[(ln.kernel, ln.defines)]: ln for ln in reversed(launches)}
    for spec in specs:
        ln = first[spec["kernel"]]
        assert spec["global"] == list(ln.global_size) and len(spec["args"]) == len(ln.args)
        for (kind, *rest), arg in zip(spec["args"], ln.args, strict=True):
            if kind == "buffer":
                assert rest[1] == arg.size
            else:
                assert kind == "bytes" and bytes.fromhex(rest[0]) == np.asarray(arg).tobytes()


@pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE or "-")
def test_a_small_model_is_one_program_and_starts_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With something in PoCL's cache (no child is started early then): one program, no child."""

    def no_child(*a: Any) -> None:
        raise AssertionError("a child was started")

    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))
    (tmp_path / "AB").mkdir()
    monkeypatch.setattr(warmup, "_spawn", no_child)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(g.op("RELU", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8]))
    ex = Executor(mb.build(), DEVICE)
    assert len(program.pocl_programs(DEVICE, precision("fp32"), _variants(ex))) == 1
    x = RNG.uniform(-1, 1, (1, 4, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(ex.run([x])[0], np.maximum(x, 0))


def _record_children(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    children: list[subprocess.Popen[bytes]] = []
    spawn = warmup._spawn

    def recorded(device: Any) -> subprocess.Popen[bytes] | None:
        child = spawn(device)
        if child is not None:
            children.append(child)
        return child

    monkeypatch.setattr(warmup, "_spawn", recorded)
    return children


@pocl_with_two_cores()
def test_an_empty_cache_gets_both_processes_ready_before_lowering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PoCL's cache folder holding no folder (a file PoCL leaves there does not count): the child
    is started and this process's first build runs in a thread; a folder in it: neither."""
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))
    (tmp_path / "tempfile_x").write_text("")
    children = _record_children(monkeypatch)
    early = warmup.early_start(DEVICE)
    assert early is not None and early.child is children[0] and early.first_build.ident is not None
    warmup.dismiss(early)
    assert early.child.poll() is not None and not early.first_build.is_alive()
    (tmp_path / "AB").mkdir()
    assert warmup.early_start(DEVICE) is None and len(children) == 1


@pocl_with_two_cores()
def test_an_early_child_with_nothing_to_compile_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small model (one program) at an empty cache, and a model that fails to lower: the child
    started early is not left running, and the small model runs right."""
    monkeypatch.setenv("POCL_CACHE_DIR", str(tmp_path))
    children = _record_children(monkeypatch)
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(g.op("RELU", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8]))
    x = RNG.uniform(-1, 1, (1, 4, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(Executor(mb.build(), DEVICE).run([x])[0], np.maximum(x, 0))

    def broken(*a: Any) -> None:
        raise RuntimeError("lowering failed")

    monkeypatch.setattr(executor_module, "lower", broken)
    with pytest.raises(RuntimeError, match="lowering failed"):
        Executor(many_kernels(), DEVICE)
    assert len(children) == 2 and all(child.poll() is not None for child in children)
    assert not (tmp_path / "gpulint-compiled").exists()

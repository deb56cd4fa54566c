"""`gpulint doctor` and the default device choice: the self-test on every device here at every
precision (each in a child process), a crashing or hanging child as a FAIL line and a device
recorded failing, and the choice among GPUs and PoCLs with fake devices."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import needs_opencl
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.executor import device as dev
from gpulint.executor import doctor

runner = CliRunner()
needs_device = needs_opencl()

POCL_30 = "OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, POCL_DEBUG"
POCL_31 = "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 15.0.6, SLEEF, DISTRO, POCL_DEBUG"


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    """doctor's JSON on this machine, self-test included: one run for the tests that read it."""
    result = runner.invoke(app, ["doctor", "--format", "json"])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


@needs_device
def test_selftest_passes_on_every_device_at_every_precision(report: dict[str, Any]) -> None:
    indices = [d["index"] for d in report["devices"]]
    ran = [(r["device"], r["precision"]) for r in report["selftest"]]
    assert ran == [(i, p) for i in indices for p in doctor.PRECISIONS]
    # A device passes, or its compiler fails on this CPU, contained and recorded: the pip PoCL 3.0-rc2 (LLVM 14,
    # "for generic") fails every compile on an AMD Zen 5 host (family 26), measured 2026-11-28, where it
    # passed on Zen 4; the choice passes over it.
    failing = {r["device"] for r in report["selftest"] if r["result"] != "pass"}
    for r in report["selftest"]:
        if r["device"] in failing:
            assert r["result"] == "fail" and "crash the OpenCL compiler" in r["reason"], r
        else:
            assert r["result"] == "pass" and r["reason"].startswith("max error"), r
    assert report["passed"] and report["chosen"]["index"] in set(indices) - failing and report["chosen"]["why"]
    assert all((d["failed_here"] is None) == (d["index"] not in failing) for d in report["devices"])
    assert set(report["host"]["flags"]) == {"avx2", "avx512f", "f16c"} and report["cache"]["dir"]


@needs_device
def test_text_names_devices_results_and_the_choice(report: dict[str, Any]) -> None:
    lines = doctor.render(report).splitlines()
    assert lines[1].startswith("host CPU: ") and lines[2].startswith("cache: ")
    for d in report["devices"]:
        assert any(ln.startswith(f"  {d['index']} {d['name']}: {d['type']}, driver ") for ln in lines)
    passed = sum(r["result"] == "pass" for r in report["selftest"])
    assert (
        sum(" PASS " in ln for ln in lines) == passed
        and sum(" FAIL " in ln for ln in lines) == len(report["selftest"]) - passed
    )
    assert lines[-1].startswith(f"default device: {report['chosen']['index']} ")


@needs_device
def test_no_selftest_text_is_quick_and_passes() -> None:
    result = runner.invoke(app, ["doctor", "--no-selftest"])
    assert result.exit_code == 0, result.output
    # no self-test runs; a device recorded failing here says so, quoting the self-test that failed
    ran = [ln for ln in result.stdout.splitlines() if ln.startswith("self-test")]
    assert not ran and "default device: " in result.stdout


@needs_device
def test_a_crashing_selftest_is_a_fail_line_and_a_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child killed by SIGSEGV (a compiler crash) is a FAIL naming the signal, exit 1, and the
    device is recorded failing here (in this test's cache folder)."""
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path))
    crash = "import os, signal, sys; print('compiling', file=sys.stderr); os.kill(os.getpid(), signal.SIGSEGV)"
    monkeypatch.setattr(doctor, "selftest_command", lambda index, precision: [sys.executable, "-c", crash])
    first = dev.devices()[0]
    result = runner.invoke(app, ["doctor", "--device", dev.index(first)])
    assert result.exit_code == 1, result.output
    fails = [ln for ln in result.stdout.splitlines() if " FAIL " in ln]
    assert len(fails) == 3 and all("killed by SIGSEGV: compiling" in ln for ln in fails), result.stdout
    assert (dev.failed(first[3]) or "").startswith("gpulint doctor: self-test at fp32: killed by SIGSEGV")
    if len(dev.devices()) > 1:  # the default choice now passes over it
        assert dev.choose(dev.devices())[0] != first
    # A passing self-test clears the record.
    monkeypatch.setattr(doctor, "selftest_command", lambda index, precision: [sys.executable, "-c", "print('ok')"])
    assert runner.invoke(app, ["doctor", "--device", dev.index(first)]).exit_code == 0
    assert dev.failed(first[3]) is None


@pytest.mark.parametrize(
    ("code", "start", "end"),
    [
        ("import time; time.sleep(30)", "no answer in 0.5 s (a compiler or kernel that hangs); stopped", ""),
        ("raise RuntimeError('the kernels failed to build')", "exit 1: ", "RuntimeError: the kernels failed to build"),
        ("print('max error 0.5 (tolerance 0.02)'); raise SystemExit(1)", "exit 1: max error 0.5 (tolerance 0.02)", ""),
    ],
    ids=["hang", "exception", "mismatch"],
)
def test_a_failing_child_says_why(code: str, start: str, end: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "selftest_command", lambda index, precision: [sys.executable, "-c", code])
    r = doctor.run_selftest((0, 1, None, None), "fp16", timeout=0.5 if "sleep" in code else 60)
    assert (r["device"], r["precision"], r["result"]) == ("0:1", "fp16", "fail")
    assert r["reason"].startswith(start) and r["reason"].endswith(end), r["reason"]


def test_usage_errors_are_one_line() -> None:
    result = runner.invoke(app, ["doctor", "--device", "no-such-device"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("gpulint: error: ") and result.stderr.count("\n") == 1


# -- the default choice, on fake platforms and devices --------------------------------------------


def fake(platform: str, version: str, name: str, kind: int, driver: str = "1.0") -> Any:
    p = SimpleNamespace(name=platform, version=version)
    return SimpleNamespace(name=name, type=kind, driver_version=driver, platform=p, version="OpenCL 3.0", extensions="")


def listed(*devices: Any) -> list[dev.Candidate]:
    """Candidates as devices() gives them: each fake on a platform of its own."""
    return [(i, 0, d.platform, d) for i, d in enumerate(devices)]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path))  # failure records of this test only
    return tmp_path


def test_a_gpu_comes_first(cache: Path) -> None:
    pip, nvidia = (
        fake("Portable Computing Language", POCL_31, "pthread", dev.CPU),
        fake("NVIDIA CUDA", "OpenCL 3.0 CUDA", "H100", dev.GPU),
    )
    chosen, why = dev.choose(listed(pip, nvidia))
    assert chosen[3] is nvidia and why == "a GPU, first of 1"


def test_the_newest_pocl_among_cpu_devices(cache: Path) -> None:
    old, new = (
        fake("Portable Computing Language", POCL_30, "pthread-AMD EPYC", dev.CPU),
        fake("Portable Computing Language", POCL_31, "pthread-skylake", dev.CPU),
    )
    intel = fake("Intel(R) CPU Runtime", "OpenCL 3.0 WINDOWS", "Xeon", dev.CPU)
    for order in [(old, new, intel), (intel, new, old)]:
        chosen, why = dev.choose(listed(*order))
        assert chosen[3] is new and why == "the newest PoCL (3.1, LLVM 15) of 3 CPU devices"
    twin = fake("Portable Computing Language", POCL_30, "second", dev.CPU)
    assert dev.choose(listed(old, twin))[0][3] is old  # a tie: listing order
    assert dev.choose(listed(intel))[1] == "the only OpenCL device"
    assert dev.choose(listed(intel, fake("Other", "x", "Xeon 2", dev.CPU)))[1] == "the first of 2 CPU devices"


def test_a_device_recorded_failing_is_passed_over(cache: Path) -> None:
    old, new = (
        fake("Portable Computing Language", POCL_30, "pthread", dev.CPU),
        fake("Portable Computing Language", POCL_31, "pthread", dev.CPU),
    )
    dev.mark_failed(new, "killed by SIGSEGV")
    assert dev.failed(new) == "killed by SIGSEGV" and dev.failed(old) is None
    assert list(cache.joinpath("failed-devices").glob("*.json"))
    chosen, why = dev.choose(listed(old, new))
    assert (
        chosen[3] is old
        and why == "PoCL (3.0-rc2, LLVM 14), the only CPU device; passed over 1:0, recorded failing here"
    )
    dev.mark_failed(old, "exit 1")  # every device failing: the choice as if none were
    chosen, why = dev.choose(listed(old, new))
    assert chosen[3] is new and why.endswith("; every device is recorded failing here")
    # The record is the driver's: a new driver version starts without one.
    assert dev.failed(fake("Portable Computing Language", POCL_31, "pthread", dev.CPU, driver="1.1")) is None
    dev.clear_failed(new)
    assert dev.failed(new) is None


def test_versions_from_platform_and_device_strings() -> None:
    assert dev.pocl_version(POCL_30) == (3, 0, 0, 0) < dev.pocl_version("OpenCL 3.0 PoCL 3.0  Linux") == (3, 0, 0, 1)
    assert dev.pocl_version(POCL_31) == (3, 1, 0, 1) < (dev.pocl_version("PoCL 6.0.1 LLVM 18") or ())
    assert dev.pocl_version("OpenCL 3.0 CUDA 12.4.131") is None
    assert dev.llvm_version(POCL_30) == "14.0.6" and dev.llvm_version(POCL_31) == "15.0.6"
    assert dev.llvm_version("OpenCL 3.0 CUDA 12.4.131") is None
    assert dev.llvm_target("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3") == "znver3"
    assert dev.llvm_target("OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512") == "skylake-avx512"
    assert dev.llvm_target("OpenCL 3.0 PoCL HSTR: pthread-aarch64-unknown-linux-gnu-cortex-a72") == "cortex-a72"
    assert dev.llvm_target("OpenCL 3.0 CUDA") is None


@needs_device
def test_select_device_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    index = dev.index(dev.devices()[0])
    assert dev.select_device(index).why == f"asked for `{index}`"
    monkeypatch.setenv("GPULINT_CL_DEVICE", index)
    assert dev.select_device().why == f"GPULINT_CL_DEVICE={index}"
    monkeypatch.delenv("GPULINT_CL_DEVICE")
    assert dev.select_device().why == dev.choose(dev.devices())[1]

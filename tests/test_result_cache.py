"""The result cache (#41): a second run over unchanged models reads back what the first computed
and prints the same; a change of content, setting, gpulint version or device recomputes; a damaged
entry is a miss and rewritten; an unwritable folder still gives results. And verify over several
models: in order, with --jobs the same as serial."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import conv_model, needs_opencl

import gpulint
from gpulint import cache as cache_mod
from gpulint import check as check_mod
from gpulint.cache import ResultCache
from gpulint.model import write
from gpulint.settings import Settings


@pytest.fixture(autouse=True)
def cache_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The cache in force (conftest turns it off for every other test), in a folder of this test's."""
    monkeypatch.delenv("GPULINT_NO_CACHE", raising=False)
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(check_mod, "KEEP_LINTS_OVER_S", 0.0)  # the builder's models lint in about 1 ms
    return tmp_path / "cache"


class Lints:
    """Counts the lints check_file runs (a hit runs none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = check_mod.lint_model

        def counted(*args: Any) -> Any:
            self.count += 1
            return real(*args)

        monkeypatch.setattr(check_mod, "lint_model", counted)


def test_check_hit_miss_and_invalidation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.tflite"
    write(conv_model(8), path)
    lints = Lints(monkeypatch)
    first = check_mod.check_file(str(path), Settings(), ResultCache())
    second = check_mod.check_file(str(path), Settings(), ResultCache())
    assert lints.count == 1 and second == first  # the same result, read back
    assert check_mod.check_file(str(path), Settings(), ResultCache(enabled=False)) == first
    assert lints.count == 2  # --no-cache: computed, whatever is kept

    write(conv_model(12), path)  # content
    check_mod.check_file(str(path), Settings(), ResultCache())
    assert lints.count == 3
    check_mod.check_file(str(path), Settings(target="litert-gpu"), ResultCache())  # a setting
    assert lints.count == 4
    monkeypatch.setattr(gpulint, "__version__", "99.0")  # gpulint's version
    monkeypatch.setattr(cache_mod, "_CODE", None)
    check_mod.check_file(str(path), Settings(), ResultCache())
    assert lints.count == 5
    check_mod.check_file(str(path), Settings(), ResultCache())
    assert lints.count == 5


def test_check_hit_applies_this_runs_selection_and_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lint is kept before selection: a copy under another name, or other selectors, are
    reported as this run asks, without linting again."""
    a, b = tmp_path / "a.tflite", tmp_path / "b.tflite"
    write(conv_model(3), a)  # 3 output channels: GPU301 (channels not a multiple of 4)
    b.write_bytes(a.read_bytes())
    lints = Lints(monkeypatch)
    all_of_a = check_mod.check_file(str(a), Settings(select=["ALL"]), ResultCache())
    codes = {f.code for f in all_of_a.findings}
    assert codes
    none_of_b = check_mod.check_file(str(b), Settings(select=["ALL"], ignore=sorted(codes)), ResultCache())
    assert lints.count == 1 and none_of_b.path == str(b) and none_of_b.findings == []


def test_damaged_entry_is_a_miss_and_rewritten(tmp_path: Path, cache_on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.tflite"
    write(conv_model(8), path)
    first = check_mod.check_file(str(path), Settings(), ResultCache())
    (entry,) = (cache_on / "results").rglob("*.pickle")
    for damage in (b"", b"not a pickle", entry.read_bytes()[:20]):
        entry.write_bytes(damage)
        lints = Lints(monkeypatch)
        assert check_mod.check_file(str(path), Settings(), ResultCache()) == first
        assert lints.count == 1 and entry.stat().st_size > 100  # recomputed and kept again


def test_unwritable_folder_still_gives_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("GPULINT_CACHE_DIR", str(blocker))  # a file where the folder should be
    path = tmp_path / "m.tflite"
    write(conv_model(8), path)
    assert check_mod.check_file(str(path), Settings(), ResultCache()).verdict == "ready"


def test_check_cli_prints_the_same_from_the_cache(tmp_path: Path) -> None:
    for i, channels in enumerate((3, 8, 12)):
        write(conv_model(channels), tmp_path / f"m{i}.tflite")
    run = [sys.executable, "-m", "gpulint", "check", str(tmp_path), "--format", "json"]
    first = subprocess.run(run, capture_output=True, text=True, env=os.environ.copy())
    second = subprocess.run(run, capture_output=True, text=True, env=os.environ.copy())
    assert first.stdout == second.stdout and first.returncode == second.returncode
    assert len(json.loads(first.stdout)["files"]) == 3


def test_a_lint_quicker_than_its_entry_is_not_kept(
    tmp_path: Path, cache_on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeping a 1-ms lint costs about what it saves: a run over hundreds of them would be slower."""
    monkeypatch.setattr(check_mod, "KEEP_LINTS_OVER_S", 3600.0)
    path = tmp_path / "m.tflite"
    write(conv_model(8), path)
    first = check_mod.check_file(str(path), Settings(), ResultCache())
    assert check_mod.check_file(str(path), Settings(), ResultCache()) == first
    assert not list(cache_on.rglob("*.pickle"))


# -- verify -------------------------------------------------------------------------------------------


def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    for i, channels in enumerate((4, 8, 5)):
        write(conv_model(channels), folder / f"m{i}.tflite")
    (folder / "broken.tflite").write_bytes(b"not a model")
    return folder


def without_seconds(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k != "seconds"} for m in out["models"]]


def run_verify(*args: str) -> tuple[int, dict[str, Any], str]:
    r = subprocess.run(
        [sys.executable, "-m", "gpulint", "verify", *args, "--format", "json"], capture_output=True, text=True
    )
    return r.returncode, json.loads(r.stdout), r.stderr


@needs_opencl()
def test_verify_folder_in_order_cached_and_with_jobs(tmp_path: Path) -> None:
    folder = model_dir(tmp_path)
    code, first, err = run_verify(str(folder))
    assert code == 2 and "broken.tflite" in err  # an error wins, the others still run
    assert [m["model"] for m in first["models"]] == [
        str(folder / n) for n in ("broken.tflite", "m0.tflite", "m1.tflite", "m2.tflite")
    ]
    assert [m["status"] for m in first["models"]] == ["ERROR", "PASS", "PASS", "PASS"]
    assert first["status"] == "ERROR" and first["counts"] == {"ERROR": 1, "PASS": 3}

    kept = sorted((Path(os.environ["GPULINT_CACHE_DIR"]) / "results").rglob("*.pickle"))
    assert len(kept) == 3
    stamps = [p.stat().st_mtime_ns for p in kept]
    code2, second, _ = run_verify(str(folder))
    assert (code2, second) == (code, first)  # read back: the same, timings included
    assert [p.stat().st_mtime_ns for p in kept] == stamps

    code3, third, _ = run_verify(str(folder), "--jobs", "2", "--no-cache")
    assert code3 == code and without_seconds(third) == without_seconds(first)
    code4, fp16, _ = run_verify(str(folder / "m0.tflite"), "--precision", "fp16")  # another precision: computed
    assert code4 == 0 and fp16["precision"] == "fp16"
    assert len(list((Path(os.environ["GPULINT_CACHE_DIR"]) / "results").rglob("*.pickle"))) == 4


@needs_opencl()
def test_verify_cache_keys_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulint.cli import verify as cli_verify
    from gpulint.verify import Request

    path = tmp_path / "m.tflite"
    write(conv_model(8), path)
    runs = []
    real = cli_verify.device_key

    import gpulint.verify as verify_mod

    real_verify = verify_mod.verify

    def counted(*args: Any) -> Any:
        runs.append(1)
        return real_verify(*args)

    monkeypatch.setattr(verify_mod, "verify", counted)
    req = Request(path)
    first = cli_verify.try_verify(req, None, ResultCache()).result
    again = cli_verify.try_verify(req, None, ResultCache()).result
    assert len(runs) == 1 and again is not None and first is not None
    assert again.to_json() == first.to_json()
    monkeypatch.setattr(cli_verify, "device_key", lambda e, d: {**real(e, d), "driver": "another driver"})
    cli_verify.try_verify(req, None, ResultCache())
    assert len(runs) == 2
    saved = tmp_path / "ref.npz"  # a run that writes files is never read back
    cli_verify.try_verify(Request(path, save_reference=saved), None, ResultCache())
    assert len(runs) == 3 and saved.is_file()


def test_one_models_files_need_one_model(tmp_path: Path) -> None:
    folder = model_dir(tmp_path)
    np.savez(tmp_path / "in.npz", image=np.zeros((1, 8, 8, 3), np.float32))
    code, out, err = run_verify(str(folder), "--inputs", str(tmp_path / "in.npz"))
    assert code == 2 and out["status"] == "ERROR"
    assert "--inputs belongs to one model's files" in err


@needs_opencl()
def test_a_cached_verify_names_this_runs_files(tmp_path: Path) -> None:
    from gpulint.cli.verify import VerifyUnit, verify_unit
    from gpulint.verify import Request

    write(conv_model(8), tmp_path / "a.tflite")
    for name in ("b.tflite", "a2.tflite", "b2.tflite"):
        (tmp_path / name).write_bytes((tmp_path / "a.tflite").read_bytes())
    for model, candidate in (("a", "b"), ("a2", "b2")):  # the second is read back from the first's entry
        req = Request(tmp_path / f"{model}.tflite", candidate_path=tmp_path / f"{candidate}.tflite")
        (attempt,) = verify_unit(VerifyUnit(req, ["opencl"], None, True), str(req.model_path))
        assert attempt.result is not None
        assert (attempt.result.model, attempt.result.candidate) == (str(req.model_path), str(req.candidate_path))
    assert len(list((Path(os.environ["GPULINT_CACHE_DIR"]) / "results").rglob("*.pickle"))) == 1

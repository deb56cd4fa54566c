"""The oracle harness itself (tests/oracle): that it answers, isolates crashes and caches."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import oracle
import pytest
from helpers import conv_model

from gpulint.model import write


@pytest.fixture
def conv(tmp_path: Path) -> Path:
    path = tmp_path / "conv.tflite"
    write(conv_model(), str(path))
    return path


def test_one_conv_runs_on_the_gpu(gl_oracle: Any, conv: Path) -> None:
    res = gl_oracle([conv], cache=None)[str(conv)]
    assert res.outcome == "ok", res.words
    assert res.status == "kTfLiteOk"
    assert res.delegated == {"0": [0]}
    assert res.partitions == {"0": 1}
    assert res.total_nodes == [1]


def test_a_model_that_kills_the_child_is_a_crash_and_the_rest_go_on(
    gl_oracle: Any, conv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boom = tmp_path / "boom.tflite"
    after = tmp_path / "after.tflite"
    shutil.copy(conv, boom)
    shutil.copy(conv, after)
    monkeypatch.setenv("GPULINT_ORACLE_TEST_CRASH", boom.name)
    res = gl_oracle([conv, boom, after], cache=None)
    assert res[str(boom)].outcome == "crash"
    assert "died" in res[str(boom)].errors[0]
    assert res[str(conv)].outcome == res[str(after)].outcome == "ok"


def test_answers_are_cached_by_content(gl_oracle: Any, conv: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = gl_oracle([conv], cache=cache)[str(conv)]
    (entry,) = cache.glob("gl-*/*.json")
    copy = tmp_path / "copy.tflite"
    shutil.copy(conv, copy)
    again = gl_oracle([copy], cache=cache)[str(copy)]  # same bytes: no child this time
    assert again.delegated == first.delegated and again.path == str(copy)
    assert list(cache.glob("gl-*/*.json")) == [entry]


def test_a_file_it_cannot_read_is_an_error_not_an_answer(gl_oracle: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x10\x00\x00\x00TFL3" + b"\x00" * 8)
    res = gl_oracle([bad], cache=None)[str(bad)]
    assert res.outcome in ("error", "crash"), res


def test_unavailable_says_how_to_set_it_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(oracle, "VENV", tmp_path / "nowhere")
    why = oracle.unavailable()
    assert why is not None and "make oracle" in why

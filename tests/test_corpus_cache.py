"""The converter corpora's cache (tests/converters/corpus.py), without a converter: built once, a refusal kept as
data, a failed build leaving nothing, and the builds of older keys removed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from converters import corpus


def refusing() -> bytes:
    raise ValueError("unsupported op aten::foo\nsecond line")


def builder(calls: list[int]) -> Any:
    def build(folder: Path) -> dict[str, Any]:
        calls.append(1)
        manifest: dict[str, Any] = {"versions": {}, "models": {}}
        corpus.convert_into(manifest, folder, "ok.tflite", {"family": "ok"}, lambda: b"TFL3")
        corpus.convert_into(manifest, folder, "no.tflite", {"family": "no"}, refusing)
        return manifest

    return build


def test_builds_once_and_keeps_the_converters_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[int] = []
    assert corpus.main([str(tmp_path)], "x.py", "0123456789abcdef", builder(calls)) == 0
    assert corpus.main([str(tmp_path)], "x.py", "0123456789abcdef", builder(calls)) == 0
    assert calls == [1]
    folder = tmp_path / "0123456789abcdef"
    assert capsys.readouterr().out.splitlines() == [str(folder)] * 2
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (folder / "ok.tflite").read_bytes() == b"TFL3"
    assert "error" not in manifest["models"]["ok.tflite"]
    assert (
        manifest["models"]["no.tflite"]["error"]
        == "ValueError: unsupported op aten::foo (in test_corpus_cache.py:refusing)"
    )
    assert not (folder / "no.tflite").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # no temporary folder left


def test_a_new_key_replaces_the_old_build_and_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    corpus.main([str(tmp_path)], "x.py", "0" * 16, builder([]))
    (tmp_path / "build.log").write_text("kept")  # the setup scripts' log lives beside the builds

    def broken(folder: Path) -> dict[str, Any]:
        (folder / "half.tflite").write_bytes(b"TF")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        corpus.main([str(tmp_path)], "x.py", "1" * 16, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0" * 16, "build.log"]
    corpus.main([str(tmp_path)], "x.py", "1" * 16, builder([]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1" * 16, "build.log"]


def test_the_key_follows_versions_and_scripts(tmp_path: Path) -> None:
    script = tmp_path / "build.py"
    script.write_text("A = 1\n")
    key = corpus.cache_key({"torch": "2.13.0"}, script)
    assert len(key) == 16 and corpus.KEY.fullmatch(key)
    assert corpus.cache_key({"torch": "2.13.0"}, script) == key
    assert corpus.cache_key({"torch": "2.14.0"}, script) != key
    script.write_text("A = 2\n")
    assert corpus.cache_key({"torch": "2.13.0"}, script) != key


def test_find_says_why_there_is_no_corpus(tmp_path: Path) -> None:
    folder, manifest, why = corpus.find(tmp_path / "venv", "b.py", tmp_path, "PyTorch corpus", "make converters")
    assert (folder, manifest) == (None, {})
    assert why == f"no converter venv {tmp_path / 'venv'} for the PyTorch corpus: run make converters"
    with pytest.raises(pytest.skip.Exception, match="no converter venv"):
        corpus.built_model((folder, manifest, why), "resnet_f32.tflite")

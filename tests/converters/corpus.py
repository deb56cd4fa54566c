"""What the converter corpus builders (torch, torch-half, torchvision, generative) and their tests share.

Build side, inside a converter venv: the package versions, the cache key (versions + the builder scripts' text),
recording one conversion (a refusal is data, in the converter's own words), and the cached build: built once into
a temporary folder that is renamed into place, so a half-built corpus is never taken for a built one, and the
builds of older keys in the same cache removed, so the cache holds one corpus (the fuzzer and bench glob it).

Test side, in gpulint's venv (no torch): `find` asks the converter venv for the key and reads the manifest, or
says why there is no corpus; `built_model` is one model of it, or a skip with the converter's words.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

KEY = re.compile(r"[0-9a-f]{16}")  # the folder names cache_key makes


def versions(packages: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "absent"
    return out


def cache_key(vers: dict[str, str], *scripts: str | Path) -> str:
    """Package versions + the text of the scripts that define the corpus (this one included: it writes the
    manifest): changing any rebuilds."""
    texts = [Path(s).read_bytes() for s in (*scripts, __file__)]
    digest = hashlib.sha256(b"".join(texts)).hexdigest()
    text = json.dumps({"versions": vers, "script": digest}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def error_words(e: BaseException) -> str:
    """The converter's refusal in one line: its type, first line and where it was raised."""
    where = traceback.extract_tb(e.__traceback__)[-1]
    words = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return f"{type(e).__name__}: {words} (in {Path(where.filename).name}:{where.name})"


def record(manifest: dict[str, Any], name: str, entry: dict[str, Any], start: float) -> None:
    """Enter one model's outcome in the manifest and print it to the build log ("name: ok (s)")."""
    entry["seconds"] = round(time.monotonic() - start, 2)
    manifest["models"][name] = entry
    print(f"{name}: {entry.get('error', 'ok')} ({entry['seconds']} s)", file=sys.stderr, flush=True)


def convert_into(
    manifest: dict[str, Any], folder: Path, name: str, entry: dict[str, Any], make: Callable[[], bytes]
) -> None:
    """Write folder/name from `make()`, or enter the converter's refusal; either way record it."""
    start = time.monotonic()
    try:
        (folder / name).write_bytes(make())
    except Exception as e:  # the converter's refusal is data: the tests skip with it
        entry["error"] = error_words(e)
    record(manifest, name, entry, start)


def main(argv: list[str], prog: str, key: str, build: Callable[[Path], dict[str, Any]]) -> int:
    """`prog CACHE`: build the corpus of `key` under CACHE unless it is there, print its folder. `prog --key`."""
    if len(argv) != 1:
        print(f"usage: {prog} CACHE  |  {prog} --key", file=sys.stderr)
        return 2
    if argv[0] == "--key":
        print(key)
        return 0
    cache = Path(argv[0])
    final = cache / key
    if not (final / "manifest.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
        try:
            start = time.monotonic()
            manifest = build(tmp)
            manifest["build_seconds"] = round(time.monotonic() - start, 1)
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)  # a half-built corpus is never taken for a built one
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in cache.iterdir():  # the builds of other versions or scripts: no test reads them again
            if old != final and old.is_dir() and KEY.fullmatch(old.name):
                shutil.rmtree(old, ignore_errors=True)
    print(final)
    return 0


def find(venv: Path, script: str | Path, cache: Path, what: str, setup: str) -> tuple[Path | None, dict[str, Any], str]:
    """The corpus `script` builds in `cache` and its manifest, or None and why there is none (`what` names it)."""
    python = venv / "bin" / "python"
    if not python.exists():
        return None, {}, f"no converter venv {venv} for the {what}: run {setup}"
    try:  # the key needs the venv's package versions; the script imports no torch for it
        key = subprocess.run(
            [str(python), str(script), "--key"], capture_output=True, text=True, timeout=120, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return None, {}, f"{venv} cannot name the {what} ({e}): run {setup}"
    manifest = cache / key / "manifest.json"
    if not manifest.is_file():
        return None, {}, f"the {what} {key} is not built in {cache}: run {setup}"
    return cache / key, json.loads(manifest.read_text()), ""


def built_model(found: tuple[Path | None, dict[str, Any], str], name: str) -> Path:
    """One model of a corpus `find` found; the test skips, saying why, where there is none."""
    import pytest  # test side only: the converter venvs have no pytest

    folder, manifest, why = found
    if folder is None:
        pytest.skip(why)
    entry = manifest["models"].get(name, {})
    if "error" in entry:
        pytest.skip(f"litert-torch could not make {name}: {entry['error']}")
    return folder / name

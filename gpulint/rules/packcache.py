"""Parsed built-in rule packs kept between processes (#40, start-up): `gpulint check` would otherwise
import yaml and parse and validate rules.yaml and its target pack on every run (about 25 ms of a
0.3 s start), for files that change only with gpulint itself.

An entry is a pickle of the parsed value under `cache folder/packs/<key>.pickle`, the folder being
gpulint's cache folder (GPULINT_CACHE_DIR, as `gpulint.cache`). Its key covers everything the
parse depends on: the pack texts themselves (their bytes), gpulint's version, Python's, and the name,
size and modification time of every file under gpulint/rules (the parser, the dataclasses pickled,
the check and detector registries a pack is validated against) and of the tflite schema modules that
name ops and tensor types. A change to any of them is a miss. Entries are written atomically
(`gpulint.atomic`), so concurrent runs see a whole entry or none; one that cannot be read is a miss
and is rewritten; a folder that cannot be written still gives the parsed value, just not kept.
Only successful parses are kept: a pack that fails to validate raises its PackError every run. The
folder is trusted as the result and kernel caches beside it are (an entry is a pickle): keep it
private to the user or CI job.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from gpulint.cache import cache_dir, read_entry, write_entry

T = TypeVar("T")

_CODE: str | None = None


def folder() -> Path:
    """`packs` in gpulint's cache folder."""
    return cache_dir() / "packs"


def _stat_lines(top: str, suffixes: tuple[str, ...]) -> Iterable[str]:
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(suffixes):
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                yield f"{os.path.relpath(path, top)}\0{st.st_size}\0{st.st_mtime_ns}\n"


def code_fingerprint() -> str:
    """gpulint's and Python's versions, and the stat of the code a parsed pack depends on. Once a
    process (a stat of ~30 files)."""
    global _CODE
    if _CODE is None:
        from gpulint import __version__
        from gpulint.model import schema

        h = hashlib.sha256(f"{__version__}\0{sys.version}\0{pickle.HIGHEST_PROTOCOL}\n".encode())
        for line in _stat_lines(os.path.dirname(os.path.abspath(__file__)), (".py",)):
            h.update(line.encode())
        tflite = schema.package_dir()
        for name in ("BuiltinOperator.py", "TensorType.py"):
            st = os.stat(tflite / name)
            h.update(f"tflite/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        _CODE = h.hexdigest()
    return _CODE


def key(kind: str, texts: Iterable[str]) -> str:
    h = hashlib.sha256(f"{kind}\0{code_fingerprint()}\n".encode())
    for text in texts:
        data = text.encode("utf-8", "surrogateescape")
        h.update(f"{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def cached(kind: str, texts: Iterable[str], parse: Callable[[], T], root: Path | None = None) -> T:
    """`parse()`, or what it returned in an earlier process for the same `kind`, pack texts and code."""
    path = (root if root is not None else folder()) / f"{key(kind, texts)}.pickle"
    kept = read_entry(path)
    if kept is not None:
        value: T = kept
        return value
    value = parse()
    write_entry(path, value)
    return value

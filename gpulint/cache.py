"""The cache folder, and the result cache in it: what check, verify, bench and report computed for a
model, kept between runs as ruff and pytest keep theirs, so that a second run over an unchanged
folder of models recomputes nothing.

A result is found by a key over everything that decides it: the bytes of the model (and of a
candidate, inputs or rule pack), the settings and options of the run, the precision, the device and
its driver, and gpulint's own code (its version and the files of the installed package, so that an
edited rule pack or kernel is a new key). A change to any of them is a miss; nothing is ever
invalidated by hand. Entries are pickles written atomically (a reader sees a whole entry or none,
under any number of concurrent runs); one that cannot be read is ignored and rewritten. A folder
that cannot be written still gives results: they are just not kept. The folder is trusted as the
kernel cache beside it is (its compiled programs run): keep it private to the user or CI job.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

# Raised by pickle.loads on a damaged or foreign entry, besides the pickle's own errors.
UNREADABLE = (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError, ValueError)


def cache_dir() -> Path:
    """gpulint's cache folder (env GPULINT_CACHE_DIR): compiled kernels (gpulint's program binaries,
    PoCL's cache under pocl/, Mesa's under mesa/) and results/. One folder a CI job can keep."""
    return Path(os.environ.get("GPULINT_CACHE_DIR", Path.home() / ".cache" / "gpulint" / "kernels")).expanduser()


def file_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes (OSError where it cannot be read); of a model inside a LiteRT-LM
    bundle (`BUNDLE#N`), the bundle's and the section's."""
    if not os.path.exists(path):
        from gpulint.model.litertlm import member

        named = member(str(path))
        if named is not None:
            return f"{file_digest(named[0])}#{named[1]}"
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_CODE: str | None = None


def code_fingerprint() -> str:
    """gpulint's version and the name, size and modification time of every file of the package:
    a new release, or an edited rule, pack, kernel or template in a checkout, is a new key. Stat
    only (about 1 ms), once a process."""
    global _CODE
    if _CODE is None:
        import gpulint

        root = Path(gpulint.__file__).parent
        h = hashlib.sha256(gpulint.__version__.encode())
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            st = path.stat()
            h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        _CODE = h.hexdigest()
    return _CODE


class ResultCache:
    """Results by key under `cache_dir()/results`; `enabled=False` (--no-cache, or GPULINT_NO_CACHE
    set) finds nothing and keeps nothing."""

    def __init__(self, enabled: bool = True, root: Path | None = None) -> None:
        self.enabled = enabled and not os.environ.get("GPULINT_NO_CACHE")  # env: --no-cache everywhere
        self.root = root if root is not None else cache_dir() / "results"

    def key(self, kind: str, **parts: Any) -> str:
        """The key of a `kind` result (check, verify, bench, report) from the parts that decide it:
        JSON-able values (paths are given as their files' digests by the caller)."""
        text = json.dumps({"kind": kind, "code": code_fingerprint(), **parts}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.pickle"

    def get(self, key: str) -> Any | None:
        return read_entry(self.path(key)) if self.enabled else None

    def put(self, key: str, value: Any) -> None:
        """Keep `value` under `key`; a folder that cannot be written keeps nothing, silently."""
        if self.enabled:
            write_entry(self.path(key), value)


def read_entry(path: Path) -> Any | None:
    """The value pickled at `path`; None where there is none or it cannot be read (damaged by a
    disk or a foreign write: a miss, which the caller's write_entry replaces)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return pickle.loads(data)
    except UNREADABLE:
        return None


def write_entry(path: Path, value: Any) -> None:
    """`value` pickled to `path`, atomically and without fsync (an entry a crash loses is a miss);
    a folder that cannot be written, or a value that cannot be pickled, keeps nothing, silently."""
    from gpulint.atomic import write_atomic

    with contextlib.suppress(OSError, pickle.PicklingError):
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, [data], sync=False)

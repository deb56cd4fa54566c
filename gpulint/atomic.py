"""Atomic file writes: a temporary file beside the target, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(
    path: str | os.PathLike[str], chunks: Iterable[bytes | bytearray | memoryview], sync: bool = True
) -> None:
    """Readers of `path` see the old file or the complete new one, never a part. `sync=False`: no
    fsync, for a cache, whose entry lost or emptied by a crash is only a miss."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

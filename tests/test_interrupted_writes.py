"""An interrupted write leaves the old file or the complete new one, never a part of one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import conv_model

from gpulint.model import read, to_bytes, write

BIG = 96 << 20  # constant bytes: long enough to write that a signal lands mid-write


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes]:
    folder = tmp_path_factory.mktemp("interrupt")
    source = folder / "big.tflite"
    write(conv_model(weight_bytes=BIG), source)
    new = source.read_bytes()  # fix with no change to make writes the same model back
    old = to_bytes(conv_model())
    return source, old, new


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay", [0.4, 0.8, 1.2, 1.6])
def test_fix_interrupted_mid_write(files: tuple[Path, bytes, bytes], tmp_path: Path, sig: int, delay: float) -> None:
    source, old, new = files
    target = tmp_path / "out.tflite"
    target.write_bytes(old)
    cmd = [
        sys.executable,
        "-m",
        "gpulint",
        "fix",
        str(source),
        "-o",
        str(target),
        "--force",
        "--skip-proof",
        "--passes",
        "remove-identity",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    data = target.read_bytes()
    assert data in (old, new), f"{len(data)} bytes: neither the old file ({len(old)}) nor the new one ({len(new)})"
    read(target)  # whichever it is, it reads
    assert b"Traceback" not in err
    if sig != signal.SIGKILL:  # a catchable signal also removes the temporary file
        assert [p.name for p in tmp_path.iterdir()] == ["out.tflite"]

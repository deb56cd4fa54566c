"""Mutations of real models, and the judge of a command's run on one, for the fuzz tests and
bench/fuzz.py.

A mutation targets the file's structure rather than its weights (flipping a weight byte
exercises nothing): positions are drawn outside the constant buffers' bytes. What makes a run
bad is `problem`'s docstring (and bench/fuzz.py's).
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpulint.model import read_buffer

EXTREMES = (0, 1, 2, 3, 4, 8, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def structure_positions(data: bytes) -> np.ndarray:
    """Byte positions of `data` that are not inside a constant buffer's data (int32: a fuzz run
    keeps them for every seed, 14 million positions over the corpora)."""
    model = read_buffer(data)
    covered = np.zeros(len(data), bool)
    base = np.frombuffer(data, np.uint8).ctypes.data
    for buf in model.buffers:
        if len(buf.data):
            start = np.frombuffer(buf.data, np.uint8).ctypes.data - base  # the views share data's memory
            covered[start : start + len(buf.data)] = True
    return np.flatnonzero(~covered).astype(np.int32)


def mutate(data: bytes, positions: np.ndarray, rng: random.Random) -> tuple[bytes, str]:
    """One mutated copy of `data` and a description of what was done."""
    out = bytearray(data)
    kind = rng.choice(("flip", "flip", "word", "word", "swap", "truncate"))
    if kind == "flip":
        picks = [int(rng.choice(positions)) for _ in range(rng.randint(1, 6))]
        for p in picks:
            out[p] ^= 1 << rng.randrange(8)
        return bytes(out), f"flip bits at {picks}"
    if kind == "word":
        p = int(rng.choice(positions)) & ~3
        value = rng.choice((*EXTREMES, rng.randrange(len(data)), len(data) - rng.randrange(64)))
        struct.pack_into("<I", out, p, value & 0xFFFFFFFF)
        return bytes(out), f"u32 at {p} = {value:#x}"
    if kind == "swap":
        p, q = (int(rng.choice(positions)) & ~3 for _ in range(2))
        out[p : p + 4], out[q : q + 4] = data[q : q + 4], data[p : p + 4]
        return bytes(out), f"swap u32 at {p} and {q}"
    cut = rng.randrange(8, len(data))
    return bytes(out[:cut]), f"truncate to {cut} bytes"


# -- seeds ------------------------------------------------------------------------------------------


def find_seeds(roots: list[Path], max_bytes: int | None = None) -> dict[str, list[Path]]:
    """Every *.tflite under the roots (at most `max_bytes` each), by corpus: the first folder under
    its root (mediapipe, tfconv, torch, yolo, generative...). Hidden folders are left out (a
    converter cache builds its next corpus in one), and so is a missing root, with a note."""
    corpora: dict[str, list[Path]] = defaultdict(list)
    for root in roots:
        if not root.is_dir():
            print(f"note: {root} is absent: no seeds from it", file=sys.stderr)
            continue
        for p in sorted(root.rglob("*.tflite")):
            rel = p.relative_to(root).parts
            if any(part.startswith(".") for part in rel) or (max_bytes and p.stat().st_size > max_bytes):
                continue
            corpora[rel[0] if len(rel) > 1 else root.name].append(p)
    return dict(sorted(corpora.items()))


# -- one command on one mutated model, in a process of its own --------------------------------------

QUICK = ("inspect", "check", "report")  # commands that read the model and never run it


def time_bound(command: list[str], size: int) -> float:
    """Seconds `gpulint COMMAND...` may take on a model of `size` bytes: generous, since only a
    hang should reach it. A command that never runs the model (inspect, check, report, fix
    --skip-proof) gets 30 s plus 2 s per MB; one that runs it (fix, verify, bench) 120 s plus 10 s
    per MB (LiteRT's accelerator compiles its shaders on a first run: 30 s for selfie_segmentation
    on this machine's software Vulkan, loaded)."""
    if command[0] in QUICK or (command[0] == "fix" and "--skip-proof" in command):
        return 30.0 + 2.0 * size / 1e6
    return 120.0 + 10.0 * size / 1e6


@dataclass
class Outcome:
    rc: int
    stderr: str
    seconds: float
    rss: int  # peak resident bytes
    timed_out: bool
    left_behind: bool  # a process of its group outlived it


def run_case(argv: list[str], bound: float, env: dict[str, str] | None = None) -> Outcome:
    """Run argv in a session of its own; at `bound` seconds SIGKILL its process group."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            _kill_group(proc.pid)

        timer = threading.Timer(bound, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        left = _kill_group(proc.pid)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return Outcome(proc.returncode, text, time.perf_counter() - start, usage.ru_maxrss * 1024, fired.is_set(), left)


def _kill_group(pgid: int) -> bool:
    """SIGKILL process group `pgid` (a session run_case started); True if any of it was left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def problem(command: str, out: Outcome, bound: float) -> str | None:
    """Why a run of `gpulint COMMAND` is bad, or None: it ran past its bound, printed a traceback
    or an internal-error line, ended on a signal or with an exit code outside 0/1/2 (0-4 for
    verify: 3 is CPU-ONLY, 4 INCONCLUSIVE), exited 2 with anything but one `gpulint: error:` line, or left a
    process running. Memory is bounded by the caller (bench/fuzz.py: RLIMIT_AS): a run stopped by
    that bound alone shows as a traceback (MemoryError) or a signal."""
    lines = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith(("INFO:", "WARNING:"))]
    if out.timed_out:
        return f"still running at its bound of {bound:.0f} s"
    if "Traceback" in out.stderr:
        return "traceback"
    if "gpulint: internal error" in out.stderr:
        return "internal error"
    if out.rc < 0:
        return f"signal {signal.Signals(-out.rc).name}"
    if out.rc not in ((0, 1, 2, 3, 4) if command == "verify" else (0, 1, 2)):
        return f"exit code {out.rc}"
    if out.rc == 2 and (len(lines) != 1 or not lines[0].startswith("gpulint: error: ")):
        return f"exit 2 with {len(lines)} stderr lines"
    if out.left_behind:
        return "left a process running"
    return None

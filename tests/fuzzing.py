"""Mutations of real models for the fuzz tests and bench/fuzz.py.

A mutation targets the file's structure rather than its weights (flipping a weight byte
exercises nothing): positions are drawn outside the constant buffers' bytes.
"""

from __future__ import annotations

import random
import struct

import numpy as np

from gpulint.model import read_buffer

EXTREMES = (0, 1, 2, 3, 4, 8, 0x7F, 0xFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def structure_positions(data: bytes) -> list[int]:
    """Byte positions of `data` that are not inside a constant buffer's data."""
    model = read_buffer(data)
    covered = np.zeros(len(data), bool)
    base = np.frombuffer(data, np.uint8).ctypes.data
    for buf in model.buffers:
        if len(buf.data):
            start = np.frombuffer(buf.data, np.uint8).ctypes.data - base  # the views share data's memory
            covered[start : start + len(buf.data)] = True
    return np.flatnonzero(~covered).tolist()


def mutate(data: bytes, positions: list[int], rng: random.Random) -> tuple[bytes, str]:
    """One mutated copy of `data` and a description of what was done."""
    out = bytearray(data)
    kind = rng.choice(("flip", "flip", "word", "word", "swap", "truncate"))
    if kind == "flip":
        picks = [rng.choice(positions) for _ in range(rng.randint(1, 6))]
        for p in picks:
            out[p] ^= 1 << rng.randrange(8)
        return bytes(out), f"flip bits at {picks}"
    if kind == "word":
        p = rng.choice(positions) & ~3
        value = rng.choice((*EXTREMES, rng.randrange(len(data)), len(data) - rng.randrange(64)))
        struct.pack_into("<I", out, p, value & 0xFFFFFFFF)
        return bytes(out), f"u32 at {p} = {value:#x}"
    if kind == "swap":
        p, q = (rng.choice(positions) & ~3 for _ in range(2))
        out[p : p + 4], out[q : q + 4] = data[q : q + 4], data[p : p + 4]
        return bytes(out), f"swap u32 at {p} and {q}"
    cut = rng.randrange(8, len(data))
    return bytes(out[:cut]), f"truncate to {cut} bytes"

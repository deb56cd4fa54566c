"""Which of several equal largest subsets the delegate takes: the one libc++'s std::sort puts first.

GetFirstNLargestPartitions (tflite/delegates/utils.cc 104-130) orders the supported subsets by size with
std::sort, which is not stable. libc++'s (LLVM 16+, the GL oracle's libmediapipe.so has its __introsort,
__partition_with_equals_on_left and __insertion_sort_incomplete for that lambda) sorts up to 23 elements by
insertion, which keeps equal ones in order, and partitions longer ranges around a median-of-3 pivot, which moves
them. Measured on the GL oracle: torchvision's ViT-small (dynamic-range int8, read without an Allocation) has 49
supported subsets, 12 of them the largest with 24 nodes each, and the delegate took the 4th
(tests/test_corpus_torchvision.py); check took the 1st until it sorted as libc++ does.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from gpulint.check import Settings, check_file
from gpulint.model.build import ModelBuilder
from gpulint.model.write import write
from gpulint.rules.partition import libcxx_sort

SETTINGS = Settings(quantized=False, target="mediapipe", backend="opengl")


def runs(subsets: int, path: Path) -> tuple[Path, list[list[int]]]:
    """A chain of `subsets` runs of RELUs (1 and 3 ops, alternating), split by ZEROS_LIKE (no GPU parser:
    "Operation is not supported."); each run reads the previous one's output through the CPU op."""
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    groups: list[list[int]] = []
    op = 0
    for i in range(subsets):
        if i:
            x = g.op("ZEROS_LIKE", [x], [1, 8, 8, 4])
            op += 1
        group = []
        for _ in range(1 if i % 2 == 0 else 3):
            x = g.op("RELU", [x], [1, 8, 8, 4])
            group.append(op)
            op += 1
        groups.append(group)
    g.output(x)
    write(mb.build(), path)
    return path, groups


def test_libcxx_sort_sorts() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        items = [(rng.randint(0, rng.choice([1, 3, 50])), i) for i in range(rng.randint(0, 300))]
        out = libcxx_sort(items, lambda a, b: a[0] > b[0])
        assert sorted(out) == sorted(items)
        assert all(out[i][0] >= out[i + 1][0] for i in range(len(out) - 1))


def test_insertion_sort_keeps_ties_in_order() -> None:
    """Below 24 elements libc++ sorts by insertion (and 2-5 by stable networks): the first of equals stays first."""
    for n in range(1, 24):
        items = [(i % 2 * 2 + 1, i) for i in range(n)]
        assert libcxx_sort(items, lambda a, b: a[0] > b[0]) == sorted(items, key=lambda t: -t[0])


@pytest.mark.parametrize(("subsets", "taken"), [(24, 23), (23, 1)], ids=["24-subsets", "23-subsets-near-miss"])
def test_the_delegate_takes_the_tie_libcxx_puts_first(tmp_path: Path, subsets: int, taken: int) -> None:
    """24 subsets of sizes 1, 3, 1, 3, ...: libc++ puts the last 3-node subset first (the partition step moves
    equal elements); with 23 it is insertion-sorted and the first 3-node subset stays first."""
    path, groups = runs(subsets, tmp_path / "runs.tflite")
    r = check_file(str(path), SETTINGS)
    assert r.error is None
    assert r.plans[0].delegated_nodes == set(groups[taken])


@pytest.mark.parametrize("subsets", [24, 23])
def test_ties_against_the_gl_delegate(gl_oracle: Any, tmp_path: Path, subsets: int) -> None:
    from test_oracle_fidelity import compare

    path, _ = runs(subsets, tmp_path / "runs.tflite")
    compare(f"{subsets} runs split by ZEROS_LIKE", path, gl_oracle([path])[str(path)])

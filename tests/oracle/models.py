"""The one-op models both oracles are asked about, built once per test session: every
tests/data/placements.yaml row (as tests/test_placements.py builds it) and the generated grid
(tests/oracle/grid.py). The README tables' agreement line is here too, for both oracles."""

from __future__ import annotations

import hashlib
from pathlib import Path

from test_placements import ROWS, build

from gpulint.model import write
from oracle.grid import cases


def placement_models(folder: Path) -> dict[int, Path | str]:
    """Row index -> its model file, or why the row does not build into one (the table's own test
    says so; here it is not a model)."""
    out: dict[int, Path | str] = {}
    for i, row in enumerate(ROWS):
        try:
            model = build(row)
        except Exception as e:
            out[i] = f"unbuildable: {e}"
            continue
        out[i] = folder / f"row{i}.tflite"
        write(model, str(out[i]))
    return out


def grid_models(folder: Path) -> dict[str, Path]:
    """Grid case id -> its model file (named by the id's hash: ids hold brackets and commas)."""
    out: dict[str, Path] = {}
    for c in cases():
        out[c.id] = folder / f"{hashlib.sha1(c.id.encode()).hexdigest()[:16]}.tflite"
        write(c.build(), str(out[c.id]))
    return out


def agreement_line(label: str, rows: list[tuple[str, str, str, str]]) -> str:
    """A README table line: per column, how many decided models agree ("yes")."""
    decided = [r for r in rows if r[0] != "undecided"]
    n = len(decided)

    def share(k: int) -> str:
        agree = sum(r[k] == "yes" for r in decided)
        return f"{agree}/{n} ({100 * agree / max(n, 1):.0f}%)"

    return (
        f"| {label} ({len(rows)} one-op models, {len(rows) - n} undecided) | {share(0)} | {share(1)} | {share(2)} | |"
    )

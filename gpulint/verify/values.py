"""check's value-range rule (GPU704): the values a model reaches on inputs the user describes
(`check --inputs X.npz`, or `--input-range LO,HI`), run on the LiteRT CPU interpreter in float,
and the first op of each chain whose result passes half's 65504, which the GPU computes as Inf
in half (issue #39). GPU701-703 read the graph's bounds; this reads the numbers, so it runs only
when the user says what the inputs are, and needs the interpreter (the verify extra).

An op counts as in keep_float.first_overflows: its result passes the limit while what it reads
does not. Where one passes half's range the finding is a warning; where it only comes within a
factor 2 of 65504 (inputs twice as large, or another image, may pass it) it is info.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpulint.model.ir import NUMPY_DTYPES, Model
from gpulint.rules.engine import Finding
from gpulint.rules.numerics import HALF_MAX
from gpulint.text import clean

CODE = "GPU704"
SEEDS = (0, 1, 2)  # --input-range: this many draws, each seed's inputs uniform in the range
NEAR = 2.0  # info where a value comes within this factor of 65504


def parse_range(text: str) -> tuple[float, float]:
    """`LO,HI` (e.g. `0,255`) as two finite numbers, LO < HI; ValueError saying why otherwise."""
    parts = [p.strip() for p in text.split(",")]
    try:
        lo, hi = (float(p) for p in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        lo = hi = math.nan
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"--input-range {text!r}: give two numbers, LO,HI (e.g. 0,255 or -1,1)")
    if lo >= hi:
        raise ValueError(f"--input-range {text!r}: LO must be below HI")
    return lo, hi


@dataclass(frozen=True)
class ValueInputs:
    """What check runs the model on: an .npz of inputs, or float inputs drawn uniformly in a range."""

    npz: Path | None = None
    low: float = 0.0
    high: float = 0.0

    def describe(self) -> str:
        if self.npz is not None:
            return f"the inputs of {self.npz.name}"
        seeds = f"seeds {SEEDS[0]}-{SEEDS[-1]}"
        return f"float inputs uniform in [{self.low:g}, {self.high:g}] ({seeds})"

    def key(self) -> dict[str, Any]:
        """What the result cache keys on: the file's bytes, or the range and its draws."""
        from gpulint.cache import file_digest

        if self.npz is not None:
            return {"npz": file_digest(self.npz)}
        return {"range": [self.low, self.high], "seeds": list(SEEDS)}

    def input_sets(self, model: Model) -> list[list[np.ndarray]]:
        """One set of inputs per draw. With a range, float inputs are uniform in it; other inputs
        are verify's seeded ones (quantized through their scale, integers in the graph's range)."""
        from gpulint import reference

        if self.npz is not None:
            from gpulint.verify.npz import load_inputs

            return [load_inputs(self.npz, model)]
        sg = model.subgraphs[0]
        sets = []
        for seed in SEEDS:
            rng = np.random.default_rng(seed)
            inputs = reference.random_inputs(model, seed)
            for k, t in enumerate(sg.inputs):
                tensor = sg.tensors[t]
                dtype = NUMPY_DTYPES.get(tensor.type) if isinstance(tensor.type, str) else None
                if dtype is not None and dtype.kind == "f":
                    inputs[k] = rng.uniform(self.low, self.high, inputs[k].shape).astype(dtype)
            sets.append(inputs)
        return sets


def value_findings(model: Model, values: ValueInputs) -> list[Finding]:
    """GPU704 on `model`: a warning per first op past half's range, info per first op within a
    factor NEAR of it (and in no overflowing chain), each with the pass that keeps it in range."""
    from gpulint.passes import keep_float
    from gpulint.rules.pack import builtin_rules

    sets = values.input_sets(model)
    tensors = keep_float.peaks(model, sets)
    over = keep_float.first_overflows(model, tensors)
    chained = {i for o in over for i in o.chain}
    near = [o for o in keep_float.first_overflows(model, tensors, HALF_MAX / NEAR) if o.op not in chained]
    found = [(o, HALF_MAX) for o in over] + [(o, HALF_MAX / NEAR) for o in near]
    fixes = keep_float.fixing_passes(model, found, sets) if found else {}
    rule = builtin_rules()[CODE]
    out = []
    for o, past in [(o, True) for o in over] + [(o, False) for o in near]:
        fix = fixes.get(o.op)
        shown = {
            "op": clean(o.name, 60),
            "tensor": clean(o.tensor, 200),
            "value": _shown(o.value),
            "inputs": values.describe(),
            "past": "past half's largest 65504: Inf on the GPU in half"
            if past
            else f"within {NEAR:g}x of half's largest 65504: larger inputs make it Inf on the GPU in half",
            "fix": _fix_words(o, fix, past),
        }
        severity = rule.severity if past else "info"
        out.append(Finding(CODE, rule.name, severity, rule.render(**shown), 0, o.op, o.name, [o.tensor], fix))
    return sorted(out, key=lambda f: f.op_index or 0)


def _shown(value: float) -> str:
    if not math.isfinite(value):
        return "Inf (past float32's range too)"
    return f"{value:.0f}" if value < 1e6 else f"{value:.3g}"


def _fix_words(o: Any, fix: str | None, past: bool) -> str:
    keeps = "keeps it in range" if past else f"keeps it below {HALF_MAX / NEAR:.0f}"
    if fix is not None:
        return f"`gpulint fix --passes {fix} --inputs X.npz` {keeps} on these inputs"
    chain = ", ".join(f"{n} (op {i})" for i, n in zip(o.chain, o.names, strict=True))
    return (
        f"no half-precision pass {keeps} on these inputs: keep-in-float, {chain} "
        "(`gpulint fix --inputs X.npz` says what each way costs)"
    )

"""Differential tests: `gpulint check --target litert-gpu` against LiteRT's GPU accelerator.

Every corpus model, every row of tests/data/placements.yaml (built into a one-op model as
tests/test_placements.py builds it) and every model of the generated one-op grid
(tests/oracle/grid.py) goes through the oracle (tests/oracle/litert.py: ai-edge-litert==2.3.0's WebGPU accelerator on Mesa
lavapipe, set up by `make oracle-webgpu`) and through `check_file` with `--target litert-gpu`.
The accelerator's log names no node indices and no partition count, so they must agree on what
it does say: the outcome (ok, refused), the number of nodes it delegated, and the unsupported ops
with the category of their reason. A disagreement is fixed in the rules from the accelerator's
source (ml_drift_delegate/tflite/model_builder.cc), never allow-listed here. Without the oracle
the tests skip and say why.

The table for README's Fidelity section: `.venv/bin/python tests/test_oracle_litert.py`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS_FILES, corpus_params
from litert_backends import CASES, D2S_CASES, FC_CASES, DepthToSpaceCase, FcCase
from oracle.grid import cases, composite, depthwise, embedding, graph, pack_twice, same_twice
from oracle.models import agreement_line, grid_models, placement_models
from test_placements import ROWS, row_id

from gpulint.check import Settings, check_file
from gpulint.model import write

# Quantized ops on (the accelerator always allows them); the WebGPU backend, the one the oracle runs
# (its OpenCL and Metal backends are held to their sources in tests/test_litert_backends.py).
SETTINGS = Settings(target="litert-gpu", backend="webgpu")
OUTSIDE = "outside the delegated partition"
UNDECIDED = ("crash", "error")


@dataclass
class Prediction:
    outcome: str  # ok | init-failure | refused
    delegated: int
    total: int
    reasons: set[tuple[str, str]] = field(default_factory=set)
    verdict: str = ""
    reason: str = ""
    summaries: list[tuple[int, int]] = field(default_factory=list)  # as LiteRtResult.summaries


def predict(path: str | Path, settings: Settings = SETTINGS) -> Prediction:
    """The one adapter between `gpulint check --target litert-gpu` and the oracle's terms."""
    r = check_file(str(path), settings)
    assert r.error is None, r.error
    outcome = {"refused": "refused", "init-failure": "init-failure"}.get(r.verdict or "", "ok")
    plan = r.plans[0]
    delegated = 0 if outcome == "refused" else len(plan.delegated_nodes)
    reasons = set()
    for p in r.ops:  # the accelerator logs the ops it refuses in every subgraph it is given
        if p.placement == "cpu" and not p.folded:
            why = [x for x in p.reasons if OUTSIDE not in x]
            if why:
                reasons.add((p.op, category(p.op, why[0])))
    total = sum(1 for p in r.ops if p.subgraph == 0)
    fp16 = any(p.subgraph == 0 and p.folded and p.op == "DEQUANTIZE" and "FP16" in " ".join(p.reasons) for p in r.ops)
    if fp16 and outcome == "ok" and delegated < total:
        # FP16GraphPartitionHelper refuses every fp16 constant DEQUANTIZE with no words
        # (tflite/delegates/utils.cc 236-257); the log shows them when the delegation is partial.
        reasons.add(("DEQUANTIZE", "unnamed"))
    summaries = []
    if outcome != "refused":
        for i, sub_plan in enumerate(r.plans):
            nodes = sum(1 for p in r.ops if p.subgraph == i)
            if len(sub_plan.delegated_nodes) < nodes:
                summaries.append((len(sub_plan.delegated_nodes), nodes))
    return Prediction(outcome, delegated, total, reasons, r.verdict or "", r.reason or "", summaries)


def category(op: str, text: str) -> str:
    """The kind of reason the accelerator gave (or gpulint quotes) for not taking an op."""
    text = text.strip()
    if text == "Operation is not supported." or text == op or text.startswith(f"{op} "):
        return "no-parser"
    if (
        "OP is supported, but tensor type/shape isn't compatible" in text
        or text.startswith("Tensor type(")
        or text.startswith("Tensor dimensions must be less than 5")
    ):
        return "tensor-type"  # the gate: gpulint's words, then the accelerator's (mdb 6742-6756)
    if text.startswith("Max version supported"):
        return "version"
    if not text:
        return "unnamed"
    return "check"


def oracle_reasons(res: Any) -> set[tuple[str, str]]:
    out = set()
    for line in res.unsupported:
        op, _, text = line.partition(":")
        op = op.strip().removeprefix("CUSTOM ")
        out.add((op, category(op, text)))
    return out


def disagreements(res: Any, pred: Prediction) -> list[str]:
    out = []
    if res.outcome != pred.outcome:
        out.append(
            f"outcome: oracle {res.outcome}, gpulint {pred.outcome} (verdict {pred.verdict}: {pred.reason[:300]})"
        )
    if res.outcome != "refused" and res.delegated != pred.delegated:
        out.append(f"delegated nodes: oracle {res.delegated} of {res.total}, gpulint {pred.delegated} of {pred.total}")
    got_summaries = [tuple(x) for x in res.summaries]
    if res.outcome == "ok" and got_summaries != pred.summaries:
        out.append(f"subgraphs not taken whole (taken, nodes): oracle {got_summaries}, gpulint {pred.summaries}")
    if res.outcome != "refused":
        got = oracle_reasons(res)
        if got != pred.reasons:
            out.append(
                f"reasons: only the oracle {sorted(got - pred.reasons)}, only gpulint {sorted(pred.reasons - got)}"
            )
    return out


def compare(name: str, path: str | Path, res: Any, settings: Settings = SETTINGS) -> None:
    if res.outcome in UNDECIDED:
        pytest.skip(f"the oracle cannot decide {name}: {res.outcome}: {'; '.join(res.errors)[:300]}")
    pred = predict(path, settings)
    problems = disagreements(res, pred)
    flags = "".join(f" --{k.replace('_', '-')} {v}" for k, v in settings.target_settings.items())
    assert not problems, (
        f"{name}: LiteRT's GPU accelerator and gpulint check --target litert-gpu{flags} disagree\n  "
        + "\n  ".join(problems)
        + f"\nthe accelerator's words:\n{res.words}"
    )


# -- (a) the corpus ---------------------------------------------------------------------------

# Disagreements not yet explained by the accelerator's source: expected failures (strict, so one
# that starts agreeing is noticed), each listed in README's Fidelity section.
OPEN: dict[str, str] = {}


def expect_agreement(request: pytest.FixtureRequest, key: str) -> None:
    if key in OPEN:
        request.node.add_marker(pytest.mark.xfail(reason=OPEN[key], strict=True))


@pytest.fixture(scope="module")
def corpus_answers(litert_oracle: Any) -> dict[str, Any]:
    return dict(litert_oracle(CORPUS_FILES))


@pytest.mark.parametrize("path", corpus_params())
def test_corpus_model(request: pytest.FixtureRequest, path: Path, corpus_answers: dict[str, Any]) -> None:
    expect_agreement(request, path.name)
    compare(path.name, path, corpus_answers[str(path)])


# -- (b) the placements table, one-op models --------------------------------------------------


@pytest.fixture(scope="module")
def row_answers(litert_oracle: Any, oracle_row_models: dict[int, Path | str]) -> dict[str, Any]:
    return dict(litert_oracle([p for p in oracle_row_models.values() if isinstance(p, Path)]))


@pytest.mark.parametrize("i", range(len(ROWS)), ids=[f"{i}-{row_id(r)}" for i, r in enumerate(ROWS)])
def test_placements_row(
    request: pytest.FixtureRequest, i: int, oracle_row_models: dict[int, Path | str], row_answers: dict[str, Any]
) -> None:
    path = oracle_row_models[i]
    if not isinstance(path, Path):
        pytest.skip(f"row {i} does not build into a model ({path})")
    expect_agreement(request, f"row {i}")
    compare(f"placements.yaml row {i} ({row_id(ROWS[i])})", path, row_answers[str(path)])


# -- (c) the generated grid -------------------------------------------------------------------

GRID = cases()


@pytest.fixture(scope="module")
def grid_answers(litert_oracle: Any, oracle_grid_models: dict[str, Path]) -> dict[str, Any]:
    return dict(litert_oracle(list(oracle_grid_models.values())))


@pytest.mark.parametrize("cid", [c.id for c in GRID])
def test_grid_model(
    request: pytest.FixtureRequest, cid: str, oracle_grid_models: dict[str, Path], grid_answers: dict[str, Any]
) -> None:
    expect_agreement(request, cid)
    path = oracle_grid_models[cid]
    compare(f"grid {cid}", path, grid_answers[str(path)])


# -- (d) the backends (#38): dynamic-range FULLY_CONNECTED, both sides -------------------------


@pytest.fixture(scope="module")
def backend_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("backends")
    out = {}
    for case in CASES:
        out[case.id] = folder / f"{case.id}.tflite"
        write(case.model(), out[case.id])
    return out


@pytest.fixture(scope="module")
def backend_answers(litert_oracle: Any, backend_models: dict[str, Path]) -> dict[str, Any]:
    return dict(litert_oracle(list(backend_models.values())))


@pytest.mark.parametrize("case", FC_CASES, ids=lambda c: c.id)
def test_backend_case_on_webgpu(case: FcCase, backend_models: dict[str, Path], backend_answers: dict[str, Any]) -> None:
    """A dynamic-range FULLY_CONNECTED whose output puts its input's rows on the BATCH axis: the
    WebGPU accelerator builds it up to 16 rows and fails from 17 ("Unable to parse bc coord for BATCH
    axis"); the oracle and `--backend webgpu` agree on each case, and the default (every backend) also
    fails on OpenCL and Metal from 2 rows (google-ai-edge/LiteRT#9277, issue #38's op matrix)."""
    path = backend_models[case.id]
    res = backend_answers[str(path)]
    compare(f"backend case {case.id}", path, res)
    assert res.outcome == ("init-failure" if case.fails_on("webgpu") else "ok"), res.words
    if res.outcome == "init-failure":
        assert "Unable to parse bc coord for BATCH axis" in res.log
    every = check_file(str(path), Settings(target="litert-gpu"))
    failing = sorted(b for b, o in every.backends.items() if o["init"] == "init-failure")
    assert failing == sorted(b for b in ("opencl", "metal", "webgpu") if case.fails_on(b)), every.reason


@pytest.mark.parametrize("case", D2S_CASES, ids=lambda c: c.id)
def test_depth_to_space_batch_on_webgpu(
    case: DepthToSpaceCase, backend_models: dict[str, Path], backend_answers: dict[str, Any]
) -> None:
    """WebGPU builds DEPTH_TO_SPACE on a batch of 2 as of 1; OpenCL fails it (LiteRT#8459, its source)."""
    path = backend_models[case.id]
    res = backend_answers[str(path)]
    compare(f"backend case {case.id}", path, res)
    assert res.outcome == "ok", res.words
    every = check_file(str(path), Settings(target="litert-gpu"))
    failing = sorted(b for b, o in every.backends.items() if o["init"] == "init-failure")
    assert failing == (["opencl"] if case.batch > 1 else []), every.reason


# -- (e) what kills the accelerator's process -------------------------------------------------

# compare() skips a model the accelerator died on; here the death is the answer, and check must name
# it: ML Drift's TransposeWeights on runtime depthwise weights, one tensor read twice by BATCH_MATMUL or PACK.
DEATHS = [
    graph("DEPTHWISE_CONV_2D-multiplier2-int8-weights", depthwise(2, "int8")),
    graph("DEPTHWISE_CONV_2D-multiplier2-input-weights", depthwise(2, "input")),
    graph("BATCH_MATMUL-same-tensor-twice", same_twice("BATCH_MATMUL")),
    graph("PACK-same-tensor-twice-[1,8,4]-axis1", pack_twice((1, 8, 4), 1)),
    graph("STABLEHLO_COMPOSITE-odml.rms_norm-rc", composite("odml.rms_norm", "rc", True)),
    graph("STABLEHLO_COMPOSITE-odml.group_norm-rcc", composite("odml.group_norm", "rcc", True)),
    graph("STABLEHLO_COMPOSITE-odml.sdpa-rrrr", composite("odml.scaled_dot_product_attention", "rrrr", False)),
    graph("STABLEHLO_COMPOSITE-odml.sdpa-rrr", composite("odml.scaled_dot_product_attention", "rrr", False)),
    graph("EMBEDDING_LOOKUP-dequant-int8-table", embedding("dequant-int8")),
    graph("EMBEDDING_LOOKUP-input-table", embedding("input")),
]


def test_what_kills_the_accelerator_is_named(litert_oracle: Any, tmp_path: Path) -> None:
    paths = {c.id: tmp_path / f"{c.id}.tflite" for c in DEATHS}
    for c in DEATHS:
        write(c.build(), paths[c.id])
    answers = dict(litert_oracle(list(paths.values())))
    for cid, path in paths.items():
        assert answers[str(path)].outcome == "crash", (cid, answers[str(path)].words)
        pred = predict(path)
        assert pred.outcome == "init-failure" and "process" in pred.reason, (cid, pred.reason)


# -- the README's table -----------------------------------------------------------------------


def table() -> str:  # pragma: no cover - a report, run by hand (see the module docstring)
    import tempfile

    from oracle import litert

    why = litert.unavailable()
    if why:
        raise SystemExit(why)

    def row(res: Any, path: Path) -> tuple[str, str, str, str]:
        if res.outcome in UNDECIDED:
            return ("undecided",) * 3 + (res.outcome,)  # type: ignore[return-value]
        pred = predict(path)
        mark = {True: "yes", False: "**no**"}
        same_count = res.outcome == "refused" or res.delegated == pred.delegated
        same_reasons = res.outcome == "refused" or oracle_reasons(res) == pred.reasons
        return (
            mark[res.outcome == pred.outcome],
            mark[same_count],
            mark[same_reasons],
            f"{res.outcome} {res.delegated}/{res.total} / {pred.outcome} {pred.delegated}/{pred.total}",
        )

    lines = [
        "| model | outcome | delegated count | unsupported ops (op, reason kind) | oracle / gpulint |",
        "|---|---|---|---|---|",
    ]
    answers = litert.litert_oracle(CORPUS_FILES)
    for p in CORPUS_FILES:
        lines.append(f"| {p.parent.name}/{p.stem} | " + " | ".join(row(answers[str(p)], p)) + " |")
    with tempfile.TemporaryDirectory() as tmp:
        groups = {
            "placements.yaml rows": [p for p in placement_models(Path(tmp)).values() if isinstance(p, Path)],
            "generated grid": list(grid_models(Path(tmp)).values()),
        }
        for label, paths in groups.items():
            got = litert.litert_oracle(paths)
            lines.append(agreement_line(label, [row(got[str(p)], p) for p in paths]))
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    print(table())

"""check against both real runtimes on the generative corpus (issue #47), every model and signature.

The classic delegate (the GL oracle, ../shared/oracle): each signature of each model is made the main
subgraph (gpulint.model.signatures.as_main, which keeps every subgraph) and asked of the delegate, which
applies itself to subgraph 0 first and stops at its first failure; check's plan of that subgraph must
agree on the init outcome, the delegated nodes, the partitions and the kinds of reasons, as
test_oracle_fidelity holds the other corpora. LiteRT 2.3's accelerator compiles a whole model; on this
corpus it dies on every one (checks/composite.py says why), and check must name that death.

One difference in the reasons is the delegates' own versions, not a modelling gap: the GL oracle's build
(mediapipe 1.2.2) checks only SELECT's condition type in gpu_compatibility.cc's CheckSelectV2, so an INT32
SELECT is left out for its tensor types ("OP is supported, but tensor type/shape isn't compatible"), where
the LiteRT f67457790c9c source the classic pack follows refuses it in CheckSelectV2's own words ("...
if, else tensors must be float ..."). The op stays on the CPU either way; only that reason's kind differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_corpus_generative import corpus
from test_oracle_fidelity import disagreements, predict

from gpulint.check import check_file
from gpulint.model import read, write
from gpulint.model.signatures import as_main, keys
from gpulint.settings import Settings

VERSION_DIFFERENCES = {
    "reasons: only the oracle [('SELECT', 'tensor-type')], only gpulint [('SELECT', 'check')]",
}


def corpus_models() -> list[Path]:
    folder, manifest, _ = corpus()
    if folder is None:
        return []
    return sorted(folder / n for n, e in manifest["models"].items() if n.endswith(".tflite") and "error" not in e)


def _skip_without_corpus() -> list[Any]:
    folder, _, why = corpus()
    return [] if folder is not None else [pytest.param(None, marks=pytest.mark.skip(reason=why), id="no-corpus")]


@pytest.fixture(scope="module")
def signature_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`{model}__{signature}` -> the model with that signature's subgraph first."""
    folder = tmp_path_factory.mktemp("signatures")
    out = {}
    for path in corpus_models():
        model = read(path)
        for key in keys(model):
            out[f"{path.stem}__{key}"] = folder / f"{path.stem}__{key}.tflite"
            write(as_main(model, key), out[f"{path.stem}__{key}"], allow_loss=True)
    return out


@pytest.fixture(scope="module")
def gl_answers(gl_oracle: Any, signature_files: dict[str, Path]) -> dict[str, Any]:
    return dict(gl_oracle(list(signature_files.values())))


def signature_ids() -> list[Any]:
    ids = []
    for path in corpus_models():
        ids += [f"{path.stem}__{key}" for key in keys(read(path))]
    return ids or _skip_without_corpus()


@pytest.mark.parametrize("case", signature_ids())
def test_check_agrees_with_the_gl_delegate(case: str, signature_files: dict[str, Path], gl_answers: Any) -> None:
    path = signature_files[case]
    res = gl_answers[str(path)]
    assert res.outcome not in ("crash", "error"), res.words
    problems = [d for d in disagreements(res, predict(path)) if d not in VERSION_DIFFERENCES]
    assert not problems, f"{case}: the GL delegate and check disagree\n  " + "\n  ".join(problems) + f"\n{res.words}"


@pytest.fixture(scope="module")
def accelerator_answers(litert_oracle: Any) -> dict[str, Any]:
    return dict(litert_oracle(corpus_models()))


@pytest.mark.parametrize("name", [p.stem for p in corpus_models()] or _skip_without_corpus())
def test_check_names_what_the_accelerator_does(name: str, accelerator_answers: dict[str, Any]) -> None:
    path = next(p for p in corpus_models() if p.stem == name)
    res = accelerator_answers[str(path)]
    result = check_file(str(path), Settings(target="litert-gpu"))
    if res.outcome == "crash":
        assert result.verdict == "init-failure" and "process dies" in result.reason, result.reason
    else:  # none here dies otherwise today; were one to compile, check must not call it a death
        assert "process dies" not in result.reason, (res.outcome, res.words)

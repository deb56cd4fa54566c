"""Every command on the generative corpus (issue #47) and on ../shared/models: an exit code, never a traceback.

The generative corpus is what litert-torch 0.10's generative API writes for its own examples with fake (tiny)
configs and random weights: five decoder families (SmolLM2, TinyLlama, Gemma 3, Qwen 3, Phi-2; signatures
`prefill_8` and `decode`, an external KV cache, STABLEHLO_COMPOSITE bodies) and two that are not decoders
(Stable Diffusion's CLIP text encoder, Gemma 3's SigLIP image encoder), each as f32, fp16 weights, dynamic-range
int8, weight-only int8 and dynamic-range int4, plus three .litertlm bundles made by litert-torch's LiteRT-LM
builder (tests/converters/generative_build.py, built by tests/converters/setup_generative.sh in .generative-venv
and cached in .converter-cache/generative/<key>/). Without that venv or cache the tests skip and say why
(`make converters` builds both).

What is held here is the issue's first Done-means line, not what each command should find: over the generative
corpus and every model of ../shared/models, `inspect`, `check` (text and JSON), `check --target litert-gpu`,
`fix -o` and `report` (every model), `verify` (default engine, fp32) and `bench` (each generative family's float
model and its smallest, and the smallest model of each shared family: they run the executor, seconds a model)
end with exit 0, 1, 2, 3 or 4, never a traceback or a signal. The static commands run in-process (typer's
CliRunner: an exception that escapes the command fails the test, as the one-line catch-all of gpulint.cli.main
is not in that path); verify and bench run as subprocesses of this venv's gpulint, so a native crash (a signal)
is seen as one. A case the tool does not meet yet is a strict xfail naming it (EXPECTED_FAIL), so its fix shows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import CORPUS, CORPUS_FILES
from converters import generative_build
from converters.corpus import built_model, find
from typer.testing import CliRunner

from gpulint.cli import app

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("GPULINT_GENERATIVE_VENV", ROOT / ".generative-venv"))
CACHE = Path(os.environ.get("GPULINT_GENERATIVE_CACHE", ROOT / ".converter-cache" / "generative"))
BUILD = Path(generative_build.__file__)
SETUP = "tests/converters/setup_generative.sh (or `make converters`)"
GPULINT = Path(sys.executable).with_name("gpulint")
NAMES = generative_build.corpus_names()
SHARED_RECIPE = re.compile(r"_(f32|f16|int8|int8io32|dr8)$")  # ../shared/models/tfconv: {family}_{recipe}
EXIT_CODES = (0, 1, 2, 3, 4)  # verify: 3 CPU-ONLY, 4 INCONCLUSIVE
SUBPROCESS_TIMEOUT = 600

runner = CliRunner()

# (model id, command) -> why the tool does not do it yet. Strict: the fix turns the case into an XPASS failure,
# and whoever fixes it removes the line. Model ids are the test ids (generative: `smollm_f32`; shared:
# `shared/tfconv/pixel_shuffle_64_f32`; for verify and bench: `smollm-f32`, `smollm-smallest`,
# `shared/tfconv/pixel_shuffle_64`).
EXPECTED_FAIL: dict[tuple[str, str], str] = {}


@cache
def corpus() -> tuple[Path | None, dict[str, Any], str]:
    """The built corpus folder and its manifest, or None and why there is none."""
    return find(VENV, BUILD, CACHE, "generative corpus", SETUP)


def generative_path(name: str) -> Path:
    return built_model(corpus(), name)


def shared_id(path: Path) -> str:
    return f"shared/{path.relative_to(CORPUS).with_suffix('').as_posix()}"


def model_ids() -> list[str]:
    return [n.rsplit(".", 1)[0] if n.endswith(".tflite") else n for n in NAMES] + [shared_id(p) for p in CORPUS_FILES]


def model_path(model: str) -> Path:
    if model.startswith("shared/"):
        return CORPUS / (model.removeprefix("shared/") + ".tflite")
    return generative_path(model if model.endswith(".litertlm") else f"{model}.tflite")


def executor_ids() -> list[str]:
    """What verify and bench run on: each generative family's float model and its smallest, and the smallest
    model of each family of ../shared/models (they run the executor, seconds a model)."""
    shared = {shared_id(p.with_name(SHARED_RECIPE.sub("", p.stem) + p.suffix)) for p in CORPUS_FILES}
    generative = [f"{f}-{which}" for f in generative_build.FAMILIES for which in ("f32", "smallest")]
    return generative + sorted(shared)


def executor_model(model: str) -> Path:
    if model.startswith("shared/"):
        stem = Path(model.removeprefix("shared/"))
        members = [p for p in CORPUS_FILES if p.parent == CORPUS / stem.parent]
        members = [p for p in members if SHARED_RECIPE.sub("", p.stem) == stem.name]
        return min(members, key=lambda p: (p.stat().st_size, p.name))
    family, which = model.rsplit("-", 1)
    if which == "f32":
        return generative_path(f"{family}_f32.tflite")
    folder, manifest, why = corpus()
    if folder is None:
        pytest.skip(why)
    built = [
        n for n, e in manifest["models"].items() if e["family"] == family and n.endswith(".tflite") and "error" not in e
    ]
    if not built:
        pytest.skip(f"litert-torch made no model of {family}")
    return folder / min(built, key=lambda n: (manifest["models"][n]["size"], n))


def cases(ids: list[str], command: str) -> list[Any]:
    out = []
    for model in ids:
        why = EXPECTED_FAIL.get((model, command))
        marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
        out.append(pytest.param(model, marks=marks, id=model))
    return out


def invoke(*args: str) -> Any:
    """In-process; an exception that escapes the command (a traceback for a user) fails the test."""
    result = runner.invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(result.exception)[-6:])
        pytest.fail(f"`gpulint {' '.join(args)}` raised:\n{tb}")
    assert result.exit_code in EXIT_CODES, (result.exit_code, result.output[-2000:])
    assert "Traceback (most recent call last)" not in result.output, result.output[-3000:]
    return result


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A subprocess of this venv's gpulint: a signal is a negative return code."""
    env = {k: v for k, v in os.environ.items() if k != "GPULINT_TRACEBACK"}
    proc = subprocess.run(
        [str(GPULINT), *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, env=env, check=False
    )
    words = (proc.stdout + proc.stderr)[-3000:]
    if proc.returncode < 0:
        pytest.fail(f"`gpulint {' '.join(args)}` died of {signal.Signals(-proc.returncode).name}:\n{words}")
    assert proc.returncode in EXIT_CODES, (proc.returncode, words)
    assert "Traceback (most recent call last)" not in proc.stdout + proc.stderr, words
    assert "gpulint: internal error" not in proc.stderr, words
    return proc


# -- the corpus itself ------------------------------------------------------------------------------


def test_corpus_is_what_the_issue_asked() -> None:
    """At least five decoder families and one that is not a decoder, in each recipe, and some bundles."""
    folder, manifest, why = corpus()
    if folder is None:
        pytest.skip(why)
    models = manifest["models"]
    built = {n: e for n, e in models.items() if "error" not in e}
    decoders = {e["family"] for e in built.values() if e["kind"] == "decoder"}
    others = {e["family"] for e in built.values() if e["kind"] == "encoder"}
    assert len(decoders) >= 5 and others, (decoders, others)
    for name, entry in built.items():
        assert (folder / name).stat().st_size == entry["size"], name
        if entry["kind"] == "decoder":  # as convert_to_tflite writes them: prefill and decode, one KV cache
            assert set(entry["signatures"]) == {f"prefill_{generative_build.PREFILL}", "decode"}, name
            assert entry["subgraphs"] > 2, name  # composite bodies (odml.*) beside the two signatures
            assert "STABLEHLO_COMPOSITE" in entry["signatures"]["decode"]["histogram"], name
    for decoder in sorted(decoders):  # every decoder in every recipe the converter offers
        assert {e["recipe"] for e in built.values() if e["family"] == decoder} >= set(generative_build.RECIPES)
    assert any(e["kind"] == "litertlm" for e in built.values()), {n: e.get("error") for n, e in models.items()}


# -- static commands: every model -------------------------------------------------------------------


@pytest.mark.parametrize("model", cases(model_ids(), "inspect"))
def test_inspect(model: str) -> None:
    invoke("inspect", str(model_path(model)))
    invoke("inspect", "--json", str(model_path(model)))


@pytest.mark.parametrize("model", cases(model_ids(), "check"))
def test_check(model: str) -> None:
    path = model_path(model)
    invoke("check", str(path))
    result = invoke("check", str(path), "--format", "json")
    if result.exit_code != 2:
        (file,) = json.loads(result.stdout)["files"]
        assert file["verdict"], file


@pytest.mark.parametrize("model", cases(model_ids(), "check-litert"))
def test_check_litert_gpu(model: str) -> None:
    result = invoke("check", str(model_path(model)), "--target", "litert-gpu", "--format", "json")
    if result.exit_code != 2:
        (file,) = json.loads(result.stdout)["files"]
        assert file["verdict"], file


@pytest.mark.parametrize("model", cases(model_ids(), "fix"))
def test_fix(model: str, tmp_path: Path) -> None:
    path = model_path(model)
    out = tmp_path / path.name
    result = invoke("fix", str(path), "-o", str(out))
    if result.exit_code == 0:
        assert out.is_file(), result.output


@pytest.mark.parametrize("model", cases(model_ids(), "report"))
def test_report(model: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = invoke("report", str(model_path(model)), "-o", str(out))
    if result.exit_code == 0:
        assert out.is_file(), result.output


# -- the executor: a float and the smallest model of each generative family, the smallest of each shared one --


@pytest.mark.parametrize("model", cases(executor_ids(), "verify"))
def test_verify(model: str) -> None:
    run("verify", str(executor_model(model)), "--precision", "fp32")


@pytest.mark.parametrize("model", cases(executor_ids(), "bench"))
def test_bench(model: str) -> None:
    run("bench", str(executor_model(model)), "--runs", "1", "--no-start")

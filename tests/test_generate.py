"""Signatures and generation (issue #47): `verify --signature NAME` runs that signature, and
`verify --generate N` runs a decoder's prefill and N decode steps with the KV cache carried, on an
engine and on the CPU interpreter side by side, on tests/toy_decoder.py's decoder (the interface of
litert-torch's generative exports)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import conv_model, needs_accelerator, needs_opencl
from toy_decoder import decoder
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import ModelError, write
from gpulint.model.build import ModelBuilder
from gpulint.model.signatures import as_main, keys

runner = CliRunner()
ENGINES = [pytest.param("opencl", marks=needs_opencl()), pytest.param("litert-gpu", marks=needs_accelerator())]


def saved(tmp_path: Path, name: str = "decoder.tflite", **kw: object) -> Path:
    path = tmp_path / name
    write(decoder(**kw), path)  # type: ignore[arg-type]
    return path


def test_as_main_puts_the_signature_first_and_keeps_every_reference() -> None:
    model = decoder()
    assert keys(model) == ["prefill_4", "decode"]
    main = as_main(model, "decode")
    assert [sg.name for sg in main.subgraphs] == ["decode", "prefill_4"]
    assert [(s.signature_key, s.subgraph_index) for s in main.signature_defs or []] == [("decode", 0), ("prefill_4", 1)]
    assert [sg.name for sg in model.subgraphs] == ["prefill_4", "decode"]  # the original is untouched


def test_as_main_renumbers_the_subgraphs_an_op_calls() -> None:
    mb = ModelBuilder()
    main = mb.subgraph("main")
    x = main.input("x", [1])
    for name in ("body", "cond"):
        g = mb.subgraph(name)
        g.output(g.op("RELU", [g.input("y", [1])], [1]))
    main.output(main.op("WHILE", [x], [1], options=dict(cond_subgraph_index=2, body_subgraph_index=1)))
    mb.signature("loop", 0)
    mb.signature("body", 1)
    moved = as_main(mb.build(), "body")
    opts = moved.subgraphs[1].operators[0].builtin_options
    assert opts is not None and (opts["cond_subgraph_index"], opts["body_subgraph_index"]) == (2, 0)


def test_an_unknown_signature_is_one_line_naming_the_signatures(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no signature 'nope' \\(its signatures: 'prefill_4', 'decode'\\)"):
        as_main(decoder(), "nope")
    result = runner.invoke(app, ["verify", str(saved(tmp_path)), "--signature", "nope"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and "its signatures: 'prefill_4', 'decode'" in result.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_verify_runs_the_signature_asked(tmp_path: Path, engine: str) -> None:
    result = runner.invoke(
        app, ["verify", str(saved(tmp_path)), "--signature", "decode", "--engine", engine, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["model"] == str(tmp_path / "decoder.tflite")
    assert sorted(o["name"] for o in body["outputs"]) == ["kv_cache_k_0_out", "logits"]


@pytest.mark.parametrize("engine", ENGINES)
def test_generation_passes_on_a_good_decoder(tmp_path: Path, engine: str) -> None:
    result = runner.invoke(app, ["verify", str(saved(tmp_path)), "--generate", "8", "--engine", engine])
    assert result.exit_code == 0, result.output
    assert f"PASS generation on {engine}" in result.stdout
    assert "(prefill_4 then decode, prompt of 5 tokens): tokens 1-8 agree" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 8, result.stdout


@needs_opencl()
def test_generation_fails_a_decoder_with_one_weight_scaled(tmp_path: Path) -> None:
    good, bad = saved(tmp_path), saved(tmp_path, "bad.tflite", head_scale={0: 10.0, 1: -10.0})
    result = runner.invoke(app, ["verify", str(good), "--candidate", str(bad), "--generate", "8", "--format", "json"])
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert body["status"] == "FAIL" and body["agreement"].endswith("differs")
    steps = body["steps"]
    assert len(steps) == 8 and any(not s["agrees"] and not s["tie"] for s in steps)
    assert [s["position"] for s in steps] == list(range(4, 12))
    # each step is fed the CPU's greedy pick of the step before
    assert all(b["fed"] == a["cpu_next"] for a, b in itertools.pairwise(steps))


@needs_opencl()
def test_generation_carries_the_cache(tmp_path: Path) -> None:
    """The toy decoder's logits are its LM head on the sum of the embeddings of every token so far:
    each step's greedy pick, computed here from its weights, is the one both sides made, which only a
    cache carried from step to step (and positions that follow the prompt) give."""
    result = runner.invoke(app, ["verify", str(saved(tmp_path)), "--generate", "6", "--format", "json"])
    body = json.loads(result.stdout)
    rng = np.random.default_rng(0)
    table, head = rng.standard_normal((32, 8)).astype(np.float32), rng.standard_normal((32, 8)).astype(np.float32)
    seen = list(body["prompt"])
    for step in body["steps"]:
        want = int(np.argmax(head @ table[seen].sum(axis=0)))
        assert (step["cpu_next"], step["engine_next"]) == (want, want), (step, seen)
        seen.append(want)


def test_generation_needs_a_decoder(tmp_path: Path) -> None:
    path = tmp_path / "conv.tflite"
    write(conv_model(), path)
    result = runner.invoke(app, ["verify", str(path), "--generate", "4"])
    assert result.exit_code == 2, result.output
    assert "--generate needs a prefill and a decode signature (this model's signatures: none)" in result.stderr


def test_generation_past_the_cache_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(saved(tmp_path)), "--generate", "20"])
    assert result.exit_code == 2, result.output
    assert "the KV cache holds 16" in result.stderr


def test_generation_and_signature_do_not_mix(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(saved(tmp_path)), "--generate", "2", "--signature", "decode"])
    assert result.exit_code == 2 and "--generate runs one decoder's" in result.stderr


def test_a_zero_cache_and_positions_feed_prefill() -> None:
    from gpulint.verify.generate import Interface, _feed

    sig = Interface.of(decoder(), "prefill_4")
    feed = _feed(sig, [3, 4, 5, 6], [0, 1, 2, 3], None)
    assert feed["tokens"].tolist() == [[3, 4, 5, 6]] and feed["input_pos"].tolist() == [0, 1, 2, 3]
    assert feed["kv_cache_k_0"].shape == (1, 16, 8) and not np.any(feed["kv_cache_k_0"])


def test_check_names_each_signature(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(saved(tmp_path)), "--format", "json"])
    body = json.loads(result.stdout)["files"][0]
    assert body["signatures"] == {"prefill_4": [0], "decode": [1]}
    assert [p["signature"] for p in body["partitions"]] == ["prefill_4", "decode"]
    text = runner.invoke(app, ["check", str(saved(tmp_path))]).stdout
    assert "subgraph 0 (signature prefill_4): " in text and "subgraph 1 (signature decode): " in text


def test_check_signature_reports_that_signature_only(tmp_path: Path) -> None:
    path = saved(tmp_path)
    whole = json.loads(runner.invoke(app, ["check", str(path), "--format", "json"]).stdout)["files"][0]
    result = runner.invoke(app, ["check", str(path), "--signature", "decode", "--format", "json"])
    body = json.loads(result.stdout)["files"][0]
    assert body["signature"] == "decode"
    assert [p["subgraph"] for p in body["partitions"]] == [1]
    assert {f["subgraph"] for f in body["findings"]} <= {1, None}
    assert 0 < len(body["findings"]) < len(whole["findings"])
    # OpenGL fails to initialize on prefill's RESHAPE: the runtime delegates both signatures at once,
    # so decode's verdict is the whole model's, and says so
    assert body["verdict"] == whole["verdict"] == "init-failure"
    assert body["reason"].startswith("the whole model, whose every subgraph the runtime delegates at once: ")


def test_check_signature_on_the_opencl_backend_is_its_own_verdict(tmp_path: Path) -> None:
    path = saved(tmp_path)
    result = runner.invoke(app, ["check", str(path), "--backend", "opencl", "--signature", "decode"])
    assert "verdict of signature decode: " in result.stdout, result.stdout
    assert "subgraph 0" not in result.stdout


def test_check_unknown_signature_is_an_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["check", str(saved(tmp_path)), "--signature", "nope"])
    assert result.exit_code == 2
    assert "the model has no signature 'nope' (its signatures: 'prefill_4', 'decode')" in result.stderr


@needs_opencl()
def test_bench_times_prefill_and_decode(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["bench", str(saved(tmp_path)), "--generate", "--runs", "1", "--no-start", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["prefill_tokens"] == 4
    assert set(body["prefill_tokens_per_s"]) == set(body["decode_ms_per_token"]) == {"cpu", "executor"}
    assert all(v > 0 for v in [*body["prefill_tokens_per_s"].values(), *body["decode_ms_per_token"].values()])
    # the rates are the steps' own times: 4 tokens in the prefill's median (the JSON rounds ms to 4 decimals)
    assert body["prefill_tokens_per_s"]["cpu"] == pytest.approx(
        4 / (body["prefill"]["cpu_interpreter_ms"] / 1e3), rel=0.1
    )
    assert body["decode_ms_per_token"]["executor"] == pytest.approx(body["decode"]["executor_ms"], abs=1e-3)
    assert body["decode"]["model"].endswith("(decode)")


@needs_opencl()
def test_bench_one_signature(tmp_path: Path) -> None:
    result = runner.invoke(app, ["bench", str(saved(tmp_path)), "--signature", "decode", "--runs", "1", "--no-start"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{tmp_path / 'decoder.tflite'} (decode) on ")
    bad = runner.invoke(app, ["bench", str(saved(tmp_path)), "--generate", "--signature", "decode"])
    assert bad.exit_code == 2 and "leave out --signature" in bad.stderr
    conv = tmp_path / "conv.tflite"
    write(conv_model(), conv)
    bad = runner.invoke(app, ["bench", str(conv), "--generate"])
    assert bad.exit_code == 2 and "needs a prefill and a decode signature" in bad.stderr


def test_a_signature_is_never_run_from_a_copy_that_drops_fields(tmp_path: Path) -> None:
    """A model whose fields the installed schema does not know (an int4 blockwise quantization, say):
    the signature's copy would lose them and the CPU would run another model, so it is one error line."""
    from helpers import root, table_field_pos

    from gpulint.model import to_bytes

    data = bytearray(to_bytes(decoder()))
    data[table_field_pos(root(data).Subgraphs(1).Operators(0), 10)] = 250  # Operator.builtin_options_type
    path = tmp_path / "unknown.tflite"
    path.write_bytes(bytes(data))
    for args in (
        ["verify", "--signature", "decode"],
        ["verify", "--generate", "2"],
        ["bench", "--signature", "decode"],
    ):
        result = runner.invoke(app, [args[0], str(path), *args[1:]])
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and "writing would drop" in result.stderr, (args, result.stderr)

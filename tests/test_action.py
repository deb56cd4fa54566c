"""The GitHub Action (action.yml): its steps are action/gpulint-check.sh's, run here as GitHub
would run them (install into a fresh virtualenv, check to SARIF, verdict), on sample models.
Only the upload (github/codeql-action/upload-sarif) is GitHub's own and is not run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import jsonschema
import pytest
import yaml
from test_check_cli import sarif_schema

from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "action" / "gpulint-check.sh"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def test_action_yml_runs_the_scripts_steps() -> None:
    """A composite action whose steps call the script's install, check and verdict in that order,
    with the upload between check and verdict reading the check step's SARIF output."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert runs == [f'"$GITHUB_ACTION_PATH/action/gpulint-check.sh" {step}' for step in ("install", "check", "verdict")]
    assert all(s["shell"] == "bash" for s in steps if "run" in s)
    script = SCRIPT.read_text()
    for s in steps:
        for var in s.get("env", {}):
            assert var in script, var  # every variable the action sets is one the script reads
    names = [s.get("id") or s.get("uses", "").split("@")[0] for s in steps]
    check, upload = names.index("check"), names.index("github/codeql-action/upload-sarif")
    assert check < upload < len(steps) - 1  # uploaded whatever the check found, before the verdict fails the job
    assert steps[upload]["with"]["sarif_file"] == "${{ steps.check.outputs.sarif-file }}"
    assert steps[upload]["if"].startswith("always()") and steps[-1]["if"].startswith("always()")
    assert steps[-1]["env"]["GPULINT_EXIT_CODE"] == "${{ steps.check.outputs.exit-code }}"
    assert set(action["outputs"]) == {"sarif-file", "exit-code"}


def step(name: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run([BASH, str(SCRIPT), name], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def outputs(path: Path) -> dict[str, str]:
    """What a step wrote to $GITHUB_OUTPUT (then empties it for the next step)."""
    found = dict(line.split("=", 1) for line in path.read_text().splitlines())
    path.write_text("")
    return found


def fresh_venv(tmp_path: Path) -> Path:
    """A new virtualenv that sees this one's packages (gpulint's dependencies, setuptools) through a
    .pth file, but not gpulint: the install step puts it there."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def source_copy(tmp_path: Path) -> Path:
    """The package's sources, as a checkout of the action has them (no build in this tree)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "gpulint", src / "gpulint", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_the_actions_steps_on_sample_models(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    write(sample_model(), repo / "models" / "bad.tflite")  # GPU101 errors, split into 3 GPU partitions
    mb = ModelBuilder()
    g = mb.subgraph()
    g.output(g.op("RELU", [g.input("x", [1, 8, 8, 4])], [1, 8, 8, 4]))
    write(mb.build(), repo / "models" / "good.tflite")
    venv = fresh_venv(tmp_path)
    out = tmp_path / "github_output"
    out.write_text("")
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "GITHUB_OUTPUT": str(out),
        "GITHUB_ACTION_PATH": str(ROOT),
    }

    # install: `none` with no gpulint on PATH is one error; then pip installs the sources
    bare = os.pathsep.join(d for d in env["PATH"].split(os.pathsep) if not (Path(d) / "gpulint").exists())
    r = step("install", repo, {**env, "PATH": bare, "GPULINT_INSTALL": "none"})
    assert r.returncode == 2 and "::error::gpulint: install is 'none' but no gpulint is on PATH" in r.stdout
    spec = f"--no-deps {source_copy(tmp_path)}"  # its dependencies: this venv's, through deps.pth
    r = step("install", repo, {**env, "GPULINT_INSTALL": spec})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("gpulint ")
    assert shutil.which("gpulint", path=env["PATH"]) == str(venv / "bin" / "gpulint")

    # check: the step passes whatever the check found (the upload runs next); its outputs say
    r = step("check", repo, {**env, "GPULINT_PATHS": "models", "GPULINT_ARGS": "--max-partitions 1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert outputs(out) == {"exit-code": "1", "sarif-file": "gpulint.sarif"}
    sarif = json.loads((repo / "gpulint.sarif").read_text())
    jsonschema.validate(sarif, sarif_schema())
    results = {
        (x["ruleId"], x["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
        for x in sarif["runs"][0]["results"]
    }
    assert ("GPU101", "models/bad.tflite") in results and ("gpulint/max-partitions", "models/bad.tflite") in results
    assert not [x for x in results if x[1] == "models/good.tflite"]
    # the log says what failed and why
    assert "models/bad.tflite: GPU101 [error] `SPACE_TO_BATCH_ND` has no GPU delegate implementation" in r.stdout
    assert (
        "models/bad.tflite: gate failed: subgraph 0 splits into 3 GPU partitions (runs of supported ops; the delegate takes 1), "
        "more than --max-partitions 1" in r.stdout
    )
    r = step("verdict", repo, {**env, "GPULINT_EXIT_CODE": "1"})
    assert r.returncode == 1 and r.stdout.startswith(
        "::error::gpulint check failed: findings at or above --fail-on, or a gate"
    )

    r = step("check", repo, {**env, "GPULINT_PATHS": "models/good.tflite", "GPULINT_SARIF": "out/good.sarif"})
    assert r.returncode == 0 and outputs(out) == {"exit-code": "0", "sarif-file": "out/good.sarif"}
    assert json.loads((repo / "out" / "good.sarif").read_text())["runs"][0]["results"] == []
    r = step("verdict", repo, {**env, "GPULINT_EXIT_CODE": "0"})
    assert r.returncode == 0 and r.stdout.strip() == "gpulint check passed"

    # bad input: exit 2, the SARIF says which file (uploaded); a bad flag: no SARIF, nothing to upload
    r = step("check", repo, {**env, "GPULINT_PATHS": "models/missing.tflite", "GPULINT_SARIF": "missing.sarif"})
    assert r.returncode == 0 and outputs(out) == {"exit-code": "2", "sarif-file": "missing.sarif"}
    assert "gpulint: error: models/missing.tflite: no such file" in r.stderr
    r = step(
        "check",
        repo,
        {**env, "GPULINT_PATHS": "models", "GPULINT_ARGS": "--target nope", "GPULINT_SARIF": "nope.sarif"},
    )
    assert r.returncode == 0 and outputs(out) == {"exit-code": "2"} and not (repo / "nope.sarif").exists()
    for code in ("2", ""):
        r = step("verdict", repo, {**env, "GPULINT_EXIT_CODE": code})
        assert r.returncode == 2 and r.stdout.startswith("::error::gpulint check")

"""The `gpulint-check` hook in .pre-commit-hooks.yaml, run by the real pre-commit tool.

pre-commit installs gpulint from this checkout into its own virtualenv (pip, from the
package index or pip's cache), so this test is slow the first time (~15 s with a warm cache).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="the checkout is not a git repository")
def test_hook_runs_under_pre_commit(tmp_path: Path) -> None:
    repo = tmp_path / "app"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    write(sample_model(), repo / "bad.tflite")
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    g.output(g.op("RELU", [x], [1, 8, 8, 4]))
    write(mb.build(), repo / "good.tflite")
    (repo / "README.md").write_text("not a model\n")
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}

    def hook(*files: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), "gpulint-check", "--files", *files]
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)

    good = hook("good.tflite", "README.md")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "gpulint check" in good.stdout and "Passed" in good.stdout
    bad = hook("bad.tflite", "good.tflite")
    assert bad.returncode == 1
    assert "Failed" in bad.stdout
    assert "bad.tflite: GPU101 [error] `SPACE_TO_BATCH_ND` has no GPU delegate implementation" in bad.stdout

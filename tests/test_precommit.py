"""The `gpulint-check` hook in .pre-commit-hooks.yaml, run by the real pre-commit tool.

pre-commit installs gpulint from this checkout into its own virtualenv (pip, from the
package index or pip's cache), so this test is slow the first time (~15 s with a warm cache).
That virtualenv is the light install: no OpenCL executor, no LiteRT runtime (#40 item 7).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import copy_tracked

from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

ROOT = Path(__file__).resolve().parents[1]


def hook_repository(dst: Path, git: list[str]) -> str:
    """The checkout as pre-commit sees a hook repository: its hook manifest and the package's sources
    (as they are in the work tree, as `pre-commit try-repo` takes them) committed in a repository
    of their own; the commit's SHA. pre-commit's store then keeps the environment it installs."""
    copy_tracked(dst, [".pre-commit-hooks.yaml", "pyproject.toml", "README.md", "LICENSE", "gpulint"])
    subprocess.run([*git, "init", "-q"], cwd=dst, check=True)
    subprocess.run([*git, "add", "."], cwd=dst, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "hooks"], cwd=dst, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=dst, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="the checkout is not a git repository")
def test_hook_runs_under_pre_commit(tmp_path: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    hooks = tmp_path / "hooks"
    sha = hook_repository(hooks, git)
    repo = tmp_path / "app"
    repo.mkdir()
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    write(sample_model(), repo / "bad.tflite")
    mb = ModelBuilder()
    g = mb.subgraph()
    x = g.input("x", [1, 8, 8, 4])
    g.output(g.op("RELU", [x], [1, 8, 8, 4]))
    write(mb.build(), repo / "good.tflite")
    (repo / "README.md").write_text("not a model\n")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks}\n    rev: {sha}\n    hooks:\n      - id: gpulint-check\n"
    )
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}

    def hook(*files: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pre_commit", "run", "--files", *files]
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)

    good = hook("good.tflite", "README.md")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "gpulint check" in good.stdout and "Passed" in good.stdout
    bad = hook("bad.tflite", "good.tflite")
    assert bad.returncode == 1
    assert "Failed" in bad.stdout
    assert "bad.tflite: GPU101 [error] `SPACE_TO_BATCH_ND` has no GPU delegate implementation" in bad.stdout
    # the hook's environment: gpulint and check's dependencies, not the verify extra's packages
    (site,) = Path(env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*/lib/python*/site-packages")
    installed = {p.name.lower() for p in site.iterdir()}
    assert "gpulint" in installed and "numpy" in installed
    assert not installed & {"pyopencl", "ai_edge_litert", "pocl_binary_distribution", "pydantic"}, sorted(installed)


def readme_config() -> str:
    """The first `.pre-commit-config.yaml` block of the pre-commit guide (docs/guides/pre-commit.md,
    where README's pre-commit section moved), as a user pastes it."""
    section = (ROOT / "docs" / "guides" / "pre-commit.md").read_text()
    return section[section.index("```yaml\n") + len("```yaml\n") : section.index("\n```", section.index("```yaml"))]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_readmes_config_works_when_pasted(tmp_path: Path) -> None:
    """README's block in a fresh repository's .pre-commit-config.yaml: pre-commit accepts it, the
    hook passes a good model and fails the sample with its GPU101 line (#40 item 3)."""
    repo = tmp_path / "app"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / ".pre-commit-config.yaml").write_text(readme_config() + "\n")
    write(sample_model(), repo / "bad.tflite")
    mb = ModelBuilder()
    g = mb.subgraph()
    g.output(g.op("RELU", [g.input("x", [1, 8, 8, 4])], [1, 8, 8, 4]))
    write(mb.build(), repo / "good.tflite")
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    # gpulint where pre-commit runs: this interpreter's venv first on the PATH
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }

    def run(*files: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pre_commit", "run", "--files", *files]
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    good = run("good.tflite")
    assert good.returncode == 0 and "gpulint check" in good.stdout and "Passed" in good.stdout, (
        good.stdout + good.stderr
    )
    bad = run("bad.tflite", "good.tflite")
    assert bad.returncode == 1 and "Failed" in bad.stdout, bad.stdout + bad.stderr
    assert "bad.tflite: GPU101 [error] `SPACE_TO_BATCH_ND` has no GPU delegate implementation" in bad.stdout

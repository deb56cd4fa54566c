"""A user's install (#40 item 7): the light install runs check, rules, rule, inspect and report
without the executor's and the runtime's packages; the commands that need them say which extra
to install in one line and exit 2; a build leaves the source tree as it was; `--version` and
`check` import no more than they need (#40 item 8, bench/bench_startup.py times them).

A missing package is simulated with a sitecustomize that puts None in sys.modules for it, so
`import pyopencl` fails as it does where it is not installed (and so does a lookup of it)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from helpers import copy_tracked

from gpulint.model import write
from gpulint.model.build import ModelBuilder
from gpulint.sample import sample_model

ROOT = Path(__file__).resolve().parents[1]
EXTRA_MODULES = ("pyopencl", "ai_edge_litert", "pocl_binary_distribution")
INSTALL = "pip install 'gpulint[verify]'"


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose Python cannot import the verify extra's modules."""
    site = tmp_path_factory.mktemp("light-site")
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        f"for name in {EXTRA_MODULES!r}:\n"
        "    sys.modules[name] = None\n"
        "import atexit, os\n"
        "def _imported():\n"
        "    out = os.environ.get('GPULINT_TEST_IMPORTED')\n"
        "    if out:\n"
        "        open(out, 'w').write('\\n'.join(sorted(k for k, v in sys.modules.items() if v is not None)))\n"
        "atexit.register(_imported)\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("models")
    write(sample_model(), folder / "bad.tflite")
    mb = ModelBuilder()
    g = mb.subgraph()
    g.output(g.op("RELU", [g.input("x", [1, 8, 8, 4])], [1, 8, 8, 4]))
    write(mb.build(), folder / "good.tflite")
    return folder / "bad.tflite", folder / "good.tflite"


def gpulint(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulint", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_sitecustomize_hides_the_extra(light: dict[str, str]) -> None:
    code = "import importlib.util as u; import sys; print([u.find_spec(m) for m in sys.argv[1:]])"
    r = subprocess.run([sys.executable, "-c", code, *EXTRA_MODULES], env=light, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "[None, None, None]", r.stderr
    r = subprocess.run([sys.executable, "-c", "import pyopencl"], env=light, capture_output=True, text=True)
    assert "ModuleNotFoundError" in r.stderr


@pytest.mark.parametrize(
    ("args", "needs", "hint"),
    [
        (["verify", "{good}"], "pyopencl, ai-edge-litert", ""),
        (["bench", "{good}"], "pyopencl, ai-edge-litert", ""),
        (["doctor"], "pyopencl", ""),
        (["demo", "--out", "{tmp}/demo"], "pyopencl, ai-edge-litert", ""),
        (["fix", "{bad}", "-o", "{tmp}/fixed.tflite"], "ai-edge-litert", " (or --skip-proof: then nothing checks"),
        (
            ["fix", "{bad}", "--skip-proof", "--verify", "-o", "{tmp}/f.tflite"],
            "pyopencl, ai-edge-litert",
            " (or leave",
        ),
        (
            ["report", "{good}", "--verify", "-o", "{tmp}/r.html"],
            "pyopencl, ai-edge-litert",
            " (or leave out --verify)",
        ),
        (
            ["check", "--matrix", "--run-litert-gpu", "{good}", "--html", "{tmp}/m.html"],
            "pyopencl, ai-edge-litert",
            " (or leave out --run-litert-gpu)",
        ),
    ],
)
def test_a_command_that_needs_the_extra_says_which(
    light: dict[str, str], models: tuple[Path, Path], tmp_path: Path, args: list[str], needs: str, hint: str
) -> None:
    bad, good = models
    argv = [a.format(bad=bad, good=good, tmp=tmp_path) for a in args]
    r = gpulint(light, *argv)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    (line,) = r.stderr.splitlines()
    said = f"gpulint: error: `gpulint {args[0]}` needs {needs}, which this install leaves out (the verify extra): {INSTALL}"
    assert line.startswith(said) and line[len(said) :].startswith(hint) and (hint or line == said), line
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_light_install_runs_check_rules_inspect_and_report(
    light: dict[str, str], models: tuple[Path, Path], tmp_path: Path
) -> None:
    bad, good = models
    imported = tmp_path / "imported.txt"
    env = {**light, "GPULINT_TEST_IMPORTED": str(imported)}
    r = gpulint(env, "check", str(good))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: ready" in r.stdout
    loaded = set(imported.read_text().split())
    assert "gpulint.check" in loaded and not loaded & {"pyopencl", "ai_edge_litert", "pydantic", "jinja2"}
    r = gpulint(env, "check", str(bad))
    assert r.returncode == 1 and "GPU101 [error]" in r.stdout and r.stderr == ""
    for args in (["rules"], ["rule", "GPU101"], ["inspect", str(bad)]):
        r = gpulint(env, *args)
        assert r.returncode == 0 and r.stdout and r.stderr == "", (args, r.stderr)
    r = gpulint(env, "fix", str(bad), "--skip-proof", "-o", str(tmp_path / "fixed.tflite"))
    assert r.returncode == 0 and (tmp_path / "fixed.tflite").is_file(), r.stderr
    # report without --verify: written; its fix preview, which proves on the interpreter, says why not
    r = gpulint(env, "report", str(bad), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0 and (tmp_path / "r.html").is_file(), r.stderr
    assert r.stderr.splitlines() == [
        f"gpulint: {bad}: no fix preview: the LiteRT interpreter cannot run the original model: "
        f"the LiteRT CPU interpreter is not installed (ai-edge-litert): {INSTALL}"
    ]


def test_an_extras_module_reached_without_asking_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The net under the commands' own checks: a ModuleNotFoundError for the extra's modules
    anywhere in a command is the same one line and exit 2; any other stays a traceback."""
    import gpulint.cli
    import gpulint.cli.doctor

    original = gpulint.cli.doctor.doctor

    def reaching(name: str) -> Any:
        @functools.wraps(original)
        def doctor(**options: Any) -> None:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)

        return doctor

    monkeypatch.setattr(gpulint.cli, "missing", lambda modules: [])
    monkeypatch.setattr(sys, "argv", ["gpulint", "doctor"])
    monkeypatch.setattr(gpulint.cli.doctor, "doctor", reaching("pyopencl._cl"))
    with pytest.raises(SystemExit) as e:
        gpulint.cli.main()
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"gpulint: error: `gpulint doctor` needs pyopencl, which this install leaves out (the verify extra): {INSTALL}"
    ]
    monkeypatch.setattr(gpulint.cli.doctor, "doctor", reaching("somethingelse"))
    with pytest.raises(ModuleNotFoundError):
        gpulint.cli.main()


def test_version_answers_before_typer(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpulint", "--version"], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout == f"gpulint {__import__('gpulint').__version__}\n"
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    assert "gpulint.cli" in imported and not {"typer", "numpy", "yaml"} & imported


def test_a_run_that_names_its_command_builds_only_it() -> None:
    code = (
        "import sys; sys.argv = ['gpulint', 'rules']\n"
        "import gpulint.cli\n"
        "try:\n    gpulint.cli.main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('gpulint.cli.')), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "GPU101" in r.stdout, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "['gpulint.cli.common', 'gpulint.cli.rules']"


def tracked_sources(dst: Path) -> None:
    """The files a checkout has that a build reads: pyproject.toml, README, LICENSE, the package."""
    copy_tracked(dst, ["pyproject.toml", "README.md", "LICENSE", "gpulint"])
    shutil.copy2(ROOT / "pyproject.toml", dst / "pyproject.toml")


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_a_build_leaves_the_source_tree_clean(tmp_path: Path) -> None:
    """`pip wheel .` (what `pip install .` runs) in a copy of the checkout: no build/, no
    *.egg-info, nothing new in the tree; the wheel holds the package's data files, and the
    runtime's and the executor's packages are only in the verify extra."""
    src = tmp_path / "src"
    tracked_sources(src)
    before = files_under(src)
    out = tmp_path / "wheels"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(out), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert files_under(src) == before
    (wheel,) = out.glob("gpulint-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    package = {n for n in names if n.startswith("gpulint/")}
    expected = {str(Path(p).relative_to(src)) for p in (src / "gpulint").rglob("*") if Path(p).is_file()}
    assert package == expected
    for wanted in ("gpulint/rules/targets/classic.yaml", "gpulint/py.typed"):
        assert wanted in names
    assert any(n.startswith("gpulint/reports/") for n in names) and any(n.endswith(".cl") for n in names)
    requires = [
        line.removeprefix("Requires-Dist: ") for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    plain = [r for r in requires if "extra ==" not in r]
    assert not [
        r
        for r in plain
        if r.split(">")[0].split("<")[0].split("=")[0].strip()
        in {"pyopencl", "ai-edge-litert", "pocl-binary-distribution", "pydantic"}
    ]
    for package_name in ("pyopencl", "ai-edge-litert", "pocl-binary-distribution"):
        assert any(r.startswith(package_name) and 'extra == "verify"' in r for r in requires), package_name
    assert "Provides-Extra: verify" in metadata and "Provides-Extra: all" in metadata


def test_the_hook_installs_the_light_package() -> None:
    """.pre-commit-hooks.yaml installs the project as it is (no extra, no additional dependency):
    the light install, which test_precommit runs and checks for the extra's packages."""
    import yaml

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["language"] == "python" and hook["entry"] == "gpulint check"
    assert not hook.get("additional_dependencies")

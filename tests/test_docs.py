"""The documentation (issue #48): README.md short and self-contained, the site in docs/ built strict with
a page per rule generated from the rule packs, every console example printing what it shows, every
`gpulint` command line naming options that exist, and the JSON Schemas of docs/schemas/ holding what
check, verify, fix and bench print (on built models and on the test corpus)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from conftest import CORPUS, NO_CORPUS
from referencing import Registry, Resource

from gpulint.output.rules import render_rule
from gpulint.rules.catalog import Rule
from gpulint.rules.pack import builtin_rules

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gpulint_docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


hooks = _load("hooks")
examples = _load("examples")


# -- README -----------------------------------------------------------------------------------------


def test_readme_is_short_and_links_only_inside_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links, "README points at the docs"
    for link in links:
        assert not re.match(r"[a-z]+:", link) and not link.startswith(("/", "..")), link
        assert (ROOT / link.split("#")[0]).exists(), link
    assert "shared/" not in text  # the test corpus is not what a user has


# -- the site -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it: strict, so a broken link or anchor, or a page missing from
    the nav, fails here."""
    pytest.importorskip("mkdocs", reason="mkdocs-material is in the dev extra: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def _text(html: Path) -> str:
    """A built page's text: tags dropped, entities of the characters the rule texts use undone."""
    text = re.sub(r"<[^>]+>", "", html.read_text())
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#39;", "'"), ("&amp;", "&")):
        text = text.replace(entity, char)
    return " ".join(text.split())


def test_every_rule_has_a_generated_page(site: Path) -> None:
    rules = builtin_rules()
    index = _text(site / "rules" / "index.html")
    for code, rule in rules.items():
        page = site / "rules" / code / "index.html"
        assert page.exists(), f"no page for {code}"
        text = _text(page)
        for part in (rule.summary, rule.rationale, *rule.references):
            assert " ".join(part.split()) in text, (code, part)
        if rule.fix_pass:
            assert f"gpulint fix --passes {rule.fix_pass}" in text
        assert code in index
    # nothing generated is committed: the pages exist only in the build
    assert not (DOCS / "rules").exists()


def test_a_rule_added_to_the_packs_gets_its_page_with_no_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    new = Rule(
        "GPU999",
        "made-up-rule",
        "warning",
        "layout",
        "detector",
        "{op} is made up",
        "A rule this test adds.",
        "To show that its page comes from the registry.",
        fix_pass="pad-channels",
        fix_safety="safe",
        references=("nowhere.cc 1-2",),
    )
    pytest.importorskip("mkdocs", reason="mkdocs-material is in the dev extra: pip install -e '.[dev]'")
    from mkdocs.config import load_config
    from mkdocs.structure.files import Files

    from gpulint.rules import pack

    monkeypatch.setattr(pack, "builtin_rules", lambda: {**builtin_rules(), "GPU999": new})
    config = load_config(str(ROOT / "mkdocs.yml"))  # loads docs/hooks.py as MkDocs does
    files = config.plugins.on_files(Files([]), config=config)
    made = {f.src_uri: f for f in files}
    assert "rules/GPU999.md" in made
    page = made["rules/GPU999.md"].content_string
    assert render_rule(new) in page  # what `gpulint rule GPU999` prints, verbatim
    assert "nowhere.cc 1-2" in page and "gpulint fix --passes pad-channels" in page
    assert "[GPU999](GPU999.md)" in made["rules/index.md"].content_string


def test_every_command_has_a_page_with_every_option(site: Path) -> None:
    from gpulint.cli import COMMANDS

    for name, _, _ in COMMANDS:
        page = "rules" if name in ("rules", "rule") else name
        text = _text(site / "commands" / page / "index.html")
        for param in hooks.command_params(name):
            for option in param["names"].split(", "):
                assert option in text, (name, option)


# -- examples ---------------------------------------------------------------------------------------

PAGES = [p for p in examples.pages() if examples.examples(p)]


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One kernel cache for the pages a worker runs: compiled once, not once per page."""
    return tmp_path_factory.mktemp("kernels")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_console_examples_print_what_they_show(page: Path, kernel_cache: Path) -> None:
    """Each ```console block run as written, in a fresh folder with the sample and the example models;
    `[...]` and `...` mark what varies. `python docs/examples.py --update` rewrites a stale one."""
    stale = examples.check_page(page, kernel_cache)
    assert not stale, "\n\n".join(map(str, stale))


def test_examples_marks_are_the_only_slack() -> None:
    assert examples.matches(["a [...] c"], ["a b c"])
    assert not examples.matches(["a [...] c"], ["a b d"])
    assert examples.matches(["x", "...", "z"], ["x", "y1", "y2", "z"])
    assert examples.matches(["x", "...", "z"], ["x", "z"])
    assert not examples.matches(["x", "z"], ["x", "y", "z"])
    assert not examples.matches(["x"], ["x", "extra"])


def test_every_gpulint_command_line_names_options_that_exist() -> None:
    """The command lines of ```sh blocks too: an option renamed or removed fails here."""
    from gpulint.cli import COMMANDS

    known = {
        name: {o for p in hooks.command_params(name) for o in p["names"].split(", ") if o.startswith("-")}
        for name, _, _ in COMMANDS
    }
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {command}: {unknown}"
        for path in examples.pages()
        for line, command in examples.command_lines(path)
        if (unknown := examples.unknown_options(command, known))
    ]
    assert not bad, "\n".join(bad)


def test_no_prompt_outside_a_console_block() -> None:
    """A `$ ` line shows a command and its output: it belongs in a ```console block, which runs."""
    for path in examples.pages():
        lines = path.read_text().split("\n")
        for info, start, end in examples.fenced_blocks(path.read_text()):
            if info != "console":
                assert not any(line.startswith("$ ") for line in lines[start:end]), f"{path}:{start}"


# -- JSON Schemas -------------------------------------------------------------------------------------


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((DOCS / "schemas" / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _json(folder: Path, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "gpulint", *args, "--format", "json"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("schema-models")
    examples.write_models(folder)
    return folder


def test_check_json_holds_to_its_schema(models: Path) -> None:
    schema = _schema("check")
    doc = _json(models, "check", "demo-out/sample.tflite", "models", "missing.tflite", "--max-partitions", "1")
    jsonschema.validate(doc, schema)
    assert {f.get("verdict", "error") for f in doc["files"]} >= {"not-worth-it", "error"}
    jsonschema.validate(_json(models, "check", "demo-out/sample.tflite", "--fail-on-cpu-fallback"), schema)


def test_fix_verify_bench_json_hold_to_their_schemas(models: Path) -> None:
    fixed = _json(models, "fix", "demo-out/sample.tflite", "-o", "fixed.tflite")
    jsonschema.validate(fixed, _schema("fix"))
    assert fixed["applied"] and fixed["output"] == "fixed.tflite"
    jsonschema.validate(_json(models, "fix", "models/softmax_by_hand.tflite", "--dry-run"), _schema("fix"))
    text_only = subprocess.run(
        [sys.executable, "-m", "gpulint", "fix", "fixed.tflite", "--dry-run", "--diff", "--format", "json"],
        cwd=models,
        capture_output=True,
        text=True,
    )
    assert text_only.returncode == 2 and not text_only.stdout  # --diff's output is text: not mixed into JSON
    verify = _schema("verify")
    one = _json(models, "verify", "demo-out/sample.tflite", "--candidate", "fixed.tflite", "--precision", "fp16")
    jsonschema.validate(one, verify)
    assert one["status"] == "PASS"
    several = _json(models, "verify", "fixed.tflite", "models", "missing.tflite")
    jsonschema.validate(several, verify)
    assert several["counts"]["ERROR"] == 1
    bench = _json(models, "bench", "fixed.tflite", "--runs", "2", "--no-start")
    jsonschema.validate(bench, _schema("bench"))


def test_generation_json_holds_to_its_schema(models: Path) -> None:
    """verify --generate and bench --generate on the examples' decoder; bench's steps by bench.json."""
    schema = _schema("generate")
    bench = _schema("bench")
    registry = Registry().with_resource(bench["$id"], Resource.from_contents(bench))  # generate.json refs it
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    generation = _json(models, "verify", "llm/decoder.tflite", "--generate", "3")
    validator.validate(generation)
    assert generation["status"] == "PASS" and len(generation["steps"]) == 3
    timing = _json(models, "bench", "llm/decoder.tflite", "--generate", "--runs", "1", "--no-start")
    validator.validate(timing)


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
def test_the_schemas_hold_on_the_corpus(tmp_path: Path) -> None:
    """check on every corpus model; fix, verify and bench on models of each kind: float, int8, a graph
    the delegate refuses (CPU-ONLY), several outputs, a CPU partition."""
    jsonschema.validate(_json(tmp_path, "check", str(CORPUS)), _schema("check"))
    jsonschema.validate(_json(tmp_path, "check", str(CORPUS), "--target", "litert-gpu"), _schema("check"))
    picked = [
        CORPUS / "tfconv" / name
        for name in (
            "odd_channels_56_int8.tflite",
            "unsupported_mix_f32.tflite",
            "mobilenet_v1_025_224_f32.tflite",
            "deeplab_like_65_f16.tflite",
        )
    ]
    for model in picked:
        jsonschema.validate(_json(tmp_path, "fix", str(model), "--dry-run"), _schema("fix"))
    jsonschema.validate(_json(tmp_path, "verify", *map(str, picked)), _schema("verify"))
    jsonschema.validate(_json(tmp_path, "bench", str(picked[1]), "--runs", "2", "--no-start"), _schema("bench"))

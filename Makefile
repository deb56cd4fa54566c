# Two entry points for a fresh machine with Python 3.11 and make:
#   make demo  - create .venv, install gpulint with its verify extra, run it on the built-in sample model
#   make test  - create or reuse .venv with the dev extra, run the whole test suite (on every core); the suite
#                builds the docs strict and runs every console example of README.md and docs/ (tests/test_docs.py)
#   make docs  - build the documentation site into site/ (MkDocs + Material, strict)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test docs lint bench clean pocl browser oracle oracle-webgpu converters explorer

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# demo verifies on the OpenCL executor and proves on the LiteRT interpreter: the verify extra
# (pyproject.toml); dev pulls it too.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[verify]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/gpulint demo --out demo-out

# The suite on every core (pytest-xdist), up to 8 workers; TEST_WORKERS=1 runs it in one process. Tests
# that share a module fixture, and all that start LiteRT's GPU accelerator, keep to one worker each
# (--dist loadgroup; tests/conftest.py). The corpora and venvs are built once, above, before any worker starts.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 8 ] && n=8; echo $$n)
test: $(VENV)/.installed-dev pocl browser oracle oracle-webgpu converters explorer
	$(BIN)/python -m pytest -q $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# The documentation site (mkdocs.yml; docs/hooks.py generates the rule pages and option tables at build
# time). Strict: a broken link, a missing page or anchor fails the build. tests/test_docs.py builds it in
# `make test` too, and checks every console example against what it prints.
docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs build --strict --site-dir site

# A second OpenCL implementation beside the pip PoCL: Debian's PoCL (a newer LLVM), which the
# default device choice prefers and `gpulint doctor` (tests/test_doctor.py) self-tests with the
# pip one. Installed here when it is missing and this user can (root with apt-get, as on CI);
# otherwise the tests run on the pip PoCL alone.
pocl:
	@dpkg -s pocl-opencl-icd >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd >/dev/null \
	      || echo "note: installing pocl-opencl-icd failed; the tests run on the pip PoCL alone"; }; \
	  else echo "note: pocl-opencl-icd is missing and cannot be installed here; the tests run on the pip PoCL alone"; fi; }

# The report tests render pages in Debian's headless Chromium. Installed here when it is missing
# and this user can (root with apt-get, as on CI); otherwise those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium is missing and cannot be installed here; the browser tests will skip"; fi; }

# The oracle tests (tests/test_oracle_*.py) ask Google's own GPU delegate, on Mesa's software GL,
# what it does with each model: apt packages when missing and root (as on CI), the pinned wheels in
# a venv of their own; quick once done (a stamp file). Where it cannot be set up, those tests skip
# and say why. `make oracle-webgpu` adds LiteRT's WebGPU accelerator for tests/test_oracle_litert.py:
# Mesa >= 24 lavapipe from bookworm-backports (about 21 MB of .debs; it also moves the machine's Mesa GL
# to 25), run after `oracle` so that a machine which cannot get Mesa 25 still has the GL oracle.
ORACLE_VENV := .oracle-venv
oracle:
	@tests/oracle/setup.sh $(ORACLE_VENV) || true

oracle-webgpu:
	@tests/oracle/setup.sh $(ORACLE_VENV) --webgpu || true
	@tests/oracle/setup_litert24.sh .oracle-litert24-venv $(ORACLE_VENV) || true

# Converter corpora of our own (issues #15, #22): real converters in venvs of their own, each corpus built
# once and cached (.converter-cache/) by its package versions and config. Best effort, like `oracle`: where a
# toolchain cannot be set up, its tests skip and say why. One line per converter.
converters:
	-@tests/converters/setup_yolo.sh .yolo-venv .converter-cache/yolo || true
	-@tests/converters/setup_torch.sh .torch-venv .converter-cache/torch || true
	-@tests/converters/setup_generative.sh .generative-venv .converter-cache/generative || true

# Model Explorer with gpulint's extension, in a venv of its own (tests/test_explorer.py: the real
# server on 127.0.0.1 and its UI in headless Chromium). Best effort: where it cannot be set up,
# those tests skip and say why.
EXPLORER_VENV := .explorer-venv
explorer:
	@tests/explorer/setup.sh $(EXPLORER_VENV) || true

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check gpulint tests bench docs/hooks.py docs/examples.py
	$(BIN)/ruff format --check gpulint tests bench docs/hooks.py docs/examples.py
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/bench_read.py
	$(BIN)/python bench/bench_check.py
	$(BIN)/python bench/bench_fix.py
	$(BIN)/python bench/bench_report.py
	$(BIN)/python bench/bench_executor.py

clean:
	rm -rf $(VENV) demo-out site .pytest_cache .mypy_cache .ruff_cache $(ORACLE_VENV) .oracle-cache .yolo-venv .torch-venv .generative-venv .converter-cache $(EXPLORER_VENV)

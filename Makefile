# Two entry points for a fresh machine with Python 3.11 and make:
#   make demo  - create .venv, install gpulint, run it on the built-in sample model
#   make test  - create or reuse .venv with the dev extra, run the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/gpulint demo --out demo-out

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check gpulint tests bench
	$(BIN)/ruff format --check gpulint tests bench
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/bench_read.py
	$(BIN)/python bench/bench_check.py
	$(BIN)/python bench/bench_fix.py

clean:
	rm -rf $(VENV) demo-out .pytest_cache .mypy_cache .ruff_cache

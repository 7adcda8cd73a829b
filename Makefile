# Quick start: `make demo` (the whole pipeline on bundled tasks, no GPU) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: test demo install lint format env clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch pinned: a bare `torch` pulls a multi-GB CUDA build.
	$(BIN)/pip install -q 'torch==2.13.0' -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# System pieces the tests use: Docker engine, bubblewrap, the base image, agent binaries.
env: install
	bash scripts/setup-env.sh $(BIN)

test: env
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)

demo: env
	$(BIN)/coding-agent-rl demo $(DEMO_ARGS)

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports && $(BIN)/mypy

format:
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

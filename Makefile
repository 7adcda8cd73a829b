# Quick start: `make demo` (the whole pipeline on bundled tasks, no GPU) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HASH := $(shell cat pyproject.toml | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(HASH)
DEMO_STAMP := $(VENV)/.installed-demo-$(HASH)

.PHONY: test demo install demo-install lint format env demo-env clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	# torch pinned: a bare `torch` pulls a multi-GB CUDA build.
	$(BIN)/pip install -q 'torch==2.13.0' -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# The demo's Python packages: no torch, Ray, E2B or test tools (the full install covers it).
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	test -e $(STAMP) || $(BIN)/pip install -q -e '.[qwen]'
	rm -f $(VENV)/.installed-demo-* && touch $@

demo-install: $(DEMO_STAMP)

# System pieces the tests use: Docker engine, bubblewrap, gVisor, Chromium, the base image,
# every agent CLI.
env: install
	bash scripts/setup-env.sh $(BIN) test

# The demo's: a Docker engine, the base image, Claude Code.
demo-env: demo-install
	bash scripts/setup-env.sh $(BIN) demo

test: env
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)

demo: demo-env
	$(BIN)/coding-agent-rl demo $(DEMO_ARGS)

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/lint-imports && $(BIN)/mypy

format:
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

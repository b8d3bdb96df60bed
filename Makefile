# The two commands of the README's quick start, and a few conveniences.
# Everything installs into ./.venv, created on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The dashboard's tests drive Debian's Chromium (no browser download from PyPI).
CHROMIUM ?= /usr/bin/chromium
# The Node example of DAG flows (a task worker over the SQL functions) runs in the
# tests when npm is installed; its one dependency comes from the npm registry.
NODE_EXAMPLE := $(if $(shell command -v npm),examples/node_task_worker/node_modules/pg)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test lint typecheck bench bench-quick chaos-large clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Install the core (SQLite only) and run the demo on the embedded default.
demo: $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/perdure demo

# Install everything (the runtime extras and the dev tools) and run the whole suite
# (unit, contract on SQLite and PostgreSQL, engine end to end, CLI, examples, chaos
# smoke), plus lint and types.
test: $(BIN)/python $(CHROMIUM) $(NODE_EXAMPLE)
	$(BIN)/pip install --quiet -e ".[all,dev]"
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy
	$(BIN)/pytest

$(CHROMIUM):
	$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium

examples/node_task_worker/node_modules/pg:
	cd examples/node_task_worker && npm install --no-audit --no-fund --silent

lint: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench

typecheck: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all,dev]"
	$(BIN)/mypy

# The benchmark suite (bench/): perdure on PostgreSQL and SQLite, DBOS Transact on
# the same server, and the server's raw commit rate; prints ratios, writes JSON.
bench: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all]" -r bench/requirements.txt
	$(BIN)/python bench/run.py --json bench/results.json

# A small size of the same, in seconds.
bench-quick: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all]"
	$(BIN)/python bench/run.py --quick --contenders perdure-pg,perdure-sqlite

# The large chaos configuration: 2,000 runs, 60 s of SIGKILLs, a PostgreSQL restart.
chaos-large: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all]"
	$(BIN)/python bench/chaos_large.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache perdure.db perdure.db-*

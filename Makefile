# The two commands of the README's quick start, and a few conveniences.
# Everything installs into ./.venv, created on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Install the core (SQLite only) and run the demo on the embedded default.
demo: $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/stepwise demo

# Install everything and run the whole suite (unit, contract on SQLite and
# PostgreSQL, engine end to end, CLI, examples, chaos smoke), plus lint and types.
test: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[all]"
	$(BIN)/ruff check src tests examples
	$(BIN)/ruff format --check src tests examples
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(BIN)/python
	$(BIN)/ruff check src tests examples
	$(BIN)/ruff format --check src tests examples

typecheck: $(BIN)/python
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache stepwise.db stepwise.db-*

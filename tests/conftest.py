"""Settings every test shares: no real home directory, no stray keys, offline, no blocking.

Every async test runs its body under blockbuster, as ``langgraph dev`` runs nodes and store
calls: a blocking call on the event loop (SQLite, a file read, a socket, ``time.sleep``, a
contended lock) fails the test with ``BlockingError``. Fixtures and sync tests are not
guarded (they run outside the loop). A test that must block on purpose says why and uses
``allow_blocking``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from blockbuster import BlockBuster, blockbuster_ctx
from pytest_asyncio import is_async_test

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
    "AMEM_OPENAI_MODEL",
    "AMEM_MODEL_NAME",
    "AMEM_LOCAL_MODEL_PATH",
    "AMEM_MINILM_PATH",
    "WEAVIATE_API_KEY",
    "LANGSMITH_TRACING",
    "LANGCHAIN_TRACING_V2",
)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in _ISOLATED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "amem-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LANGGRAPH_NO_VERSION_CHECK", "true")
    yield


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
    if not is_async_test(item) or item.get_closest_marker("allow_blocking") is not None:
        yield
        return
    with blockbuster_ctx() as buster:
        _relax(buster)
        yield

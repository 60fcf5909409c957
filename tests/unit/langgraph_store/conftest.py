"""Fixtures for the LangGraph store tests: the stores under test, one clock, real embeddings.

``store`` runs a conformance test against ``AgenticStore`` on the embedded store, against
``AgenticStore`` on the Weaviate backend (the real weaviate-client over a scripted server
that ranks hybrid searches like the pinned Weaviate version, ``tests/unit/store/weaviate/server.py``), and against
LangGraph's own ``InMemoryStore`` (semantic search with the same embeddings), so the tests
are checked to encode LangGraph's expectations and not only ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from langgraph.store.base import BaseStore, TTLConfig
from langgraph.store.memory import InMemoryStore

import agentic_memory.store.weaviate as wv
import agentic_memory.store.weaviate.store as wv_store
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.store.weaviate.conftest import scripted_client
from tests.unit.store.weaviate.server import FakeWeaviate

AGENTIC = ("embedded", "weaviate")
"""The ids of the ``store`` parameters that are ``AgenticStore``."""


class Clock:
    """A settable clock, in UTC."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(scope="session")
def embeddings() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(autouse=True)
def _prompt_weaviate_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # weaviate-client's fixed-size batch waits up to a second for the batch to fill before it
    # sends fewer objects than its size: every small upsert would take a second. A size of
    # one sends at once; the objects and requests are otherwise the same.
    monkeypatch.setattr(wv_store, "BATCH_SIZE", 1)


def open_agentic(
    backend: str,
    tmp_path: Path,
    embeddings: LocalEmbeddings,
    clock: Clock,
    ttl: TTLConfig | None = None,
    **kwargs: object,
) -> AgenticStore:
    """Open an ``AgenticStore`` on a fresh embedded store or a fresh fake Weaviate."""
    if backend == "embedded":
        memory = EmbeddedStore(tmp_path / f"store-{id(clock)}", dims=embeddings.dims)
    else:
        memory = wv.WeaviateStore(
            scripted_client(FakeWeaviate()), dims=embeddings.dims, lock_dir=tmp_path / "locks"
        )
    return AgenticStore(memory, embeddings, clock=clock, ttl=ttl, close_store=True, **kwargs)


@pytest.fixture(params=["embedded", "weaviate", "inmemory"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock
) -> Iterator[BaseStore]:
    if request.param == "inmemory":
        yield InMemoryStore(index={"dims": embeddings.dims, "embed": embeddings})
        return
    opened = open_agentic(request.param, tmp_path, embeddings, clock)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=AGENTIC)
def agentic(
    request: pytest.FixtureRequest, tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock
) -> Iterator[AgenticStore]:
    """``AgenticStore`` on both backends (for what ``InMemoryStore`` does not do: TTLs)."""
    opened = open_agentic(request.param, tmp_path, embeddings, clock)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def amem(tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock) -> Iterator[AgenticStore]:
    """``AgenticStore`` on the embedded store (the memory-kind tests)."""
    opened = open_agentic("embedded", tmp_path, embeddings, clock)
    try:
        yield opened
    finally:
        opened.close()


def is_agentic(store: BaseStore) -> bool:
    return isinstance(store, AgenticStore)

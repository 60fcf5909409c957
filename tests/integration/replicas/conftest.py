"""Fixtures for the many-machines tests: a real PostgreSQL and a Weaviate on real ports.

``postgres_uri`` is the persistence tests' fixture (``initdb`` as user ``postgres`` on a free
port, skipped with a stated reason where PostgreSQL is not installed), imported here so both
directories start their server the same way.

``network`` is the in-memory ``NetworkWeaviate`` the machines share (its create window a test
can widen and hook); ``live_network`` the session's live server (``tests/live_weaviate.py``),
whose app collections are dropped first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agentic_memory.store.weaviate import WeaviateStore
from tests.integration.persistence.conftest import postgres_uri
from tests.live_weaviate import LiveWeaviate, skip_or_fail
from tests.unit.store.weaviate.network import NetworkWeaviate, connect
from tests.unit.store.weaviate.server import FakeWeaviate

__all__ = ["fake_network", "live_network", "network", "postgres_uri"]


@dataclass(frozen=True)
class SharedWeaviate:
    """Where the machines reach Weaviate; ``server`` is the fake's state (``None``: live)."""

    http_port: int
    grpc_port: int
    server: FakeWeaviate | None


CREATE_WINDOW_S = 0.02
"""How long the fake Weaviate keeps every create between its check and its write."""


@pytest.fixture
def fake_network() -> Iterator[NetworkWeaviate]:
    """One in-memory Weaviate on free loopback ports, shared by every simulated machine."""
    with NetworkWeaviate() as served:
        served.server.create_window = CREATE_WINDOW_S
        yield served


@pytest.fixture
def network(fake_network: NetworkWeaviate) -> SharedWeaviate:
    """The fake, as the machines reach it."""
    return SharedWeaviate(fake_network.http_port, fake_network.grpc_port, fake_network.server)


@pytest.fixture
def live_network(live_weaviate: LiveWeaviate) -> SharedWeaviate:
    """The session's live server, its app collections dropped first (exact counts)."""
    if live_weaviate.node is None:
        skip_or_fail("drops the app's own collections: runs on the session's server only")
    http_port = live_weaviate.node.ports.http
    cleaner = WeaviateStore(connect(http_port, live_weaviate.grpc_port), dims=8)
    try:
        for name in cleaner.collections():
            cleaner.drop_collection(name)
    finally:
        cleaner.close()
    return SharedWeaviate(http_port, live_weaviate.grpc_port, None)

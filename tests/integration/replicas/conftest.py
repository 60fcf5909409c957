"""Fixtures for the many-machines tests: a real PostgreSQL and a Weaviate on real ports.

``postgres_uri`` is the persistence tests' fixture (``initdb`` as user ``postgres`` on a free
port, skipped with a stated reason where PostgreSQL is not installed), imported here so both
directories start their server the same way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.persistence.conftest import postgres_uri
from tests.unit.store.weaviate.network import NetworkWeaviate

__all__ = ["network", "postgres_uri"]

CREATE_WINDOW_S = 0.02
"""How long the fake Weaviate keeps every create between its check and its write."""


@pytest.fixture
def network() -> Iterator[NetworkWeaviate]:
    """One in-memory Weaviate on free loopback ports, shared by every simulated machine."""
    with NetworkWeaviate() as served:
        served.server.create_window = CREATE_WINDOW_S
        yield served

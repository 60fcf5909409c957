"""Fixtures for the notebook API tests: a real embedded store in a temp dir, real WordLlama."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_memory.api import Memory
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.models.embeddings import LocalEmbeddings


@pytest.fixture(scope="session")
def embeddings() -> LocalEmbeddings:
    # One instance for the session; the WordLlama weights load once per process anyway.
    return LocalEmbeddings()


@pytest.fixture
def mem(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[Memory]:
    with Memory.open(home=tmp_path / "home", backend="embedded", embeddings=embeddings) as m:
        yield m


def logged(mem: Memory, user: str) -> int:
    """Count everything a user has in the message log, straight from the store."""
    if MESSAGES.name not in mem.store.collections():
        return 0
    return mem.store.count(MESSAGES.name, user=user)

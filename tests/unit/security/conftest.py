"""Fixtures of the security tests: a real embedded store in a tmp dir, WordLlama."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

_EMBEDDINGS = LocalEmbeddings()


@pytest.fixture
def embeddings() -> LocalEmbeddings:
    return _EMBEDDINGS


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    opened = EmbeddedStore(tmp_path / "store", dims=_EMBEDDINGS.dims)
    yield opened
    opened.close()

"""Fixtures for the memory-kind contract tests: a real embedded store, real embeddings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore


@pytest.fixture(scope="session")
def embeddings() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
def store(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[EmbeddedStore]:
    # Where the CLI looks (AMEM_HOME is tmp_path / "amem-home", tests/conftest.py).
    s = EmbeddedStore(tmp_path / "amem-home" / "store", dims=embeddings.dims)
    yield s
    s.close()

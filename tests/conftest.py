"""Settings every test shares: no real home directory, no stray keys, offline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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

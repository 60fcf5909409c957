"""Fixtures of the retention and importance tests: a real embedded store, real WordLlama."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KEEP_ALL = RetentionPolicy(message_days=None, max_messages=None, purge_interval_minutes=None)
"""No retention at all: what the tests write stays until a test's own policy says otherwise."""


def days_ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


@pytest.fixture(scope="session")
def embeddings() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
def store(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    yield s
    s.close()


def log_with(store: EmbeddedStore, embeddings: LocalEmbeddings, **policy: Any) -> MessageLog:
    """A message log under ``KEEP_ALL`` with the given policy fields changed."""
    fields = {**KEEP_ALL.to_dict(), **policy}
    return MessageLog(store, embeddings, retention=RetentionPolicy(**fields))


def exchange(
    log: MessageLog,
    user: str,
    thread: str,
    text: str,
    *,
    days: float,
    important: bool | None = None,
) -> list[str]:
    """Log a user message and its answer, ``days`` before NOW; return their ids."""
    return asyncio.run(
        log.aremember(
            user,
            thread,
            [{"role": "user", "content": text}, {"role": "assistant", "content": f"About {text}."}],
            now=days_ago(days),
            important=important,
        )
    )

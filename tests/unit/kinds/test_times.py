"""Every kind refuses a write time without a timezone the same way, and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.store import InvalidInputError
from tests.unit.kinds.episodes.test_memory import reflection

Write = Callable[[Any, Any, Any], Awaitable[object]]


async def _facts(store: Any, embeddings: Any, now: Any) -> object:
    facts = [{"subject": "city", "value": "Porto", "category": "identity"}]
    return await FactStore(store, embeddings).aremember("alice", facts, now=now)


async def _rules(store: Any, embeddings: Any, now: Any) -> object:
    rules = [{"instruction": "Answer briefly", "rationale": "she asked"}]
    return await RuleBook(store, embeddings).apropose("alice", rules, now=now)


async def _episodes(store: Any, embeddings: Any, now: Any) -> object:
    return await EpisodicMemory(store, embeddings).astore(
        "alice", "t1", reflection("Talked about Porto."), "user: hi", now=now
    )


async def _messages(store: Any, embeddings: Any, now: Any) -> object:
    turns = [{"role": "user", "content": "I live in Porto."}]
    return await MessageLog(store, embeddings).aremember("alice", "t1", turns, now=now)


def _count(store: Any) -> int:
    return sum(
        store.count(name, user="alice")
        for name in store.collections()
        if "alice" in store.users(name)
    )


@pytest.mark.parametrize("write", [_facts, _rules, _episodes, _messages])
@pytest.mark.parametrize(
    "now", [datetime(2026, 1, 1, 12, 0), "2026-01-01T12:00:00Z", 1767268800, 0, "", False]
)
def test_a_time_without_a_timezone_is_refused_and_nothing_is_written(
    store: Any, embeddings: Any, write: Write, now: Any
) -> None:
    with pytest.raises(InvalidInputError, match="now must be a datetime with a timezone"):
        asyncio.run(write(store, embeddings, now))
    assert _count(store) == 0

"""Exact checks after concurrent writers: shared by the embedded and the Weaviate stress tests."""

from __future__ import annotations

import asyncio
from collections import Counter

from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.store import MemoryStore, Where
from tests.integration.concurrency.workers import HashEmbeddings, fact_value, message_text


def check_facts(store: MemoryStore, reported: list[str], writers: list[str], n: int) -> None:
    facts = FactStore(store, HashEmbeddings())
    history = asyncio.run(facts.ahistory("alice", "city"))
    expected = {fact_value(w, i) for w in writers for i in range(n)}
    assert len(history) == len(expected), "every update is in the history exactly once"
    assert {f.value for f in history} == expected
    assert sorted(f.id for f in history) == sorted(reported)
    current = [f for f in asyncio.run(facts.acurrent("alice")) if f.subject == "city"]
    assert len(current) == 1 and current[0].id == history[-1].id
    flagged = store.count(
        FACTS.name,
        user="alice",
        where=[Where("subject", "eq", "city"), Where("current", "eq", True)],
    )
    assert flagged == 1, "exactly one stored row says it is current"
    for older, newer in zip(history, history[1:], strict=False):
        assert not older.current and older.superseded_by == newer.id
        assert older.valid_to == newer.valid_from
    for w in writers:
        # One writer's updates appear in the order it made them.
        mine = [f.value for f in history if f.value.startswith(f"value {w} ")]
        assert mine == [fact_value(w, i) for i in range(n)]


def check_rules(store: MemoryStore, reported: list[int], writers: list[str], n: int) -> None:
    versions = asyncio.run(RuleBook(store, HashEmbeddings()).aversions("alice"))
    total = len(writers) * n
    assert sorted(reported) == list(range(2, total + 2)), "each caller got its own version"
    assert [v.version for v in versions] == list(range(1, total + 2))
    assert Counter(v.note for v in versions[1:]) == Counter(
        f"{w}/{i}" for w in writers for i in range(n)
    )
    for v in versions[1:]:
        assert v.parent_version == v.version - 1


def check_messages(store: MemoryStore, reported: list[str], writers: list[str], n: int) -> None:
    log = MessageLog(store, HashEmbeddings())
    logged = asyncio.run(log.alist("alice", thread_id="t", limit=10_000))
    total = len(writers) * n
    assert len(logged) == total, "no message is lost"
    assert [m.turn for m in logged] == list(range(total)), "turns unique and increasing"
    assert sorted(m.id for m in logged) == sorted(reported)
    assert Counter(m.content for m in logged) == Counter(
        message_text(w, i) for w in writers for i in range(n)
    )
    for w in writers:
        mine = [m.content for m in logged if m.content.startswith(f"message {w} ")]
        assert mine == [message_text(w, i) for i in range(n)]

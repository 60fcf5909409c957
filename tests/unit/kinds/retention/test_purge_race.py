"""A purge deletes exactly the turns it read, and a thread's turn numbers are never given twice.

Two handles on one store (as two processes), a cap of 100: a purge reads the oldest turns,
and before its delete runs, a faster purge takes the same turns and the user goes on in that
thread. Its new turns must survive the slower delete, and be numbered after the purged ones.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.messages.schema import TURN_MARKS
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import Where
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.kinds.retention.conftest import NOW, days_ago, log_with

CAP = 100


def _say(log: MessageLog, thread: str, text: str, days: float) -> list[str]:
    return asyncio.run(
        log.aremember("alice", thread, [{"role": "user", "content": text}], now=days_ago(days))
    )


def _thread(store: EmbeddedStore, thread: str) -> list[tuple[int, str]]:
    where = [Where("thread_id", "eq", thread)]
    return sorted(
        (int(o.properties["turn"]), str(o.properties["content"]))
        for o in store.iterate(MESSAGES.name, user="alice", where=where)
    )


@pytest.fixture
def full(store: EmbeddedStore, embeddings: LocalEmbeddings) -> MessageLog:
    """110 turns: the 10 oldest, and last, of thread "old"; 100 newer ones in thread "new"."""
    log = log_with(store, embeddings, max_messages=CAP)
    for i in range(10):
        _say(log, "old", f"old {i}", 60 - i)
    for i in range(100):
        _say(log, "new", f"new {i}", 40 - i / 10)
    assert store.count(MESSAGES.name, user="alice") == 110
    return log


def test_a_slow_purge_spares_turns_logged_after_it_read(
    full: MessageLog, store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    acknowledged: list[str] = []
    with EmbeddedStore(store.path, dims=embeddings.dims) as other:
        slow = log_with(other, embeddings, max_messages=CAP)
        real = other.delete_where
        delayed = False

        def delete_late(collection: str, where: Any, *, user: str | None = None) -> int:
            nonlocal delayed
            if not delayed:
                delayed = True
                # Between the slow purge's read and its delete: a fast purge takes the same
                # ten turns (the whole thread "old"), and the user goes on in that thread.
                assert asyncio.run(full.apurge("alice", now=NOW)).over_cap == 10
                for i in range(10):
                    acknowledged.extend(_say(full, "old", f"again {i}", 0))
            return real(collection, where, user=user)

        other.delete_where = delete_late  # type: ignore[method-assign]
        report = asyncio.run(slow.apurge("alice", now=NOW))
    stored = {o.id for o in store.iterate(MESSAGES.name, user="alice")}
    lost = len(set(acknowledged) - stored)
    assert not lost, (
        f"a purge deleted {lost} turns logged after it chose its own ({len(stored)} left)"
    )
    # The slow purge read again and pruned the ten oldest of the rest: the log is at its cap.
    assert report.remaining == len(stored) == CAP
    # The new turns continue the thread's numbers: none of the purged ones is given again.
    assert _thread(store, "old") == [(10 + i, f"again {i}") for i in range(10)]
    assert [c for _, c in _thread(store, "new")] == [f"new {i}" for i in range(10, 100)]


def test_turn_numbers_continue_after_a_purge_took_a_thread_whole(
    full: MessageLog, store: EmbeddedStore
) -> None:
    assert asyncio.run(full.apurge("alice", now=NOW)).over_cap == 10
    assert _thread(store, "old") == []
    ids = _say(full, "old", "back again", 0)
    assert _thread(store, "old") == [(10, "back again")]
    # A message without an id of its own is named by its turn: a fresh name too.
    assert ids[0] == MessageLog.message_id("alice", "old", "#10")
    marks = list(store.iterate(TURN_MARKS.name, user="alice"))
    assert [(m.properties["thread_id"], m.properties["turn"]) for m in marks] == [("old", 9)]


def test_expired_turns_leave_their_numbers_taken(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, message_days=30)
    for i in range(4):
        _say(log, "t", f"old {i}", 90 - i)
    assert asyncio.run(log.apurge("alice", now=NOW)).expired == 4
    _say(log, "t", "fresh", 0)
    assert _thread(store, "t") == [(4, "fresh")]


def test_forgetting_a_thread_forgets_its_numbers_too(
    full: MessageLog, store: EmbeddedStore
) -> None:
    asyncio.run(full.apurge("alice", now=NOW))
    assert asyncio.run(full.aforget("alice", thread_id="old")) == 0
    assert list(store.iterate(TURN_MARKS.name, user="alice")) == []
    _say(full, "old", "a new start", 0)
    assert _thread(store, "old") == [(0, "a new start")]
    assert asyncio.run(full.aforget_user("alice")) == 101
    assert list(store.iterate(TURN_MARKS.name, user="alice")) == []


def test_threads_whose_newest_turns_are_purged_in_turn_give_no_number_twice(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, max_messages=2, purge_interval_minutes=0)
    ids: list[str] = []
    for i in range(12):
        # Every write purges; three threads in turn: each one's newest turn is purged
        # before the thread is written again.
        ids += _say(log, "abc"[i % 3], f"turn {i}", 12 - i)
    assert max(Counter(ids).values()) == 1
    assert _thread(store, "a") == []
    assert _thread(store, "b") == [(3, "turn 10")]
    assert _thread(store, "c") == [(3, "turn 11")]

"""Purging by the retention policy: what goes, what never goes, and under pressure."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from agentic_memory.api import Memory
from agentic_memory.kinds.episodes import EPISODES, EpisodicMemory
from agentic_memory.kinds.facts import FACTS, ExtractedFact, FactStore
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.messages.schema import TURN_MARKS
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.kinds.rules import RULES, RuleBook
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, StoreError, Where
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.kinds.retention.conftest import KEEP_ALL, NOW, days_ago, exchange, log_with


def _turns(store: EmbeddedStore, user: str) -> list[tuple[str, int, str, bool]]:
    return sorted(
        (
            str(o.properties["thread_id"]),
            int(o.properties["turn"]),
            str(o.properties["content"]),
            bool(o.properties.get("important")),
        )
        for o in store.iterate(MESSAGES.name, user=user)
    )


def test_expired_turns_go_unless_important(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, message_days=30)
    exchange(log, "alice", "old", "an old chat", days=45)
    exchange(log, "alice", "old", "an old promise", days=40, important=True)
    exchange(log, "alice", "new", "a recent chat", days=5)
    exchange(log, "bob", "old", "bob's old chat", days=90)

    dry = asyncio.run(log.apurge("alice", now=NOW, dry_run=True))
    assert (dry.expired, dry.over_cap, dry.remaining) == (2, 0, 4)
    assert dry.cutoff == "2026-10-31T12:00:00+00:00"
    assert store.count(MESSAGES.name, user="alice") == 6  # nothing deleted

    done = asyncio.run(log.apurge("alice", now=NOW))
    assert (done.expired, done.over_cap, done.remaining, done.deleted) == (2, 0, 4, 2)
    # The old chat went; the important old promise and the recent chat stay, with their
    # turn numbers and marks.
    assert _turns(store, "alice") == [
        ("new", 0, "a recent chat", False),
        ("new", 1, "About a recent chat.", False),
        ("old", 2, "an old promise", True),
        ("old", 3, "About an old promise.", True),
    ]
    assert store.count(MESSAGES.name, user="bob") == 2  # another user is not touched
    assert asyncio.run(log.apurge("alice", now=NOW)).deleted == 0  # nothing left to do


def test_over_the_cap_the_oldest_unimportant_go(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, max_messages=5)
    for i in range(6):  # twelve turns, logged a day apart, two at a time (one instant)
        exchange(log, "alice", f"t{i % 2}", f"topic {i}", days=20 - i, important=i == 0)
    dry = asyncio.run(log.apurge("alice", now=NOW, dry_run=True))
    assert (dry.expired, dry.over_cap, dry.remaining) == (0, 7, 5)
    report = asyncio.run(log.apurge("alice", now=NOW))
    assert (report.over_cap, report.remaining, report.important_over_cap) == (7, 5, 0)
    left = {c for _, _, c, _ in _turns(store, "alice")}
    # The important oldest pair stays; then the newest: topic 5 and the user turn of 4? No:
    # seven of the ten unimportant go, oldest first, so topic 4's answer and topic 5 remain,
    # and of topic 4 the older-by-id one of its tied pair went first.
    assert {"topic 0", "About topic 0."} <= left
    assert {"topic 5", "About topic 5."} <= left
    assert len(left) == 5
    assert not {"topic 1", "About topic 1.", "topic 2", "About topic 2.", "topic 3"} & left


def test_important_turns_over_the_cap_are_kept_and_said(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, max_messages=3)
    for i in range(3):
        exchange(log, "alice", "t", f"keep {i}", days=10 - i, important=True)
    exchange(log, "alice", "t", "chat", days=1)
    report = asyncio.run(log.apurge("alice", now=NOW))
    assert (report.over_cap, report.remaining, report.important_over_cap) == (2, 6, 3)
    assert all(important for *_, important in _turns(store, "alice"))


def test_a_big_excess_is_pruned_in_bulk(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    log = log_with(store, embeddings)
    for i in range(60):
        exchange(log, "alice", f"t{i % 4}", f"note {i}", days=100 - i)
    log.retention = RetentionPolicy(message_days=None, max_messages=7, purge_interval_minutes=None)
    deletes: list[list[Where]] = []
    real = store.delete_where

    def spy(collection: str, where: Any, *, user: str | None = None) -> int:
        deletes.append(list(where))
        return real(collection, where, user=user)

    store.delete_where = spy  # type: ignore[method-assign]
    report = asyncio.run(log.apurge("alice", now=NOW))
    assert (report.over_cap, report.remaining) == (113, 7)
    assert len(deletes) <= 4  # one statement, plus the turns tied with the first kept one
    assert {c for _, _, c, _ in _turns(store, "alice")} >= {"note 59", "About note 59."}


def test_purge_never_touches_facts_or_rules(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    mem = Memory(store, embeddings, retention=KEEP_ALL)
    exchange(mem.messages, "alice", "t1", "I am vegetarian", days=400)
    asyncio.run(
        FactStore(store, embeddings).aremember(
            "alice", [ExtractedFact(subject="diet", value="vegetarian", category="preference")]
        )
    )
    book = RuleBook(store, embeddings)
    asyncio.run(book.apropose("alice", [{"instruction": "Be brief", "rationale": "asked"}]))
    asyncio.run(
        EpisodicMemory(store, embeddings).astore(
            "alice", "t1", _Reflection(0.1), "user: I am vegetarian", now=days_ago(400)
        )
    )
    before = {
        name: {
            u: sorted((o.id, repr(o.properties)) for o in store.iterate(name, user=u))
            for u in store.users(name)
        }
        for name in (FACTS.name, RULES.name)
    }
    touched: list[str] = []
    for method in (
        "delete",
        "delete_where",
        "delete_user",
        "upsert",
        "insert",
        "drop_collection",
        "add_properties",
    ):
        real = getattr(store, method)

        def spy(name: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            touched.append(name)
            return _real(name, *args, **kwargs)

        setattr(store, method, spy)
    tight = Memory(
        store,
        embeddings,
        retention=RetentionPolicy(message_days=0.001, max_messages=1, max_episodes=1),
    )
    reports = tight.purge(now=NOW)
    assert [r.user for r in reports] == ["alice"]
    assert reports[0].messages.expired == 2
    after = {
        name: {
            u: sorted((o.id, repr(o.properties)) for o in store.iterate(name, user=u))
            for u in store.users(name)
        }
        for name in (FACTS.name, RULES.name)
    }
    assert after == before
    # The log's turn marks: the numbers of the purged turns stay taken.
    assert set(touched) <= {MESSAGES.name, TURN_MARKS.name, EPISODES.name}
    assert reports[0].to_dict()["never_purged"] == ["UserFact", "ProceduralRules"]


@dataclass
class _Reflection:
    importance: float
    context_tags: tuple[str, ...] = ("food",)
    conversation_summary: str = "A talk."
    what_worked: str = "listening"
    what_to_avoid: str = "rushing"

    def __post_init__(self) -> None:
        self.context_tags = list(self.context_tags)  # type: ignore[assignment]


# -- automatic purging after a write -----------------------------------------------------------


def test_a_write_purges_at_most_once_per_interval(
    store: EmbeddedStore, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = log_with(store, embeddings, message_days=30, purge_interval_minutes=60)
    purges: list[str] = []
    real = MessageLog.apurge

    async def counted(self: MessageLog, user: str, **kwargs: Any) -> Any:
        purges.append(user)
        return await real(self, user, **kwargs)

    monkeypatch.setattr(MessageLog, "apurge", counted)
    exchange(log, "alice", "t", "an old chat", days=45)  # purged by its own write: expired
    exchange(log, "alice", "t", "another old chat", days=45)  # within the hour: not purged
    exchange(log, "bob", "t", "bob's old chat", days=45)  # another user: purged
    assert purges == ["alice", "bob"]
    assert store.count(MESSAGES.name, user="alice") == 2
    assert store.count(MESSAGES.name, user="bob") == 0
    # Another MessageLog on the same store shares the clock; a new store does not.
    asyncio.run(
        log_with(store, embeddings, message_days=30).aremember(
            "alice", "t", [{"role": "user", "content": "x"}]
        )
    )
    assert purges == ["alice", "bob"]


def test_every_write_purges_with_a_zero_interval_and_none_without(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, max_messages=2, purge_interval_minutes=0)
    for i in range(3):
        exchange(log, "alice", "t", f"chat {i}", days=3 - i)
        assert store.count(MESSAGES.name, user="alice") == 2
    manual = log_with(store, embeddings, max_messages=2, purge_interval_minutes=None)
    exchange(manual, "alice", "t", "more", days=0)
    assert store.count(MESSAGES.name, user="alice") == 4


def test_a_failing_purge_never_fails_the_write(
    store: EmbeddedStore,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = log_with(store, embeddings, message_days=1, purge_interval_minutes=0)

    async def broken(self: MessageLog, user: str, **kwargs: Any) -> Any:
        raise StoreError("disk on fire")

    monkeypatch.setattr(MessageLog, "apurge", broken)
    with caplog.at_level(logging.WARNING):
        ids = exchange(log, "alice", "t", "still logged", days=0)
    assert len(ids) == 2 and store.count(MESSAGES.name, user="alice") == 2
    assert "disk on fire" in caplog.text


class ProcessKilled(Exception):
    """Stands for the process dying at that point (no later code of the purge runs)."""


# -- adversarial: races and crashes ------------------------------------------------------------


def test_a_turn_marked_important_while_the_purge_runs_is_kept(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, max_messages=2)
    doomed = exchange(log, "alice", "t", "old one", days=10) + exchange(
        log, "alice", "t", "old two", days=9
    )
    exchange(log, "alice", "t", "new", days=1)
    real = store.delete_where
    marked = False

    def mark_first(collection: str, where: Any, *, user: str | None = None) -> int:
        nonlocal marked
        if not marked:
            marked = True
            # The user marks the oldest turn between the purge's read and its delete.
            asyncio.run(log.amark_important("alice", [doomed[0]]))
        return real(collection, where, user=user)

    store.delete_where = mark_first  # type: ignore[method-assign]
    report = asyncio.run(log.apurge("alice", now=NOW))
    store.delete_where = real  # type: ignore[method-assign]
    left = {c: imp for _, _, c, imp in _turns(store, "alice")}
    assert left.get("old one") is True
    # The round recounts after the delete that kept the marked turn: one more unimportant
    # turn goes, and the user is at the cap, the marked turn among the two.
    assert report.remaining == store.count(MESSAGES.name, user="alice") == 2


def test_a_crash_mid_purge_loses_nothing_important_and_the_next_purge_finishes(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, message_days=30, max_messages=4)
    for i in range(5):
        exchange(log, "alice", f"t{i}", f"expired {i}", days=60 + i, important=i == 2)
    for i in range(5):
        exchange(log, "alice", f"n{i}", f"fresh {i}", days=10 - i)
    real = store.delete_where
    calls = 0

    def crash_on_second(collection: str, where: Any, *, user: str | None = None) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ProcessKilled("killed mid-purge")
        return real(collection, where, user=user)

    store.delete_where = crash_on_second  # type: ignore[method-assign]
    with pytest.raises(ProcessKilled):
        asyncio.run(log.apurge("alice", now=NOW))
    store.delete_where = real  # type: ignore[method-assign]
    middle = _turns(store, "alice")
    assert len(middle) == 12  # the expired eight went in the first (atomic) statement
    assert {c for _, _, c, imp in middle if imp} == {"expired 2", "About expired 2."}
    report = asyncio.run(log.apurge("alice", now=NOW))
    assert (report.expired, report.remaining) == (0, 4)
    final = _turns(store, "alice")
    assert {c for _, _, c, imp in final if imp} == {"expired 2", "About expired 2."}
    assert {c for _, _, c, _ in final} == {
        "expired 2",
        "About expired 2.",
        "fresh 4",
        "About fresh 4.",
    }


def test_purges_racing_writers_keep_turns_unique_and_important_ones(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    cap = 20
    policy = RetentionPolicy(message_days=None, max_messages=cap, purge_interval_minutes=None)
    errors: list[BaseException] = []
    important: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        # Separate stores: separate SQLite connections, as separate processes.
        with EmbeddedStore(store.path, dims=embeddings.dims) as own:
            log = MessageLog(own, embeddings, retention=policy)
            try:
                for i in range(12):
                    ids = asyncio.run(
                        log.aremember(
                            "alice",
                            f"thread-{n % 2}",
                            [{"role": "user", "content": f"w{n} says {i}"}],
                            important=i % 5 == 0,
                        )
                    )
                    if i % 5 == 0:
                        with lock:
                            important.extend(ids)
            except BaseException as exc:
                errors.append(exc)

    def purger() -> None:
        with EmbeddedStore(store.path, dims=embeddings.dims) as own:
            log = MessageLog(own, embeddings, retention=policy)
            try:
                while not stop.is_set():
                    asyncio.run(log.apurge("alice"))
            except BaseException as exc:
                errors.append(exc)

    asyncio.run(
        MessageLog(store, embeddings, retention=policy).aremember(
            "alice", "thread-0", [{"role": "user", "content": "start"}]
        )
    )
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    purgers = [threading.Thread(target=purger) for _ in range(2)]
    for t in writers + purgers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in purgers:
        t.join()
    assert errors == []
    asyncio.run(MessageLog(store, embeddings, retention=policy).apurge("alice"))
    stored = list(store.iterate(MESSAGES.name, user="alice"))
    keys = Counter((o.properties["thread_id"], o.properties["turn"]) for o in stored)
    assert max(keys.values()) == 1  # turn numbers stay unique per thread
    ids = {o.id for o in stored}
    assert set(important) <= ids  # every important turn survived
    assert len(stored) == max(cap, len(important))


def test_bad_purge_arguments(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    log = log_with(store, embeddings)
    for kwargs in ({"now": NOW.replace(tzinfo=None)}, {"now": "2026-01-01"}, {"dry_run": "yes"}):
        with pytest.raises(InvalidInputError):
            asyncio.run(log.apurge("alice", **kwargs))  # type: ignore[arg-type]
    for user in ("", "_global", 3):
        with pytest.raises(InvalidInputError):
            asyncio.run(log.apurge(user))  # type: ignore[arg-type]
    assert (
        asyncio.run(log.apurge("alice")).deleted == 0
    )  # no log yet: nothing to do, nothing created
    assert MESSAGES.name not in store.collections()
    mem = Memory(store, embeddings, retention=KEEP_ALL)
    with pytest.raises(InvalidInputError):
        mem.purge("_global")
    assert mem.purge() == []


_KILLED_PURGE = """
import asyncio, os, signal, sys
from datetime import datetime
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

real = EmbeddedStore._delete_rids
calls = 0

def dies_in_the_second(self, conn, spec, user, rids):
    global calls
    calls += 1
    deleted = real(self, conn, spec, user, rids)
    if calls == 2:
        # The rows are deleted inside the open transaction: the process dies before COMMIT.
        os.kill(os.getpid(), signal.SIGKILL)
    return deleted

EmbeddedStore._delete_rids = dies_in_the_second
emb = LocalEmbeddings()
policy = RetentionPolicy(message_days=30, max_messages=10, purge_interval_minutes=None)
with EmbeddedStore(sys.argv[1], dims=emb.dims) as store:
    log = MessageLog(store, emb, retention=policy)
    asyncio.run(log.apurge("alice", now=datetime.fromisoformat(sys.argv[2])))
"""


def test_a_process_killed_inside_a_purge_delete_leaves_it_whole(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    import signal
    import subprocess
    import sys

    log = log_with(store, embeddings, message_days=30, max_messages=10)
    for i in range(5):
        exchange(log, "alice", f"old{i}", f"expired {i}", days=60 + i, important=i == 2)
    for i in range(20):
        exchange(log, "alice", f"new{i}", f"fresh {i}", days=20 - i / 2)
    exchange(log, "bob", "b", "bob's old turn", days=90)
    assert store.count(MESSAGES.name, user="alice") == 50

    child = subprocess.run(
        [sys.executable, "-c", _KILLED_PURGE, str(store.path), NOW.isoformat()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    # The expiry's delete committed (8 unimportant expired turns); the first pruning round
    # died before its commit and left nothing of itself: no turn of it is gone.
    with EmbeddedStore(store.path, dims=embeddings.dims) as after:
        turns = _turns(after, "alice")
        assert len(turns) == 42
        assert {c for _, _, c, imp in turns if imp} == {"expired 2", "About expired 2."}
        assert not any(c.startswith(("expired 0", "expired 1")) for _, _, c, _ in turns)
        assert sum(c.startswith("fresh") for _, _, c, _ in turns) == 20
        assert after.count(MESSAGES.name, user="bob") == 2
        # The next purge finishes the job: the cap, the important exchange within it.
        report = asyncio.run(
            MessageLog(after, embeddings, retention=log.retention).apurge("alice", now=NOW)
        )
        assert (report.expired, report.over_cap, report.remaining) == (0, 32, 10)
        kept = {c for _, _, c, _ in _turns(after, "alice")}
        assert {"expired 2", "About expired 2.", "fresh 19", "About fresh 16."} <= kept
        assert after.count(MESSAGES.name, user="bob") == 2

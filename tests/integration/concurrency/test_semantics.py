"""What concurrent writers may and may not observe, made deterministic by interleaving by hand.

The stress tests race real writers; these tests place "the other writer" at the exact moment
between a writer's read and its write, or stop a writer between its two steps (a crash), and
check the outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.forget import forget_fact
from agentic_memory.kinds.facts import FACTS, FactStore, root_id, successor_id
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.rules import RuleBook, RuleConflictError
from agentic_memory.store import (
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoreError,
    Where,
    make_id,
)
from agentic_memory.store.embedded import EmbeddedStore
from tests.integration.concurrency.workers import DIMS, HashEmbeddings

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    with EmbeddedStore(tmp_path / "store", dims=DIMS) as s:
        yield s


def _flagged(store: MemoryStore, subject: str) -> int:
    return store.count(
        FACTS.name,
        user="alice",
        where=[Where("subject", "eq", subject), Where("current", "eq", True)],
    )


class _Interleave:
    """Runs ``other`` once, right before the first call of ``store.<method>``."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, store: MemoryStore, method: str, other: Any
    ):
        self.done = False
        real = getattr(store, method)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not self.done:
                self.done = True
                other()
            return real(*args, **kwargs)

        monkeypatch.setattr(store, method, wrapped)


# -- facts ------------------------------------------------------------------------------------


def test_a_value_written_between_read_and_write_is_superseded_not_lost(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = FactStore(store, HashEmbeddings())
    other = FactStore(store, HashEmbeddings())
    asyncio.run(facts.aremember("alice", [{"subject": "city", "value": "Paris"}], now=T0))
    _Interleave(
        monkeypatch,
        store,
        "insert",
        lambda: asyncio.run(
            other.aremember("alice", [{"subject": "city", "value": "Lyon"}], now=T0)
        ),
    )
    (change,) = asyncio.run(
        facts.aremember("alice", [{"subject": "city", "value": "Nice"}], now=T0)
    )
    # The Lyon writer won the race for Paris's successor; Nice superseded Lyon, not Paris.
    assert change.previous is not None and change.previous.value == "Lyon"
    history = asyncio.run(facts.ahistory("alice", "city"))
    assert [f.value for f in history] == ["Paris", "Lyon", "Nice"]
    assert [f.current for f in history] == [False, False, True]
    assert history[0].superseded_by == history[1].id and history[1].superseded_by == history[2].id
    assert history[1].id == successor_id("alice", "city", root_id("alice", "city"))
    assert _flagged(store, "city") == 1


def test_restating_what_another_writer_just_wrote_changes_nothing(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = FactStore(store, HashEmbeddings())
    asyncio.run(facts.aremember("alice", [{"subject": "diet", "value": "vegan"}]))
    _Interleave(
        monkeypatch,
        store,
        "insert",
        lambda: asyncio.run(
            FactStore(store, HashEmbeddings()).aremember(
                "alice", [{"subject": "diet", "value": "vegetarian"}]
            )
        ),
    )
    assert asyncio.run(facts.aremember("alice", [{"subject": "diet", "value": "Vegetarian"}])) == []
    assert [f.value for f in asyncio.run(facts.ahistory("alice", "diet"))] == [
        "vegan",
        "vegetarian",
    ]


def test_a_crash_between_the_two_steps_leaves_one_current_value(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = FactStore(store, HashEmbeddings())
    asyncio.run(facts.aremember("alice", [{"subject": "city", "value": "Paris"}], now=T0))

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("power cut")

    with monkeypatch.context() as m:
        m.setattr(store, "upsert", crash)  # the new value is inserted, the old one not retired
        with pytest.raises(StoreError, match="power cut"):
            asyncio.run(
                facts.aremember(
                    "alice", [{"subject": "city", "value": "Lyon"}], now=T0 + timedelta(1)
                )
            )
    assert _flagged(store, "city") == 2  # both rows still say "current"…
    assert [(f.value, f.current) for f in asyncio.run(facts.acurrent("alice"))] == [("Lyon", True)]
    history = asyncio.run(facts.ahistory("alice", "city"))
    assert [(f.value, f.current) for f in history] == [("Paris", False), ("Lyon", True)]
    # …until the next write of the subject, which repairs the flag with the right links.
    asyncio.run(facts.aremember("alice", [{"subject": "city", "value": "lyon"}]))  # a restatement
    assert _flagged(store, "city") == 1
    paris, lyon = asyncio.run(facts.ahistory("alice", "city"))
    assert (paris.superseded_by, paris.valid_to) == (lyon.id, lyon.valid_from)


def test_a_store_with_the_old_races_damage_still_has_one_current_value(
    store: EmbeddedStore,
) -> None:
    """Earlier versions numbered values 1, 2, 3…; racing writers left several flagged current."""
    facts = FactStore(store, HashEmbeddings())
    store.ensure_collection(FACTS)
    emb = HashEmbeddings()
    rows = []
    for n, (value, current) in enumerate([("A", False), ("B", True), ("C", True)], 1):
        props = {
            "subject": "city",
            "value": value,
            "category": "other",
            "current": current,
            "valid_from": (T0 + timedelta(days=n)).isoformat(),
        }
        rows.append(
            MemoryObject(make_id("fact", "alice", "city", str(n)), props, emb.embed_query(value))
        )
    store.upsert(FACTS.name, rows, user="alice")
    assert [f.value for f in asyncio.run(facts.acurrent("alice"))] == ["C"]
    assert [(f.value, f.current) for f in asyncio.run(facts.ahistory("alice", "city"))] == [
        ("A", False),
        ("B", False),
        ("C", True),
    ]
    (change,) = asyncio.run(facts.aremember("alice", [{"subject": "city", "value": "D"}]))
    assert change.previous is not None and change.previous.value == "C"
    assert [f.value for f in asyncio.run(facts.ahistory("alice", "city"))] == ["A", "B", "C", "D"]
    assert [f.value for f in asyncio.run(facts.acurrent("alice"))] == ["D"]


def test_a_value_after_a_forgotten_one_does_not_overwrite_the_current_one(
    store: EmbeddedStore,
) -> None:
    """Numbering by history length gave the next value the id of the current one after a
    deletion, and the current value was overwritten."""
    facts = FactStore(store, HashEmbeddings())
    for i, value in enumerate(["A", "B", "C"]):
        asyncio.run(
            facts.aremember("alice", [{"subject": "city", "value": value}], now=T0 + timedelta(i))
        )
    middle = asyncio.run(facts.ahistory("alice", "city"))[1]
    asyncio.run(forget_fact(store, "alice", middle.id))
    asyncio.run(
        facts.aremember("alice", [{"subject": "city", "value": "D"}], now=T0 + timedelta(5))
    )
    history = asyncio.run(facts.ahistory("alice", "city"))
    assert [f.value for f in history] == ["A", "C", "D"]
    assert [f.value for f in asyncio.run(facts.acurrent("alice"))] == ["D"]
    assert _flagged(store, "city") == 1


def test_naive_now_is_refused_before_anything_is_read(store: EmbeddedStore) -> None:
    facts = FactStore(store, HashEmbeddings())
    with pytest.raises(InvalidInputError, match="timezone"):
        asyncio.run(
            facts.aremember("alice", [{"subject": "a", "value": "b"}], now=datetime(2026, 1, 1))
        )
    assert FACTS.name not in store.collections()


# -- rules ------------------------------------------------------------------------------------


def _rules(text: str) -> list[dict[str, str]]:
    return [{"instruction": text, "rationale": "test"}]


def test_propose_on_a_stale_base_is_a_conflict_and_writes_nothing(store: EmbeddedStore) -> None:
    book = RuleBook(store, HashEmbeddings())
    first = asyncio.run(book.apropose("alice", _rules("Be brief")))
    assert first is not None and first.version == 2
    assert (
        asyncio.run(book.apropose("alice", _rules("Be kind"), base_version=2)) is not None
    )  # version 3
    with pytest.raises(RuleConflictError, match="at version 3, not 2") as info:
        asyncio.run(book.apropose("alice", _rules("Be loud"), base_version=2))
    assert (info.value.base_version, info.value.latest_version) == (2, 3)
    assert isinstance(info.value, ConflictError)
    assert [v.version for v in asyncio.run(book.aversions("alice"))] == [1, 2, 3]
    # Based on the starting set (version 1, not yet stored) is a base like any other.
    with pytest.raises(RuleConflictError):
        asyncio.run(
            RuleBook(store, HashEmbeddings()).apropose("alice", _rules("x"), base_version=1)
        )
    assert (
        asyncio.run(RuleBook(store, HashEmbeddings()).apropose("bob", _rules("x"), base_version=1))
        is not None
    )
    for bad in (0, -1, True, "2", 2.0):
        with pytest.raises(InvalidInputError, match="base_version"):
            asyncio.run(book.apropose("alice", _rules("y"), base_version=bad))  # type: ignore[arg-type]


def test_a_version_taken_between_read_and_write_gives_the_next_number(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = RuleBook(store, HashEmbeddings())
    other = RuleBook(store, HashEmbeddings())
    _Interleave(
        monkeypatch, store, "insert", lambda: asyncio.run(other.apropose("alice", _rules("Theirs")))
    )
    mine = asyncio.run(book.apropose("alice", _rules("Mine")))
    assert mine is not None and (mine.version, mine.parent_version) == (3, 2)
    assert [
        (v.version, v.rules[0].instruction if v.version > 1 else "")
        for v in asyncio.run(book.aversions("alice"))
    ][1:] == [
        (2, "Theirs"),
        (3, "Mine"),
    ]


def test_a_based_proposal_that_loses_the_race_reports_it(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = RuleBook(store, HashEmbeddings())
    asyncio.run(book.apropose("alice", _rules("Start")))
    other = RuleBook(store, HashEmbeddings())
    _Interleave(
        monkeypatch, store, "insert", lambda: asyncio.run(other.apropose("alice", _rules("Theirs")))
    )
    with pytest.raises(RuleConflictError, match="at version 3, not 2"):
        asyncio.run(book.apropose("alice", _rules("Mine"), base_version=2))
    assert [v.rules[0].instruction for v in asyncio.run(book.aversions("alice"))[1:]] == [
        "Start",
        "Theirs",
    ]


# -- messages ---------------------------------------------------------------------------------


def test_a_turn_taken_between_read_and_write_is_renumbered(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = MessageLog(store, HashEmbeddings())
    other = MessageLog(store, HashEmbeddings())
    asyncio.run(log.aremember("alice", "t", [{"role": "user", "content": "first"}]))
    _Interleave(
        monkeypatch,
        store,
        "insert",
        lambda: asyncio.run(
            other.aremember("alice", "t", [{"role": "user", "content": "theirs", "id": "x"}])
        ),
    )
    ids = asyncio.run(
        log.aremember(
            "alice", "t", [{"role": "user", "content": "mine"}, {"role": "ai", "content": "reply"}]
        )
    )
    logged = asyncio.run(log.alist("alice", thread_id="t"))
    assert [(m.turn, m.content) for m in logged] == [
        (0, "first"),
        (1, "theirs"),
        (2, "mine"),
        (3, "reply"),
    ]
    assert ids == [m.id for m in logged[2:]]
    assert ids[0] == MessageLog.message_id("alice", "t", "#2")


def test_a_message_logged_twice_at_once_is_stored_once(
    store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = MessageLog(store, HashEmbeddings())
    message = [{"role": "user", "content": "same", "id": "m1"}]
    _Interleave(
        monkeypatch,
        store,
        "insert",
        lambda: asyncio.run(MessageLog(store, HashEmbeddings()).aremember("alice", "t", message)),
    )
    assert asyncio.run(log.aremember("alice", "t", message)) == [
        MessageLog.message_id("alice", "t", "m1")
    ]
    assert [(m.turn, m.content) for m in asyncio.run(log.alist("alice", thread_id="t"))] == [
        (0, "same")
    ]


def test_async_log_retries_too(store: EmbeddedStore, monkeypatch: pytest.MonkeyPatch) -> None:
    log = MessageLog(store, HashEmbeddings())
    other = MessageLog(store, HashEmbeddings())
    _Interleave(
        monkeypatch,
        store,
        "insert",
        lambda: asyncio.run(other.aremember("alice", "t", [{"role": "user", "content": "theirs"}])),
    )
    ids = asyncio.run(log.aremember("alice", "t", [{"role": "user", "content": "mine"}]))
    logged = asyncio.run(log.alist("alice", thread_id="t"))
    assert [(m.turn, m.content) for m in logged] == [(0, "theirs"), (1, "mine")]
    assert ids == [logged[1].id]
    assert store.count(MESSAGES.name, user="alice") == 2

"""Marking logged turns important: by the caller, by the user, by the model; and recall."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from langchain_core.messages import HumanMessage

from agentic_memory.api import Memory
from agentic_memory.kinds.messages import IMPORTANCE_WEIGHT, MESSAGES, MessageLog
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.kinds.retention.conftest import KEEP_ALL, days_ago, exchange, log_with


def _stored(store: EmbeddedStore, user: str) -> dict[str, dict[str, object]]:
    return {o.id: o.properties for o in store.iterate(MESSAGES.name, user=user)}


def test_remember_marks_the_whole_call_or_one_message(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings, message_days=30)
    plain = exchange(log, "alice", "t1", "my bike is red", days=1)
    kept = exchange(log, "alice", "t1", "my passport number is X123", days=1, important=True)
    mixed = asyncio.run(
        log.aremember(
            "alice",
            "t2",
            [
                {"role": "user", "content": "the door code is 4711", "important": True},
                {"role": "assistant", "content": "Noted."},
            ],
            marked_by="model",
        )
    )
    by_id = {m.id: m for m in asyncio.run(log.alist("alice", limit=100))}
    assert [by_id[i].important for i in plain] == [False, False]
    assert [(by_id[i].important, by_id[i].important_by) for i in kept] == [(True, "user")] * 2
    assert (by_id[mixed[0]].important, by_id[mixed[0]].important_by) == (True, "model")
    assert (by_id[mixed[1]].important, by_id[mixed[1]].important_by) == (False, "")
    # Expiry: 30 days after logging, none for important turns.
    assert by_id[plain[0]].expires_at == "2026-12-29T12:00:00+00:00"
    assert by_id[kept[0]].expires_at is None and by_id[mixed[0]].expires_at is None
    assert by_id[mixed[1]].expires_at is not None


def test_logging_a_message_again_keeps_its_mark_unless_told(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings)
    message = HumanMessage("remember: the spare key is under the mat", id="m1")
    [oid] = asyncio.run(log.aremember("alice", "t1", [message], important=True))
    asyncio.run(log.aremember("alice", "t1", [message]))  # the graph logs a thread's turns again
    assert asyncio.run(log.alist("alice"))[0].important is True
    asyncio.run(log.aremember("alice", "t1", [message], important=False))
    assert asyncio.run(log.alist("alice"))[0].important is False
    assert asyncio.run(log.alist("alice"))[0].id == oid


def test_mark_and_unmark_by_id(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    log = log_with(store, embeddings)
    ids = exchange(log, "alice", "t1", "we chose the blue sofa", days=2)
    vectors = {
        o.id: o.vector for o in store.iterate(MESSAGES.name, user="alice", include_vector=True)
    }
    marked = asyncio.run(log.amark_important("alice", [ids[0], ids[0].upper()]))  # one id, twice
    assert [(m.id, m.important, m.important_by) for m in marked] == [(ids[0], True, "user")]
    stored = _stored(store, "alice")
    assert stored[ids[0]]["important"] is True and stored[ids[0]]["important_by"] == "user"
    assert "important" not in stored[ids[1]] or stored[ids[1]]["important"] is False
    # The vector and everything else stay as they were.
    after = {
        o.id: o.vector for o in store.iterate(MESSAGES.name, user="alice", include_vector=True)
    }
    assert after == vectors
    asyncio.run(log.amark_important("alice", [ids[0]], important=False))
    stored = _stored(store, "alice")
    assert stored[ids[0]]["important"] is False and "important_by" not in stored[ids[0]]


def test_the_user_word_wins_over_the_model(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings)
    [oid] = asyncio.run(
        log.aremember(
            "alice",
            "t1",
            [{"role": "user", "content": "my blood type is 0+", "important": True}],
            marked_by="model",
        )
    )
    assert asyncio.run(log.amark_important("alice", [oid]))[0].important_by == "user"
    assert asyncio.run(log.amark_important("alice", [oid], by="model"))[0].important_by == "user"


def test_bad_marks_change_nothing(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    log = log_with(store, embeddings)
    alice = exchange(log, "alice", "t1", "alice's secret", days=1)
    bob = exchange(log, "bob", "t1", "bob's note", days=1)
    before = (_stored(store, "alice"), _stored(store, "bob"))
    bad: list[tuple[str, object]] = [
        ("alice", bob[:1]),  # another user's message is not found
        ("bob", [alice[0]]),
        ("alice", [alice[0], bob[0]]),  # one bad id: none is marked
        ("alice", ["not-a-uuid"]),
        ("alice", ["' OR 1=1 --"]),
        ("alice", [str(uuid.uuid4())]),
        ("alice", alice[0]),  # one string, not a list
        ("alice", [42]),
        ("", alice),
        ("_global", alice),
        ("nobody", alice),
    ]
    for user, ids in bad:
        with pytest.raises(InvalidInputError):
            asyncio.run(log.amark_important(user, ids))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        asyncio.run(log.amark_important("alice", alice, important="yes"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        asyncio.run(log.amark_important("alice", alice, by="admin"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        asyncio.run(
            log.aremember("alice", "t1", [{"role": "user", "content": "x", "important": "yes"}])
        )
    assert (_stored(store, "alice"), _stored(store, "bob")) == before
    assert asyncio.run(log.amark_important("alice", [])) == []


def test_marking_in_a_store_without_a_log_says_so(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    with pytest.raises(InvalidInputError, match="no logged message"):
        asyncio.run(
            MessageLog(store, embeddings, retention=KEEP_ALL).amark_important(
                "alice", [str(uuid.uuid4())]
            )
        )
    assert MESSAGES.name not in store.collections()


def test_find_a_turn(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    log = log_with(store, embeddings)
    ids = exchange(log, "alice", "t1", "first", days=1) + exchange(
        log, "alice", "t1", "second", days=1
    )
    found = asyncio.run(log.afind("alice", "t1", 2))
    assert found is not None and found.id == ids[2] and found.content == "second"
    assert (
        asyncio.run(log.afind("alice", "t1", 9)) is None
        and asyncio.run(log.afind("bob", "t1", 0)) is None
    )
    for turn in (-1, True, "2"):
        with pytest.raises(InvalidInputError):
            asyncio.run(log.afind("alice", "t1", turn))  # type: ignore[arg-type]


# -- recall ------------------------------------------------------------------------------------


def test_an_important_turn_outranks_an_equally_good_match(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    log = log_with(store, embeddings)
    # Two threads that say the same thing: the hybrid scores are equal.
    said = [{"role": "user", "content": "the wifi password is on the fridge"}]
    first = asyncio.run(log.aremember("alice", "t1", said, now=days_ago(3)))
    second = asyncio.run(log.aremember("alice", "t2", said, now=days_ago(3)))
    exchange(log, "alice", "t3", "we talked about the weather", days=3)
    before = asyncio.run(log.arecall("alice", "wifi password", k=4))
    assert {before[0].id, before[1].id} == {first[0], second[0]}
    assert before[0].score == pytest.approx(before[1].score)
    loser = before[1].id
    asyncio.run(log.amark_important("alice", [loser]))
    after = asyncio.run(log.arecall("alice", "wifi password", k=4))
    assert after[0].id == loser and after[0].important is True
    assert after[0].score == pytest.approx(
        before[1].score + IMPORTANCE_WEIGHT * (1 - before[1].score)
    )
    assert after[1].score == pytest.approx(before[0].score)


def test_equal_importance_keeps_the_ranking(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    """Marking every turn important changes no order: the benchmark's ranking stands."""
    log = log_with(store, embeddings)
    topics = [
        "we hiked up the ridge on saturday",
        "the dentist appointment is on monday",
        "my sister moved to lisbon",
        "I bought a red bike for commuting",
        "the ridge trail was muddy after rain",
        "lisbon has great custard tarts",
    ]
    ids: list[str] = []
    for i, text in enumerate(topics):
        ids += exchange(log, "alice", f"t{i % 3}", text, days=10 - i)
    queries = ["ridge hike", "lisbon sister", "bike", "monday appointment", "rain"]
    plain = {q: asyncio.run(log.arecall("alice", q, k=8)) for q in queries}
    asyncio.run(log.amark_important("alice", ids))
    marked = {q: asyncio.run(log.arecall("alice", q, k=8)) for q in queries}
    for q in queries:
        assert [h.id for h in marked[q]] == [h.id for h in plain[q]]
        for a, b in zip(marked[q], plain[q], strict=True):
            assert a.score == pytest.approx(b.score + IMPORTANCE_WEIGHT * (1 - b.score))


def test_the_memory_api(
    tmp_path: object, embeddings: LocalEmbeddings, store: EmbeddedStore
) -> None:
    mem = Memory(store, embeddings, retention=KEEP_ALL)
    ids = mem.remember("alice", "t1", [{"role": "user", "content": "keep this"}], important=True)
    assert mem.list("alice")[0].important is True
    assert [m.important for m in mem.mark_important("alice", ids, important=False)] == [False]
    marked = asyncio.run(mem.amark_important("alice", ids))
    assert marked[0].important is True
    with pytest.raises(InvalidInputError):
        Memory(store, embeddings, retention={"message_days": 3})  # type: ignore[arg-type]

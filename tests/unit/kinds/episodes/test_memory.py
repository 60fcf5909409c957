from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agentic_memory.kinds.episodes import (
    IMPORTANCE_WEIGHT,
    RECENCY_WEIGHT,
    RELEVANCE_WEIGHT,
    EpisodicMemory,
    Reflection,
)
from agentic_memory.store import InvalidInputError

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def reflection(summary: str, importance: float = 0.5, tags: list[str] | None = None) -> Reflection:
    return Reflection(
        context_tags=tags or ["topic"],
        conversation_summary=summary,
        what_worked="Short concrete answers.",
        what_to_avoid="Long digressions.",
        importance=importance,
    )


@pytest.fixture
def episodes(store, embeddings) -> EpisodicMemory:
    return EpisodicMemory(store, embeddings)


def test_store_is_idempotent_per_conversation_number(episodes: EpisodicMemory) -> None:
    r = reflection("Planned a trip to Rome.")
    first = asyncio.run(episodes.astore("alice", "t1", r, "user: rome?", now=NOW))
    again = asyncio.run(episodes.astore("alice", "t1", r, "user: rome?", conversation=1, now=NOW))
    second = asyncio.run(episodes.astore("alice", "t1", r, "user: again", now=NOW))
    assert first == again == EpisodicMemory.episode_id("alice", "t1", 1)
    assert second == EpisodicMemory.episode_id("alice", "t1", 2)
    assert len(asyncio.run(episodes.alist("alice"))) == 2
    got = asyncio.run(episodes.aget("alice", first))
    assert got is not None and got.conversation == "user: rome?"
    assert got.context_tags == ["topic"] and got.importance == 0.5


def test_recall_is_per_user_and_scored_by_the_documented_formula(
    episodes: EpisodicMemory,
) -> None:
    asyncio.run(
        episodes.astore(
            "alice", "t1", reflection("Vegetarian dinner recipes with lentils.", 0.9), "x", now=NOW
        )
    )
    asyncio.run(
        episodes.astore(
            "alice",
            "t2",
            reflection("Fixing a bicycle chain.", 0.1),
            "y",
            now=NOW - timedelta(days=60),
        )
    )
    asyncio.run(
        episodes.astore("bob", "t9", reflection("Vegetarian dinner recipes."), "z", now=NOW)
    )

    hits = asyncio.run(
        episodes.arecall("alice", "vegetarian dinner", k=2, now=NOW, half_life_days=30)
    )
    assert [h.episode.thread_id for h in hits] == ["t1", "t2"]
    best, other = hits
    assert best.recency == pytest.approx(1.0)
    assert other.recency == pytest.approx(0.25)
    for h in hits:
        assert h.score == pytest.approx(
            RELEVANCE_WEIGHT * h.relevance
            + RECENCY_WEIGHT * h.recency
            + IMPORTANCE_WEIGHT * h.episode.importance
        )
    assert [
        h.episode.thread_id for h in asyncio.run(episodes.arecall("bob", "bicycle", now=NOW))
    ] == ["t9"]


def test_importance_and_recency_break_ties(episodes: EpisodicMemory) -> None:
    same = "Weekly grocery list planning."
    asyncio.run(
        episodes.astore("alice", "old", reflection(same, 0.5), "x", now=NOW - timedelta(days=90))
    )
    asyncio.run(episodes.astore("alice", "new", reflection(same, 0.5), "x", now=NOW))
    asyncio.run(episodes.astore("alice", "vital", reflection(same, 1.0), "x", now=NOW))
    order = [
        h.episode.thread_id for h in asyncio.run(episodes.arecall("alice", same, k=3, now=NOW))
    ]
    assert order == ["vital", "new", "old"]


def test_bad_input_writes_nothing(episodes: EpisodicMemory) -> None:
    r = reflection("x")
    with pytest.raises(InvalidInputError, match="conversation_text"):
        asyncio.run(episodes.astore("alice", "t1", r, "  "))
    with pytest.raises(InvalidInputError, match="thread_id"):
        asyncio.run(episodes.astore("alice", "", r, "text"))
    with pytest.raises(InvalidInputError, match="positive integer"):
        asyncio.run(episodes.astore("alice", "t1", r, "text", conversation=0))
    with pytest.raises(InvalidInputError, match="query"):
        asyncio.run(episodes.arecall("alice", " "))
    assert asyncio.run(episodes.alist("alice")) == []


async def test_async_twins_and_forget(episodes: EpisodicMemory) -> None:
    eid = await episodes.astore("alice", "t1", reflection("Chess openings."), "user: e4?")
    assert [e.id for e in await episodes.alist("alice")] == [eid]
    hits = await episodes.arecall("alice", "chess")
    assert hits[0].to_dict()["id"] == eid and "conversation" not in hits[0].to_dict()
    assert await episodes.aforget("alice", [eid]) == 1
    assert await episodes.aget("alice", eid) is None

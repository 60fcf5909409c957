"""A new episode never replaces another: not after a prune, not when two ends store at once.

``EpisodicMemory.astore`` without ``conversation`` numbered a new episode one more than the
thread's episodes; once a purge had pruned one, that number was another episode's, which was
replaced (an acknowledged episode lost). Two ends counting at once took the same number.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from agentic_memory.kinds.episodes import EpisodicMemory, Reflection
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.kinds.retention.conftest import NOW


def _reflection(summary: str, importance: float = 0.5) -> Reflection:
    return Reflection(
        context_tags=["trips"],
        conversation_summary=summary,
        what_worked="Lists.",
        what_to_avoid="Jargon.",
        importance=importance,
    )


def test_an_episode_after_a_prune_keeps_the_others(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    episodes = EpisodicMemory(store, embeddings)
    for i, importance in enumerate((0.1, 0.9, 0.8)):
        asyncio.run(
            episodes.astore(
                "alice",
                "t",
                _reflection(f"trip {i}", importance),
                f"user: trip {i}",
                now=NOW + timedelta(minutes=i),
            )
        )
    assert [p["summary"] for p in asyncio.run(episodes.aprune("alice", 2)).pruned] == ["trip 0"]
    asyncio.run(episodes.astore("alice", "t", _reflection("trip 3"), "user: trip 3"))
    summaries = sorted(e.conversation_summary for e in asyncio.run(episodes.alist("alice")))
    assert summaries == ["trip 1", "trip 2", "trip 3"]


def test_ends_storing_at_once_each_keep_their_episode(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    episodes = EpisodicMemory(store, embeddings)

    async def at_once() -> list[str]:
        return list(
            await asyncio.gather(
                *(
                    episodes.astore("alice", "t", _reflection(f"end {i}"), f"user: end {i}")
                    for i in range(6)
                )
            )
        )

    ids = asyncio.run(at_once())
    assert len(set(ids)) == 6
    summaries = sorted(e.conversation_summary for e in asyncio.run(episodes.alist("alice")))
    assert summaries == [f"end {i}" for i in range(6)]

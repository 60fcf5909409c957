"""The ``("episodes", user)`` namespaces: episodes written through ``EpisodicMemory``.

A value that cannot be a memory is refused with a clear error and changes nothing
(moved from ``tests/unit/langgraph_store/test_kinds.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import InvalidInputError
from tests.unit.langgraph_store.conftest import Clock

EPISODES = ("episodes", "alice")


def episode(thread: str = "t1", **changes: Any) -> dict[str, Any]:
    value = {
        "thread_id": thread,
        "conversation": "user: plan a vegetarian dinner\nai: lentil curry",
        "context_tags": ["dinner", "vegetarian"],
        "conversation_summary": "Planned a vegetarian dinner.",
        "what_worked": "Concrete recipes.",
        "what_to_avoid": "Peanuts.",
        "importance": 0.8,
    }
    value.update(changes)
    return value


def test_episodes_are_put_under_their_id(amem: AgenticStore, clock: Clock) -> None:
    first = EpisodicMemory.episode_id("alice", "t1", 1)
    amem.put(EPISODES, first, episode())
    item = amem.get(EPISODES, first)
    assert item is not None
    assert item.value["conversation_summary"] == "Planned a vegetarian dinner."
    assert item.value["thread_id"] == "t1"
    assert asyncio.run(amem.episodes.aget("alice", first)) is not None
    # The wrong key for a new episode: refused, naming the key to use.
    second = EpisodicMemory.episode_id("alice", "t1", 2)
    with pytest.raises(InvalidInputError, match=second):
        amem.put(EPISODES, "my-episode", episode())
    amem.put(EPISODES, second, episode(conversation_summary="A second dinner."))
    assert len(asyncio.run(amem.episodes.alist("alice"))) == 2
    # An edit keeps the episode's creation time and its thread.
    clock.advance(days=1)
    amem.put(EPISODES, first, {**item.value, "what_worked": "Short answers."})
    edited = amem.get(EPISODES, first)
    assert edited is not None and edited.value["what_worked"] == "Short answers."
    assert edited.created_at == item.created_at
    with pytest.raises(InvalidInputError, match="cannot move"):
        amem.put(EPISODES, first, episode(thread="t2"))
    hits = amem.search(EPISODES, query="second dinner")
    assert hits[0].key == second and hits[0].score is not None
    assert [i.key for i in amem.search(EPISODES, filter={"what_worked": "Short answers."})] == [
        first
    ]
    amem.delete(EPISODES, first)
    assert amem.get(EPISODES, first) is None
    assert amem.get(EPISODES, "not-a-uuid") is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"importance": 1.5}, "importance"),
        ({"importance": True}, "importance"),
        ({"conversation": ""}, "non-empty string"),
        ({"context_tags": "dinner"}, "list of strings"),
        ({"what_worked": None}, "needs 'what_worked'"),
        ({"mood": "happy"}, "no field 'mood'"),
        ({"created_at": "2026-01-01T00:00:00+00:00"}, "set by the store"),
    ],
)
def test_a_value_that_is_not_an_episode_is_refused(
    amem: AgenticStore, changes: dict[str, Any], message: str
) -> None:
    key = EpisodicMemory.episode_id("alice", "t1", 1)
    with pytest.raises(InvalidInputError, match=message):
        amem.put(EPISODES, key, episode(**changes))
    assert asyncio.run(amem.episodes.alist("alice")) == []

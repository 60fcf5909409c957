"""Memory-kind namespaces: items are the agent's memories, written through the kind classes.

Every write goes through ``FactStore``, ``RuleBook``, ``EpisodicMemory`` or ``MessageLog``, so
their rules hold for store writes: a fact supersedes (history kept), a rule version is
immutable and numbered by ``propose``, a message is numbered by ``remember``, knowledge is
written by ingestion only. A value that cannot be a memory is refused with a clear error and
changes nothing; another user's namespace never returns anything of this user's.
"""

from __future__ import annotations

import asyncio

from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.langgraph_store import AgenticStore
from tests.unit.kinds.episodes.test_space import episode
from tests.unit.kinds.rules.test_space import rule

FACTS = ("facts", "alice")
RULES = ("rules", "alice")
EPISODES = ("episodes", "alice")
THREAD = ("messages", "alice", "t1")


# -- isolation and listing ------------------------------------------------------------------


def test_another_users_namespace_returns_nothing_of_this_user(amem: AgenticStore) -> None:
    amem.put(FACTS, "diet", {"value": "vegetarian"})
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    first = EpisodicMemory.episode_id("alice", "t1", 1)
    amem.put(EPISODES, first, episode())
    amem.put(THREAD, "m1", {"role": "user", "content": "my secret is pineapple"})
    for root in ("facts", "rules", "episodes"):
        assert amem.search((root, "bob")) == []
        assert amem.search((root, "bob"), query="vegetarian dinner pineapple") == []
    assert amem.search(("messages", "bob"), query="secret pineapple") == []
    assert amem.search(("messages", "bob", "t1")) == []
    assert amem.get(("facts", "bob"), "diet") is None
    assert amem.get(("episodes", "bob"), first) is None
    assert amem.get(("rules", "bob"), "latest") is None
    assert amem.get(("messages", "bob", "t1"), "m1") is None
    assert amem.get(("messages", "bob", "t1"), MessageLog.message_id("alice", "t1", "m1")) is None
    amem.delete(("episodes", "bob"), first)
    amem.delete(("messages", "bob", "t1"), MessageLog.message_id("alice", "t1", "m1"))
    assert amem.get(EPISODES, first) is not None
    assert amem.get(THREAD, "m1") is not None
    assert amem.list_namespaces(prefix=("facts", "bob")) == []


def test_list_namespaces_shows_the_kinds(amem: AgenticStore) -> None:
    amem.put(FACTS, "diet", {"value": "vegetarian"})
    amem.put(("facts", "bob"), "diet", {"value": "vegan"})
    amem.put(THREAD, "m1", {"role": "user", "content": "hello"})
    amem.put(("messages", "alice", "t2"), "m1", {"role": "user", "content": "hello again"})
    amem.put(("memories", "alice"), "k", {"text": "a LangMem memory"})
    assert amem.list_namespaces() == [
        ("facts", "alice"),
        ("facts", "bob"),
        ("memories", "alice"),
        ("messages", "alice", "t1"),
        ("messages", "alice", "t2"),
    ]
    assert amem.list_namespaces(max_depth=2) == [
        ("facts", "alice"),
        ("facts", "bob"),
        ("memories", "alice"),
        ("messages", "alice"),
    ]
    assert amem.list_namespaces(suffix=("alice",)) == [("facts", "alice"), ("memories", "alice")]
    assert amem.list_namespaces(prefix=("messages", "*", "t2")) == [("messages", "alice", "t2")]
    assert amem.list_namespaces(prefix=("facts", "_bad")) == []
    assert [i.namespace for i in amem.search(("facts",))] == [("facts", "alice"), ("facts", "bob")]


async def test_kinds_async(amem: AgenticStore) -> None:
    await amem.aput(FACTS, "diet", {"value": "vegetarian"})
    item = await amem.aget(FACTS, "diet")
    assert item is not None and item.value["value"] == "vegetarian"
    assert [i.key for i in await amem.asearch(FACTS, query="food")] == ["diet"]
    await amem.adelete(FACTS, "diet")
    assert await amem.aget(FACTS, "diet") is None
    assert await amem.alist_namespaces(prefix=("facts",)) == []


# -- the Weaviate backend ---------------------------------------------------------------------


def test_kinds_on_both_backends(agentic: AgenticStore) -> None:
    agentic.put(FACTS, "diet", {"value": "vegetarian", "category": "preference"})
    agentic.put(FACTS, "diet", {"value": "vegan"})
    agentic.put(FACTS, "allergy", {"value": "peanuts", "category": "constraint"})
    assert [f.value for f in asyncio.run(agentic.facts.ahistory("alice", "diet"))] == [
        "vegetarian",
        "vegan",
    ]
    assert agentic.search(FACTS, query="peanut allergy")[0].key == "allergy"
    agentic.put(RULES, "latest", {"rules": [rule(1)]})
    assert agentic.get(RULES, "latest").value["version"] == 2  # type: ignore[union-attr]
    agentic.put(THREAD, "m1", {"role": "user", "content": "My printer is a LaserJet 4"})
    agentic.put(THREAD, "m2", {"role": "ai", "content": "Noted."})
    assert [i.value["turn"] for i in agentic.search(THREAD)] == [0, 1]
    assert agentic.search(("facts", "bob"), query="peanut") == []

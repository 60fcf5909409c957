"""Memory-kind namespaces: items are the agent's memories, written through the kind classes.

Every write goes through ``FactStore``, ``RuleBook``, ``EpisodicMemory`` or ``MessageLog``, so
their rules hold for store writes: a fact supersedes (history kept), a rule version is
immutable and numbered by ``propose``, a message is numbered by ``remember``, knowledge is
written by ingestion only. A value that cannot be a memory is refused with a clear error and
changes nothing; another user's namespace never returns anything of this user's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import PutOp

from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.langgraph_store import (
    AgenticStore,
    OperatorRequiredError,
    RuleVersionConflictError,
)
from agentic_memory.store import InvalidInputError
from tests.unit.langgraph_store.conftest import Clock

FACTS = ("facts", "alice")
RULES = ("rules", "alice")
EPISODES = ("episodes", "alice")
THREAD = ("messages", "alice", "t1")


def rule(n: int) -> dict[str, str]:
    return {"instruction": f"Rule number {n}", "rationale": f"reason {n}"}


# -- facts ------------------------------------------------------------------------------------


def test_a_fact_put_supersedes_and_keeps_history(amem: AgenticStore, clock: Clock) -> None:
    amem.put(FACTS, "Diet", {"value": "vegetarian", "category": "preference"})
    first = amem.get(FACTS, "diet")
    assert first is not None
    assert first.key == "diet"
    assert first.value == {
        "subject": "diet",
        "value": "vegetarian",
        "category": "preference",
        "valid_from": first.value["valid_from"],
        "source_thread": None,
    }
    clock.advance(days=3)
    amem.put(FACTS, "diet", {"value": "vegan", "source_thread": "t9"})
    item = amem.get(FACTS, " DIET. ")  # any spelling of the subject
    assert item is not None and item.value["value"] == "vegan"
    assert item.value["category"] == "preference"  # kept from the value it superseded
    assert item.value["source_thread"] == "t9"
    assert item.created_at == first.created_at  # the subject's first value
    assert (item.updated_at - item.created_at).days == 3  # the current value
    history = asyncio.run(amem.facts.ahistory("alice", "diet"))
    assert [(f.value, f.current) for f in history] == [("vegetarian", False), ("vegan", True)]
    assert history[0].superseded_by == history[1].id
    # Restating the current value changes nothing.
    amem.put(FACTS, "diet", {"value": "  Vegan "})
    assert len(asyncio.run(amem.facts.ahistory("alice", "diet"))) == 2


def test_a_fact_read_back_can_be_edited_and_put_again(amem: AgenticStore, clock: Clock) -> None:
    amem.put(FACTS, "city", {"value": "Lyon", "category": "identity"})
    item = amem.get(FACTS, "city")
    assert item is not None
    clock.advance(hours=1)
    edited = {**item.value, "value": "Paris"}
    amem.put(FACTS, "city", edited)  # subject and valid_from are as read: accepted
    assert [f.value for f in asyncio.run(amem.facts.ahistory("alice", "city"))] == ["Lyon", "Paris"]
    stale = {**edited, "value": "Nice"}  # valid_from of Lyon, not of the current value
    with pytest.raises(InvalidInputError, match="valid_from is set by the store"):
        amem.put(FACTS, "city", stale)
    assert [f.value for f in asyncio.run(amem.facts.ahistory("alice", "city"))] == ["Lyon", "Paris"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"category": "other"}, "needs 'value'"),
        ({"value": None}, "needs 'value'"),
        ({"value": 42}, "must be a string"),
        ({"value": "   "}, "empty"),
        ({"value": "x" * 201}, "longer than 200"),
        ({"value": "a cat", "category": "pet"}, "category must be one of"),
        ({"value": "a cat", "subject": "dog"}, "a fact's key is its subject"),
        ({"value": "a cat", "colour": "black"}, "no field 'colour'"),
        ({"value": "a cat", "source_thread": 3}, "source_thread"),
        ({"value": "a cat", "valid_from": "2026-01-01T00:00:00+00:00"}, "valid_from"),
    ],
)
def test_a_value_that_is_not_a_fact_is_refused(
    amem: AgenticStore, value: dict[str, Any], message: str
) -> None:
    amem.put(FACTS, "pet", {"value": "a dog", "category": "other"})
    with pytest.raises(InvalidInputError, match=message):
        amem.put(FACTS, "pet", value)
    assert [f.value for f in asyncio.run(amem.facts.ahistory("alice", "pet"))] == ["a dog"]


def test_a_category_changes_only_with_a_value(amem: AgenticStore) -> None:
    amem.put(FACTS, "pet", {"value": "a dog", "category": "other"})
    with pytest.raises(InvalidInputError, match="category changes only together"):
        amem.put(FACTS, "pet", {"value": "a dog", "category": "identity"})
    amem.put(FACTS, "pet", {"value": "two dogs", "category": "identity"})
    assert amem.get(FACTS, "pet").value["category"] == "identity"  # type: ignore[union-attr]


def test_bad_subjects_and_owners_are_refused(amem: AgenticStore) -> None:
    for key in ("", "   ", "x" * 61):
        with pytest.raises(InvalidInputError):
            amem.put(FACTS, key, {"value": "v"})
    for namespace in [("facts",), ("facts", "alice", "extra"), ("facts", "_global")]:
        with pytest.raises(InvalidInputError):
            amem.put(namespace, "k", {"value": "v"})
        with pytest.raises(InvalidInputError):
            amem.get(namespace, "k")
    with pytest.raises(InvalidInputError, match="index must be None"):
        amem.put(FACTS, "pet", {"value": "v"}, index=["value"])
    assert amem.list_namespaces() == []


def test_deleting_a_fact_forgets_the_subject(amem: AgenticStore) -> None:
    amem.put(FACTS, "pet", {"value": "a dog"})
    amem.put(FACTS, "pet", {"value": "a cat"})
    amem.put(FACTS, "city", {"value": "Lyon"})
    amem.delete(FACTS, "Pet")
    assert amem.get(FACTS, "pet") is None
    assert asyncio.run(amem.facts.ahistory("alice", "pet")) == []
    assert [i.key for i in amem.search(FACTS)] == ["city"]
    amem.delete(FACTS, "never-stated")  # nothing to forget: not an error


def test_fact_search_ranks_and_filters(amem: AgenticStore) -> None:
    amem.put(FACTS, "diet", {"value": "vegetarian", "category": "preference"})
    amem.put(FACTS, "allergy", {"value": "peanuts", "category": "constraint"})
    amem.put(FACTS, "city", {"value": "Lyon", "category": "identity"})
    assert [i.key for i in amem.search(FACTS)] == ["allergy", "city", "diet"]
    hits = amem.search(FACTS, query="peanut allergy")
    assert hits[0].key == "allergy" and hits[0].score is not None
    assert [i.key for i in amem.search(FACTS, filter={"category": "identity"})] == ["city"]
    ranked = amem.search(FACTS, query="food", filter={"category": {"$ne": "identity"}})
    assert {i.key for i in ranked} == {"diet", "allergy"}
    assert [i.key for i in amem.search(FACTS, limit=1, offset=1)] == ["city"]


# -- rules ------------------------------------------------------------------------------------


def test_a_rules_put_creates_the_next_version(amem: AgenticStore) -> None:
    assert amem.get(RULES, "latest") is None  # the starting set is not stored yet
    amem.put(RULES, "latest", {"rules": [rule(1), rule(2)], "note": "from the SDK"})
    versions = asyncio.run(amem.rules.aversions("alice"))
    assert [v.version for v in versions] == [1, 2]  # the starting set is stored with it
    latest = amem.get(RULES, "latest")
    assert latest is not None and latest.key == "latest"
    assert latest.value["version"] == 2
    assert latest.value["rules"] == [rule(1), rule(2)]
    assert latest.value["note"] == "from the SDK"
    assert latest.value["parent_version"] == 1
    assert amem.get(RULES, "2").value == latest.value  # type: ignore[union-attr]
    assert amem.get(RULES, "1").value["note"] == "starting rules"  # type: ignore[union-attr]
    assert amem.get(RULES, "3") is None and amem.get(RULES, "two") is None
    assert [i.key for i in amem.search(RULES)] == ["2", "1"]  # newest first
    # The same rules again: no new version.
    amem.put(RULES, "latest", {"rules": [rule(1), rule(2)]})
    assert len(asyncio.run(amem.rules.aversions("alice"))) == 2


def test_a_rule_set_read_back_can_be_edited_and_put_again(amem: AgenticStore) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    read = amem.get(RULES, "latest")
    assert read is not None
    amem.put(RULES, "latest", {**read.value, "rules": [rule(1), rule(2)]})
    latest = asyncio.run(amem.rules.alatest("alice"))
    assert latest.version == 3 and latest.parent_version == 2
    # An edit of version 2 after version 3 exists: a conflict, nothing written.
    with pytest.raises(RuleVersionConflictError, match="at version 3, not 2"):
        amem.put(RULES, "latest", {**read.value, "rules": [rule(5)]})
    assert asyncio.run(amem.rules.alatest("alice")).version == 3
    with pytest.raises(InvalidInputError, match="set by the store"):
        amem.put(RULES, "latest", {"rules": [rule(7)], "created_at": "2020-01-01T00:00:00+00:00"})


def test_rule_versions_are_immutable(amem: AgenticStore) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    with pytest.raises(InvalidInputError, match="immutable"):
        amem.put(RULES, "2", {"rules": [rule(9)]})
    with pytest.raises(InvalidInputError, match="cannot be deleted"):
        amem.delete(RULES, "2")
    with pytest.raises(InvalidInputError, match="cannot be deleted"):
        amem.delete(RULES, "latest")
    assert amem.get(RULES, "2").value["rules"] == [rule(1)]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"rules": [rule(n) for n in range(11)]}, "at most 10 rules, got 11"),
        ({"rules": []}, "non-empty list"),
        ({"rules": ["Be brief – short is better"]}, "each rule is"),
        ({"rules": [{"instruction": "x"}]}, "each rule is"),
        ({"rules": [{"instruction": "", "rationale": "r"}]}, "empty"),
        ({"rules": [rule(1)], "rollback_to": 1}, "exactly one of"),
        ({}, "exactly one of"),
        ({"rules": [rule(1)], "version": "2"}, "version number"),
        ({"rules": [rule(1)], "source_users": ["bob"]}, "source_users is set by the store"),
        ({"rules": [rule(1)], "source_episodes": "e1"}, "list of strings"),
        ({"rules": [rule(1)], "priority": 1}, "no field 'priority'"),
    ],
)
def test_a_value_that_is_not_a_rule_set_is_refused(
    amem: AgenticStore, value: dict[str, Any], message: str
) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    with pytest.raises(InvalidInputError, match=message):
        amem.put(RULES, "latest", value)
    assert [v.version for v in asyncio.run(amem.rules.aversions("alice"))] == [1, 2]


def test_rollback_and_the_global_scope(amem: AgenticStore) -> None:
    amem.put(RULES, "latest", {"rules": [rule(1)]})
    amem.put(RULES, "latest", {"rules": [rule(2)]})
    amem.put(RULES, "latest", {"rollback_to": 2})
    latest = asyncio.run(amem.rules.alatest("alice"))
    assert latest.version == 4 and latest.rules == asyncio.run(amem.rules.aget("alice", 2)).rules
    assert latest.note == "rollback to version 2"
    assert latest.source_users == ()  # a put credits no one: the store never names a source
    # The shared rules are an operator's: this store is none, another one is.
    with pytest.raises(OperatorRequiredError, match="only an operator"):
        amem.put(("rules", "_global"), "latest", {"rules": [rule(3)]})
    ops = AgenticStore(amem.memory_store, amem.embeddings, operator="ops")
    with pytest.raises(InvalidInputError, match="source_users is set by the store"):
        ops.put(("rules", "_global"), "latest", {"rules": [rule(3)], "source_users": ["alice"]})
    ops.put(("rules", "_global"), "latest", {"rules": [rule(3)]})
    shared = amem.get(("rules", "_global"), "latest")
    assert shared is not None and shared.value["source_users"] == []
    assert "ops" in shared.value["note"]
    assert amem.list_namespaces(prefix=("rules",)) == [("rules", "_global"), ("rules", "alice")]
    assert amem.search(("rules", "alice"), query="Rule number 2")[0].key in {"3", "4"}


# -- episodes ---------------------------------------------------------------------------------


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


# -- messages ---------------------------------------------------------------------------------


def test_messages_are_logged_through_the_message_log(amem: AgenticStore) -> None:
    amem.put(THREAD, "m1", {"role": "user", "content": "My printer is a LaserJet 4"})
    amem.put(THREAD, "m2", {"role": "assistant", "content": "Noted.", "speaker": "Bot"})
    logged = asyncio.run(amem.messages.alist("alice", thread_id="t1"))
    assert [(m.turn, m.role, m.content) for m in logged] == [
        (0, "human", "My printer is a LaserJet 4"),
        (1, "ai", "Noted."),
    ]
    stored_id = MessageLog.message_id("alice", "t1", "m1")
    by_own_id = amem.get(THREAD, "m1")
    by_stored_id = amem.get(THREAD, stored_id)
    assert by_own_id is not None and by_stored_id is not None
    assert by_own_id.key == "m1" and by_stored_id.key == stored_id
    assert by_own_id.value == by_stored_id.value
    assert by_own_id.value["turn"] == 0 and by_own_id.value["role"] == "human"
    # Logging the same message id again edits it in place: same turn.
    amem.put(THREAD, "m1", {"role": "user", "content": "My printer is a LaserJet 5"})
    assert [m.content for m in asyncio.run(amem.messages.alist("alice", thread_id="t1"))][
        0
    ].endswith("5")
    with pytest.raises(InvalidInputError, match="stored id of a logged message"):
        amem.put(THREAD, stored_id, {"role": "user", "content": "rewritten"})
    with pytest.raises(InvalidInputError, match="set by the message log"):
        amem.put(THREAD, "m1", {"role": "user", "content": "x", "turn": 7})
    listed = amem.search(("messages", "alice"))
    assert [i.key for i in listed] == [stored_id, MessageLog.message_id("alice", "t1", "m2")]
    hits = amem.search(("messages", "alice"), query="which printer do I have")
    assert hits[0].value["content"] == "My printer is a LaserJet 5"
    assert hits[0].namespace == THREAD
    amem.delete(THREAD, "m2")
    assert [m.turn for m in asyncio.run(amem.messages.alist("alice", thread_id="t1"))] == [0]
    amem.delete(("messages", "alice", "t2"), "m1")  # another thread: nothing deleted
    assert len(asyncio.run(amem.messages.alist("alice"))) == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"role": "system", "content": "x"}, "system and tool messages are not logged"),
        ({"role": "user", "content": "   "}, "non-empty string"),
        ({"role": "user"}, "needs 'content'"),
        ({"role": "user", "content": "x", "metadata": ["a"]}, "metadata"),
        ({"role": "user", "content": "x" * 100_001}, "100,000"),
        ({"role": "user", "content": "x", "created_at": "2026"}, "set by the message log"),
    ],
)
def test_a_value_that_is_not_a_message_is_refused(
    amem: AgenticStore, value: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        amem.put(THREAD, "m1", value)
    assert asyncio.run(amem.messages.alist("alice")) == []


# -- knowledge --------------------------------------------------------------------------------


def test_knowledge_is_read_only(amem: AgenticStore, tmp_path: Path) -> None:
    doc = tmp_path / "printers.md"
    doc.write_text(
        "1 Printers\n\nThe LaserJet 4 takes toner cartridge 92298A.\n\n"
        "2 Scanners\n\nThe ScanJet needs a SCSI card.\n"
    )
    report = ingest_paths([doc], kb="manuals", store=amem.memory_store, embeddings=amem.embeddings)
    assert report.ok
    chunks = amem.search(("knowledge", "manuals"))
    assert chunks and all(c.value["source"] == str(doc.resolve()) for c in chunks)
    hits = amem.search(("knowledge", "Manuals"), query="toner cartridge")
    assert "92298A" in hits[0].value["text"]
    assert hits[0].value["citation"] == "[printers.md p.1]"
    assert hits[0].value["section"] == "1 Printers"
    assert amem.get(("knowledge", "manuals"), hits[0].key).value["section"] == "1 Printers"
    assert amem.get(("knowledge", "manuals"), hits[0].key) is not None
    assert ("knowledge", "manuals") in amem.list_namespaces(prefix=("knowledge",))
    with pytest.raises(InvalidInputError, match="read-only"):
        amem.put(("knowledge", "manuals"), hits[0].key, {"text": "edited"})
    with pytest.raises(InvalidInputError, match="read-only"):
        amem.delete(("knowledge", "manuals"), hits[0].key)
    with pytest.raises(InvalidInputError, match="read-only"):
        amem.batch([PutOp(("knowledge", "manuals"), "x", {"text": "y"}, ttl=3)])
    assert amem.search(("knowledge", "nothing_here")) == []
    with pytest.raises(InvalidInputError, match="knowledge base name"):
        amem.search(("knowledge", "not a name"))


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

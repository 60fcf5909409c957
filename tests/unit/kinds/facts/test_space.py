"""The ``("facts", user)`` namespaces: a fact put supersedes (history kept) through ``FactStore``.

A value that cannot be a memory is refused with a clear error and changes nothing
(moved from ``tests/unit/langgraph_store/test_kinds.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import InvalidInputError
from tests.unit.langgraph_store.conftest import Clock

FACTS = ("facts", "alice")


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

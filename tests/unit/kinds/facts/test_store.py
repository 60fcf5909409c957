from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from agentic_memory.kinds.facts import FactStore, normalise_subject
from agentic_memory.store import InvalidInputError

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def facts(store, embeddings) -> FactStore:
    return FactStore(store, embeddings)


def test_normalise_subject() -> None:
    assert normalise_subject("  Diet  ") == "diet"
    assert normalise_subject("Favourite\t Colour:") == "favourite colour"
    with pytest.raises(InvalidInputError, match="empty"):
        normalise_subject("  .  ")


def test_add_restate_and_supersede(facts: FactStore) -> None:
    added = asyncio.run(
        facts.aremember(
            "alice", [{"subject": "Diet", "value": "vegetarian", "category": "preference"}], now=T0
        )
    )
    assert [(c.action, c.fact.subject, c.fact.value) for c in added] == [
        ("added", "diet", "vegetarian")
    ]
    # Restating the value (any case or spacing) changes nothing.
    assert (
        asyncio.run(facts.aremember("alice", [{"subject": "diet ", "value": " Vegetarian"}])) == []
    )
    assert len(asyncio.run(facts.ahistory("alice", "diet"))) == 1

    later = T0 + timedelta(days=3)
    changed = asyncio.run(
        facts.aremember(
            "alice",
            [{"subject": "diet", "value": "vegan", "category": "preference"}],
            source_thread="t2",
            now=later,
        )
    )
    assert [(c.action, c.previous.value if c.previous else None) for c in changed] == [
        ("superseded", "vegetarian")
    ]
    current = asyncio.run(facts.acurrent("alice"))
    assert [(f.subject, f.value, f.current) for f in current] == [("diet", "vegan", True)]
    old, new = asyncio.run(facts.ahistory("alice", "diet"))
    assert (old.value, old.current, old.valid_to, old.superseded_by) == (
        "vegetarian",
        False,
        later.isoformat(),
        new.id,
    )
    assert (new.value, new.current, new.valid_to, new.source_thread) == ("vegan", True, None, "t2")


def test_one_subject_twice_in_a_batch_keeps_the_last(facts: FactStore) -> None:
    changes = asyncio.run(
        facts.aremember(
            "alice", [{"subject": "city", "value": "Paris"}, {"subject": "City", "value": "Lyon"}]
        )
    )
    assert [c.fact.value for c in changes] == ["Lyon"]
    assert [f.value for f in asyncio.run(facts.acurrent("alice"))] == ["Lyon"]


def test_bad_fact_writes_nothing(facts: FactStore, store) -> None:
    with pytest.raises(InvalidInputError, match="category"):
        asyncio.run(
            facts.aremember(
                "alice",
                [
                    {"subject": "name", "value": "Alice"},
                    {"subject": "x", "value": "y", "category": "?"},
                ],
            )
        )
    with pytest.raises(InvalidInputError, match="value is empty"):
        asyncio.run(facts.aremember("alice", [{"subject": "name", "value": "  "}]))
    with pytest.raises(InvalidInputError, match="sequence"):
        asyncio.run(facts.aremember("alice", {"subject": "name", "value": "Alice"}))  # type: ignore[arg-type]
    assert asyncio.run(facts.acurrent("alice")) == []


def test_users_are_isolated_and_forget(facts: FactStore) -> None:
    asyncio.run(
        facts.aremember(
            "alice", [{"subject": "allergy", "value": "peanuts", "category": "constraint"}]
        )
    )
    asyncio.run(
        facts.aremember("alice", [{"subject": "allergy", "value": "peanuts and shellfish"}])
    )
    asyncio.run(facts.aremember("bob", [{"subject": "allergy", "value": "none"}]))
    assert [f.value for f in asyncio.run(facts.acurrent("bob"))] == ["none"]
    assert asyncio.run(facts.aforget("alice", "Allergy")) == 2
    assert asyncio.run(facts.acurrent("alice")) == []
    assert [f.value for f in asyncio.run(facts.acurrent("bob"))] == ["none"]


async def test_async_twins(facts: FactStore) -> None:
    changes = await facts.aremember("alice", [{"subject": "name", "value": "Alice"}])
    assert changes[0].to_dict()["action"] == "added"
    assert [f.value for f in await facts.acurrent("alice")] == ["Alice"]
    assert len(await facts.ahistory("alice", "name")) == 1
    assert await facts.aforget("alice", "name") == 1


def test_search_ranks_current_facts_of_one_user(facts: FactStore) -> None:
    assert (
        asyncio.run(facts.asearch("alice", "diet")) == []
    )  # nothing stored yet: no collection created
    asyncio.run(
        facts.aremember(
            "alice",
            [
                {"subject": "diet", "value": "vegetarian"},
                {"subject": "home city", "value": "Lisbon"},
            ],
            now=T0,
        )
    )
    asyncio.run(
        facts.aremember(
            "alice", [{"subject": "diet", "value": "vegan"}], now=T0 + timedelta(days=1)
        )
    )
    asyncio.run(facts.aremember("bob", [{"subject": "diet", "value": "carnivore"}], now=T0))

    found = asyncio.run(facts.asearch("alice", "what diet do I follow", alpha=0.0, limit=5))
    assert [(f.subject, f.value) for f, _ in found][0] == ("diet", "vegan")
    # Superseded values and other users' facts are never returned.
    assert {f.value for f, _ in found} <= {"vegan", "Lisbon"}
    assert all(0.0 <= score <= 1.0 for _, score in found)
    assert [f.value for f, _ in asyncio.run(facts.asearch("bob", "diet"))] == ["carnivore"]


@pytest.mark.parametrize(
    ("query", "kwargs", "message"),
    [
        ("", {}, "non-empty"),
        ("   ", {}, "non-empty"),
        ("diet \ud800", {}, "lone surrogate"),
        ("diet " * 30_000, {}, "more than the 100,000"),
        ("diet", {"limit": 0}, "limit must be a positive integer"),
        ("diet", {"alpha": 1.5}, "alpha must be a number in"),
    ],
)
def test_search_refuses_bad_arguments_before_embedding(
    facts: FactStore, query: str, kwargs: dict[str, float], message: str
) -> None:
    # Before any fact is stored too: bad input is an error, not an empty answer.
    for _ in range(2):
        with pytest.raises(InvalidInputError, match=message):
            asyncio.run(facts.asearch("alice", query, **kwargs))
        asyncio.run(facts.aremember("alice", [{"subject": "diet", "value": "vegan"}], now=T0))

"""What ``AgenticStore`` adds to or checks beyond ``BaseStore``: alpha, refusals, opening.

Refusals are ``InvalidInputError`` (a ``ValueError``, so LangGraph's server answers 400)
and change nothing, also in a batch whose other operations are valid.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from agentic_memory.langgraph_store import ALPHA_KEY, AgenticStore
from agentic_memory.langgraph_store.generic import ITEMS
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, SchemaConflictError
from agentic_memory.store.embedded import EmbeddedStore

NS = ("notes", "bob")


def seed(store: AgenticStore) -> None:
    store.put(NS, "olives", {"text": "Pizza with olives and anchovies"})
    store.put(NS, "margherita", {"text": "A classic margherita pizza"})
    store.put(NS, "weather", {"text": "Rain is expected tomorrow"})


def count(store: AgenticStore) -> int:
    names = store.memory_store.collections()
    return store.memory_store.count(ITEMS.name) if ITEMS.name in names else 0


# -- alpha ------------------------------------------------------------------------------------


def test_alpha_zero_is_keywords_only(agentic: AgenticStore) -> None:
    seed(agentic)
    hits = agentic.search(NS, query="anchovies", filter={ALPHA_KEY: 0.0})
    assert [h.key for h in hits] == ["olives"]  # only the item that says the word
    everything = agentic.search(NS, query="anchovies", filter={ALPHA_KEY: 1})
    assert len(everything) == 3  # vectors rank every item
    both = agentic.search(
        NS, query="anchovies", filter={"$and": [{ALPHA_KEY: 0}, {"text": {"$ne": ""}}]}
    )
    assert [h.key for h in both] == ["olives"]


def test_the_store_default_alpha(
    tmp_path: Path, embeddings: LocalEmbeddings, clock: object
) -> None:
    memory = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    with AgenticStore(memory, embeddings, alpha=0.0, close_store=True) as store:
        seed(store)
        assert [h.key for h in store.search(NS, query="anchovies")] == ["olives"]
        assert len(store.search(NS, query="anchovies", filter={ALPHA_KEY: 0.7})) == 3


def test_alpha_is_checked(agentic: AgenticStore) -> None:
    seed(agentic)
    for bad in (-0.1, 1.5, math.nan, "0.5", True):
        with pytest.raises(InvalidInputError, match="in \\[0, 1\\]"):
            agentic.search(NS, query="pizza", filter={ALPHA_KEY: bad})
    with pytest.raises(InvalidInputError, match="give a query"):
        agentic.search(NS, filter={ALPHA_KEY: 0.5})
    with pytest.raises(InvalidInputError, match="appears 2 times"):
        agentic.search(NS, query="x", filter={"$and": [{ALPHA_KEY: 0.1}, {ALPHA_KEY: 0.2}]})
    with pytest.raises(InvalidInputError):
        AgenticStore(agentic.memory_store, agentic.embeddings, alpha=2)


# -- filters ----------------------------------------------------------------------------------


def test_and_filters_as_the_server_composes_them(agentic: AgenticStore) -> None:
    agentic.put(NS, "a", {"owner": "bob", "n": 1})
    agentic.put(NS, "b", {"owner": "bob", "n": 2})
    agentic.put(NS, "c", {"owner": "eve", "n": 3})
    found = agentic.search(NS, filter={"$and": [{"n": {"$gte": 2}}, {"owner": "bob"}]})
    assert [i.key for i in found] == ["b"]


def test_comparisons_follow_json_types(agentic: AgenticStore) -> None:
    agentic.put(NS, "one", {"v": 1})
    agentic.put(NS, "true", {"v": True})
    agentic.put(NS, "text", {"v": "1"})
    agentic.put(NS, "float", {"v": 1.0})
    agentic.put(NS, "date", {"v": "2026-12-01"})

    def found(flt: dict[str, Any]) -> set[str]:
        return {i.key for i in agentic.search(NS, filter=flt)}

    assert found({"v": 1}) == {"one", "float"}  # 1 == 1.0, and true is not 1
    assert found({"v": True}) == {"true"}
    assert found({"v": "1"}) == {"text"}
    assert found({"v": {"$gt": 0}}) == {"one", "float"}  # numbers with numbers only
    assert found({"v": {"$gte": "2026-01-01"}}) == {"date"}  # strings with strings
    assert found({"v": {"$ne": 1}}) == {"true", "text", "date"}
    assert found({"w": {"$ne": 1}}) == {"one", "true", "text", "float", "date"}


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"v": {"$in": [1, 2]}}, "unsupported filter operator '\\$in'"),
        ({"$or": [{"v": 1}]}, "unsupported filter operator '\\$or'"),
        ({"v": {"$gt": [1]}}, "compares with a number or a string"),
        ({"v": {"$gt": 1, "x": 2}}, "mixes operators and field names"),
        ({"v": {1, 2}}, "not JSON"),
        ({"v": math.inf}, "JSON cannot carry"),
        ({"$and": []}, "non-empty list"),
        ("v=1", "must be a mapping"),
    ],
)
def test_bad_filters_are_refused(agentic: AgenticStore, flt: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        agentic.search(NS, filter=flt)


# -- values, keys and operations --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "not JSON"),
        ({"pair": (1, 2)}, "not JSON"),
        ({1: "int key"}, "JSON object keys are strings"),
        ({"nested": {2: "x"}}, "JSON object keys are strings"),
        ({"x": math.nan}, "JSON cannot carry"),
        ({"x": {"a", "b"}}, "not JSON"),
        ({"bad": "\ud83d"}, "lone surrogate"),
        ({"big": "x" * 1_000_001}, "more than the 1,000,000"),
        (["not", "a", "dict"], "must be a dict"),
    ],
)
def test_values_that_are_not_json_are_refused(
    agentic: AgenticStore, value: Any, message: str
) -> None:
    agentic.put(NS, "kept", {"v": 1})
    with pytest.raises(InvalidInputError, match=message):
        agentic.batch([PutOp(NS, "k", value)])
    assert agentic.get(NS, "k") is None
    assert count(agentic) == 1


def test_a_batch_with_one_bad_operation_changes_nothing(agentic: AgenticStore) -> None:
    with pytest.raises(InvalidInputError):
        agentic.batch(
            [
                PutOp(NS, "good", {"v": 1}),
                PutOp(("facts", "alice"), "diet", {"value": "vegan"}),
                PutOp(NS, "bad", {"v": {1, 2}}),
            ]
        )
    assert agentic.get(NS, "good") is None
    assert agentic.search(("facts", "alice")) == []
    with pytest.raises(InvalidInputError, match="unknown store operation"):
        agentic.batch([PutOp(NS, "good", {"v": 1}), "get everything"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="not one"):
        agentic.batch(GetOp(NS, "good"))  # type: ignore[arg-type]
    assert count(agentic) == 0


def test_operation_arguments_are_checked(agentic: AgenticStore) -> None:
    for op in (
        SearchOp(NS, limit=-1),
        SearchOp(NS, offset=-5),
        SearchOp(NS, limit=True),  # type: ignore[arg-type]
        SearchOp(NS, query=42),  # type: ignore[arg-type]
        SearchOp(NS, query="x" * 100_001),
        ListNamespacesOp(max_depth=0),
        ListNamespacesOp(match_conditions=(MatchCondition("middle", ("a",)),)),  # type: ignore[arg-type]
        GetOp(NS, 7),  # type: ignore[arg-type]
        PutOp(NS, "k", {"v": 1}, index="text"),  # type: ignore[arg-type]
        PutOp(NS, "k", {"v": 1}, index=[""]),
    ):
        with pytest.raises(InvalidInputError):
            agentic.batch([op])
    assert agentic.search(NS, limit=0) == []


def test_keys_may_hold_any_text(agentic: AgenticStore) -> None:
    odd = ["", "with space", "dots.in.key", "slash/and\\back", "\x1fseparator", "ünïcödé 🍕"]
    for n, key in enumerate(odd):
        agentic.put(NS, key, {"n": n})
    for n, key in enumerate(odd):
        item = agentic.get(NS, key)
        assert item is not None and item.key == key and item.value == {"n": n}
    assert len(agentic.search(NS, limit=50)) == len(odd)


def test_blank_queries_list(agentic: AgenticStore) -> None:
    seed(agentic)
    assert {i.key for i in agentic.search(NS, query="   ")} == {"olives", "margherita", "weather"}
    assert all(i.score is None for i in agentic.search(NS, query=""))


def test_a_large_value_can_index_a_field(agentic: AgenticStore) -> None:
    blob = {"summary": "a pizza recipe", "raw": "x " * 60_000}
    with pytest.raises(InvalidInputError, match="index=\\["):
        agentic.put(NS, "big", blob)
    agentic.put(NS, "big", blob, index=["summary"])
    assert agentic.search(NS, query="pizza recipe")[0].key == "big"


# -- search across namespaces -----------------------------------------------------------------


def test_the_empty_prefix_spans_kinds_and_generic_namespaces(amem: AgenticStore) -> None:
    amem.put(("facts", "alice"), "diet", {"value": "vegetarian pizza lover"})
    amem.put(NS, "olives", {"text": "pizza with olives"})
    found = {(i.namespace, i.key) for i in amem.search((), query="pizza", limit=20)}
    assert found == {(("facts", "alice"), "diet"), (NS, "olives")}
    listed = [(i.namespace, i.key) for i in amem.search((), limit=20)]
    assert listed == [(("facts", "alice"), "diet"), (NS, "olives")]  # kinds first
    assert [(i.namespace, i.key) for i in amem.search((), limit=1, offset=1)] == [(NS, "olives")]


# -- opening ----------------------------------------------------------------------------------


def test_from_env_opens_the_configured_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embeddings: LocalEmbeddings
) -> None:
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    with AgenticStore.from_env(embeddings=embeddings) as store:
        store.put(NS, "k", {"v": 1})
        assert store.memory_store.backend == "embedded"
    assert (tmp_path / "home" / "store").is_dir()
    with AgenticStore.from_env(home=tmp_path / "home", embeddings=embeddings) as again:
        assert again.get(NS, "k") is not None
    with pytest.raises(InvalidInputError, match="unknown store backend"):
        AgenticStore.from_env(backend="postgres", embeddings=embeddings)
    with pytest.raises(InvalidInputError, match="alpha"):
        AgenticStore.from_env(home=tmp_path / "home", embeddings=embeddings, alpha=-1)


def test_the_store_keeps_its_vector_size(tmp_path: Path, embeddings: LocalEmbeddings) -> None:
    memory = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    with AgenticStore(memory, embeddings, close_store=True) as store:
        store.put(NS, "k", {"v": 1})
    other = EmbeddedStore(tmp_path / "s", dims=8)
    with (
        AgenticStore(other, embeddings, close_store=True) as mismatched,
        pytest.raises(SchemaConflictError),
    ):
        mismatched.get(NS, "k")


# -- forgetting -------------------------------------------------------------------------------


def test_forgetting_generic_items(agentic: AgenticStore, clock: object) -> None:
    agentic.put(("memories", "alice"), "a", {"text": "alice 1"}, ttl=5)
    agentic.get(("memories", "alice"), "a")  # leaves a TTL refresh behind
    agentic.put(("memories", "alice", "work"), "b", {"text": "alice 2"})
    agentic.put(("memories", "bob"), "c", {"text": "bob 1"})
    agentic.put(("notes", "alice"), "d", {"text": "alice 3"})
    agentic.put(("alice",), "e", {"text": "a namespace named like her"})
    agentic.put(("facts", "alice"), "diet", {"value": "vegan"})
    assert agentic.forget_user("alice") == 3
    left = {(i.namespace, i.key) for i in agentic.search((), limit=50)}
    assert left == {
        (("memories", "bob"), "c"),
        (("alice",), "e"),
        (("facts", "alice"), "diet"),  # kinds are forgotten through agentic_memory.forget
    }
    assert agentic.forget_namespace(("memories",)) == 1
    with pytest.raises(InvalidInputError, match="not a memory kind"):
        agentic.forget_namespace(("facts", "alice"))
    with pytest.raises(InvalidInputError, match="non-empty prefix"):
        agentic.forget_namespace(())
    assert agentic.get(("facts", "alice"), "diet") is not None

"""What LangGraph's ``BaseStore`` documents, checked on generic namespaces.

Every test runs against ``AgenticStore`` (embedded and Weaviate backends) and LangGraph's
``InMemoryStore``: a test that passes on ``InMemoryStore`` encodes LangGraph's own
expectations. Where ``InMemoryStore`` behaves otherwise, the test says why and checks
``AgenticStore`` alone:

* it is semantic-only (cosine of one vector per text) where ours is hybrid (BM25 and
  vectors, relativeScoreFusion), so only orderings both must agree on are asserted;
* it applies a batch's puts after its reads, where ours runs a batch in order;
* it resets ``created_at`` on every put (LangGraph's Postgres store keeps it, as we do);
* it keeps listing a namespace after its last item is deleted (Postgres does not, nor do we).

TTLs are in ``test_ttl.py``: ``InMemoryStore`` does not support them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)

from tests.unit.langgraph_store.conftest import is_agentic

DOCS = ("docs", "alice")


def keys(items: list[SearchItem]) -> list[str]:
    return [i.key for i in items]


def seed(store: BaseStore) -> None:
    store.put(DOCS, "pizza", {"text": "I love pizza with olives and cheese", "stars": 5})
    store.put(DOCS, "rain", {"text": "The weather is rainy and cold today", "stars": 2})
    store.put(DOCS, "tea", {"text": "Green tea in the morning", "stars": 4, "tags": ["drink"]})
    store.put((*DOCS, "archive"), "old", {"text": "An old pizza recipe", "stars": 3})
    store.put(("docs", "bob"), "bob1", {"text": "Bob's pizza order", "stars": 1})


# -- put / get / delete ---------------------------------------------------------------------------


def test_put_then_get_returns_the_item(store: BaseStore) -> None:
    value = {"text": "hello", "nested": {"n": 1, "list": [1, "two", None, True]}, "f": 1.5}
    store.put(DOCS, "k1", value)
    item = store.get(DOCS, "k1")
    assert isinstance(item, Item)
    assert item.value == value
    assert item.key == "k1"
    assert item.namespace == DOCS
    assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
    assert item.updated_at >= item.created_at
    assert store.get(DOCS, "missing") is None
    assert store.get(("docs", "carol"), "k1") is None


def test_put_replaces_the_value(store: BaseStore, clock: object) -> None:
    store.put(DOCS, "k", {"v": 1})
    first = store.get(DOCS, "k")
    if is_agentic(store):
        clock.advance(minutes=1)  # type: ignore[attr-defined]
    store.put(DOCS, "k", {"v": 2, "extra": True})
    second = store.get(DOCS, "k")
    assert first is not None and second is not None
    assert second.value == {"v": 2, "extra": True}
    assert second.updated_at >= first.updated_at
    if is_agentic(store):
        # Like LangGraph's Postgres store (InMemoryStore resets it): created once.
        assert second.created_at == first.created_at
        assert second.updated_at > first.updated_at


def test_delete_removes_only_that_item(store: BaseStore) -> None:
    store.put(DOCS, "a", {"v": 1})
    store.put(DOCS, "b", {"v": 2})
    store.delete(DOCS, "a")
    assert store.get(DOCS, "a") is None
    assert store.get(DOCS, "b") is not None
    store.delete(DOCS, "a")  # deleting what is gone is not an error
    store.delete(("docs", "nobody"), "x")
    assert keys(store.search(DOCS)) == ["b"]


def test_keys_and_namespaces_are_exact(store: BaseStore) -> None:
    store.put(("a", "b"), "k", {"where": "a.b"})
    store.put(("a", "b", "c"), "k", {"where": "a.b.c"})
    store.put(("ab",), "k", {"where": "ab"})
    store.put(("a",), "K", {"where": "a upper"})
    assert store.get(("a", "b"), "k").value == {"where": "a.b"}  # type: ignore[union-attr]
    assert store.get(("a", "b", "c"), "k").value == {"where": "a.b.c"}  # type: ignore[union-attr]
    assert store.get(("a",), "k") is None
    # A prefix is label-wise: ("a",) does not cover ("ab",).
    found = {i.value["where"] for i in store.search(("a",))}
    assert found == {"a.b", "a.b.c", "a upper"}
    assert {i.value["where"] for i in store.search(("a", "b"))} == {"a.b", "a.b.c"}


def test_namespace_labels_are_checked(store: BaseStore) -> None:
    for bad in [("docs", "a.b"), ("docs", ""), ()]:
        with pytest.raises(InvalidNamespaceError if bad else ValueError):
            store.put(bad, "k", {"v": 1})
    with pytest.raises(ValueError):
        store.put(("langgraph", "x"), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.get(("docs", "a.b"), "k")
    with pytest.raises(InvalidNamespaceError):
        store.search(("docs", "a.b"))
    with pytest.raises(InvalidNamespaceError):
        store.list_namespaces(prefix=("a.b",))
    assert store.search(()) == []


# -- search: listing, filters, pagination ----------------------------------------------------


def test_search_lists_a_prefix(store: BaseStore) -> None:
    seed(store)
    assert set(keys(store.search(DOCS))) == {"pizza", "rain", "tea", "old"}
    assert set(keys(store.search(("docs",), limit=100))) == {"pizza", "rain", "tea", "old", "bob1"}
    assert keys(store.search(("nothing",))) == []
    for item in store.search(DOCS):
        assert item.score is None  # no query, no score
        assert item.namespace in (DOCS, (*DOCS, "archive"))


def test_filters(store: BaseStore) -> None:
    seed(store)

    def found(flt: dict[str, object]) -> set[str]:
        return set(keys(store.search(("docs",), filter=flt, limit=50)))

    assert found({"stars": 5}) == {"pizza"}
    assert found({"stars": {"$eq": 4}}) == {"tea"}
    assert found({"stars": {"$ne": 5}}) == {"rain", "tea", "old", "bob1"}
    assert found({"stars": {"$gt": 3}}) == {"pizza", "tea"}
    assert found({"stars": {"$gte": 3}}) == {"pizza", "tea", "old"}
    assert found({"stars": {"$lt": 2}}) == {"bob1"}
    assert found({"stars": {"$lte": 2}}) == {"rain", "bob1"}
    assert found({"stars": {"$gte": 2, "$lt": 4}}) == {"rain", "old"}
    assert found({"stars": {"$gt": 1}, "text": "Green tea in the morning"}) == {"tea"}
    assert found({"tags": ["drink"]}) == {"tea"}
    assert found({"stars": 99}) == set()
    assert found({"missing": 1}) == set()


def test_nested_filters(store: BaseStore) -> None:
    store.put(DOCS, "a", {"meta": {"lang": "en", "pages": 3}})
    store.put(DOCS, "b", {"meta": {"lang": "fr", "pages": 3}})
    store.put(DOCS, "c", {"meta": "flat"})
    assert keys(store.search(DOCS, filter={"meta": {"lang": "fr"}})) == ["b"]
    assert set(keys(store.search(DOCS, filter={"meta": {"pages": 3}}))) == {"a", "b"}


def test_pagination_without_query(store: BaseStore) -> None:
    for n in range(23):
        store.put(DOCS, f"k{n:02d}", {"n": n})
    pages = [keys(store.search(DOCS, limit=5, offset=o)) for o in range(0, 25, 5)]
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    flat = [k for page in pages for k in page]
    assert sorted(flat) == [f"k{n:02d}" for n in range(23)]
    assert keys(store.search(DOCS, limit=5, offset=30)) == []
    everything = keys(store.search(DOCS, limit=100))
    assert flat == everything  # pages are slices of one order
    odd = keys(store.search(DOCS, filter={"n": {"$gte": 10}}, limit=4, offset=4))
    assert len(odd) == 4 and all(int(k[1:]) >= 10 for k in odd)


def test_pagination_with_query(store: BaseStore) -> None:
    seed(store)
    full = store.search(("docs",), query="pizza", limit=10)
    assert len(full) == 5
    paged = [store.search(("docs",), query="pizza", limit=2, offset=o) for o in (0, 2, 4)]
    assert [keys(p) for p in paged] == [keys(full[0:2]), keys(full[2:4]), keys(full[4:])]


# -- search: queries --------------------------------------------------------------------------


def test_query_ranks_the_relevant_items_first(store: BaseStore) -> None:
    seed(store)
    hits = store.search(DOCS, query="pizza")
    assert set(keys(hits[:2])) == {"pizza", "old"}
    assert all(isinstance(h.score, float) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)  # type: ignore[misc]
    tea = store.search(DOCS, query="green tea")
    assert keys(tea)[0] == "tea"
    # A filter narrows a query: only the matching items, still ranked.
    narrowed = store.search(("docs",), query="pizza", filter={"stars": {"$lt": 3}})
    assert keys(narrowed) == ["bob1", "rain"]


def test_index_fields_choose_what_is_searched(store: BaseStore) -> None:
    store.put(
        DOCS,
        "a",
        {"title": "apple pie baking", "body": "quantum physics lecture notes"},
        index=["title"],
    )
    store.put(
        DOCS,
        "b",
        {"title": "quantum physics lecture notes", "body": "apple pie baking"},
        index=["title"],
    )
    assert keys(store.search(DOCS, query="quantum physics lecture"))[0] == "b"
    assert keys(store.search(DOCS, query="apple pie baking"))[0] == "a"


def test_unindexed_items_come_after_scored_ones(store: BaseStore) -> None:
    store.put(DOCS, "indexed", {"text": "a note about pizza"})
    store.put(DOCS, "hidden", {"text": "a note about pizza too"}, index=False)
    assert store.get(DOCS, "hidden") is not None  # still readable
    assert set(keys(store.search(DOCS))) == {"indexed", "hidden"}  # and listed
    hits = store.search(DOCS, query="pizza")
    assert keys(hits) == ["indexed", "hidden"]
    assert hits[0].score is not None and hits[1].score is None


# -- batches ----------------------------------------------------------------------------------


def test_batch_returns_results_in_order(store: BaseStore) -> None:
    seed(store)
    results = store.batch(
        [
            GetOp(DOCS, "tea"),
            SearchOp(DOCS, filter={"stars": 5}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("docs",)),), max_depth=2),
            PutOp(DOCS, "new", {"text": "new"}),
            GetOp(DOCS, "rain"),
            PutOp(DOCS, "rain", None),
        ]
    )
    assert len(results) == 6
    assert isinstance(results[0], Item) and results[0].key == "tea"
    assert keys(results[1]) == ["pizza"]  # type: ignore[arg-type]
    assert results[2] == [("docs", "alice"), ("docs", "bob")]
    assert results[3] is None and results[5] is None
    assert isinstance(results[4], Item) and results[4].key == "rain"
    assert store.get(DOCS, "rain") is None
    assert store.get(DOCS, "new") is not None


def test_batch_runs_in_order(store: BaseStore) -> None:
    if not is_agentic(store):
        pytest.skip("InMemoryStore applies a batch's puts after its reads")
    results = store.batch(
        [
            PutOp(DOCS, "x", {"v": 1}),
            GetOp(DOCS, "x"),
            PutOp(DOCS, "x", {"v": 2}),
            SearchOp(DOCS),
            PutOp(DOCS, "x", None),
            GetOp(DOCS, "x"),
        ]
    )
    assert results[1].value == {"v": 1}  # type: ignore[union-attr]
    assert [i.value for i in results[3]] == [{"v": 2}]  # type: ignore[union-attr]
    assert results[5] is None


# -- list_namespaces --------------------------------------------------------------------------


def test_list_namespaces(store: BaseStore) -> None:
    # The example of BaseStore.list_namespaces' docstring.
    for ns in [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]:
        store.put(ns, "k", {"ns": list(ns)})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a",)) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("*", "i")) == [("a", "b", "d", "i")]
    assert store.list_namespaces(max_depth=1) == [("a",)]
    assert store.list_namespaces(prefix=("a",), limit=2, offset=1) == [
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
    ]
    assert store.list_namespaces(prefix=("z",)) == []


def test_an_emptied_namespace_is_not_listed(store: BaseStore) -> None:
    store.put(("n", "1"), "k", {"v": 1})
    store.put(("n", "2"), "k", {"v": 1})
    store.delete(("n", "1"), "k")
    listed = store.list_namespaces(prefix=("n",))
    if not is_agentic(store):
        pytest.skip(f"InMemoryStore still lists the emptied namespace: {listed}")
    assert listed == [("n", "2")]


# -- async ------------------------------------------------------------------------------------


async def test_async_methods_match_the_sync_ones(store: BaseStore) -> None:
    await store.aput(DOCS, "a", {"text": "async pizza"})
    await store.aput(DOCS, "b", {"text": "async rain", "n": 2})
    item = await store.aget(DOCS, "a")
    assert item is not None and item.value == {"text": "async pizza"}
    hits = await store.asearch(DOCS, query="pizza")
    assert keys(hits)[0] == "a"
    assert keys(await store.asearch(DOCS, filter={"n": 2})) == ["b"]
    assert await store.alist_namespaces() == [DOCS]
    many = await asyncio.gather(*(store.aget(DOCS, k) for k in ("a", "b", "c")))
    assert [m.key if m else None for m in many] == ["a", "b", None]
    results = await store.abatch([GetOp(DOCS, "b"), SearchOp(DOCS, limit=1)])
    assert results[0].key == "b" and len(results[1]) == 1  # type: ignore[union-attr,arg-type]
    await store.adelete(DOCS, "a")
    assert await store.aget(DOCS, "a") is None

"""The create-only ``insert`` and compound-index hints, run against every backend.

``insert`` is what concurrent writers build on (see docs/storage.md, "Concurrent writers"): it
creates every object of a batch or none, and refuses an id that exists or an object matching
its ``unless`` guard with ``ConflictError``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from agentic_memory.store import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    MissingUserError,
    Where,
    make_id,
)
from tests.unit.store.conftest import OpenStore, make_spec, vec

ALICE = "alice"
BOB = "bob"


def obj(key: str, vector: list[float] | None = None, **props: Any) -> MemoryObject:
    return MemoryObject(id=make_id(key), properties=props, vector=vector or vec(1, 0))


def everything(store: MemoryStore, spec: CollectionSpec, user: str | None) -> list[Any]:
    return [
        (o.id, o.properties)
        for o in store.list_objects(spec.name, user=user, limit=1000, sort_by="rank")
    ]


def test_insert_creates_and_refuses_an_existing_id(
    store: MemoryStore, coll: CollectionSpec
) -> None:
    result = store.insert(coll.name, [obj("i1", vec(1, 0), body="first", rank=1)], user=ALICE)
    assert result.ok and result.ids == [make_id("i1")]
    with pytest.raises(ConflictError, match="already exist") as info:
        store.insert(coll.name, [obj("i1", vec(0, 1), body="second", rank=2)], user=ALICE)
    assert info.value.existing == (make_id("i1"),) and not info.value.guarded
    got = store.get(coll.name, make_id("i1"), user=ALICE, include_vector=True)
    assert got is not None and got.properties == {"body": "first", "rank": 1}
    assert got.vector == pytest.approx(vec(1, 0))
    # The same id in another spelling is the same object.
    upper = MemoryObject(make_id("i1").upper(), {"body": "third"}, vec(1, 1))
    with pytest.raises(ConflictError):
        store.insert(coll.name, [upper], user=ALICE)
    assert store.count(coll.name, user=ALICE) == 1
    hits = store.hybrid(coll.name, query="second", vector=vec(0, 1), alpha=0.0, user=ALICE)
    assert hits == []


def test_insert_is_all_or_nothing(store: MemoryStore, coll: CollectionSpec) -> None:
    store.insert(coll.name, [obj("b2", body="taken", rank=2)], user=ALICE)
    before = everything(store, coll, ALICE)
    batch = [obj("b1", body="new", rank=1), obj("b2", body="clash", rank=2), obj("b3", rank=3)]
    with pytest.raises(ConflictError) as info:
        store.insert(coll.name, batch, user=ALICE)
    assert info.value.existing == (make_id("b2"),)
    assert everything(store, coll, ALICE) == before
    # Without the clash, the same batch goes in whole.
    store.insert(coll.name, [batch[0], batch[2]], user=ALICE)
    assert [p["rank"] for _, p in everything(store, coll, ALICE)] == [1, 2, 3]


def test_insert_after_delete_and_empty_batches(store: MemoryStore, coll: CollectionSpec) -> None:
    store.insert(coll.name, [obj("d1", body="x")], user=ALICE)
    assert store.delete(coll.name, [make_id("d1")], user=ALICE) == 1
    store.insert(coll.name, [obj("d1", body="again")], user=ALICE)
    got = store.get(coll.name, make_id("d1"), user=ALICE)
    assert got is not None and got.properties == {"body": "again"}
    assert store.insert(coll.name, [], user=ALICE).ids == []


def test_insert_guard_refuses_when_an_object_matches_every_condition(
    store: MemoryStore, coll: CollectionSpec
) -> None:
    store.upsert(
        coll.name,
        [obj("g1", kind="a", rank=1), obj("g2", kind="a", rank=2), obj("g3", kind="b", rank=9)],
        user=ALICE,
    )
    after_two = [Where("kind", "eq", "a"), Where("rank", "gt", 2)]
    # Nothing of kind "a" above rank 2 (the rank 9 object is of kind "b"): allowed.
    store.insert(coll.name, [obj("g4", kind="a", rank=3)], user=ALICE, unless=after_two)
    # Now there is one: refused, and nothing written.
    with pytest.raises(ConflictError, match="guard") as info:
        store.insert(coll.name, [obj("g5", kind="a", rank=3)], user=ALICE, unless=after_two)
    assert info.value.guarded and info.value.existing == ()
    assert store.get(coll.name, make_id("g5"), user=ALICE) is None
    # The id check and the guard both apply; an empty guard is no guard.
    store.insert(coll.name, [obj("g6", kind="c", rank=1)], user=ALICE, unless=())
    assert store.count(coll.name, user=ALICE) == 5


def test_insert_sees_only_its_own_partition(store: MemoryStore, coll: CollectionSpec) -> None:
    store.insert(coll.name, [obj("p1", kind="a", rank=5)], user=ALICE)
    # Bob may create the same id, and Alice's objects do not trip his guard.
    store.insert(
        coll.name,
        [obj("p1", kind="a", rank=1)],
        user=BOB,
        unless=[Where("kind", "eq", "a")],
    )
    alice = store.get(coll.name, make_id("p1"), user=ALICE)
    bob = store.get(coll.name, make_id("p1"), user=BOB)
    assert alice is not None and alice.properties["rank"] == 5
    assert bob is not None and bob.properties["rank"] == 1
    with pytest.raises(ConflictError):
        store.insert(coll.name, [obj("p1")], user=BOB)


def test_insert_into_a_shared_collection(store: MemoryStore, shared: CollectionSpec) -> None:
    store.insert(shared.name, [obj("s1", body="shared")])
    with pytest.raises(ConflictError):
        store.insert(shared.name, [obj("s1", body="again")])
    with pytest.raises(InvalidInputError, match="shared"):
        store.insert(shared.name, [obj("s2")], user=ALICE)


def test_bad_inserts_change_nothing(store: MemoryStore, coll: CollectionSpec) -> None:
    store.insert(coll.name, [obj("ok", rank=1)], user=ALICE)
    before = everything(store, coll, ALICE)
    bad: list[Callable[[], object]] = [
        lambda: store.insert(coll.name, [obj("n1"), obj("n2", vector=[1.0])], user=ALICE),
        lambda: store.insert(coll.name, [obj("n1", rank="high")], user=ALICE),
        lambda: store.insert(coll.name, [obj("n1"), obj("n1")], user=ALICE),
        lambda: store.insert(
            coll.name,
            [obj("n1"), MemoryObject(make_id("n1").upper(), {}, vec(1))],
            user=ALICE,
        ),
        lambda: store.insert(coll.name, obj("n1"), user=ALICE),  # type: ignore[arg-type]
        lambda: store.insert(coll.name, [obj("n1")], user=ALICE, unless=[Where("nope", "eq", 1)]),
        lambda: store.insert(
            coll.name,
            [obj("n1")],
            user=ALICE,
            unless=Where("rank", "eq", 1),  # type: ignore[arg-type]
        ),
        lambda: store.insert(coll.name, [obj("n1", vector=[float("nan")] * 8)], user=ALICE),
    ]
    for call in bad:
        with pytest.raises(InvalidInputError):
            call()
    with pytest.raises(MissingUserError):
        store.insert(coll.name, [obj("n1")])
    assert everything(store, coll, ALICE) == before


def test_racing_inserts_of_one_id_have_one_winner(
    open_test_store: OpenStore, coll: CollectionSpec
) -> None:
    writers = 6
    barrier = threading.Barrier(writers)
    stores = [open_test_store() for _ in range(writers)]

    def attempt(i: int) -> str:
        barrier.wait()
        try:
            stores[i].insert(coll.name, [obj("race", body=f"writer {i}", rank=i)], user=ALICE)
        except ConflictError:
            return "lost"
        return "won"

    with ThreadPoolExecutor(writers) as pool:
        outcomes = list(pool.map(attempt, range(writers)))
    assert sorted(outcomes) == ["lost"] * (writers - 1) + ["won"]
    got = stores[0].get(coll.name, make_id("race"), user=ALICE)
    assert got is not None and got.properties["body"] == f"writer {outcomes.index('won')}"


def test_guarded_inserts_number_a_sequence_without_gaps_or_repeats(
    open_test_store: OpenStore, coll: CollectionSpec
) -> None:
    """The message log's pattern: read the last number, claim the next one, retry on conflict."""
    writers, each = 4, 10
    barrier = threading.Barrier(writers)

    def claim(w: int) -> list[int]:
        store = open_test_store()
        barrier.wait()
        mine: list[int] = []
        while len(mine) < each:
            top = store.list_objects(
                coll.name,
                user=ALICE,
                where=[Where("kind", "eq", "seq")],
                sort_by="rank",
                descending=True,
                limit=1,
            )
            last = int(top[0].properties["rank"]) if top else -1
            guard = [Where("kind", "eq", "seq"), Where("rank", "gt", last)]
            try:
                store.insert(
                    coll.name,
                    [obj(f"seq-{w}-{len(mine)}", kind="seq", rank=last + 1, body=f"w{w}")],
                    user=ALICE,
                    unless=guard,
                )
            except ConflictError:
                continue
            mine.append(last + 1)
        return mine

    with ThreadPoolExecutor(writers) as pool:
        claimed = [n for part in pool.map(claim, range(writers)) for n in part]
    assert sorted(claimed) == list(range(writers * each))
    store = open_test_store()
    ranks = [o.properties["rank"] for o in store.list_objects(coll.name, user=ALICE, limit=100)]
    assert sorted(ranks) == list(range(writers * each))


async def test_async_insert(store: MemoryStore, coll: CollectionSpec) -> None:
    await store.ainsert(coll.name, [obj("a1", body="async")], user=ALICE)
    with pytest.raises(ConflictError):
        await store.ainsert(coll.name, [obj("a1")], user=ALICE)
    with pytest.raises(ConflictError):
        await store.ainsert(
            coll.name, [obj("a2")], user=ALICE, unless=[Where("body", "eq", "async")]
        )
    assert await store.acount(coll.name, user=ALICE) == 1


# -- compound index hints ---------------------------------------------------------------------


def test_index_hints_are_validated(store: MemoryStore, new_name: Callable[[], str]) -> None:
    base = make_spec(new_name())
    for indexes, match in [
        ((("kind", "nope"),), "'nope' is not a filterable scalar"),
        ((("tags", "rank"),), "'tags' is not a filterable scalar"),
        ((("kind", "kind"),), "repeats"),
        ((("kind", "rank"), ("kind", "rank")), "repeats"),
        (((),), "non-empty"),
        ([("kind", "rank")], "tuple of tuples"),
    ]:
        with pytest.raises(InvalidInputError, match=match):
            store.ensure_collection(replace(base, indexes=indexes))  # type: ignore[arg-type]
    assert base.name not in store.collections()


def test_index_hints_do_not_change_the_schema_or_the_answers(
    store: MemoryStore, new_name: Callable[[], str]
) -> None:
    plain = make_spec(new_name())
    store.ensure_collection(plain)
    store.upsert(
        plain.name,
        [obj(f"x{i}", kind="ab"[i % 2], rank=i % 5) for i in range(20)],
        user=ALICE,
    )
    hinted = replace(plain, indexes=(("kind", "rank"),))
    assert hinted == plain  # a hint is not part of the schema
    store.ensure_collection(hinted)
    page = store.list_objects(
        plain.name, user=ALICE, where=[Where("kind", "eq", "a")], sort_by="rank", descending=True
    )
    expected = sorted(
        [(i % 5, make_id(f"x{i}")) for i in range(0, 20, 2)], key=lambda t: (-t[0], t[1])
    )
    assert [(o.properties["rank"], o.id) for o in page] == expected
    assert "indexes" not in plain.to_dict()
    assert CollectionSpec.from_dict(hinted.to_dict()).indexes == (("kind", "rank"),)

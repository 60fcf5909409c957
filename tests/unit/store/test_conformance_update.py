"""``MemoryStore.update``: rewrite stored objects from what they hold when the write happens.

What lets writers that change different properties of one object (a message's text, its
importance mark) both keep their change. Runs against every backend (Weaviate with
``WEAVIATE_URL``; the fake server's run is in ``tests/unit/store/weaviate``).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agentic_memory.store import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    make_id,
)
from tests.unit.store.conftest import OpenStore, vec

ALICE = "alice"


def obj(key: str, **props: Any) -> MemoryObject:
    return MemoryObject(make_id(key), props, vec(1, 0))


def bump(current: StoredObject) -> MemoryObject:
    assert current.vector is not None
    props = {**current.properties, "rank": int(current.properties["rank"]) + 1}
    return MemoryObject(current.id, props, current.vector)


def test_update_changes_what_is_stored_now(store: MemoryStore, coll: CollectionSpec) -> None:
    store.upsert(coll.name, [obj("u1", body="one", rank=1), obj("u2", rank=5)], user=ALICE)
    seen: list[StoredObject] = []

    def change(current: StoredObject) -> MemoryObject | None:
        seen.append(current)
        if current.properties["rank"] == 5:
            return None  # leave it
        return MemoryObject(current.id, {**current.properties, "kind": "x"}, vec(0, 1))

    result = store.update(
        coll.name, [make_id("u1"), make_id("u2"), make_id("missing")], change, user=ALICE
    )
    assert result.ids == [make_id("u1")]
    assert sorted(o.id for o in seen) == sorted([make_id("u1"), make_id("u2")])
    assert all(o.vector == pytest.approx(vec(1, 0)) for o in seen)
    got = store.get(coll.name, make_id("u1"), user=ALICE, include_vector=True)
    assert got is not None and got.properties == {"body": "one", "rank": 1, "kind": "x"}
    assert got.vector == pytest.approx(vec(0, 1))
    assert store.get(coll.name, make_id("missing"), user=ALICE) is None
    # The keyword index follows the new text, not the old, also once a search has loaded it.
    warm = store.hybrid(coll.name, query="one", vector=vec(0, 1), alpha=0.0, user=ALICE)
    assert [h.id for h in warm] == [make_id("u1")]
    store.update(
        coll.name,
        [make_id("u1")],
        lambda c: MemoryObject(c.id, {**c.properties, "body": "zebra"}, vec(0, 1)),
        user=ALICE,
    )
    hits = store.hybrid(coll.name, query="zebra", vector=vec(0, 1), alpha=0.0, user=ALICE)
    assert [h.id for h in hits] == [make_id("u1")]
    assert store.hybrid(coll.name, query="one", vector=vec(0, 1), alpha=0.0, user=ALICE) == []


def test_a_bad_change_writes_nothing(store: MemoryStore, coll: CollectionSpec) -> None:
    store.upsert(coll.name, [obj("b1", rank=1), obj("b2", rank=2)], user=ALICE)
    ids = [make_id("b1"), make_id("b2")]

    def bad_second(current: StoredObject) -> MemoryObject:
        props = {**current.properties, "rank": 10}
        if current.id == make_id("b2"):
            props["rank"] = "not a number"
        return MemoryObject(current.id, props, vec(1, 0))

    for change, match in [
        (bad_second, "must be int"),
        (lambda c: MemoryObject(make_id("other"), c.properties, vec(1, 0)), "of that id"),
        (lambda c: MemoryObject(c.id, c.properties, [float("nan")] * 8), "finite"),
    ]:
        with pytest.raises(InvalidInputError, match=match):
            store.update(coll.name, ids, change, user=ALICE)
    ranks = sorted(o.properties["rank"] for o in store.list_objects(coll.name, user=ALICE))
    assert ranks == [1, 2]
    with pytest.raises(InvalidInputError, match="not one string"):
        store.update(coll.name, make_id("b1"), bump, user=ALICE)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not a UUID"):
        store.update(coll.name, ["nope"], bump, user=ALICE)
    assert store.update(coll.name, [], bump, user=ALICE).ids == []


def test_racing_updates_lose_nothing(open_test_store: OpenStore, coll: CollectionSpec) -> None:
    """Eight handles (as eight processes would have) increment one counter 25 times each."""
    first = open_test_store()
    first.upsert(coll.name, [obj("counter", rank=0)], user=ALICE)
    handles = [open_test_store() for _ in range(8)]
    start = threading.Barrier(len(handles))

    def run(handle: MemoryStore) -> int:
        start.wait()
        for _ in range(25):
            assert handle.update(coll.name, [make_id("counter")], bump, user=ALICE).ids
        return 25

    with ThreadPoolExecutor(len(handles)) as pool:
        assert sum(pool.map(run, handles)) == 200
    got = first.get(coll.name, make_id("counter"), user=ALICE)
    assert got is not None and got.properties["rank"] == 200


async def test_async_update(store: MemoryStore, coll: CollectionSpec) -> None:
    await store.aupsert(coll.name, [obj("a1", rank=1)], user=ALICE)
    result = await store.aupdate(coll.name, [make_id("a1")], bump, user=ALICE)
    assert result.ids == [make_id("a1")]
    got = await store.aget(coll.name, make_id("a1"), user=ALICE)
    assert got is not None and got.properties["rank"] == 2

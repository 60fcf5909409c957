"""Adding properties to a collection that holds objects, on every backend.

``add_properties`` is how a schema grows between versions without rewriting a stored object;
``extend_collection`` brings a collection written by an earlier version to the current spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from agentic_memory.store import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    Property,
    SchemaConflictError,
    UnknownCollectionError,
    Where,
    make_id,
)
from tests.unit.store.conftest import OpenStore, make_spec, vec

ALICE = "alice"
BOB = "bob"
PINNED = Property("pinned", "bool", description="added later")
SCORE = Property("score", "number", filterable=False)


def _fill(store: MemoryStore, spec: CollectionSpec, user: str | None, n: int) -> list[str]:
    objects = [
        MemoryObject(
            make_id(spec.name, str(user), str(i)),
            {"title": f"note {i}", "body": "zebra lion", "rank": i, "kind": "a"},
            vec(1, i),
        )
        for i in range(n)
    ]
    store.upsert(spec.name, objects, user=user).raise_for_failures()
    return [o.id for o in objects]


def test_added_properties_leave_every_object_as_it_was(
    store: MemoryStore, coll: CollectionSpec
) -> None:
    ids = _fill(store, coll, ALICE, 5)
    _fill(store, coll, BOB, 2)
    before = {o.id: o.properties for o in store.iterate(coll.name, user=ALICE)}

    assert store.add_properties(coll.name, [PINNED, SCORE]) == ["pinned", "score"]

    spec = store.spec(coll.name)
    assert [p.name for p in spec.properties] == [
        *(p.name for p in coll.properties),
        "pinned",
        "score",
    ]
    assert spec.prop("pinned").description == "added later"
    after = {o.id: o.properties for o in store.iterate(coll.name, user=ALICE)}
    assert after == before
    assert store.count(coll.name, user=BOB) == 2
    # Old objects have no value: "ne" matches them, "eq" does not (as on Weaviate).
    assert store.count(coll.name, user=ALICE, where=[Where("pinned", "ne", True)]) == 5
    assert store.count(coll.name, user=ALICE, where=[Where("pinned", "eq", False)]) == 0

    pinned = store.get(coll.name, ids[2], user=ALICE, include_vector=True)
    assert pinned is not None and pinned.vector is not None
    store.upsert(
        coll.name,
        [MemoryObject(ids[2], {**pinned.properties, "pinned": True, "score": 0.5}, pinned.vector)],
        user=ALICE,
    ).raise_for_failures()
    assert [
        o.id for o in store.list_objects(coll.name, user=ALICE, where=[Where("pinned", "eq", True)])
    ] == [ids[2]]
    assert store.count(coll.name, user=ALICE, where=[Where("pinned", "ne", True)]) == 4
    deleted = store.delete_where(
        coll.name, [Where("rank", "lt", 4), Where("pinned", "ne", True)], user=ALICE
    )
    assert deleted == 3
    assert sorted(o.properties["rank"] for o in store.iterate(coll.name, user=ALICE)) == [2, 4]
    hits = store.hybrid(coll.name, query="zebra", vector=vec(1, 0), user=ALICE, limit=10)
    assert {h.id for h in hits} == {ids[2], ids[4]}
    assert next(h for h in hits if h.id == ids[2]).properties["pinned"] is True


def test_adding_is_idempotent_and_seen_by_another_store(
    open_test_store: OpenStore, coll: CollectionSpec, store: MemoryStore
) -> None:
    other = open_test_store()
    assert other.spec(coll.name) == store.spec(coll.name)  # cached before the change
    assert store.add_properties(coll.name, [PINNED]) == ["pinned"]
    assert store.add_properties(coll.name, [PINNED]) == []
    # The other store still caches the old schema: adding checks the stored one.
    assert other.add_properties(coll.name, [PINNED, SCORE]) == ["score"]
    # An earlier version's spec is not a way back: the store keeps what it has.
    with pytest.raises(SchemaConflictError):
        store.extend_collection(coll)
    grown = dataclasses.replace(coll, properties=(*coll.properties, PINNED, SCORE))
    assert store.extend_collection(grown) == []
    assert store.spec(coll.name).properties == grown.properties


def test_extend_collection_brings_an_earlier_schema_up_to_date(
    open_test_store: OpenStore, new_name: Callable[[], str]
) -> None:
    store = open_test_store()
    old = make_spec(new_name())
    store.ensure_collection(old)
    ids = _fill(store, old, ALICE, 3)
    grown = dataclasses.replace(old, properties=(*old.properties, PINNED, SCORE))
    # The current spec is refused by the strict check ...
    with pytest.raises(SchemaConflictError):
        store.ensure_collection(grown)
    # ... and reached by adding what it ends with.
    assert store.extend_collection(grown) == ["pinned", "score"]
    assert store.spec(old.name).properties == grown.properties
    assert sorted(o.id for o in store.iterate(old.name, user=ALICE)) == sorted(ids)
    # A new collection is simply created.
    fresh = dataclasses.replace(grown, name=new_name())
    assert store.extend_collection(fresh) == []
    assert store.spec(fresh.name).properties == grown.properties
    # A reopened store sees the grown schema.
    again = open_test_store()
    assert again.spec(old.name).properties == grown.properties
    again.ensure_collection(grown)


def test_extend_collection_refuses_what_is_not_an_addition_at_the_end(
    store: MemoryStore, coll: CollectionSpec
) -> None:
    changed_type = dataclasses.replace(
        coll,
        properties=tuple(
            Property("rank", "number") if p.name == "rank" else p for p in coll.properties
        )
        + (PINNED,),
    )
    in_the_middle = dataclasses.replace(coll, properties=(PINNED, *coll.properties))
    fewer = dataclasses.replace(coll, properties=(*coll.properties[:-1], PINNED))
    other_kind = dataclasses.replace(coll, per_user=False, properties=(*coll.properties, PINNED))
    for spec in (changed_type, in_the_middle, fewer, other_kind):
        with pytest.raises(SchemaConflictError):
            store.extend_collection(spec)
        assert store.spec(coll.name).properties == coll.properties
    assert store.collections().count(coll.name) == 1


def test_bad_additions_change_nothing(store: MemoryStore, coll: CollectionSpec) -> None:
    _fill(store, coll, ALICE, 1)
    bad: list[tuple[object, type[Exception]]] = [
        (PINNED, InvalidInputError),  # one Property, not a sequence
        ("pinned", InvalidInputError),
        ([{"name": "x"}], InvalidInputError),
        ([Property("Bad-Name", "bool")], InvalidInputError),
        ([Property("id", "text")], InvalidInputError),  # reserved
        ([Property("blob", "binary")], InvalidInputError),  # type: ignore[arg-type]
        ([Property("notes", "text", searchable=True)], InvalidInputError),
        ([PINNED, Property("PINNED", "bool")], InvalidInputError),
        ([Property("tiTle", "text")], SchemaConflictError),  # case clash with "title"
        ([Property("rank", "text")], SchemaConflictError),
        ([Property("kind", "text", filterable=False)], SchemaConflictError),
        ([PINNED, Property("rank", "number")], SchemaConflictError),  # all or nothing
    ]
    for properties, error in bad:
        with pytest.raises(error):
            store.add_properties(coll.name, properties)  # type: ignore[arg-type]
        assert store.spec(coll.name).properties == coll.properties
    with pytest.raises(UnknownCollectionError):
        store.add_properties("NoSuchCollection", [PINNED])


def test_shared_collections_grow_too(store: MemoryStore, shared: CollectionSpec) -> None:
    _fill(store, shared, None, 3)
    assert store.add_properties(shared.name, [PINNED]) == ["pinned"]
    assert store.count(shared.name, where=[Where("pinned", "ne", True)]) == 3
    assert store.count(shared.name) == 3


async def test_async_twins(store: MemoryStore, coll: CollectionSpec) -> None:
    assert await store.aadd_properties(coll.name, [PINNED]) == ["pinned"]
    grown = dataclasses.replace(coll, properties=(*coll.properties, PINNED, SCORE))
    assert await store.aextend_collection(grown) == ["score"]

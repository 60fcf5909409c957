"""Objects a killed node kept unindexed are found again after ``reindex_unindexed``.

The fake server holds them as such a node does (``FakeWeaviate.unindexed``): listed by the
cursor, found by no id lookup or search, and left so by an unchanged rewrite (the server
skips an unchanged object). Seen live in the cluster tests; ``store.weaviate.repair`` says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import agentic_memory.store.weaviate as wv
from agentic_memory.store import CollectionSpec, MemoryObject, Property, StoreError, make_id
from tests.unit.store.weaviate.conftest import client_over
from tests.unit.store.weaviate.server import FakeWeaviate

SHARED = CollectionSpec(
    name="Knowledge_Manual",
    per_user=False,
    properties=(Property("text", "text", searchable=True), Property("n", "int")),
)
PER_USER = CollectionSpec(name="Notes", per_user=True, properties=SHARED.properties)
ALICE = "alice@example.com"


def _objects(prefix: str, count: int) -> list[MemoryObject]:
    return [
        MemoryObject(
            id=make_id(prefix, str(i)),
            properties={"text": f"{prefix} chunk {i} on fitting part {i}", "n": i},
            vector=[0.1 * (i + 1), -0.5, 0.25, 1.0 / (i + 3)],
        )
        for i in range(count)
    ]


@pytest.fixture
def crashed() -> Iterator[tuple[FakeWeaviate, wv.WeaviateStore]]:
    """A store whose node holds two shared objects and one of Alice's unindexed."""
    w = FakeWeaviate()
    with client_over(w) as client:
        store = wv.WeaviateStore(client, dims=4)
        for spec in (SHARED, PER_USER):
            store.ensure_collection(spec)
        store.upsert(SHARED.name, _objects("s", 6)).raise_for_failures()
        store.upsert(PER_USER.name, _objects("a", 3), user=ALICE).raise_for_failures()
        tenant = wv.tenant_name(ALICE)
        w.unindexed |= {
            (SHARED.name, "", make_id("s", "1")),
            (SHARED.name, "", make_id("s", "4")),
            (PER_USER.name, tenant, make_id("a", "2")),
        }
        yield w, store


def test_what_a_node_kept_unindexed_is_found_again_unchanged(
    crashed: tuple[FakeWeaviate, wv.WeaviateStore],
) -> None:
    w, store = crashed
    lost = [(SHARED.name, None, make_id("s", "1")), (SHARED.name, None, make_id("s", "4"))]
    lost.append((PER_USER.name, ALICE, make_id("a", "2")))
    assert all(store.get(c, oid, user=u) is None for c, u, oid in lost)
    # Listed (the object store holds them), so counts and async replication see nothing.
    assert len(list(store.iterate(SHARED.name))) == 6
    # Written again unchanged, the server skips them: still lost.
    store.upsert(SHARED.name, _objects("s", 6)).raise_for_failures()
    assert store.get(SHARED.name, make_id("s", "1")) is None

    rewritten = store.reindex_unindexed()

    assert rewritten == {SHARED.name: 2, f"{PER_USER.name}/{wv.tenant_name(ALICE)}": 1}
    written = {o.id: o for o in [*_objects("s", 6), *_objects("a", 3)]}
    for collection, user, oid in lost:
        found = store.get(collection, oid, user=user, include_vector=True)
        assert found is not None
        assert found.properties == written[oid].properties
        # Its own vector again, exactly (as the float32 values the server keeps).
        assert found.vector == [float(np.float32(v)) for v in written[oid].vector]
    assert not w.unindexed
    assert store.reindex_unindexed() == {}


def test_nothing_unindexed_writes_nothing(crashed: tuple[FakeWeaviate, wv.WeaviateStore]) -> None:
    w, store = crashed
    w.unindexed.clear()
    before = len(w.requests("batch_objects"))
    assert store.reindex_unindexed() == {}
    assert len(w.requests("batch_objects")) == before


def test_a_cold_tenant_is_not_woken(crashed: tuple[FakeWeaviate, wv.WeaviateStore]) -> None:
    # Reading a cold tenant activates it: a repair of a node with many users would load them
    # all, though a tenant is written out whole when it goes cold.
    w, store = crashed
    tenant = wv.tenant_name(ALICE)
    w.cold = {tenant}
    assert store.reindex_unindexed() == {SHARED.name: 2}
    assert all(r.tenant != tenant for r in w.requests("search"))
    w.cold = set()
    assert store.reindex_unindexed() == {f"{PER_USER.name}/{tenant}": 1}


def _meanwhile(w: FakeWeaviate, act: Callable[[], None]) -> None:
    """Run ``act`` once, right after the repair's first id lookup (another writer)."""

    def hook(request: Any) -> None:
        if request.HasField("filters") and w.after_search is not None:
            w.after_search = None
            act()

    w.after_search = hook


def test_a_change_a_writer_made_since_the_listing_is_what_gets_rewritten(
    crashed: tuple[FakeWeaviate, wv.WeaviateStore],
) -> None:
    w, store = crashed
    oid = make_id("s", "1")
    bucket = w.objects[(SHARED.name, "")]
    changed = {**bucket[oid]["properties"], "n": 99}
    _meanwhile(w, lambda: bucket.update({oid: {**bucket[oid], "properties": changed}}))
    assert store.reindex_unindexed()[SHARED.name] == 2
    found = store.get(SHARED.name, oid)
    assert found is not None and found.properties["n"] == 99


def test_an_object_deleted_since_the_listing_stays_deleted(
    crashed: tuple[FakeWeaviate, wv.WeaviateStore],
) -> None:
    w, store = crashed
    oid = make_id("s", "1")
    bucket = w.objects[(SHARED.name, "")]
    _meanwhile(w, lambda: bucket.pop(oid))
    assert store.reindex_unindexed()[SHARED.name] == 1
    assert oid not in bucket
    assert store.get(SHARED.name, make_id("s", "4")) is not None


def test_a_refused_rewrite_still_gives_every_object_its_own_vector_back(
    crashed: tuple[FakeWeaviate, wv.WeaviateStore],
) -> None:
    w, store = crashed
    w.batch_errors = {0: "disk full"}
    with pytest.raises(StoreError, match="disk full"):
        store.reindex_unindexed()
    written = {o.id: o for o in _objects("s", 6)}
    for oid, obj in w.objects[(SHARED.name, "")].items():
        assert obj["vector"] == [float(np.float32(v)) for v in written[oid].vector]

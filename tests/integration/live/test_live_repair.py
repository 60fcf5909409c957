"""The repair of a killed node's unindexed objects against a live Weaviate: what it reads.

The cluster tests (``tests/integration/cluster/test_node_killed.py``) make a node keep
objects unindexed and repair them; here, on the session's one live server, the repair must
find nothing to rewrite on a healthy node and leave a cold tenant cold (reading it would
wake it: auto tenant activation is on).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentic_memory.store import CollectionSpec, MemoryObject, Property, make_id, open_store
from agentic_memory.store.weaviate import WeaviateStore, tenant_name
from tests.integration.live.test_live_churn import _status, _wait_status
from tests.live_weaviate import LiveWeaviate

pytestmark = pytest.mark.weaviate

NOTES = CollectionSpec(
    name="RepairNotes",
    per_user=True,
    properties=(Property("text", "text", searchable=True),),
)
SHARED = CollectionSpec(
    name="RepairShared",
    per_user=False,
    properties=(Property("text", "text", searchable=True),),
)


@pytest.fixture
def live(weaviate_env: LiveWeaviate) -> Iterator[WeaviateStore]:
    store = open_store(4, backend="weaviate")
    assert isinstance(store, WeaviateStore)
    try:
        yield store
    finally:
        for spec in (NOTES, SHARED):
            if spec.name in store.collections():
                store.drop_collection(spec.name)
        store.close()


def _notes(who: str, count: int) -> list[MemoryObject]:
    return [
        MemoryObject(
            id=make_id(who, str(i)),
            properties={"text": f"{who} note {i}"},
            vector=[0.1 * (i + 1), 0.2, -0.3, 0.4],
        )
        for i in range(count)
    ]


def test_a_healthy_node_has_nothing_to_repair_and_a_cold_tenant_stays_cold(
    live: WeaviateStore,
) -> None:
    for spec in (NOTES, SHARED):
        live.ensure_collection(spec)
    live.upsert(SHARED.name, _notes("shared", 700)).raise_for_failures()  # two pages
    for user in ("alice", "bob"):
        live.upsert(NOTES.name, _notes(user, 3), user=user).raise_for_failures()
    collection = live._client.collections.get(NOTES.name)
    bob = tenant_name("bob")
    collection.tenants.deactivate(bob)
    _wait_status(collection, bob, {"INACTIVE", "COLD"})

    assert live.reindex_unindexed() == {}
    assert _status(collection, bob) in {"INACTIVE", "COLD"}
    # Nothing was rewritten: alice's notes and the shared ones read as they were written.
    found = live.get(NOTES.name, make_id("alice", "2"), user="alice", include_vector=True)
    assert found is not None and found.vector is not None
    assert found.vector[0] == pytest.approx(0.3, abs=1e-7)
    assert len(live.list_objects(SHARED.name, limit=1000)) == 700

"""WeaviateStore's glue code against a recording fake client (no server)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from weaviate.classes.config import ReplicationDeletionStrategy, VectorDistances
from weaviate.classes.query import HybridFusion
from weaviate.exceptions import WeaviateQueryError

import agentic_memory.store.weaviate as wv
import agentic_memory.store.weaviate.store as wv_store
from agentic_memory.kinds.facts import FACTS
from agentic_memory.kinds.knowledge import knowledge_collection
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    PartialWriteError,
    Property,
    SchemaConflictError,
    StoreError,
    UnknownCollectionError,
    Where,
    make_id,
)
from tests.unit.store.weaviate.conftest import FakeClient, server_schema

DIMS = 4
VEC = [0.1, 0.2, 0.3, 0.4]


def _store(client: FakeClient, dims: int = DIMS) -> wv.WeaviateStore:
    return wv.WeaviateStore(client, dims=dims)


def _calls(client: FakeClient, kind: str) -> list[tuple[Any, ...]]:
    return [c for c in client.calls if c[0] == kind]


def _hit(uid: str, score: float, explain: str = "", **props: Any) -> Any:
    return SimpleNamespace(
        uuid=uid,
        properties=props,
        metadata=SimpleNamespace(score=score, explain_score=explain),
    )


def test_collections_are_created_with_explicit_schema(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    store.ensure_collection(knowledge_collection("docs"))
    (_, name, kwargs), (_, kb_name, kb_kwargs) = _calls(client, "create")
    assert name == "MessageLog" and kb_name == "Knowledge_Docs"
    vector = kwargs["vector_config"]
    assert vector.name == wv.VECTOR_NAME
    assert vector.vectorizer.vectorizer.value == "none"
    assert vector.vectorIndexConfig.distance == VectorDistances.COSINE
    # No inverted-index config, so the server uses BlockMax WAND (agentic_memory/store/weaviate/store.py).
    assert "inverted_index_config" not in kwargs
    mt = kwargs["multi_tenancy_config"]
    assert (mt.enabled, mt.autoTenantCreation, mt.autoTenantActivation) == (True, True, True)
    assert kb_kwargs["multi_tenancy_config"] is None
    # A shared collection gets one shard (global BM25 statistics); per-user ones none.
    assert kwargs["sharding_config"] is None
    assert kb_kwargs["sharding_config"].desiredCount == 1
    for replication in (kwargs["replication_config"], kb_kwargs["replication_config"]):
        assert replication.factor is None  # the server's REPLICATION_MINIMUM_FACTOR
        assert replication.asyncEnabled is True
        assert replication.deletionStrategy == ReplicationDeletionStrategy.TIME_BASED_RESOLUTION
    assert {p.name for p in kwargs["properties"]} == {p.name for p in MESSAGES.properties} | {
        wv.USER_PROPERTY
    }
    assert store.collections() == ["Knowledge_Docs", "MessageLog"]


def test_a_fresh_store_rebuilds_the_spec_from_the_server(client: FakeClient) -> None:
    _store(client).ensure_collection(FACTS)
    again = _store(client)
    assert again.spec(FACTS.name) == FACTS
    again.ensure_collection(FACTS)
    assert len(_calls(client, "create")) == 1


def test_schema_conflicts_are_detected(client: FakeClient) -> None:
    _store(client).ensure_collection(FACTS)
    with pytest.raises(SchemaConflictError, match="4-dimensional"):
        _store(client, dims=8).ensure_collection(FACTS)
    changed = CollectionSpec(FACTS.name, FACTS.properties[:-1], per_user=True)
    with pytest.raises(SchemaConflictError, match="different schema"):
        _store(client).ensure_collection(changed)
    shared = CollectionSpec(FACTS.name, FACTS.properties, per_user=False)
    with pytest.raises(SchemaConflictError):
        _store(client).ensure_collection(shared)


def test_foreign_collections_are_left_alone(client: FakeClient) -> None:
    client.schemas["Foreign"] = server_schema("Foreign", description="not ours")
    store = _store(client)
    assert store.collections() == []
    with pytest.raises(SchemaConflictError, match="did not create"):
        store.ensure_collection(CollectionSpec("Foreign", (Property("x", "text"),), per_user=False))
    with pytest.raises(UnknownCollectionError):
        store.spec("Foreign")


def test_upsert_creates_the_tenant_once_and_reports_failures(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    ok, bad = make_id("a"), make_id("b")
    client.fail[bad] = "vector length mismatch"
    props = {"content": "hi", "role": "human", "thread_id": "t", "turn": 0}
    result = store.upsert(
        MESSAGES.name,
        [MemoryObject(ok, props, VEC), MemoryObject(bad.upper(), props, VEC)],
        user="alice@example.com",
    )
    assert result.ids == [ok]
    assert result.failed == {bad.upper(): "vector length mismatch"}
    with pytest.raises(PartialWriteError):
        result.raise_for_failures()
    tenant = wv.tenant_name("alice@example.com")
    assert _calls(client, "tenants.create") == [("tenants.create", "MessageLog", [tenant])]
    (_, _, bound, count) = _calls(client, "insert_many")[0]
    assert bound == tenant and count == 2
    assert client.added[0]["vector"] == {wv.VECTOR_NAME: VEC}
    assert client.added[0]["properties"][wv.USER_PROPERTY] == "alice@example.com"
    store.upsert(MESSAGES.name, [MemoryObject(ok, props, VEC)], user="alice@example.com")
    assert len(_calls(client, "tenants.create")) == 1


def test_the_batch_size_is_read_where_the_store_writes(
    client: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests shrink batches by patching the module that reads the size; the package re-exports
    # no copy of it, so a patch aimed at the package fails instead of silently doing nothing.
    assert not hasattr(wv, "BATCH_SIZE")
    monkeypatch.setattr(wv_store, "BATCH_SIZE", 2)
    store = _store(client)
    store.ensure_collection(MESSAGES)
    props = {"content": "hi", "role": "human", "thread_id": "t", "turn": 0}
    objects = [MemoryObject(make_id(str(i)), props, VEC) for i in range(5)]
    assert len(store.upsert(MESSAGES.name, objects, user="alice").ids) == 5
    assert [call[3] for call in _calls(client, "insert_many")] == [2, 2, 1]


def test_reads_of_a_user_without_a_tenant_touch_nothing(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    assert store.hybrid(MESSAGES.name, query="x", vector=VEC, user="nobody") == []
    assert store.count(MESSAGES.name, user="nobody") == 0
    assert store.list_objects(MESSAGES.name, user="nobody") == []
    assert store.get(MESSAGES.name, make_id("x"), user="nobody") is None
    assert store.delete(MESSAGES.name, [make_id("x")], user="nobody") == 0
    assert store.delete_user(MESSAGES.name, "nobody") == 0
    assert not _calls(client, "hybrid") and not _calls(client, "tenants.create")


def test_hybrid_query_arguments_and_scores(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(FACTS)
    client.tenants[FACTS.name]["alice"] = []
    a, b, c = sorted(make_id(x) for x in "abc")
    client.hybrid_objects = [
        _hit(c, 0.5, subject="z"),
        _hit(b, 0.5, subject="y"),
        _hit(
            a,
            0.9,
            f"Hybrid (Result Set keyword,bm25) Document {a}: original score 2.5, normalized score: 0.4"
            f" - Hybrid (Result Set vector,hybridVector) Document {a}: original score 0.8, normalized score: 0.5",
            subject="x",
            subject__exact="x",
            amem_user="alice",
        ),
    ]
    hits = store.hybrid(FACTS.name, query="diet", vector=VEC, alpha=0.25, limit=3, user="alice")
    (_, _, tenant, kwargs) = _calls(client, "hybrid")[0]
    assert tenant == "alice"
    assert kwargs["query"] == "diet" and kwargs["alpha"] == 0.25 and kwargs["limit"] == 3
    assert kwargs["fusion_type"] == HybridFusion.RELATIVE_SCORE
    assert kwargs["target_vector"] == wv.VECTOR_NAME
    assert kwargs["query_properties"] == ["subject", "value"]
    assert kwargs["return_metadata"].score and kwargs["return_metadata"].explain_score
    # The server's order stands (it breaks near ties before cutting, hybrid_fusion.go);
    # internal properties never leak out.
    assert [h.id for h in hits] == [c, b, a]
    assert hits[2].properties == {"subject": "x"}
    # Read back as the float32 values the server printed (D10).
    assert (hits[2].keyword_score, hits[2].vector_score) == (2.5, float(np.float32(0.8)))
    assert (hits[1].keyword_score, hits[1].vector_score) == (None, None)


def test_blank_query_is_the_vector_side_weighted_by_alpha(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(FACTS)
    client.tenants[FACTS.name]["alice"] = []
    a, b, c, d = sorted(make_id(x) for x in "abcd")

    def near(uid: str, distance: float) -> Any:
        return SimpleNamespace(
            uuid=uid, properties={"subject": uid[:4]}, metadata=SimpleNamespace(distance=distance)
        )

    # cosine similarities 0.8, 0.2, -0.4, 0.2 -> normalised 1, 0.5, 0, 0.5
    client.near_objects = [near(a, 0.2), near(b, 0.8), near(c, 1.4), near(d, 0.8)]
    hits = store.hybrid(FACTS.name, query="  ", vector=VEC, alpha=0.4, limit=3, user="alice")
    (_, _, tenant, kwargs) = _calls(client, "near_vector")[0]
    assert tenant == "alice"
    assert kwargs["limit"] == wv.HYBRID_MIN_CANDIDATES
    assert kwargs["target_vector"] == wv.VECTOR_NAME and kwargs["near_vector"] == VEC
    assert kwargs["return_metadata"].distance
    assert not _calls(client, "hybrid")
    # Equal fused scores and equal cosines: UUID ascending, as the server orders them.
    assert [h.id for h in hits] == [a, b, d]
    assert [h.score for h in hits] == pytest.approx([0.4, 0.2, 0.2])
    assert [h.vector_score for h in hits] == pytest.approx([0.8, 0.2, 0.2])
    assert all(h.keyword_score is None for h in hits)
    assert hits[0].properties == {"subject": a[:4]}
    client.near_objects = [near(a, 0.3), near(b, 0.3)]
    both = store.hybrid(FACTS.name, query="", vector=VEC, alpha=1.0, user="alice")
    assert [h.score for h in both] == [1.0, 1.0]
    assert store.hybrid(FACTS.name, query="", vector=VEC, alpha=0, user="alice") == []
    assert len(_calls(client, "near_vector")) == 2


def test_a_collection_without_searchable_text_ranks_the_vector_side_alone(
    client: FakeClient,
) -> None:
    # D11: with no property to search the server refuses a hybrid search ("No properties
    # provided, and no indexed properties found in class"); the embedded store finds no
    # keyword candidates. The store does what the embedded store does.
    spec = CollectionSpec(
        name="Plain",
        per_user=True,
        properties=(Property("kind", "text"), Property("rank", "int")),
    )
    store = _store(client)
    store.ensure_collection(spec)
    client.tenants[spec.name]["alice"] = []
    a, b = sorted(make_id(x) for x in "ab")
    client.near_objects = [
        SimpleNamespace(uuid=a, properties={"kind": "x"}, metadata=SimpleNamespace(distance=0.5)),
        SimpleNamespace(uuid=b, properties={"kind": "y"}, metadata=SimpleNamespace(distance=0.1)),
    ]
    hits = store.hybrid(spec.name, query="zebra", vector=VEC, alpha=0.5, limit=5, user="alice")
    assert not _calls(client, "hybrid")
    assert [h.id for h in hits] == [b, a]
    assert [h.score for h in hits] == pytest.approx([0.5, 0.0])
    assert all(h.keyword_score is None for h in hits)
    assert store.hybrid(spec.name, query="zebra", vector=VEC, alpha=0.0, user="alice") == []


def test_list_sorts_with_id_as_tie_breaker(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    client.tenants[MESSAGES.name]["alice"] = []
    store.list_objects(
        MESSAGES.name, user="alice", sort_by="turn", descending=True, limit=5, offset=2
    )
    store.list_objects(MESSAGES.name, user="alice")
    (first, second) = [c[3] for c in _calls(client, "fetch_objects")]
    assert [(s.prop, s.ascending) for s in first["sort"].sorts] == [("turn", False), ("_id", True)]
    assert (first["limit"], first["offset"]) == (5, 2)
    assert [(s.prop, s.ascending) for s in second["sort"].sorts] == [("_id", True)]
    store.ensure_collection(FACTS)
    client.tenants[FACTS.name]["alice"] = []
    store.list_objects(FACTS.name, user="alice", sort_by="subject")
    third = _calls(client, "fetch_objects")[-1][3]
    assert [s.prop for s in third["sort"].sorts] == ["subject" + wv.EXACT_SUFFIX, "_id"]


def test_users_report_raw_ids_of_non_empty_tenants(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    hashed = wv.tenant_name("alice@example.com")
    for tenant in (hashed, "bob", "empty"):
        client.tenants[MESSAGES.name][tenant] = []
    obj = SimpleNamespace(properties={wv.USER_PROPERTY: "alice@example.com"})
    client.tenant_objects[(MESSAGES.name, hashed)] = [obj]
    client.tenant_objects[(MESSAGES.name, "bob")] = [
        SimpleNamespace(properties={wv.USER_PROPERTY: "bob"})
    ]
    assert store.users(MESSAGES.name) == ["alice@example.com", "bob"]


def test_delete_user_counts_then_drops_the_tenant(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    tenant = wv.tenant_name("alice@example.com")
    client.tenants[MESSAGES.name][tenant] = []
    client.tenant_objects[(MESSAGES.name, tenant)] = [object(), object()]
    assert store.delete_user(MESSAGES.name, "alice@example.com") == 2
    assert _calls(client, "tenants.remove") == [("tenants.remove", "MessageLog", [tenant])]
    assert tenant not in client.tenants[MESSAGES.name]


def test_close_closes_the_client_and_later_calls_fail(client: FakeClient) -> None:
    with _store(client) as store:
        store.ensure_collection(MESSAGES)
    assert client.closed
    with pytest.raises(StoreError, match="closed"):
        store.count(MESSAGES.name, user="alice")
    with pytest.raises(StoreError, match="closed"):
        store.collections()


def test_client_errors_become_store_errors(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    client.tenants[MESSAGES.name]["alice"] = []

    def broken(**_: Any) -> None:
        raise WeaviateQueryError("connection reset", "GRPC search")

    client.collections.get = lambda name: SimpleNamespace(
        tenants=SimpleNamespace(get_by_name=lambda t: SimpleNamespace(name=t)),
        with_tenant=lambda t: SimpleNamespace(aggregate=SimpleNamespace(over_all=broken)),
    )
    with pytest.raises(StoreError, match="count failed: .*connection reset"):
        store.count(MESSAGES.name, user="alice")


def _delete_client(client: FakeClient, results: list[Any], seen: list[Any]) -> None:
    def delete_many(**kwargs: Any) -> Any:
        seen.append(kwargs["where"])
        return results.pop(0)

    client.collections.get = lambda name: SimpleNamespace(
        tenants=SimpleNamespace(get_by_name=lambda t: SimpleNamespace(name=t)),
        with_tenant=lambda t: SimpleNamespace(data=SimpleNamespace(delete_many=delete_many)),
    )


def test_delete_by_ids_in_chunks_counts_matches(client: FakeClient) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    ids = [make_id(str(i)) for i in range(250)]
    seen: list[Any] = []
    ok = SimpleNamespace(matches=40, successful=40, failed=0)
    _delete_client(client, [ok, ok, ok], seen)
    assert store.delete(MESSAGES.name, [i.upper() for i in ids] + ids[:5], user="alice") == 120
    assert [len(f.value) for f in seen] == [100, 100, 50]
    assert seen[0].value[0] == ids[0]  # canonical (lower-case), duplicates dropped


def test_delete_where_repeats_until_nothing_matches_and_reports_failures(
    client: FakeClient,
) -> None:
    store = _store(client)
    store.ensure_collection(MESSAGES)
    seen: list[Any] = []
    _delete_client(
        client,
        [
            SimpleNamespace(matches=3, successful=3, failed=0),
            SimpleNamespace(matches=2, successful=2, failed=0),
            SimpleNamespace(matches=0, successful=0, failed=0),
        ],
        seen,
    )
    where = [Where("thread_id", "eq", "t")]
    assert store.delete_where(MESSAGES.name, where, user="alice") == 5
    assert len(seen) == 3
    _delete_client(client, [SimpleNamespace(matches=2, successful=1, failed=1)], seen)
    with pytest.raises(StoreError, match="failed to delete 1"):
        store.delete_where(MESSAGES.name, where, user="alice")

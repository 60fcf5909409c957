"""WeaviateStore through the real weaviate-client 4.16 down to the requests it sends.

The client is real and believes it talks to the pinned Weaviate version (``WEAVIATE_VERSION``); only its transport is scripted
(``Wire`` in conftest.py), so these tests check the REST bodies and gRPC messages the store
produces and that the client's own parsers accept the answers.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import numpy as np
import pytest
from weaviate.exceptions import WeaviateBatchError, WeaviateQueryError
from weaviate.proto.v1 import (
    base_pb2,
    base_search_pb2,
    batch_delete_pb2,
    properties_pb2,
    search_get_pb2,
)

import agentic_memory.store.weaviate as wv
from agentic_memory.kinds.facts import FACTS
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    PartialWriteError,
    Property,
    SchemaConflictError,
    StoreError,
    Where,
    make_id,
)
from tests.unit.store.weaviate.conftest import Wire, client_over
from tests.unit.store.weaviate.server import FakeWeaviate

VEC = [0.5, -0.25, 0.0, 1.0]
ALICE = "alice@example.com"
TENANT = wv.tenant_name(ALICE)


def _result(
    oid: str,
    props: dict[str, Any],
    *,
    score: float = 0.0,
    explain: str = "",
    vector: list[float] | None = None,
) -> Any:
    fields = {}
    for key, value in props.items():
        if isinstance(value, bool):
            fields[key] = properties_pb2.Value(bool_value=value)
        elif isinstance(value, int):
            fields[key] = properties_pb2.Value(int_value=value)
        elif isinstance(value, float):
            fields[key] = properties_pb2.Value(number_value=value)
        elif isinstance(value, list):
            fields[key] = properties_pb2.Value(
                list_value=properties_pb2.ListValue(
                    text_values=properties_pb2.TextValues(values=value)
                )
            )
        elif key in ("created_at", "valid_from"):
            fields[key] = properties_pb2.Value(date_value=value)
        else:
            fields[key] = properties_pb2.Value(text_value=value)
    vectors = []
    if vector is not None:
        vectors = [
            base_pb2.Vectors(
                name=wv.VECTOR_NAME,
                vector_bytes=struct.pack(f"{len(vector)}f", *vector),
                type=base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32,
            )
        ]
    return search_get_pb2.SearchResult(
        properties=search_get_pb2.PropertiesResult(
            non_ref_props=properties_pb2.Properties(fields=fields), target_collection="X"
        ),
        metadata=search_get_pb2.MetadataResult(
            id_as_bytes=uuid.UUID(oid).bytes,
            creation_time_unix=1_764_460_800_000,
            creation_time_unix_present=True,
            last_update_time_unix=1_764_460_800_000,
            last_update_time_unix_present=True,
            score=score,
            score_present=True,
            explain_score=explain,
            explain_score_present=bool(explain),
            vectors=vectors,
        ),
    )


def _reply(*results: Any) -> Any:
    return search_get_pb2.SearchReply(results=list(results))


@pytest.fixture
def store(wire: tuple[Wire, Any]) -> wv.WeaviateStore:
    _, client = wire
    s = wv.WeaviateStore(client, dims=len(VEC))
    s.ensure_collection(MESSAGES)
    return s


def test_create_sends_the_explicit_schema(wire: tuple[Wire, Any], store: wv.WeaviateStore) -> None:
    w, client = wire
    (body,) = [b for m, p, b in w.rest if m == "POST" and p == "/v1/schema"]
    assert body["class"] == "MessageLog"
    assert body["description"].endswith("[amem schema=1 dims=4]")
    assert body["vectorConfig"] == {
        "default": {
            "vectorizer": {"none": {}},
            "vectorIndexType": "hnsw",
            "vectorIndexConfig": {"distance": "cosine"},
        }
    }
    # No inverted-index config: the server then creates BlockMax-WAND buckets (BM25 defaults
    # k1 1.2, b 0.75, "en" stopwords); the client cannot ask for them explicitly.
    assert "invertedIndexConfig" not in body
    assert "shardingConfig" not in body  # per-user: one shard per tenant
    # No factor: the server's REPLICATION_MINIMUM_FACTOR. Async replication and deletions
    # resolved by time, so that a replica that was down catches up (docs/weaviate.md).
    assert body["replicationConfig"] == {
        "asyncEnabled": True,
        "deletionStrategy": "TimeBasedResolution",
    }
    assert body["multiTenancyConfig"] == {
        "enabled": True,
        "autoTenantCreation": True,
        "autoTenantActivation": True,
    }
    props = {p["name"]: p for p in body["properties"]}
    searchable = props["search_text"]
    assert searchable["dataType"] == ["text"] and searchable["tokenization"] == "word"
    assert searchable["indexSearchable"] is True and searchable["indexFilterable"] is False
    assert props["content"]["indexSearchable"] is False
    assert props["thread_id"]["tokenization"] == "field"
    assert props["turn"]["dataType"] == ["int"] and props["created_at"]["dataType"] == ["date"]
    assert props[wv.USER_PROPERTY]["indexFilterable"] is False
    # A second process rebuilds the same spec from the server's JSON and creates nothing.
    again = wv.WeaviateStore(client, dims=4)
    assert again.spec(MESSAGES.name) == MESSAGES
    again.ensure_collection(MESSAGES)
    assert len([1 for m, p, _ in w.rest if m == "POST" and p == "/v1/schema"]) == 1
    with pytest.raises(SchemaConflictError, match="4-dimensional"):
        wv.WeaviateStore(client, dims=8).ensure_collection(MESSAGES)
    assert again.collections() == ["MessageLog"]


def test_upsert_creates_the_tenant_and_batches_named_vectors(
    wire: tuple[Wire, Any], store: wv.WeaviateStore
) -> None:
    w, _ = wire
    good, bad = make_id("good"), make_id("bad")
    w.batch_errors = {1: "property turn: invalid integer"}
    props = {
        "content": "hi",
        "role": "human",
        "thread_id": "t",
        "turn": 3,
        "created_at": "2026-01-01T01:00:00+01:00",
    }
    result = store.upsert(
        MESSAGES.name,
        [MemoryObject(good, props, VEC), MemoryObject(bad.upper(), {"content": "x"}, VEC)],
        user=ALICE,
    )
    assert result.ids == [good]
    assert result.failed == {bad.upper(): "property turn: invalid integer"}
    assert [r for r in w.rest if "/tenants" in r[1]] == [
        ("GET", f"/v1/schema/MessageLog/tenants/{TENANT}", None),
        ("POST", "/v1/schema/MessageLog/tenants", [{"name": TENANT, "activityStatus": "HOT"}]),
    ]
    (request,) = w.requests("batch_objects")
    first = request.objects[0]
    assert (first.uuid, first.collection, first.tenant) == (good, "MessageLog", TENANT)
    assert first.vectors[0].name == wv.VECTOR_NAME
    assert list(struct.unpack("4f", first.vectors[0].vector_bytes)) == VEC
    fields = first.properties.non_ref_properties.fields
    assert fields["content"].string_value == "hi"
    assert fields["created_at"].string_value == "2026-01-01T00:00:00+00:00"
    assert fields[wv.USER_PROPERTY].string_value == ALICE
    # The tenant is known now: a second write checks nothing and creates nothing.
    before = len(w.rest)
    w.batch_errors = {}
    store.upsert(MESSAGES.name, [MemoryObject(good, props, VEC)], user=ALICE)
    assert not [r for r in w.rest[before:] if "/tenants" in r[1]]


def test_hybrid_request_and_parsed_hits(wire: tuple[Wire, Any], store: wv.WeaviateStore) -> None:
    w, _ = wire
    w.tenants["MessageLog"] = {TENANT}
    a, b = sorted([make_id("a"), make_id("b")])
    explain = (
        f"Hybrid (Result Set keyword,bm25) Document {b}: original score 1.8, normalized score: 0.5 - "
        f"Hybrid (Result Set vector,hybridVector) Document {b}: original score 0.9, normalized score: 0.5"
    )
    w.search_replies = [
        _reply(
            _result(
                b,
                {
                    "content": "hiking",
                    "turn": 2,
                    "created_at": "2026-01-01T00:00:00Z",
                    "amem_user": ALICE,
                },
                score=1.0,
                explain=explain,
            ),
            _result(a, {"content": "alps", "turn": 1}, score=0.25),
        )
    ]
    hits = store.hybrid(
        MESSAGES.name,
        query="hiking",
        vector=VEC,
        alpha=0.5,
        limit=7,
        user=ALICE,
        where=[Where("thread_id", "ne", "now")],
    )
    (request,) = w.requests("search")
    assert (request.collection, request.tenant, request.limit) == ("MessageLog", TENANT, 7)
    h = request.hybrid_search
    assert (h.query, h.alpha, list(h.properties)) == ("hiking", 0.5, ["search_text"])
    assert h.fusion_type == base_search_pb2.Hybrid.FUSION_TYPE_RELATIVE_SCORE
    assert list(h.targets.target_vectors) == [wv.VECTOR_NAME]
    assert list(struct.unpack("4f", h.vector_bytes)) == VEC
    assert request.filters.target.property == "thread_id"
    assert request.metadata.score and request.metadata.explain_score
    assert [x.id for x in hits] == [b, a]
    assert hits[0].properties == {
        "content": "hiking",
        "turn": 2,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    # The explained scores are float32 values printed by Go's %v, read back exactly (D10).
    assert (hits[0].score, hits[0].keyword_score, hits[0].vector_score) == (
        1.0,
        float(np.float32(1.8)),
        float(np.float32(0.9)),
    )
    assert (hits[1].keyword_score, hits[1].vector_score) == (None, None)


def test_blank_query_is_a_near_vector_search(
    wire: tuple[Wire, Any], store: wv.WeaviateStore
) -> None:
    w, _ = wire
    w.tenants["MessageLog"] = {TENANT}
    a = make_id("a")
    result = _result(a, {"content": "x"})
    result.metadata.distance = 0.25
    result.metadata.distance_present = True
    w.search_replies = [_reply(result)]
    (hit,) = store.hybrid(
        MESSAGES.name, query=" ", vector=VEC, alpha=0.3, user=ALICE, where=[Where("turn", "gt", 1)]
    )
    (request,) = w.requests("search")
    assert not request.HasField("hybrid_search")
    near = request.near_vector
    assert list(near.targets.target_vectors) == [wv.VECTOR_NAME]
    assert list(struct.unpack("4f", near.vectors[0].vector_bytes)) == VEC
    assert request.limit == wv.HYBRID_MIN_CANDIDATES
    assert request.filters.target.property == "turn"
    assert request.metadata.distance
    assert (hit.id, hit.score, hit.vector_score) == (a, pytest.approx(0.3), 0.75)


def test_a_collection_without_searchable_text_is_searched_by_vector_only(
    wire: tuple[Wire, Any], store: wv.WeaviateStore
) -> None:
    # D11: a hybrid search with no property to search is refused by the server; the store
    # ranks the vector side alone, as the embedded store does.
    w, _ = wire
    spec = CollectionSpec(
        name="Plain", per_user=True, properties=(Property("kind", "text"), Property("n", "int"))
    )
    store.ensure_collection(spec)
    w.tenants["Plain"] = {TENANT}
    a = make_id("a")
    result = _result(a, {"kind": "x"})
    result.metadata.distance = 0.5
    result.metadata.distance_present = True
    w.search_replies = [_reply(result)]
    (hit,) = store.hybrid(spec.name, query="zebra", vector=VEC, alpha=0.5, user=ALICE)
    (request,) = w.requests("search")
    assert not request.HasField("hybrid_search") and request.HasField("near_vector")
    assert request.limit == wv.HYBRID_MIN_CANDIDATES
    assert (hit.id, hit.score, hit.keyword_score, hit.vector_score) == (a, 0.5, None, 0.5)


def test_reads_sort_count_get_and_delete(wire: tuple[Wire, Any], store: wv.WeaviateStore) -> None:
    w, _ = wire
    w.tenants["MessageLog"] = {TENANT}
    store.list_objects(
        MESSAGES.name, user=ALICE, sort_by="turn", descending=True, limit=5, offset=10
    )
    (request,) = w.requests("search")
    assert [(s.path[0] if s.path else "", s.ascending) for s in request.sort_by] == [
        ("turn", False),
        ("_id", True),
    ]
    assert (request.limit, request.offset) == (5, 10)

    oid = make_id("x")
    w.search_replies = [_reply(_result(oid, {"content": "x", "turn": 0}, vector=VEC))]
    got = store.get(MESSAGES.name, oid, user=ALICE, include_vector=True)
    assert got is not None and got.id == oid and got.vector == VEC
    assert got.properties == {"content": "x", "turn": 0}
    assert store.get(MESSAGES.name, make_id("nope"), user=ALICE) is None

    w.counts = [7]
    assert store.count(MESSAGES.name, user=ALICE, where=[Where("role", "eq", "ai")]) == 7
    (agg,) = w.requests("aggregate")
    assert agg.tenant == TENANT and agg.objects_count and agg.filters.target.property == "role"

    w.delete_replies = [batch_delete_pb2.BatchDeleteReply(matches=1, successful=1, failed=0)]
    assert store.delete(MESSAGES.name, [oid, make_id("missing")], user=ALICE) == 1
    (delete,) = w.requests("batch_delete")
    assert delete.tenant == TENANT
    assert delete.filters.target.property == "_id"
    assert set(delete.filters.value_text_array.values) == {oid, make_id("missing")}


def test_delete_user_drops_the_tenant_and_users_report_raw_ids(
    wire: tuple[Wire, Any], store: wv.WeaviateStore
) -> None:
    w, _ = wire
    w.tenants["MessageLog"] = {TENANT, "bob", "empty"}
    w.search_replies = [
        _reply(_result(make_id("1"), {wv.USER_PROPERTY: ALICE})),
        _reply(_result(make_id("2"), {wv.USER_PROPERTY: "bob"})),
        _reply(),
    ]
    users = store.users(MESSAGES.name)
    assert sorted(users) == [ALICE, "bob"]
    searches = w.requests("search")
    assert {s.tenant for s in searches} == {TENANT, "bob", "empty"}
    w.counts = [2]
    assert store.delete_user(MESSAGES.name, ALICE) == 2
    assert ("DELETE", "/v1/schema/MessageLog/tenants", [TENANT]) in w.rest
    assert TENANT not in w.tenants["MessageLog"]


def test_users_do_not_wake_cold_tenants_named_after_the_user(
    wire: tuple[Wire, Any], store: wv.WeaviateStore
) -> None:
    w, _ = wire
    w.tenants["MessageLog"] = {TENANT, "bob", "carol"}
    w.cold = {TENANT, "bob"}
    w.search_replies = [
        _reply(_result(make_id("1"), {wv.USER_PROPERTY: ALICE})),
        _reply(_result(make_id("3"), {wv.USER_PROPERTY: "carol"})),
    ]
    assert store.users(MESSAGES.name) == ["alice@example.com", "bob", "carol"]
    # bob's tenant is cold and its name is the user id: it is not read (reading wakes it).
    # alice's name is a hash: only the tenant's objects hold her id.
    assert sorted(s.tenant for s in w.requests("search")) == sorted([TENANT, "carol"])


def test_filters_on_searchable_text_use_the_exact_copy(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=4)
    store.ensure_collection(FACTS)
    w.tenants["UserFact"] = {"alice"}
    store.list_objects(
        FACTS.name, user="alice", where=[Where("subject", "eq", "diet")], sort_by="subject"
    )
    (request,) = w.requests("search")
    assert request.filters.target.property == "subject__exact"
    assert request.sort_by[0].path[0] == "subject__exact"


def test_a_tenant_deleted_elsewhere_is_forgotten_and_retried(
    wire: tuple[Wire, Any], store: wv.WeaviateStore
) -> None:
    w, client = wire
    w.tenants["MessageLog"] = {TENANT}
    w.counts = [3]
    assert store.count(MESSAGES.name, user=ALICE) == 3
    # Another process deletes the tenant; this store still believes it exists.
    w.tenants["MessageLog"].clear()

    def gone(request: Any) -> Any:
        raise WeaviateQueryError(f'tenant not found: "{TENANT}"', "GRPC aggregate")

    client._connection.grpc_aggregate = gone
    assert store.count(MESSAGES.name, user=ALICE) == 0
    # Any other error is reported once, as a StoreError, without retrying (a passing
    # cluster state is retried: tests/unit/store/weaviate/test_cluster_retries.py).
    w.tenants["MessageLog"].add(TENANT)

    def broken(request: Any) -> Any:
        w.grpc.append(("broken", request))
        raise WeaviateQueryError("unexpected EOF", "GRPC aggregate")

    client._connection.grpc_aggregate = broken
    with pytest.raises(StoreError, match="count failed: .*unexpected EOF"):
        store.count(MESSAGES.name, user=ALICE)
    assert len(w.requests("broken")) == 1


def test_ids_reach_the_server_in_their_canonical_spelling() -> None:
    # Against the stateful fake, which keeps a batch object's id text as the server does:
    # an id sent upper case and without hyphens would be stored but never found again.
    w = FakeWeaviate()
    canonical = make_id("spelled")
    bare = uuid.UUID(canonical).hex.upper()
    with client_over(w) as client:
        store = wv.WeaviateStore(client, dims=len(VEC))
        store.ensure_collection(MESSAGES)
        props = {"content": "hi", "role": "human", "thread_id": "t", "turn": 0}
        store.upsert(MESSAGES.name, [MemoryObject(bare, props, VEC)], user=ALICE)
        sent = [o.uuid for r in w.requests("batch_objects") for o in r.objects]
        assert sent == [canonical]
        got = store.get(MESSAGES.name, bare, user=ALICE)
        assert got is not None and got.id == canonical
        assert store.update(
            MESSAGES.name,
            [bare],
            lambda c: MemoryObject(c.id.upper(), {**c.properties, "turn": 1}, VEC),
            user=ALICE,
        ).ids
        assert [o.uuid for r in w.requests("batch_objects") for o in r.objects][-1] == canonical
        assert store.delete(MESSAGES.name, [bare], user=ALICE) == 1
        assert store.count(MESSAGES.name, user=ALICE) == 0


def test_a_connection_lost_partway_through_an_upsert_reports_what_was_written() -> None:
    w = FakeWeaviate()
    sent = w.batch_objects
    calls: list[int] = []

    def drops_the_third(request: Any, timeout: float, max_retries: float) -> dict[int, str]:
        calls.append(len(request.objects))
        if len(calls) == 3:
            # What the client raises once its retries of an unavailable channel are spent.
            raise WeaviateBatchError("failed to connect to all addresses; last error: ...")
        return sent(request, timeout, max_retries)

    objects = [
        MemoryObject(
            make_id("m", str(i)),
            {"content": f"turn {i}", "role": "human", "thread_id": "t", "turn": i},
            VEC,
        )
        for i in range(450)
    ]
    with client_over(w) as client:
        store = wv.WeaviateStore(client, dims=len(VEC))
        store.ensure_collection(MESSAGES)
        client._connection.grpc_batch_objects = drops_the_third
        result = store.upsert(MESSAGES.name, objects, user=ALICE)
        # Two chunks of 100 were acknowledged; the third may or may not be stored; the rest
        # was never sent. Every id is in exactly one of the two lists.
        assert calls == [100, 100, 100]
        assert result.ids == [o.id for o in objects[:200]]
        assert list(result.failed) == [o.id for o in objects[200:]]
        assert "may or may not be stored" in result.failed[objects[200].id]
        assert "not sent" in result.failed[objects[300].id]
        assert store.count(MESSAGES.name, user=ALICE) == 200
        with pytest.raises(PartialWriteError):
            result.raise_for_failures()
        # Lost before anything was written: an error, as any failed call.
        calls.clear()
        calls.extend([0, 0])
        with pytest.raises(StoreError, match="failed to connect"):
            store.upsert(MESSAGES.name, objects[:10], user=ALICE)


def test_a_collection_of_an_older_server_is_reported_and_nan_scores_fall_back_to_vectors(
    wire: tuple[Wire, Any], store: wv.WeaviateStore, caplog: pytest.LogCaptureFixture
) -> None:
    w, client = wire
    assert store.check_volume() == {}
    # A volume from 1.32.9: the class was created with an inverted-index config, which gave
    # the older scorer there; its schema has no usingBlockMaxWAND.
    del w.schemas["MessageLog"]["invertedIndexConfig"]["usingBlockMaxWAND"]
    reopened = wv.WeaviateStore(client, dims=len(VEC))
    with caplog.at_level("WARNING"):
        issues = reopened.check_volume()
    assert list(issues) == ["MessageLog"] and "older BM25 scorer" in issues["MessageLog"]
    assert "weaviate-migration.md" in caplog.text
    # D1: NaN keyword scores. The store ranks by the vector side alone and says why.
    w.tenants["MessageLog"] = {TENANT}
    a = make_id("a")
    explain = (
        f"Hybrid (Result Set keyword,bm25) Document {a}: original score NaN, normalized score: NaN"
    )
    w.search_replies = [
        _reply(_result(a, {"content": "x", "turn": 0}, score=float("nan"), explain=explain)),
        _reply(_result(a, {"content": "x", "turn": 0})),
    ]
    w.search_replies[1].results[0].metadata.distance = 0.25
    w.search_replies[1].results[0].metadata.distance_present = True
    hits = reopened.hybrid(MESSAGES.name, query="x", vector=VEC, alpha=0.5, user=ALICE)
    assert [(h.id, h.score, h.keyword_score) for h in hits] == [(a, 0.5, None)]
    assert w.requests("search")[-1].HasField("near_vector")
    assert "NaN" in reopened.volume_issues()["MessageLog"]

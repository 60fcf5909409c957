"""Scale-out settings: replication factor, shards of shared collections, consistency level."""

from __future__ import annotations

from typing import Any

import pytest
from weaviate.proto.v1 import base_pb2

import agentic_memory.store.weaviate as wv
from agentic_memory.kinds.knowledge import knowledge_collection
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import InvalidInputError, MemoryObject, Where, make_id
from tests.unit.store.weaviate.conftest import Wire

VEC = [0.5, -0.25, 0.0, 1.0]


def test_defaults_keep_one_shard_and_leave_the_rest_to_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "WEAVIATE_REPLICATION_FACTOR",
        "WEAVIATE_SHARDS",
        "WEAVIATE_CONSISTENCY_LEVEL",
        "WEAVIATE_QUERY_MAXIMUM_RESULTS",
    ):
        monkeypatch.delenv(name, raising=False)
    assert wv.scale_settings() == wv.ScaleSettings(
        replication_factor=None, shards=1, consistency=None, query_maximum_results=10_000
    )


def test_environment_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEAVIATE_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("WEAVIATE_SHARDS", "2")
    monkeypatch.setenv("WEAVIATE_CONSISTENCY_LEVEL", "quorum")
    monkeypatch.setenv("WEAVIATE_QUERY_MAXIMUM_RESULTS", "20000")
    assert wv.scale_settings() == wv.ScaleSettings(3, 2, "QUORUM", 20_000)
    assert wv.scale_settings(replication_factor=1, consistency="ALL").replication_factor == 1
    assert wv.scale_settings(consistency="ALL").consistency == "ALL"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WEAVIATE_REPLICATION_FACTOR", "0"),
        ("WEAVIATE_REPLICATION_FACTOR", "three"),
        ("WEAVIATE_SHARDS", "-1"),
        ("WEAVIATE_CONSISTENCY_LEVEL", "MOST"),
        ("WEAVIATE_QUERY_MAXIMUM_RESULTS", "1.5"),
    ],
)
def test_bad_settings_are_named(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInputError, match=name):
        wv.scale_settings()


def test_collections_are_created_with_the_settings(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=4, scale=wv.ScaleSettings(replication_factor=3, shards=1))
    store.ensure_collection(MESSAGES)
    store.ensure_collection(knowledge_collection("docs"))
    bodies = {b["class"]: b for m, p, b in w.rest if m == "POST" and p == "/v1/schema"}
    per_user, shared = bodies["MessageLog"], bodies["Knowledge_Docs"]
    for body in (per_user, shared):
        assert body["replicationConfig"] == {
            "factor": 3,
            "asyncEnabled": True,
            "deletionStrategy": "TimeBasedResolution",
        }
    assert "shardingConfig" not in per_user  # one shard per tenant
    # One shard, replicated: BM25 statistics stay global on any number of nodes.
    assert shared["shardingConfig"]["desiredCount"] == 1
    assert "invertedIndexConfig" not in shared


def test_a_replicated_collection_without_async_replication_gets_it(
    wire: tuple[Wire, Any],
) -> None:
    """A collection an earlier version created on a cluster: its replicas never caught up."""
    w, client = wire
    store = wv.WeaviateStore(client, dims=4)
    store.ensure_collection(MESSAGES)
    store.ensure_collection(knowledge_collection("docs"))
    old = {"factor": 3, "asyncEnabled": False, "deletionStrategy": "NoAutomatedResolution"}
    w.schemas["MessageLog"]["replicationConfig"] = dict(old)
    w.schemas["Knowledge_Docs"]["replicationConfig"] = {**old, "factor": 1}
    w.rest.clear()
    store.ensure_collection(MESSAGES)
    store.ensure_collection(knowledge_collection("docs"))
    (put,) = [(p, b) for m, p, b in w.rest if m == "PUT"]
    assert put[0] == "/v1/schema/MessageLog"
    assert put[1]["replicationConfig"] == {
        "factor": 3,
        "asyncEnabled": True,
        "deletionStrategy": "TimeBasedResolution",
    }
    # One replica has nothing to catch up with: left as it is.
    assert w.schemas["Knowledge_Docs"]["replicationConfig"]["asyncEnabled"] is False


def test_the_consistency_level_goes_with_every_request(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=4, scale=wv.ScaleSettings(consistency="ALL"))
    store.ensure_collection(MESSAGES)
    store.upsert(MESSAGES.name, [MemoryObject(make_id("a"), {"content": "x"}, VEC)], user="u")
    store.hybrid(MESSAGES.name, query="x", vector=VEC, user="u")
    store.list_objects(MESSAGES.name, user="u", where=[Where("turn", "gt", 1)])
    list(store.iterate(MESSAGES.name, user="u"))
    (batch,) = w.requests("batch_objects")
    assert batch.consistency_level == base_pb2.CONSISTENCY_LEVEL_ALL
    searches = w.requests("search")
    assert len(searches) == 3
    assert all(s.consistency_level == base_pb2.CONSISTENCY_LEVEL_ALL for s in searches)

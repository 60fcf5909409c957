"""Fixtures for the Weaviate backend's unit tests: no server, a recording fake client.

The fake answers the way Weaviate's REST/gRPC layer does for the calls the store makes, with
schemas passed through the real client's own create-serialiser and config parser, so a
schema that round-trips here is the one a server would hold.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import weaviate
from weaviate.collections.classes.config import _CollectionConfigCreate
from weaviate.collections.classes.config_methods import _collection_config_from_json
from weaviate.connect import ConnectionParams
from weaviate.proto.v1 import aggregate_pb2, search_get_pb2, tenants_pb2
from weaviate.util import _ServerVersion

from agentic_memory.store.ranking import WEAVIATE_VERSION

_HNSW_DEFAULTS: dict[str, Any] = {
    "cleanupIntervalSeconds": 300,
    "distance": "cosine",
    "dynamicEfMin": 100,
    "dynamicEfMax": 500,
    "dynamicEfFactor": 8,
    "ef": -1,
    "efConstruction": 128,
    "flatSearchCutoff": 40000,
    "maxConnections": 32,
    "skip": False,
    "vectorCacheMaxObjects": 1_000_000_000_000,
}


def server_schema(name: str, **create_kwargs: Any) -> dict[str, Any]:
    """Return the schema JSON a server would report for ``collections.create(name, **kw)``."""
    body = _CollectionConfigCreate(name=name, **create_kwargs)._to_dict()
    for prop in body.get("properties", []):
        # Weaviate fills the index flags it was not given with its defaults.
        text = prop["dataType"][0] in ("text", "text[]")
        if prop.get("indexFilterable") is None:
            prop["indexFilterable"] = True
        if prop.get("indexSearchable") is None:
            prop["indexSearchable"] = text
    inverted = body.setdefault("invertedIndexConfig", {})
    # usecases/schema/class.go setInvertedConfigDefaults (1.32.22 and later): every class.
    inverted["usingBlockMaxWAND"] = True
    inverted.setdefault("bm25", {"b": 0.75, "k1": 1.2})
    inverted.setdefault("cleanupIntervalSeconds", 60)
    inverted["stopwords"] = {"preset": "en", "additions": None, "removals": None}
    _replication_defaults(body)
    body.setdefault(
        "shardingConfig",
        {
            "virtualPerPhysical": 128,
            "desiredCount": 1,
            "actualCount": 1,
            "desiredVirtualCount": 128,
            "actualVirtualCount": 128,
            "key": "_id",
            "strategy": "hash",
            "function": "murmur3",
        },
    )
    body["vectorizer"] = "none"
    for vector in body.get("vectorConfig", {}).values():
        vector["vectorIndexConfig"] = {**_HNSW_DEFAULTS, **(vector.get("vectorIndexConfig") or {})}
    return body


class FakeCollection:
    """One collection, optionally bound to a tenant; records the calls it receives."""

    def __init__(self, client: FakeClient, name: str, tenant: str | None = None) -> None:
        self.client = client
        self.name = name
        self.tenant = tenant
        self.config = SimpleNamespace(get=self._config)
        self.tenants = SimpleNamespace(
            get_by_name=self._tenant_get,
            create=self._tenant_create,
            get=self._tenant_list,
            remove=self._tenant_remove,
        )
        self.query = SimpleNamespace(
            hybrid=self._hybrid, fetch_objects=self._fetch, near_vector=self._near_vector
        )
        self.aggregate = SimpleNamespace(over_all=self._over_all)
        self.data = SimpleNamespace(delete_many=self._delete_many, insert_many=self._insert_many)

    def _config(self) -> Any:
        return _collection_config_from_json(self.client.schemas[self.name])

    def _tenant_get(self, name: str) -> Any:
        return SimpleNamespace(name=name) if name in self.client.tenants[self.name] else None

    def _tenant_create(self, tenants: list[Any]) -> None:
        self.client.calls.append(("tenants.create", self.name, [t.name for t in tenants]))
        for t in tenants:
            self.client.tenants[self.name][t.name] = []

    def _tenant_list(self) -> dict[str, Any]:
        return {name: SimpleNamespace(name=name) for name in self.client.tenants[self.name]}

    def _tenant_remove(self, names: list[str]) -> None:
        self.client.calls.append(("tenants.remove", self.name, names))
        for n in names:
            self.client.tenants[self.name].pop(n, None)

    def with_tenant(self, tenant: str) -> FakeCollection:
        return FakeCollection(self.client, self.name, tenant)

    def _insert_many(self, objects: list[Any]) -> Any:
        """``data.insert_many``: one batch request; errors keyed by the object's index."""
        self.client.calls.append(("insert_many", self.name, self.tenant, len(objects)))
        errors: dict[int, Any] = {}
        for index, obj in enumerate(objects):
            uuid = str(obj.uuid)
            self.client.added.append(
                {"properties": obj.properties, "uuid": uuid, "vector": obj.vector}
            )
            # Ids as given: the server keeps the text it was sent (see server.py).
            if uuid in self.client.fail:
                errors[index] = SimpleNamespace(message=self.client.fail[uuid])
        return SimpleNamespace(errors=errors)

    def _hybrid(self, **kwargs: Any) -> Any:
        self.client.calls.append(("hybrid", self.name, self.tenant, kwargs))
        return SimpleNamespace(objects=self.client.hybrid_objects)

    def _near_vector(self, **kwargs: Any) -> Any:
        self.client.calls.append(("near_vector", self.name, self.tenant, kwargs))
        return SimpleNamespace(objects=self.client.near_objects)

    def _over_all(self, **kwargs: Any) -> Any:
        self.client.calls.append(("aggregate", self.name, self.tenant, kwargs))
        return SimpleNamespace(
            total_count=len(self.client.tenant_objects.get((self.name, self.tenant), []))
        )

    def _delete_many(self, **kwargs: Any) -> Any:
        self.client.calls.append(("delete_many", self.name, self.tenant, kwargs))
        objects = self.client.tenant_objects.get((self.name, self.tenant), [])
        n = len(objects)
        objects.clear()
        return SimpleNamespace(successful=n, matches=n, failed=0)

    def _fetch(self, **kwargs: Any) -> Any:
        self.client.calls.append(("fetch_objects", self.name, self.tenant, kwargs))
        objects = self.client.tenant_objects.get((self.name, self.tenant), [])
        return SimpleNamespace(objects=objects[: kwargs.get("limit") or len(objects)])


class FakeClient:
    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}
        self.tenants: dict[str, dict[str, list[Any]]] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.added: list[dict[str, Any]] = []
        self.fail: dict[str, str] = {}
        self.hybrid_objects: list[Any] = []
        self.near_objects: list[Any] = []
        self.tenant_objects: dict[tuple[str, str | None], list[Any]] = {}
        self.closed = False
        # The raw schema route the store reads the scorer from (GET /v1/schema/{name}).
        self._connection = SimpleNamespace(
            get=lambda path: SimpleNamespace(
                json=lambda: self.schemas.get(path.rsplit("/", 1)[-1], {})
            )
        )
        self.collections = SimpleNamespace(
            exists=lambda name: name in self.schemas,
            create=self._create,
            get=lambda name: FakeCollection(self, name),
            list_all=self._list_all,
            delete=self._delete,
        )

    def _create(self, name: str, **kwargs: Any) -> None:
        self.calls.append(("create", name, kwargs))
        self.schemas[name] = server_schema(name, **kwargs)
        self.tenants[name] = {}

    def _list_all(self, simple: bool = True) -> dict[str, Any]:
        return {
            n: SimpleNamespace(description=s.get("description")) for n, s in self.schemas.items()
        }

    def _delete(self, name: str) -> None:
        self.schemas.pop(name, None)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


# -- the real client over a scripted wire ------------------------------------------------------


class Wire:
    """The REST and gRPC endpoints a real ``WeaviateClient`` talks to, scripted in memory.

    REST schema and tenant routes keep state (so the client's own parsers see real JSON);
    gRPC calls are recorded and answered from queues the test fills.
    """

    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}
        self.tenants: dict[str, set[str]] = {}
        self.rest: list[tuple[str, str, Any]] = []
        self.grpc: list[tuple[str, Any]] = []
        self.search_replies: list[Any] = []
        self.batch_errors: dict[int, str] = {}
        self.delete_replies: list[Any] = []
        self.counts: list[int] = []
        self.cold: set[str] = set()

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.rest.append((request.method, request.url.path, body))
        parts = request.url.path.split("/")[2:]  # after /v1
        method = request.method
        if parts[0] != "schema":
            return httpx.Response(404)
        if len(parts) == 1:
            if method == "GET":
                return httpx.Response(200, json={"classes": list(self.schemas.values())})
            name = body["class"]
            # cluster/schema/manager.go PreApplyFilter: an existing (or case-equal) class is
            # refused, never replaced.
            if any(other.lower() == name.lower() for other in self.schemas):
                return _unprocessable(f"class name {name} already exists")
            self.schemas[name] = _fill_server_defaults(body)
            self.tenants[name] = set()
            return httpx.Response(200, json=self.schemas[name])
        name = parts[1]
        if len(parts) == 2:
            if method == "DELETE":
                self.schemas.pop(name, None)
                return httpx.Response(200)
            if method == "PUT" and name in self.schemas:
                # usecases/schema/class.go UpdateClass: the client sends the whole class.
                self.schemas[name] = _fill_server_defaults(body)
                return httpx.Response(200, json=self.schemas[name])
            if name in self.schemas:
                return httpx.Response(200, json=self.schemas[name])
            return httpx.Response(404)
        if parts[2] == "properties":
            return self._add_property(name, body)
        tenants = self.tenants.setdefault(name, set())
        if len(parts) == 4:
            if parts[3] in tenants:
                return httpx.Response(200, json={"name": parts[3], "activityStatus": "ACTIVE"})
            return httpx.Response(404)
        if method == "POST":
            tenants.update(t["name"] for t in body)
            return httpx.Response(200, json=body)
        if method == "DELETE":
            tenants.difference_update(body)
            return httpx.Response(200)
        return httpx.Response(405)

    def _add_property(self, name: str, body: dict[str, Any]) -> httpx.Response:
        """``POST /v1/schema/{class}/properties`` as the pinned server version answers it.

        ``usecases/schema/property.go`` AddClassProperty (merge=false from the REST handler):
        a missing class or a name already in use in any case is a 422 with the error; else
        the property gets the server's index defaults and is appended to the class.
        """
        schema = self.schemas.get(name)
        if schema is None:
            return _unprocessable(f"class is nil: not found: {name}")
        taken = {p["name"].lower() for p in schema.get("properties", [])}
        if body["name"].lower() in taken:
            return _unprocessable(
                f"class {name!r}: conflict for property {body['name']!r}: already in use or "
                "provided multiple times"
            )
        prop = _fill_server_defaults({"properties": [copy.deepcopy(body)]})["properties"][0]
        schema.setdefault("properties", []).append(prop)
        return httpx.Response(200, json=prop)

    def search(self, request: Any) -> Any:
        self.grpc.append(("search", request))
        return self.search_replies.pop(0) if self.search_replies else search_get_pb2.SearchReply()

    def tenants_get(self, request: Any) -> Any:
        self.grpc.append(("tenants_get", request))
        names = sorted(self.tenants.get(request.collection, set()))
        hot = tenants_pb2.TENANT_ACTIVITY_STATUS_HOT
        cold = tenants_pb2.TENANT_ACTIVITY_STATUS_COLD
        return tenants_pb2.TenantsGetReply(
            tenants=[
                tenants_pb2.Tenant(name=n, activity_status=cold if n in self.cold else hot)
                for n in names
            ]
        )

    def batch_objects(self, request: Any, timeout: float, max_retries: float) -> dict[int, str]:
        self.grpc.append(("batch_objects", request))
        return dict(self.batch_errors)

    def batch_delete(self, request: Any) -> Any:
        self.grpc.append(("batch_delete", request))
        return self.delete_replies.pop(0)

    def aggregate(self, request: Any) -> Any:
        self.grpc.append(("aggregate", request))
        single = aggregate_pb2.AggregateReply.Single(objects_count=self.counts.pop(0))
        return aggregate_pb2.AggregateReply(single_result=single)

    def requests(self, kind: str) -> list[Any]:
        return [r for k, r in self.grpc if k == kind]


def _unprocessable(message: str) -> httpx.Response:
    return httpx.Response(422, json={"error": [{"message": message}]})


def _replication_defaults(schema: dict[str, Any]) -> None:
    """Fill ``replicationConfig`` as the server does (``usecases/replica/config.go``
    ``ValidateConfig``, ``usecases/schema/class.go``): no factor is the minimum factor (1)."""
    replication = schema.setdefault("replicationConfig", {})
    if int(replication.get("factor") or 0) < 1:
        replication["factor"] = 1
    replication.setdefault("asyncEnabled", False)
    replication.setdefault("deletionStrategy", "NoAutomatedResolution")


def _fill_server_defaults(body: dict[str, Any]) -> dict[str, Any]:
    schema = copy.deepcopy(body)
    for prop in schema.get("properties", []):
        if prop.get("indexFilterable") is None:
            prop["indexFilterable"] = True
        if prop.get("indexSearchable") is None:
            prop["indexSearchable"] = prop["dataType"][0] in ("text", "text[]")
    # usecases/schema/class.go setInvertedConfigDefaults: BlockMax WAND for every new class
    # since 1.32.22, whether an inverted-index config was sent or not.
    inverted = schema.setdefault("invertedIndexConfig", {})
    inverted["usingBlockMaxWAND"] = True
    inverted.setdefault("bm25", {"b": 0.75, "k1": 1.2})
    inverted.setdefault("cleanupIntervalSeconds", 60)
    inverted["stopwords"] = {"preset": "en", "additions": None, "removals": None}
    _replication_defaults(schema)
    if not schema.get("multiTenancyConfig", {}).get("enabled"):
        schema["shardingConfig"] = server_schema("X")["shardingConfig"]
    schema["vectorizer"] = "none"
    for vector in schema.get("vectorConfig", {}).values():
        vector["vectorIndexConfig"] = {**_HNSW_DEFAULTS, **(vector.get("vectorIndexConfig") or {})}
    return schema


@pytest.fixture
def wire() -> Iterator[tuple[Wire, Any]]:
    """A real, unconnected ``WeaviateClient`` (server ``WEAVIATE_VERSION``) whose transport is a ``Wire``."""
    w = Wire()
    with client_over(w) as client:
        yield w, client


@contextmanager
def client_over(w: Wire) -> Iterator[Any]:
    """A real, unconnected ``WeaviateClient`` (server ``WEAVIATE_VERSION``) whose transport is ``w``."""
    client = scripted_client(w)
    try:
        yield client
    finally:
        disconnect(client)


def scripted_client(w: Wire) -> Any:
    """Return a real ``WeaviateClient`` (believing it talks to the pinned server version) wired to ``w``."""
    params = ConnectionParams.from_params(
        http_host="weaviate.test",
        http_port=8080,
        http_secure=False,
        grpc_host="weaviate.test",
        grpc_port=50051,
        grpc_secure=False,
    )
    client = weaviate.WeaviateClient(connection_params=params, skip_init_checks=True)
    conn = client._connection
    conn._weaviate_version = _ServerVersion(*map(int, WEAVIATE_VERSION.split(".")))
    conn._client = httpx.Client(transport=httpx.MockTransport(w.handle))
    conn._connected = True
    conn.grpc_search = w.search
    conn.grpc_tenants_get = w.tenants_get
    conn.grpc_batch_objects = w.batch_objects
    conn.grpc_batch_delete = w.batch_delete
    conn.grpc_aggregate = w.aggregate
    return client


def disconnect(client: Any) -> None:
    """Release a ``scripted_client``."""
    conn = client._connection
    conn._client.close()
    conn._connected = False

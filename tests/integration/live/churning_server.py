"""A scripted Weaviate whose shards churn like the server's, to run the live suite without one.

``ChurningWeaviate`` keeps, per collection and tenant, a ``weaviate_reference.Shard`` with the
server's statistics (memtables, segments, the 1.32 memtable WAND bound) next to the stored
objects: gRPC batches and batch deletes change both; a tenant set ``INACTIVE`` through REST
flushes the shard as ``Bucket.Shutdown`` does (4 KB rule), and ``ACTIVE`` loads it again and
lets the compaction run; hybrid searches are ranked by the model and answered with ``score``
and an ``explain_score`` in the server's format.

It exists to check ``tests/integration/live/test_live_churn.py`` itself (the tenant lifecycle through
the real client, the model states, the tolerances) where no server can run; it cannot
check the server, whose ranking it models (``test_live_harness.py``).
"""

from __future__ import annotations

import json
import struct
import uuid
from typing import Any

import httpx
from weaviate.proto.v1 import search_get_pb2

from tests.unit.store import weaviate_reference as ref
from tests.unit.store.weaviate.server import FakeWeaviate, _result


class ChurningWeaviate(FakeWeaviate):
    """A ``FakeWeaviate`` with model shards that flush and compact like the server's."""

    def __init__(self) -> None:
        super().__init__()
        self.shards: dict[tuple[str, str], ref.Shard] = {}
        self.status: dict[tuple[str, str], str] = {}
        self.flushes: list[tuple[str, str, dict[str, bool]]] = []

    def _shard(self, collection: str, tenant: str) -> ref.Shard:
        key = (collection, tenant)
        if key not in self.shards:
            searchable = [
                p["name"]
                for p in self.schemas[collection].get("properties", [])
                if p.get("indexSearchable") and p["dataType"][0] in ("text", "text[]")
            ]
            self.shards[key] = ref.Shard(searchable, memtable_pruning=True)
        return self.shards[key]

    # -- REST: tenant activity --------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.split("/")[2:]
        if len(parts) >= 3 and parts[0] == "schema" and parts[2] == "tenants":
            name = parts[1]
            if request.method == "PUT":
                body = json.loads(request.content)
                self.rest.append(("PUT", request.url.path, body))
                for tenant in body:
                    self._set_status(name, tenant["name"], tenant["activityStatus"])
                return httpx.Response(200, json=body)
            if request.method == "GET" and len(parts) == 4:
                self.rest.append(("GET", request.url.path, None))
                if parts[3] not in self.tenants.get(name, set()):
                    return httpx.Response(404)
                status = self.status.get((name, parts[3]), "ACTIVE")
                return httpx.Response(200, json={"name": parts[3], "activityStatus": status})
        return super().handle(request)

    def _set_status(self, collection: str, tenant: str, status: str) -> None:
        key = (collection, tenant)
        with self.state:
            before = self.status.get(key, "ACTIVE")
            self.status[key] = status
            shard = self._shard(collection, tenant)
            if status in ("INACTIVE", "COLD") and before not in ("INACTIVE", "COLD"):
                # migrator.go UpdateTenants: the shard shuts down, Bucket.Shutdown flushes.
                self.flushes.append((collection, tenant, shard.flush()))
            if status in ("ACTIVE", "HOT") and before in ("INACTIVE", "COLD"):
                # Loaded again (kept memtables replayed, D13); the compaction cycle gets to
                # the segments at once here.
                shard.reload()
                shard.compact()

    # -- gRPC -------------------------------------------------------------------------------

    def batch_objects(self, request: Any, timeout: float, max_retries: float) -> dict[int, str]:
        errors = super().batch_objects(request, timeout, max_retries)
        with self.state:
            for obj in request.objects:
                key = (obj.collection, obj.tenant)
                oid = str(uuid.UUID(obj.uuid))
                stored = self.objects[key][oid]
                props = {k: v for k, v in stored["properties"].items() if v is not None}
                self._shard(*key).put(oid, props, list(stored["vector"]))
        return errors

    def batch_delete(self, request: Any) -> Any:
        with self.state:
            key = (request.collection, request.tenant)
            gone = [oid for oid, _ in self._matching(*key, request.filters)]
        reply = super().batch_delete(request)
        with self.state:
            for oid in gone:
                self._shard(*key).delete(oid)
        return reply

    def search(self, request: Any) -> Any:
        if request.HasField("near_vector"):
            return self._near_vector(request)
        return super().search(request)

    def _model_shard(self, request: Any, stored: dict[str, dict[str, Any]]) -> ref.Shard:
        # The shard that lived through the writes, flushes and compactions: not a fresh one.
        del stored
        return self._shard(request.collection, request.tenant)

    def _near_vector(self, request: Any) -> Any:
        self.grpc.append(("search", request))
        packed = request.near_vector.vectors[0].vector_bytes
        vector = list(struct.unpack(f"{len(packed) // 4}f", packed))
        with self.state:
            stored, shard, allowed = self._view(request)
            found = ref.near_vector(shard, vector, request.limit, allowed)
        types = self._types(request.collection)
        results = []
        for uuid_, distance in found:
            result = _result(uuid_, stored[uuid_], types, request.metadata)
            result.metadata.distance = float(distance)
            result.metadata.distance_present = True
            results.append(result)
        return search_get_pb2.SearchReply(results=results)

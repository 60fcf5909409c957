"""An in-memory Weaviate behind the real client's transport, for races through the wire.

``FakeWeaviate`` extends the scripted ``Wire`` with object storage, so that the store and the
memory classes above it run unchanged against it (ids as the server keeps them: a batch
object's id text as sent, found by an ``_id`` filter only in that spelling): gRPC batches (upserts), searches with
filters, sorting and paging, counts and filtered deletes, and the REST create ``POST
/v1/objects``, which behaves as the pinned Weaviate version's ``AddObject`` does
(``usecases/objects/add.go``): it checks that the id is free, answers 422 "id '…' already
exists" if not, and otherwise writes, holding nothing between the check and the write. A test
can pause a create in that window (``pause_create``, ``in_window``) to force the race, or keep
the window open for every create (``create_window`` seconds): on a replicated cluster the
write goes through the replicator between the check and the put, so the window is
milliseconds, and writers on several machines that take no common lock lose updates in it.

Hybrid searches are ranked by ``tests/unit/store/weaviate_reference.py`` (the model of the
server's BM25, vector search and relativeScoreFusion the storage conformance tests check both
backends against) over the request's collection, tenant and filter, the reply carrying
``score`` and ``explain_score`` as the server writes them; so the store and everything above it
run through the real weaviate-client end to end. Reads answer as the server's source does for what the store uses: ``fetch_objects`` in id
order with limit/offset, the ``after`` cursor (refused together with filters, sort or offset:
``entities/filters/cursor_validator.go``), filters (``_id`` ranges included; text compared as
field tokenisation trims it), sorting (``sorter/basic_comparators.go``: text lower-cased,
missing values first), ``offset + limit`` capped by ``QUERY_MAXIMUM_RESULTS`` (``db/search.go``
getTotalLimit) and batch deletes by filter capped the same way, creation and update times sent
when asked. The scripted replies of ``Wire`` (``search_replies``, ``delete_replies``, ``counts``,
``batch_errors``) come first when a test set them. Enough to run export and forget past 10,000
objects through the real weaviate-client.

Only what the store sends is implemented; anything else fails loudly.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
from weaviate.exceptions import WeaviateQueryError
from weaviate.proto.v1 import (
    aggregate_pb2,
    base_pb2,
    batch_delete_pb2,
    properties_pb2,
    search_get_pb2,
)

from tests.unit.store import weaviate_reference as ref
from tests.unit.store.weaviate.conftest import Wire
from tests.unit.store.weaviate.gofmt import go_v_float32

_OP = base_pb2.Filters
QUERY_MAXIMUM_RESULTS = 10_000


class FakeWeaviate(Wire):
    """A ``Wire`` that keeps objects per (collection, tenant) and answers from them."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.state = threading.Lock()
        self.pause_create: Callable[[str], None] | None = None
        """Called between a create's existence check and its write, with the object id."""
        self.in_window: Callable[[dict[str, Any]], None] | None = None
        """Called there too, with the request body (the write lands whatever it does)."""
        self.create_window = 0.0
        """Seconds every create waits between its check and its write."""
        self.creates = 0
        self.after_search: Callable[[Any], None] | None = None
        """Called after each search with its request (another writer acting meanwhile)."""
        self.unindexed: set[tuple[str, str, str]] = set()
        """(collection, tenant, id) of objects held but in no index, as a node killed in the
        middle of a batch can keep them: listed by the cursor, found by no filter or search;
        an unchanged rewrite leaves them so (the server skips it), a new vector indexes them."""

    # -- REST ---------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/objects" and request.method == "POST":
            return self._create(request)
        response = super().handle(request)
        if request.method == "DELETE" and request.url.path.endswith("/tenants"):
            name = request.url.path.split("/")[3]
            with self.state:
                for tenant in json.loads(request.content):
                    self.objects.pop((name, tenant), None)
        return response

    def _create(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.rest.append(("POST", "/v1/objects", body))
        key = (body["class"], body.get("tenant") or "")
        oid = str(uuid.UUID(body["id"]))
        with self.state:
            exists = oid in self.objects.get(key, {})
        if exists:
            return httpx.Response(
                422, json={"error": [{"message": f"id '{body['id']}' already exists"}]}
            )
        if self.pause_create is not None:
            self.pause_create(oid)
        if self.in_window is not None:
            self.in_window(body)
        if self.create_window:
            time.sleep(self.create_window)
        types = self._types(body["class"])
        with self.state:
            self.creates += 1
            self.objects.setdefault(key, {})[oid] = {
                "properties": {k: _typed(types.get(k), v) for k, v in body["properties"].items()},
                "vector": list(body.get("vector") or body["vectors"]["default"]),
                # The REST create parses the id (a strfmt.UUID): its index holds it canonical.
                "id_text": oid,
                **_times(self.objects.get(key, {}).get(oid)),
            }
        return httpx.Response(200, json=body)

    # -- gRPC ---------------------------------------------------------------------------

    def batch_objects(self, request: Any, timeout: float, max_retries: float) -> dict[int, str]:
        self.grpc.append(("batch_objects", request))
        with self.state:
            for obj in request.objects:
                types = self._types(obj.collection)
                props: dict[str, Any] = {}
                for name, value in obj.properties.non_ref_properties.fields.items():
                    kind = value.WhichOneof("kind")
                    if kind != "null_value":
                        props[name] = _typed(types.get(name), getattr(value, kind))
                for arr in obj.properties.text_array_properties:
                    props[arr.prop_name] = list(arr.values)
                for name in obj.properties.empty_list_props:
                    props[name] = []
                (vec,) = [v for v in obj.vectors if v.name == "default"]
                floats = list(struct.unpack(f"{len(vec.vector_bytes) // 4}f", vec.vector_bytes))
                key = (obj.collection, obj.tenant)
                oid = str(uuid.UUID(obj.uuid))
                before = self.objects.get(key, {}).get(oid)
                if before is not None and before["vector"] != floats:
                    # A new vector is a new document id: every index entry is written.
                    self.unindexed.discard((*key, oid))
                if before is not None and (before["properties"], before["vector"]) == (
                    props,
                    floats,
                ):
                    continue  # compareObjsForInsertStatus: an unchanged object is skipped
                self.objects.setdefault(key, {})[oid] = {
                    "properties": props,
                    "vector": floats,
                    # A batch keeps the id's text as sent in the id index (found live), while
                    # the client sends every lookup by id canonical: see _match.
                    "id_text": obj.uuid,
                    **_times(self.objects.get(key, {}).get(oid)),
                }
        return dict(self.batch_errors)

    def search(self, request: Any) -> Any:
        self.grpc.append(("search", request))
        if self.search_replies:
            return self.search_replies.pop(0)
        if request.HasField("hybrid_search"):
            return self._hybrid(request)
        if request.HasField("near_vector"):
            raise AssertionError("FakeWeaviate answers hybrid searches, not near_vector")
        limit = request.limit or 10
        if request.after and (request.HasField("filters") or request.sort_by or request.offset):
            raise WeaviateQueryError(
                "cursor api: invalid 'after' parameter: where,sort cannot be set with after "
                "and limit parameters",
                "GRPC search",
            )
        if request.offset + limit > QUERY_MAXIMUM_RESULTS:
            raise WeaviateQueryError("query maximum results exceeded", "GRPC search")
        with self.state:
            rows = self._matching(request.collection, request.tenant, request.filters)
        if request.after:
            rows = [row for row in rows if row[0] > request.after]
        for sort in reversed(list(request.sort_by)):
            field = sort.path[0]
            rows.sort(
                key=lambda r, f=field: _sort_key(r[0] if f == "_id" else r[1]["properties"].get(f)),
                reverse=not sort.ascending,
            )
        rows = rows[request.offset : request.offset + limit]
        types = self._types(request.collection)
        reply = search_get_pb2.SearchReply(
            results=[_result(oid, obj, types, request.metadata) for oid, obj in rows]
        )
        if self.after_search is not None:
            self.after_search(request)
        return reply

    def aggregate(self, request: Any) -> Any:
        self.grpc.append(("aggregate", request))
        if self.counts:
            n = self.counts.pop(0)
        else:
            with self.state:
                n = len(self._matching(request.collection, request.tenant, request.filters))
        single = aggregate_pb2.AggregateReply.Single(objects_count=n)
        return aggregate_pb2.AggregateReply(single_result=single)

    def batch_delete(self, request: Any) -> Any:
        self.grpc.append(("batch_delete", request))
        if self.delete_replies:
            return self.delete_replies.pop(0)
        with self.state:
            rows = self._matching(request.collection, request.tenant, request.filters)
            rows = rows[:QUERY_MAXIMUM_RESULTS]
            stored = self.objects.get((request.collection, request.tenant), {})
            for oid, _ in rows:
                stored.pop(oid, None)
        return batch_delete_pb2.BatchDeleteReply(matches=len(rows), successful=len(rows), failed=0)

    def _hybrid(self, request: Any) -> Any:
        """Rank by the reference model of the server's BM25, vector search and fusion."""
        hybrid = request.hybrid_search
        with self.state:
            stored, shard, allowed = self._view(request)
            found = ref.hybrid(
                shard,
                hybrid.query,
                hybrid_vector(hybrid),
                float(hybrid.alpha),
                request.limit or 10,
                allowed=allowed,
            )
        return self.scored_reply(request, stored, found)

    def _view(self, request: Any) -> tuple[dict[str, dict[str, Any]], ref.Shard, set[str]]:
        """The request's objects, the model shard that ranks them, and those its filter lets by."""
        key = (request.collection, request.tenant)
        stored = {
            oid: obj
            for oid, obj in self.objects.get(key, {}).items()
            if (*key, oid) not in self.unindexed
        }
        rows = self._matching(request.collection, request.tenant, request.filters)
        return stored, self._model_shard(request, stored), {oid for oid, _ in rows}

    def _model_shard(self, request: Any, stored: dict[str, dict[str, Any]]) -> ref.Shard:
        """A shard of the model holding ``stored`` in write order (their docIDs)."""
        shard = ref.Shard(searchable=list(request.hybrid_search.properties))
        for oid, obj in stored.items():
            shard.put(oid, obj["properties"], obj["vector"])
        return shard

    def scored_reply(
        self, request: Any, stored: dict[str, dict[str, Any]], found: list[ref.Result]
    ) -> Any:
        """The reply to a hybrid search: the hits with their scores and ``explain_score``."""
        types = self._types(request.collection)
        results = []
        for hit in found:
            result = _result(hit.uuid, stored[hit.uuid], types, request.metadata)
            result.metadata.score = float(hit.score)
            result.metadata.score_present = True
            result.metadata.explain_score = explain(hit)
            result.metadata.explain_score_present = True
            results.append(result)
        return search_get_pb2.SearchReply(results=results)

    # -- helpers ------------------------------------------------------------------------

    def _types(self, collection: str) -> dict[str, str]:
        schema = self.schemas[collection]
        return {p["name"]: p["dataType"][0] for p in schema.get("properties", [])}

    def _matching(
        self, collection: str, tenant: str, filters: Any
    ) -> list[tuple[str, dict[str, Any]]]:
        """The objects that pass ``filters``, in id order (as the server reads its id index)."""
        stored = self.objects.get((collection, tenant), {})
        has_filter = filters.ByteSize() > 0
        return [
            (oid, stored[oid])
            for oid in sorted(stored)
            if not has_filter
            or (
                (collection, tenant, oid) not in self.unindexed
                and _match(stored[oid]["id_text"], stored[oid]["properties"], filters)
            )
        ]


def hybrid_vector(hybrid: Any) -> list[float]:
    """The query vector of a hybrid request, however the client packed it."""
    packed = b""
    for named in hybrid.vectors:
        packed = named.vector_bytes
    if not packed:
        packed = hybrid.vector_bytes
    if packed:
        return list(struct.unpack(f"{len(packed) // 4}f", packed))
    return list(hybrid.vector)


def explain(hit: ref.Result) -> str:
    """``explain_score`` as the server writes it (float32 scores printed with Go's ``%v``)."""
    lines = []
    if hit.keyword is not None:
        lines.append(
            f"Hybrid (Result Set keyword,bm25) Document {hit.uuid}: original score "
            f"{go_v_float32(float(hit.keyword))}, normalized score: 0"
        )
    if hit.vector is not None:
        lines.append(
            f"Hybrid (Result Set vector,hybridVector) Document {hit.uuid}: original score "
            f"{go_v_float32(float(hit.vector))}, normalized score: 0"
        )
    return "\n".join(lines)


def _times(previous: dict[str, Any] | None) -> dict[str, int]:
    now = time.time_ns() // 1_000_000
    return {"created": previous["created"] if previous else now, "updated": now}


def _typed(dtype: str | None, value: Any) -> Any:
    if dtype == "int":
        return int(value)
    if dtype == "number":
        return float(value)
    if dtype == "date" and isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, "")  # missing values first ascending (handleNils)
    return (1, value.lower() if isinstance(value, str) else value)  # strings.ToLower


def _filter_value(f: Any) -> Any:
    kind = f.WhichOneof("test_value")
    value = getattr(f, kind)
    if kind.endswith("_array"):
        return list(value.values)
    return value


def _match(id_text: str, props: dict[str, Any], f: Any) -> bool:
    """Whether an object passes a gRPC filter; ``_id`` is compared with the id's indexed text."""
    op = f.operator
    if op == _OP.OPERATOR_AND:
        return all(_match(id_text, props, sub) for sub in f.filters)
    if op == _OP.OPERATOR_OR:
        return any(_match(id_text, props, sub) for sub in f.filters)
    target = f.target.property
    actual = id_text if target == "_id" else props.get(target)
    wanted = _filter_value(f)
    if isinstance(actual, datetime) and isinstance(wanted, str):
        wanted = datetime.fromisoformat(wanted.replace("Z", "+00:00"))
    # Field tokenisation trims whitespace on both sides of a text comparison.
    actual, wanted = _trimmed(actual), _trimmed(wanted)
    if op == _OP.OPERATOR_CONTAINS_ANY:
        values = actual if isinstance(actual, list) else [actual]
        return any(v in wanted for v in values)
    if op == _OP.OPERATOR_NOT_EQUAL:
        return actual is None or actual != wanted
    if actual is None:
        return False
    compare: dict[int, Callable[[Any, Any], bool]] = {
        _OP.OPERATOR_EQUAL: lambda a, b: a == b,
        _OP.OPERATOR_GREATER_THAN: lambda a, b: a > b,
        _OP.OPERATOR_GREATER_THAN_EQUAL: lambda a, b: a >= b,
        _OP.OPERATOR_LESS_THAN: lambda a, b: a < b,
        _OP.OPERATOR_LESS_THAN_EQUAL: lambda a, b: a <= b,
    }
    if op not in compare:
        raise AssertionError(f"FakeWeaviate does not implement filter operator {op}")
    return compare[op](actual, wanted)


def _trimmed(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return [v.strip() if isinstance(v, str) else v for v in value]
    return value


def _value(dtype: str | None, value: Any) -> Any:
    if dtype == "text[]":
        return properties_pb2.Value(
            list_value=properties_pb2.ListValue(text_values=properties_pb2.TextValues(values=value))
        )
    if dtype == "int":
        return properties_pb2.Value(int_value=value)
    if dtype == "number":
        return properties_pb2.Value(number_value=value)
    if dtype == "boolean":
        return properties_pb2.Value(bool_value=value)
    if dtype == "date":
        return properties_pb2.Value(date_value=value.isoformat())
    return properties_pb2.Value(text_value=value)


def _result(oid: str, obj: dict[str, Any], types: dict[str, str], asked: Any) -> Any:
    fields = {k: _value(types.get(k), v) for k, v in obj["properties"].items()}
    packed = []
    if asked.vectors or asked.vector:
        vec = obj["vector"]
        packed = [
            base_pb2.Vectors(
                name="default",
                vector_bytes=struct.pack(f"{len(vec)}f", *vec),
                type=base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32,
            )
        ]
    return search_get_pb2.SearchResult(
        properties=search_get_pb2.PropertiesResult(
            non_ref_props=properties_pb2.Properties(fields=fields), target_collection="X"
        ),
        metadata=search_get_pb2.MetadataResult(
            id_as_bytes=uuid.UUID(oid).bytes,
            vectors=packed,
            # Sent when asked for (a fetch by id always asks), as the server does.
            creation_time_unix=obj["created"] if asked.creation_time_unix else 0,
            creation_time_unix_present=bool(asked.creation_time_unix),
            last_update_time_unix=obj["updated"] if asked.last_update_time_unix else 0,
            last_update_time_unix_present=bool(asked.last_update_time_unix),
        ),
    )

"""A stateful stand-in for a Weaviate server of the pinned version (``WEAVIATE_VERSION``) behind the real client's transport.

``Wire`` (conftest.py) answers gRPC calls from queues; ``FakeServer`` keeps the objects the
client writes and answers reads the way the server's source does for what the store uses:
``fetch_objects`` with limit/offset, the ``after`` cursor (refused together with filters, sort
or offset: ``entities/filters/cursor_validator.go``), filters (including ``_id`` ranges),
sorting (``sorter/basic_comparators.go``), ``offset + limit`` capped by
``QUERY_MAXIMUM_RESULTS`` (``db/search.go`` getTotalLimit), batch deletes by filter (at most
``QUERY_MAXIMUM_RESULTS`` per call), counts, and tenants removed with their objects. Enough to
run export and forget past 10,000 objects through the real weaviate-client.
"""

from __future__ import annotations

import struct
import time
import uuid as uuidlib
from dataclasses import dataclass, field
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

from tests.unit.store.weaviate.conftest import Wire

QUERY_MAXIMUM_RESULTS = 10_000
_OP = base_pb2.Filters.Operator


@dataclass
class Stored:
    properties: dict[str, Any]
    vector: list[float]
    id_text: str
    """The id as the batch sent it: the server's id index keeps that text (found live), and
    the client sends every lookup by id canonical, so another spelling is never found."""
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    """Unix milliseconds, as the server keeps them (kept when the object is replaced)."""
    updated_ms: int = field(default_factory=lambda: int(time.time() * 1000))


class FakeServer(Wire):
    """``Wire`` with state: objects per (collection, tenant), filtered and sorted reads."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[tuple[str, str], dict[str, Stored]] = {}

    # -- REST: deleting a tenant deletes its objects ----------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.split("/")[2:]
        if request.method == "POST" and parts == ["objects"]:
            return self._create(request)
        response = super().handle(request)
        if request.method == "DELETE" and len(parts) == 3 and parts[2] == "tenants":
            import json

            for tenant in json.loads(request.content):
                self.objects.pop((parts[1], tenant), None)
        return response

    def _create(self, request: httpx.Request) -> httpx.Response:
        """``POST /v1/objects`` (``collection.data.insert``): create one, refuse an id taken."""
        import json

        body = json.loads(request.content)
        self.rest.append((request.method, request.url.path, body))
        bucket = self.objects.setdefault((body["class"], body.get("tenant") or ""), {})
        oid = str(uuidlib.UUID(body["id"]))
        if oid in bucket:
            message = f"id '{oid}' already exists"
            return httpx.Response(422, json={"error": [{"message": message}]})
        vectors = body.get("vectors") or {}
        vector = body.get("vector") or next(iter(vectors.values()), [])
        bucket[oid] = Stored(dict(body.get("properties") or {}), list(vector), body["id"])
        return httpx.Response(200, json=body)

    # -- gRPC ------------------------------------------------------------------------------

    def batch_objects(self, request: Any, timeout: float, max_retries: float) -> dict[int, str]:
        self.grpc.append(("batch_objects", request))
        for obj in request.objects:
            bucket = self.objects.setdefault((obj.collection, obj.tenant), {})
            props: dict[str, Any] = {}
            for key, value in obj.properties.non_ref_properties.fields.items():
                kind = value.WhichOneof("kind")
                props[key] = None if kind == "null_value" else getattr(value, kind)
            for arr in obj.properties.text_array_properties:
                props[arr.prop_name] = list(arr.values)
            for key in obj.properties.empty_list_props:
                props[key] = []
            vector = list(
                struct.unpack(
                    f"{len(obj.vectors[0].vector_bytes) // 4}f", obj.vectors[0].vector_bytes
                )
            )
            oid = str(uuidlib.UUID(obj.uuid))
            stored = Stored(props, vector, obj.uuid)
            if oid in bucket:
                stored.created_ms = bucket[oid].created_ms
            bucket[oid] = stored
        return dict(self.batch_errors)

    def search(self, request: Any) -> Any:
        self.grpc.append(("search", request))
        if self.search_replies:
            return self.search_replies.pop(0)
        schema = self.schemas[request.collection]
        types = {p["name"]: p["dataType"][0] for p in schema["properties"]}
        bucket = self.objects.get((request.collection, request.tenant), {})
        limit = request.limit or 25
        if request.after:
            if request.HasField("filters") or request.sort_by or request.offset:
                raise WeaviateQueryError(
                    "cursor api: invalid 'after' parameter: where,sort cannot be set with after "
                    "and limit parameters",
                    "GRPC search",
                )
        if request.offset + limit > QUERY_MAXIMUM_RESULTS:
            raise WeaviateQueryError("query maximum results exceeded", "GRPC search")
        ids = sorted(bucket)
        if request.HasField("filters"):
            test = _predicate(request.filters, types)
            ids = [i for i in ids if test(i, bucket[i])]
        if request.after:
            ids = [i for i in ids if i > request.after]
        for sort in reversed(list(request.sort_by)):
            ids.sort(key=_sort_key(sort.path[0], bucket, types), reverse=not sort.ascending)
        chosen = ids[request.offset : request.offset + limit]
        with_vector = bool(request.metadata.vectors) or request.metadata.vector
        return search_get_pb2.SearchReply(
            results=[_result(i, bucket[i], types, with_vector, request.metadata) for i in chosen]
        )

    def batch_delete(self, request: Any) -> Any:
        self.grpc.append(("batch_delete", request))
        if self.delete_replies:
            return self.delete_replies.pop(0)
        types = {
            p["name"]: p["dataType"][0] for p in self.schemas[request.collection]["properties"]
        }
        bucket = self.objects.get((request.collection, request.tenant), {})
        test = _predicate(request.filters, types)
        matched = [i for i in sorted(bucket) if test(i, bucket[i])]
        gone = matched[:QUERY_MAXIMUM_RESULTS]
        for i in gone:
            del bucket[i]
        return batch_delete_pb2.BatchDeleteReply(matches=len(gone), successful=len(gone), failed=0)

    def aggregate(self, request: Any) -> Any:
        self.grpc.append(("aggregate", request))
        if self.counts:
            n = self.counts.pop(0)
        else:
            types = {
                p["name"]: p["dataType"][0] for p in self.schemas[request.collection]["properties"]
            }
            bucket = self.objects.get((request.collection, request.tenant), {})
            test = _predicate(request.filters, types) if request.HasField("filters") else None
            n = sum(1 for i, obj in bucket.items() if test is None or test(i, obj))
        single = aggregate_pb2.AggregateReply.Single(objects_count=n)
        return aggregate_pb2.AggregateReply(single_result=single)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _value(filters: Any) -> Any:
    kind = filters.WhichOneof("test_value")
    if kind in ("value_text_array", "value_int_array", "value_number_array", "value_boolean_array"):
        return list(getattr(filters, kind).values)
    return getattr(filters, kind)


def _norm(value: Any, dtype: str) -> Any:
    if dtype.startswith("date"):
        return _instant(value)
    if dtype.startswith("text"):
        return str(value).strip()  # field tokenisation trims whitespace
    if dtype.startswith(("int", "number")):
        return float(value)
    return value


def _matches(filters: Any, oid: str, obj: Stored, types: dict[str, str]) -> bool:
    return _predicate(filters, types)(oid, obj)


def _predicate(filters: Any, types: dict[str, str]) -> Any:
    """Compile a gRPC filter into a Python test on (id, object)."""
    op = filters.operator
    if op in (_OP.OPERATOR_AND, _OP.OPERATOR_OR):
        parts = [_predicate(f, types) for f in filters.filters]
        combine = all if op == _OP.OPERATOR_AND else any
        return lambda oid, obj: combine(p(oid, obj) for p in parts)
    prop = filters.target.property or filters.on[0]
    dtype = "text" if prop == "_id" else types[prop]
    raw = _value(filters)
    want = [_norm(w, dtype) for w in raw] if isinstance(raw, list) else _norm(raw, dtype)

    def test(oid: str, obj: Stored) -> bool:
        have = obj.id_text if prop == "_id" else obj.properties.get(prop)
        if op == _OP.OPERATOR_CONTAINS_ANY:
            if have is None:
                return False
            haves = have if isinstance(have, list) else [have]
            return any(_norm(h, dtype) in want for h in haves)
        if op == _OP.OPERATOR_NOT_EQUAL:
            # inverted/row_reader_roaring_set.go: every doc id AND NOT the equal ones, so an
            # object without the property (written before it was added) matches.
            return have is None or _norm(have, dtype) != want
        if have is None:
            return False
        a = _norm(have, dtype)
        return {
            _OP.OPERATOR_EQUAL: a == want,
            _OP.OPERATOR_GREATER_THAN: a > want,
            _OP.OPERATOR_GREATER_THAN_EQUAL: a >= want,
            _OP.OPERATOR_LESS_THAN: a < want,
            _OP.OPERATOR_LESS_THAN_EQUAL: a <= want,
        }[op]

    return test


def _sort_key(prop: str, bucket: dict[str, Stored], types: dict[str, str]) -> Any:
    def key(oid: str) -> tuple[Any, ...]:
        if prop == "_id":
            return (1, oid)
        value = bucket[oid].properties.get(prop)
        if value is None:
            return (0,)  # missing values first ascending (handleNils)
        dtype = types[prop]
        if dtype == "text":
            return (1, str(value).lower())  # strings.ToLower comparison
        return (1, _norm(value, dtype))

    return key


def _result(oid: str, obj: Stored, types: dict[str, str], with_vector: bool, asked: Any) -> Any:
    names = asked.vectors
    fields = {}
    for key, value in obj.properties.items():
        if value is None:
            continue
        dtype = types.get(key, "text")
        if dtype == "text[]":
            fields[key] = properties_pb2.Value(
                list_value=properties_pb2.ListValue(
                    text_values=properties_pb2.TextValues(values=value)
                )
            )
        elif dtype == "int":
            fields[key] = properties_pb2.Value(int_value=int(value))
        elif dtype == "number":
            fields[key] = properties_pb2.Value(number_value=float(value))
        elif dtype == "boolean":
            fields[key] = properties_pb2.Value(bool_value=bool(value))
        elif dtype == "date":
            fields[key] = properties_pb2.Value(date_value=str(value))
        else:
            fields[key] = properties_pb2.Value(text_value=str(value))
    vectors = []
    if with_vector:
        vectors = [
            base_pb2.Vectors(
                name=(list(names) or ["default"])[0],
                vector_bytes=struct.pack(f"{len(obj.vector)}f", *obj.vector),
                type=base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32,
            )
        ]
    return search_get_pb2.SearchResult(
        properties=search_get_pb2.PropertiesResult(
            non_ref_props=properties_pb2.Properties(fields=fields), target_collection="X"
        ),
        metadata=search_get_pb2.MetadataResult(
            id_as_bytes=uuidlib.UUID(oid).bytes,
            vectors=vectors,
            # Sent when asked for (a fetch by id always asks), as the server does.
            creation_time_unix=obj.created_ms if asked.creation_time_unix else 0,
            creation_time_unix_present=bool(asked.creation_time_unix),
            last_update_time_unix=obj.updated_ms if asked.last_update_time_unix else 0,
            last_update_time_unix_present=bool(asked.last_update_time_unix),
        ),
    )

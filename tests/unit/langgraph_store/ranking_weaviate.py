"""``FakeWeaviate`` that also answers hybrid searches, ranked by the reference model.

``tests/unit/store/weaviate/server.py`` keeps objects and answers filters, sorting, counts and
deletes as the pinned Weaviate version does, but does not rank. Here a hybrid ``SearchRequest`` is
answered by ``tests/unit/store/weaviate_reference.py`` (the model of the server's BM25, vector
search and relativeScoreFusion the storage conformance tests check both backends against),
over the objects of the request's collection and tenant, with the request's filter; the
reply carries ``score`` and ``explain_score`` as the server writes them (float32 scores
printed with Go's ``%v``). So the LangGraph
store runs through the real weaviate-client and ``WeaviateStore`` end to end.
"""

from __future__ import annotations

import struct
from typing import Any

from weaviate.proto.v1 import search_get_pb2

from tests.unit.store import weaviate_reference as ref
from tests.unit.store.weaviate.gofmt import go_v_float32
from tests.unit.store.weaviate.server import FakeWeaviate, _match, _result

_ALLOWED = "__allowed_by_filter"


class RankingWeaviate(FakeWeaviate):
    """A ``FakeWeaviate`` whose hybrid searches are ranked like the server's."""

    def search(self, request: Any) -> Any:
        if not request.HasField("hybrid_search"):
            return super().search(request)
        self.grpc.append(("search", request))
        hybrid = request.hybrid_search
        vector = _vector(hybrid)
        with self.state:
            stored = dict(self.objects.get((request.collection, request.tenant), {}))
        has_filter = request.filters.ByteSize() > 0
        shard = ref.Shard(searchable=list(hybrid.properties))
        for oid, obj in stored.items():
            allowed = not has_filter or _match(obj["id_text"], obj["properties"], request.filters)
            # A marker property outside the searchable ones carries the filter to the model.
            props = {**obj["properties"], _ALLOWED: "y" if allowed else "n"}
            shard.put(oid, props, obj["vector"])
        found = ref.hybrid(
            shard,
            hybrid.query,
            vector,
            float(hybrid.alpha),
            request.limit or 10,
            where=[(_ALLOWED, "eq", "y", "text")],
        )
        types = self._types(request.collection)
        results = []
        for hit in found:
            result = _result(hit.uuid, stored[hit.uuid], types, [])
            result.metadata.score = float(hit.score)
            result.metadata.score_present = True
            result.metadata.explain_score = _explain(hit)
            result.metadata.explain_score_present = True
            results.append(result)
        return search_get_pb2.SearchReply(results=results)


def _vector(hybrid: Any) -> list[float]:
    packed = b""
    for named in hybrid.vectors:
        packed = named.vector_bytes
    if not packed:
        packed = hybrid.vector_bytes
    if packed:
        return list(struct.unpack(f"{len(packed) // 4}f", packed))
    return list(hybrid.vector)


def _explain(hit: ref.Result) -> str:
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

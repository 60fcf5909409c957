"""The reads of ``WeaviateStore`` on a collection the store has bound to its tenant.

Each function takes the client's collection (``WeaviateStore._for_read``) and returns the
store's types: stored objects by id, keyset pages, listings past the server's result window,
hybrid hits ranked by relativeScoreFusion, and the users of a per-user collection.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from weaviate.classes.query import Filter, HybridFusion, MetadataQuery, Sort
from weaviate.collections.classes.filters import _Filters

from agentic_memory.store.checks import PAGE_LIMIT
from agentic_memory.store.ranking import (
    fuse_relative_score,
    fusion_weights,
    order_hybrid,
    vector_candidates,
)
from agentic_memory.store.types import (
    CollectionSpec,
    HybridQuery,
    Listing,
    Page,
    SearchHit,
    StoredObject,
    Where,
)
from agentic_memory.store.weaviate.filters import build_filter, sort_like_weaviate
from agentic_memory.store.weaviate.schema import (
    EXACT_SUFFIX,
    ID_PROPERTY,
    USER_PROPERTY,
    VECTOR_NAME,
    from_weaviate_properties,
    has_exact_copy,
    is_hashed_tenant,
)
from agentic_memory.store.weaviate.scores import parse_explain_score

ID_LOOKUP = 1000
"""Ids per lookup by id: one request may not ask for more than ``QUERY_MAXIMUM_RESULTS``
objects (10,000 by default), and an ``update`` or ``insert`` may name any number."""
DEEP_PAGE = 5000
"""Page size of the id-ordered reads behind a listing that goes past the result window."""

_ACTIVE = frozenset({"ACTIVE", "HOT"})


def stored(spec: CollectionSpec, obj: Any, include_vector: bool) -> StoredObject:
    """Return the client's object as the store's, with its vector if asked for."""
    vector: list[float] | None = None
    if include_vector and obj.vector:
        raw = obj.vector.get(VECTOR_NAME) if isinstance(obj.vector, dict) else obj.vector
        vector = [float(x) for x in raw] if raw is not None else None
    return StoredObject(
        id=str(obj.uuid),
        properties=from_weaviate_properties(spec, obj.properties),
        vector=vector,
    )


def fetch_by_ids(
    collection: Any, ids: list[str], window: int, include_vector: bool = False
) -> list[Any]:
    """Return the stored objects of canonical ``ids``, looked up ``ID_LOOKUP`` at a time.

    ``window`` is the server's ``QUERY_MAXIMUM_RESULTS``: no lookup asks for more.
    """
    size = max(1, min(ID_LOOKUP, window))
    found: list[Any] = []
    for start in range(0, len(ids), size):
        chunk = ids[start : start + size]
        reply = collection.query.fetch_objects(
            filters=Filter.by_id().contains_any(chunk),
            limit=len(chunk),
            include_vector=[VECTOR_NAME] if include_vector else False,
        )
        found.extend(reply.objects)
    return found


def list_page(
    spec: CollectionSpec, collection: Any, listing: Listing, window: int
) -> list[StoredObject]:
    """Return one page of a listing sorted by ``sort_by`` (ties by id), as ``list_objects`` asks.

    ``window`` is the server's ``QUERY_MAXIMUM_RESULTS``.
    """
    where, limit, offset = listing.where, listing.limit, listing.offset
    sort_by, descending = listing.sort_by, listing.descending
    if offset + limit > window:
        # The server refuses offset + limit beyond QUERY_MAXIMUM_RESULTS (db/search.go
        # getTotalLimit): read every match in id order and sort here the way it would.
        matches = _all_after(spec, collection, where)
        return sort_like_weaviate(spec, matches, sort_by, descending)[offset : offset + limit]
    # Weaviate does not order ties itself: the id is always the last sort key.
    sort = Sort.by_id(ascending=True)
    if sort_by:
        # The exact copy holds the same value and is indexed for filtering.
        prop = spec.prop(sort_by)
        target = sort_by + EXACT_SUFFIX if has_exact_copy(prop) else sort_by
        sort = Sort.by_property(target, ascending=not descending).by_id(ascending=True)
    result = collection.query.fetch_objects(
        limit=limit, offset=offset, filters=build_filter(spec, where), sort=sort
    )
    return [stored(spec, obj, False) for obj in result.objects]


def _all_after(spec: CollectionSpec, collection: Any, where: list[Where]) -> list[StoredObject]:
    out: list[StoredObject] = []
    after: str | None = None
    while True:
        page = fetch_after(spec, collection, Page(where, after, DEEP_PAGE))
        out.extend(page)
        if len(page) < DEEP_PAGE:
            return out
        after = page[-1].id


def fetch_after(spec: CollectionSpec, collection: Any, page: Page) -> list[StoredObject]:
    """Return one keyset page: the ``after`` cursor, or ``_id > after`` with the conditions.

    The cursor is refused together with filters (``entities/filters/cursor_validator.go``),
    so filtered pages are sorted by id and start past the last id with a ``GreaterThan``
    on ``_id``, which the server evaluates on its id index (``row_reader_roaring_set.go``).
    """
    where, after, include_vector = page.where, page.after, page.include_vector
    vectors: list[str] | bool = [VECTOR_NAME] if include_vector else False
    limit = min(page.limit, PAGE_LIMIT)
    if not where:
        result = collection.query.fetch_objects(limit=limit, after=after, include_vector=vectors)
    else:
        filters = build_filter(spec, where)
        assert filters is not None  # where is not empty
        if after is not None:
            filters = Filter.all_of([filters, Filter.by_property(ID_PROPERTY).greater_than(after)])
        result = collection.query.fetch_objects(
            limit=limit,
            filters=filters,
            sort=Sort.by_id(ascending=True),
            include_vector=vectors,
        )
    return [stored(spec, obj, include_vector) for obj in result.objects]


def hybrid_hits(
    spec: CollectionSpec, collection: Any, search: HybridQuery, filters: _Filters | None
) -> list[SearchHit] | None:
    """Search both sides on the server; ``None`` when its keyword scores came back NaN.

    D1: Weaviate 1.32.9-1.32.25 could write a NaN average length, which every later
    average carries: every BM25 score of the property is NaN and the fused order
    meaningless. The caller then ranks by the vector side alone and says why.
    """
    # The server searches only the sides whose float32 weight is not zero.
    vector_weight, keyword_weight = fusion_weights(search.alpha)
    result = collection.query.hybrid(
        query=search.query,
        vector=[float(x) for x in search.vector],
        alpha=search.alpha,
        limit=search.limit,
        fusion_type=HybridFusion.RELATIVE_SCORE,
        query_properties=list(spec.searchable),
        target_vector=VECTOR_NAME,
        filters=filters,
        return_metadata=MetadataQuery(score=True, explain_score=True),
    )
    if any(_nan_score(obj.metadata) for obj in result.objects):
        return None
    hits = []
    for obj in result.objects:
        keyword, vec = parse_explain_score(obj.metadata.explain_score)
        hits.append(
            SearchHit(
                id=str(obj.uuid),
                properties=from_weaviate_properties(spec, obj.properties),
                score=float(obj.metadata.score or 0.0),
                # A side with no weight is not searched (as on the embedded store).
                keyword_score=None if keyword_weight == 0 else keyword,
                vector_score=None if vector_weight == 0 else vec,
            )
        )
    # The server's order stands: it broke near ties (raw score, then UUID) before cutting.
    return hits[: search.limit]


def vector_side_only(
    spec: CollectionSpec, collection: Any, search: HybridQuery, filters: _Filters | None
) -> list[SearchHit]:
    """Rank without keyword candidates: relativeScoreFusion of the vector side alone.

    A blank query has no keyword candidates on the server, nor has a collection without
    searchable text (the embedded store's rule; the server would refuse to search no
    property); the vector side is fetched with
    ``near_vector`` (``max(limit, 100)`` candidates, as a hybrid search takes) and fused
    and ordered here with the server's rules (``agentic_memory.store.ranking``), exactly as the
    embedded store does. Older servers answered ``hybrid(query="")`` as a plain
    near-vector search (weaviate/weaviate#4048), whose scores are not fusion scores.
    """
    vector_weight, _ = fusion_weights(search.alpha)
    if vector_weight == 0:
        # Pure keyword search for nothing: no candidates, as on the server.
        return []
    result = collection.query.near_vector(
        near_vector=[float(x) for x in search.vector],
        limit=vector_candidates(search.limit),
        target_vector=VECTOR_NAME,
        filters=filters,
        return_metadata=MetadataQuery(distance=True),
    )
    # explorer_hybrid.go denseSearch: the raw score is 1 - distance, in float32.
    sims = {
        str(obj.uuid): float(np.float32(1) - np.float32(obj.metadata.distance or 0.0))
        for obj in result.objects
    }
    objects = {str(obj.uuid): obj for obj in result.objects}
    fused, secondary = fuse_relative_score([(float(vector_weight), sims)])
    order = order_hybrid(fused, fused, secondary, {k: k for k in fused}, search.limit)
    return [
        SearchHit(
            id=key,
            properties=from_weaviate_properties(spec, objects[key].properties),
            score=fused[key],
            keyword_score=None,
            vector_score=sims[key],
        )
        for key in order
    ]


def is_active(tenant: Any) -> bool:
    """Whether a tenant (as ``collection.tenants.get()`` gives it) is loaded.

    Reading a cold one wakes it (auto tenant activation is on).
    """
    status = getattr(tenant, "activity_status", None)
    return status is None or str(getattr(status, "value", status)) in _ACTIVE


def users_of(collection: Any) -> list[str]:
    """Return the users that have objects in a per-user collection, sorted."""
    users: list[str] = []
    for name, tenant in collection.tenants.get().items():
        if not is_active(tenant) and not is_hashed_tenant(str(name)):
            # A plain tenant name is the user id itself: reported without reading the
            # tenant, which would wake a cold one (auto tenant activation is on).
            users.append(str(name))
            continue
        # An active tenant is read to skip it when empty; a hashed name must be read
        # to recover the raw user id, even when that wakes the tenant (docs/weaviate.md).
        result = collection.with_tenant(name).query.fetch_objects(
            limit=1, return_properties=[USER_PROPERTY]
        )
        if not result.objects:
            continue
        raw = result.objects[0].properties.get(USER_PROPERTY)
        users.append(str(raw) if raw else str(name))
    return sorted(users)


def _nan_score(metadata: Any) -> bool:
    score = metadata.score
    explain = metadata.explain_score or ""
    return (score is not None and math.isnan(score)) or "original score NaN" in explain

"""Searching a knowledge base: among its active revisions, with a relevance floor.

The visible state lives in the manifest (see :mod:`agentic_memory.kinds.knowledge.base`):
this module reads it (the sources, the generation, the active revisions) and searches among
the active revisions; ``Knowledge.asearch`` (``search_knowledge``) runs the whole search.
"""

from __future__ import annotations

import weakref

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.knowledge.schema import (
    _ENTRY_SOURCE,
    _MANIFEST_PAGE,
    KnowledgeHit,
    SourceInfo,
    _generation_id,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import (
    InvalidInputError,
    MemoryStore,
    SearchHit,
    Where,
)

# Up to this many active revisions are passed to the store as one ``in`` filter; above it
# the search over-fetches and filters the hits itself (see docs/ingestion.md for the numbers).
IN_FILTER_MAX_REVISIONS = 32
_SEARCH_ATTEMPTS = 4


# -- what is visible --------------------------------------------------------------------------


async def agen(store: MemoryStore, manifest: str, owner: str | None) -> str | None:
    """Return the manifest's generation token (``None`` before the first commit)."""
    obj = await store.aget(manifest, _generation_id(), user=owner)
    return None if obj is None else str(obj.properties.get("token"))


async def aread_sources(
    store: MemoryStore, manifest: str, owner: str | None
) -> dict[str, SourceInfo]:
    """Return the committed sources of a manifest, by source key."""
    sources: dict[str, SourceInfo] = {}
    where = [Where("entry", "eq", _ENTRY_SOURCE)]
    async for obj in store.aiterate(manifest, user=owner, where=where, page_size=_MANIFEST_PAGE):
        info = SourceInfo.from_properties(obj.properties)
        sources[info.source] = info
    return sources


# The active revisions of a manifest, cached per store and generation: a search then costs
# two single-object reads and one hybrid query while nothing is being ingested.
_ActiveKey = tuple[str, str | None]
_ACTIVE_CACHE: weakref.WeakKeyDictionary[
    MemoryStore, dict[_ActiveKey, tuple[str | None, frozenset[str]]]
]
_ACTIVE_CACHE = weakref.WeakKeyDictionary()


async def aactive_revisions(
    store: MemoryStore, manifest: str, generation: str | None, owner: str | None
) -> frozenset[str]:
    """Return the active revisions of a manifest at ``generation`` (cached per generation)."""
    per_store = _ACTIVE_CACHE.setdefault(store, {})
    cached = per_store.get((manifest, owner))
    if cached is not None and generation is not None and cached[0] == generation:
        return cached[1]
    sources = await aread_sources(store, manifest, owner)
    active = frozenset(info.revision for info in sources.values())
    per_store[(manifest, owner)] = (generation, active)
    return active


# -- search -----------------------------------------------------------------------------------


async def asearch_active(
    store: MemoryStore,
    collection: str,
    query: str,
    vector: list[float],
    k: int,
    alpha: float,
    active: frozenset[str],
    owner: str | None,
) -> list[KnowledgeHit]:
    """Return the best ``k`` hits among the chunks of the ``active`` revisions."""
    if len(active) <= IN_FILTER_MAX_REVISIONS:
        found = await store.ahybrid(
            collection,
            query=query,
            vector=vector,
            alpha=alpha,
            limit=k,
            user=owner,
            where=[Where("revision", "in", sorted(active))],
        )
        return [await _ahit(store, collection, h, vector, owner) for h in found]
    # Too many revisions for one filter: over-fetch and keep the active ones. Invisible
    # chunks are rare (only what a killed run left), so one round nearly always suffices.
    limit = k * 4
    while True:
        found = await store.ahybrid(
            collection, query=query, vector=vector, alpha=alpha, limit=limit, user=owner
        )
        kept = [h for h in found if h.properties.get("revision") in active]
        if len(kept) >= k or len(found) < limit:
            return [await _ahit(store, collection, h, vector, owner) for h in kept[:k]]
        limit *= 4


async def _asimilarity(
    store: MemoryStore, collection: str, hit: SearchHit, vector: list[float], owner: str | None
) -> float:
    """Return the hit's cosine similarity to the query vector.

    The hybrid search reports it for the chunks among its vector candidates; a chunk found by
    its keywords alone (or with ``alpha`` 0) is read back with its vector.
    """
    if hit.vector_score is not None:
        return float(hit.vector_score)
    stored = await store.aget(collection, hit.id, user=owner, include_vector=True)
    if stored is None or not stored.vector:
        return 0.0
    a, b = np.asarray(vector, dtype=np.float64), np.asarray(stored.vector, dtype=np.float64)
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norms) if norms else 0.0


async def _ahit(
    store: MemoryStore,
    collection: str,
    found: SearchHit,
    vector: list[float],
    owner: str | None,
) -> KnowledgeHit:
    id, props, score = found.id, found.properties, found.score
    similarity = await _asimilarity(store, collection, found, vector, owner)
    return KnowledgeHit(
        chunk_id=id,
        text=str(props.get("text") or ""),
        source=str(props.get("source") or ""),
        title=str(props.get("title") or ""),
        page_start=int(props.get("page_start") or 1),
        page_end=int(props.get("page_end") or props.get("page_start") or 1),
        score=float(score),
        chunk_index=int(props.get("chunk_index") or 0),
        similarity=similarity,
        section=str(props.get("section") or ""),
    )


RELEVANCE_FLOORS: dict[str, float] = {"wordllama-l2-supercat-256": 0.25}
"""Default relevance floor (cosine) per embedding model, measured by
``bench/relevance_floor_bench.py`` (``bench/results/relevance_floor.md``): with the offline
WordLlama model, the passage answering each of 40 real questions about this project's docs
scored at least 0.28, while the best passage for 220 messages the docs do not answer (LoCoMo
conversation turns and questions, everyday statements such as "I'm vegetarian and allergic
to peanuts") scored 0.17 at the median and 0.27 at the 95th percentile. 0.25 keeps every
answering passage with a 0.03 margin and leaves 90 % of those messages (95 % of the
everyday statements, every diet and allergy one) without a passage. Cosine scales differ
between models, so an unmeasured model gets no floor until the run sets one."""


def check_min_similarity(value: object) -> float:
    """Return a valid relevance floor (a number in [-1, 1]) or raise ``InvalidInputError``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not -1 <= value <= 1:
        raise InvalidInputError(f"min_similarity must be a number in [-1, 1], got {value!r}")
    return float(value)


def default_relevance_floor(embeddings: Embeddings) -> float | None:
    """Return the measured floor of ``embeddings``' model (:data:`RELEVANCE_FLOORS`), else None."""
    if isinstance(embeddings, LocalEmbeddings):
        return RELEVANCE_FLOORS["wordllama-l2-supercat-256"]
    return None

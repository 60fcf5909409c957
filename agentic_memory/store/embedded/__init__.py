"""The embedded backend: one SQLite file for durability, numpy for ranking.

``store``: the ``EmbeddedStore`` class (transactions, catalogue, writes, reads, hybrid search);
``sql``: the file's layout, filters and migrations; ``keyword``: tokenising and BM25
postings; ``skipping``: the frequent terms' columns and bounds that let BM25 on a large
partition skip the rows that cannot enter its top k; ``vectors``: cosine top-k and the PCA
shortlist; ``lists``: the inverted lists that

limit the shortlist's pass on large partitions; ``cache``: the per-partition
in-memory index and its in-place updates. Ranking follows the pinned Weaviate version
(``ranking.WEAVIATE_VERSION``): the rules live in ``agentic_memory.store.ranking``; ``docs/storage.md`` cites the server source and says
why BM25 is computed in numpy rather than by SQLite FTS5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from agentic_memory.store import ranking
from agentic_memory.store.embedded.keyword import _best_rows, encode_terms, term_hash
from agentic_memory.store.embedded.sql import (
    DB_FILENAME,
    SCHEMA_VERSION,
    TOKENIZER_VERSION,
    normalise_date,
)
from agentic_memory.store.embedded.store import EmbeddedStore
from agentic_memory.store.embedded.vectors import (
    COARSE_DIMS,
    COARSE_RERANK,
    EXACT_VECTOR_ROWS,
    _cosine_top,
)
from agentic_memory.store.ranking import (
    BM25_B,
    BM25_K1,
    HYBRID_CANDIDATES,
    WEAVIATE_EN_STOPWORDS,
    query_terms,
    tokenize,
)

T = TypeVar("T")

HYBRID_MIN_CANDIDATES = HYBRID_CANDIDATES
"""Kept for existing imports; see ``agentic_memory.store.ranking.HYBRID_CANDIDATES``."""


def fuse_relative_score(sides: Sequence[tuple[float, Mapping[T, float]]]) -> dict[T, float]:
    """Return the fused scores of ``agentic_memory.store.ranking.fuse_relative_score`` (kept for callers)."""
    return ranking.fuse_relative_score(sides)[0]


__all__ = [
    "BM25_B",
    "BM25_K1",
    "COARSE_DIMS",
    "COARSE_RERANK",
    "DB_FILENAME",
    "EXACT_VECTOR_ROWS",
    "HYBRID_MIN_CANDIDATES",
    "SCHEMA_VERSION",
    "TOKENIZER_VERSION",
    "WEAVIATE_EN_STOPWORDS",
    "EmbeddedStore",
    "_best_rows",
    "_cosine_top",
    "encode_terms",
    "fuse_relative_score",
    "normalise_date",
    "query_terms",
    "term_hash",
    "tokenize",
]

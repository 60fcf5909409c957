"""The Weaviate backend: explicit schemas, one tenant per user, relativeScoreFusion hybrid search.

Importing this package opens no connection; ``WeaviateStore.connect`` does. The translation
between the store's types and Weaviate's lives in pure functions so it can be tested without a
server: ``settings`` (connection and scale-out settings from arguments and the environment),
``schema`` (collection configs, tenant names, property values), ``filters`` (conditions and
the server's sort order), ``scores`` (the hybrid ``explain_score`` read back as float32);
``store`` holds the ``WeaviateStore`` class.

Layout inside Weaviate:

- every ``CollectionSpec`` becomes a collection with exactly its properties (auto-schema is
  never relied on), one self-provided named vector ``default`` (HNSW, cosine) and no
  inverted-index config: the server's BM25 defaults (k1 1.2, b 0.75, ``en`` stopwords) with
  BlockMax WAND, which the pinned server gives every new collection, are the ranking the
  embedded store reproduces (a collection kept from an older server with the older scorer
  is reported: ``WeaviateStore.volume_issues``); the collection
  description carries the vector size and a marker, so the spec can be rebuilt from the
  server's config;
- a text property that is both searchable and filterable is stored twice: word-tokenized
  for BM25 and, as ``<name>__exact``, field-tokenized for filters, because Weaviate filters
  on a word-tokenized property match tokens, not the whole value;
- per-user collections are multi-tenant; each object also stores the raw user id in
  ``amem_user`` so ``users()`` can report ids whose tenant name had to be hashed.

Tests that patch a module-level value patch it where it is read, e.g.
``agentic_memory.store.weaviate.store.BATCH_SIZE``.
"""

from __future__ import annotations

from agentic_memory.store.ranking import BM25_B, BM25_K1, HYBRID_CANDIDATES
from agentic_memory.store.weaviate.filters import build_filter, sort_like_weaviate
from agentic_memory.store.weaviate.schema import (
    EXACT_SUFFIX,
    ID_PROPERTY,
    USER_PROPERTY,
    VECTOR_NAME,
    collection_description,
    from_weaviate_properties,
    parse_description,
    rfc3339,
    schema_signature,
    spec_from_config,
    tenant_name,
    to_weaviate_properties,
    weaviate_properties,
)
from agentic_memory.store.weaviate.scores import parse_explain_score, parse_float32
from agentic_memory.store.weaviate.settings import (
    DEFAULT_GRPC_PORT,
    ConnectionSettings,
    ScaleSettings,
    connection_settings,
    scale_settings,
)
from agentic_memory.store.weaviate.store import WeaviateStore

HYBRID_MIN_CANDIDATES = HYBRID_CANDIDATES
"""``QUERY_HYBRID_MAXIMUM_RESULTS``: each side of a hybrid search takes ``max(limit, 100)``."""

__all__ = [
    "BM25_B",
    "BM25_K1",
    "DEFAULT_GRPC_PORT",
    "EXACT_SUFFIX",
    "HYBRID_MIN_CANDIDATES",
    "ID_PROPERTY",
    "USER_PROPERTY",
    "VECTOR_NAME",
    "ConnectionSettings",
    "ScaleSettings",
    "WeaviateStore",
    "build_filter",
    "collection_description",
    "connection_settings",
    "from_weaviate_properties",
    "parse_description",
    "parse_explain_score",
    "parse_float32",
    "rfc3339",
    "scale_settings",
    "schema_signature",
    "sort_like_weaviate",
    "spec_from_config",
    "tenant_name",
    "to_weaviate_properties",
    "weaviate_properties",
]

"""Long-term memory storage: one interface, an embedded backend and a Weaviate backend."""

from agentic_memory.paths import amem_home
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.bulk import BulkWriter
from agentic_memory.store.checks import GLOBAL_SCOPE, check_user_id
from agentic_memory.store.open import open_store
from agentic_memory.store.types import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MissingUserError,
    PartialWriteError,
    Property,
    SchemaConflictError,
    SearchHit,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    UpsertResult,
    VectorSizeError,
    Where,
    check_text,
    make_id,
)

__all__ = [
    "GLOBAL_SCOPE",
    "BulkWriter",
    "CollectionSpec",
    "ConflictError",
    "InvalidInputError",
    "MemoryObject",
    "MemoryStore",
    "MissingUserError",
    "PartialWriteError",
    "Property",
    "SchemaConflictError",
    "SearchHit",
    "StoreError",
    "StoredObject",
    "UnknownCollectionError",
    "UpsertResult",
    "VectorSizeError",
    "Where",
    "amem_home",
    "check_text",
    "check_user_id",
    "make_id",
    "open_store",
]

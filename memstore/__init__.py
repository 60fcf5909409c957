"""Long-term memory storage: one interface, an embedded backend and a Weaviate backend."""

from memstore.base import GLOBAL_SCOPE, MemoryStore, check_user_id
from memstore.types import (
    CollectionSpec,
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
    make_id,
)

__all__ = [
    "GLOBAL_SCOPE",
    "CollectionSpec",
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
    "check_user_id",
    "make_id",
]

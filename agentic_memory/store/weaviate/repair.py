"""Objects a Weaviate node holds but its own indexes miss, after it was killed mid-write.

A node killed (SIGKILL, the kernel's OOM killer, a power cut) during a batch can come back
with some of the batch's objects in its object store but in none of its indexes: each bucket
buffers its write-ahead log and a batch flushes them one after the other (1.32.27 ``lsmkv``
commit loggers; the restart logs ``lsm_recover_from_active_wal_corruption``). Such an object
is counted, listed and hashed like any other, so async replication finds nothing to repair,
but no id lookup, filter, keyword or vector search served by that node ever finds it. Seen
in the cluster tests: a file's chunks acknowledged at ``QUORUM`` stayed invisible through the
restarted node, 4 of 5 (``docs/weaviate.md``, "A node killed mid-write").

Writing such an object again with the same content does nothing: the server skips an
unchanged object (``compareObjsForInsertStatus``). So each one is written twice, never
deleted (a repair killed half-way loses nothing): first with its vector's first component
moved to the next float32, which gives it a new document id and every index entry on every
replica, then with its own vector again. Each one is read again right before (an object a
writer changed since the listing is left as the writer wrote it); what a writer changes in
the milliseconds between that read and the rewrite is overwritten with what was read: run
the repair before the node takes traffic again.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from weaviate.classes.data import DataObject
from weaviate.classes.query import Filter

from agentic_memory.store.types import StoreError
from agentic_memory.store.weaviate.schema import VECTOR_NAME

PAGE = 500
"""Objects listed, and looked up by id, per request."""


def reindex_unindexed(collection: Any) -> int:
    """Write again the objects of ``collection`` that its node's indexes miss; return how many.

    ``collection`` is a client collection (bound to a tenant for per-user collections), on a
    connection to the node to repair: a listing reads that node's object store, an id lookup
    its index.

    Raises:
        StoreError: the server refused a rewrite (what was rewritten before stays).
    """
    repaired = 0
    after = None
    while True:
        page = collection.query.fetch_objects(
            limit=PAGE, after=after, include_vector=[VECTOR_NAME]
        ).objects
        if not page:
            return repaired
        after = page[-1].uuid
        ids = [str(o.uuid) for o in page]
        indexed = collection.query.fetch_objects(
            filters=Filter.by_id().contains_any(ids), limit=len(ids)
        ).objects
        found = {str(o.uuid) for o in indexed}
        missed = [o for o in page if str(o.uuid) not in found and _unchanged(collection, o)]
        if missed:
            _rewrite(collection, missed)
            repaired += len(missed)


def _unchanged(collection: Any, listed: Any) -> bool:
    """Whether the object still holds what the listing read, read again just before the write.

    A writer may have updated it since (its own write keeps its content; a new vector also
    indexes it): it is left alone rather than given back the listed content. The cursor
    reads it, from the id just below its own, since no id lookup finds it.
    """
    below = uuid.UUID(int=listed.uuid.int - 1) if listed.uuid.int else None
    now = collection.query.fetch_objects(limit=1, after=below, include_vector=[VECTOR_NAME]).objects
    return bool(now) and (now[0].uuid, now[0].properties, now[0].vector) == (
        listed.uuid,
        listed.properties,
        listed.vector,
    )


def _rewrite(collection: Any, objects: list[Any]) -> None:
    for nudged in (True, False):
        data = [
            DataObject(
                properties=obj.properties,
                uuid=obj.uuid,
                vector={
                    VECTOR_NAME: _moved(obj.vector[VECTOR_NAME])
                    if nudged
                    else obj.vector[VECTOR_NAME]
                },
            )
            for obj in objects
        ]
        result = collection.data.insert_many(data)
        if result.errors:
            first = next(iter(result.errors.values()))
            raise StoreError(
                f"Weaviate refused to rewrite {len(result.errors)} unindexed object(s): "
                f"{first.message}"
            )


def _moved(vector: list[float]) -> list[float]:
    """Return ``vector`` with its first component at the next float32 up."""
    out = list(vector)
    out[0] = float(np.nextafter(np.float32(out[0]), np.float32(np.inf)))
    return out

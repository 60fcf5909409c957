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
replica, then with its own vector again. Each one is read again right before, and that
content is written (a writer's change since the listing is kept; a deleted object stays
deleted); what a writer changes between that read and the second write is overwritten with
what was read: run the repair before the node takes traffic again.

What is checked is the id index: an object whose id entry was flushed but some other
index entry was not is not found by this repair.
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
        missed = [now for o in page if str(o.uuid) not in found if (now := _now(collection, o))]
        if missed:
            _rewrite(collection, missed)
            repaired += len(missed)


def _now(collection: Any, listed: Any) -> Any | None:
    """Read the object again just before its rewrite; ``None`` once it is deleted.

    What a writer changed since the listing is what gets rewritten (an update keeping the
    vector would leave it unindexed: the server re-indexes only changed properties), and a
    deleted object is not brought back. The cursor reads it, from the id just below its
    own: no id lookup finds it.
    """
    below = uuid.UUID(int=listed.uuid.int - 1) if listed.uuid.int else None
    now = collection.query.fetch_objects(limit=1, after=below, include_vector=[VECTOR_NAME]).objects
    return now[0] if now and now[0].uuid == listed.uuid else None


def _rewrite(collection: Any, objects: list[Any]) -> None:
    """Write ``objects`` with a moved vector, then with their own: the second pass always runs."""
    refused = _write(collection, objects, nudged=True)
    # Restored whatever the first pass did: an object left with the moved vector would
    # look indexed to the next repair and keep that vector.
    refused.update(_write(collection, objects, nudged=False))
    if refused:
        raise StoreError(
            f"Weaviate refused to rewrite {len(refused)} unindexed object(s): "
            f"{next(iter(refused.values()))}"
        )


def _write(collection: Any, objects: list[Any], *, nudged: bool) -> dict[str, str]:
    data = [
        DataObject(
            properties=obj.properties,
            uuid=obj.uuid,
            vector={
                VECTOR_NAME: _moved(obj.vector[VECTOR_NAME]) if nudged else obj.vector[VECTOR_NAME]
            },
        )
        for obj in objects
    ]
    result = collection.data.insert_many(data)
    return {str(objects[i].uuid): error.message for i, error in result.errors.items()}


def _moved(vector: list[float]) -> list[float]:
    """Return ``vector`` with its first component at the next float32 up."""
    out = list(vector)
    out[0] = float(np.nextafter(np.float32(out[0]), np.float32(np.inf)))
    return out

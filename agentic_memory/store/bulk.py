"""Bulk writes: many objects into one partition, in a few large transactions.

Ingesting a PDF library or importing an export writes thousands of objects a few dozen at a
time (a batch of embeddings, a page of the file). Each upsert is a transaction of its own,
and on the embedded store each one also builds and merges keyword blocks: 128 chunks at a
time, a block of 1,024 rows is rewritten about eight times before it is full. A
``BulkWriter`` (``MemoryStore.bulk``) checks every batch as it comes, like ``upsert``, keeps
it, and writes what it holds with one ``upsert`` every ``rows`` objects and at the end:
blocks are built once per flush, full, and the per-transaction costs are paid once per
flush.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from agentic_memory.store.checks import check_batch
from agentic_memory.store.threads import in_thread
from agentic_memory.store.types import (
    CollectionSpec,
    MemoryObject,
    UpsertResult,
    Writes,
    canonical_id,
    check_finite,
)


class _Store(Protocol):
    """What a bulk writer needs of ``MemoryStore`` (``store.base`` imports this module)."""

    dims: int

    def spec(self, name: str, *, reload: bool = False) -> CollectionSpec: ...

    def _upsert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult: ...


BULK_ROWS = 8192
"""Objects a bulk writer holds before it writes them: eight full keyword blocks."""


class BulkWriter:
    """Upserts into one collection and partition, checked at once and written in large batches.

    Made by ``MemoryStore.bulk`` (or ``abulk``). What ``upsert`` is given is written with the
    next flush: when ``rows`` objects are held, on ``flush``, and when the ``with`` block
    ends without an error. Each flush is one ``upsert`` (one transaction on the embedded
    store): all of it is written or none of it. When the block raises, what was not written
    yet is dropped and what was stays; inside ``EmbeddedStore.transaction()`` the whole
    block is one transaction.
    """

    def __init__(self, store: _Store, collection: str, user: str | None, rows: int) -> None:
        """Write into ``collection`` (and ``user``'s partition) ``rows`` objects at a time."""
        self._store = store
        self._collection = collection
        self._user = user
        self._rows = rows
        self._objects: list[MemoryObject] = []
        self._vectors: list[npt.NDArray[np.float64]] = []
        self._ids: set[str] = set()
        self.written = 0
        """Objects written so far."""
        self.results: list[UpsertResult] = []
        """Each flush's result."""

    @property
    def held(self) -> int:
        """Return how many objects wait for the next flush."""
        return len(self._objects)

    def upsert(self, objects: Sequence[MemoryObject]) -> None:
        """Check ``objects`` as ``upsert`` does and write them with the next flush.

        An id given again replaces what was given before, as separate upserts would: the
        objects held are written first.

        Raises:
            InvalidInputError: the batch is malformed; nothing of it is kept.
        """
        store = self._store
        spec = store.spec(self._collection)
        check_batch(spec, objects, "upsert", store.dims)
        if not objects:
            return
        vectors = check_finite([obj.vector for obj in objects])

        keys = [canonical_id(obj.id) for obj in objects]
        if not self._ids.isdisjoint(keys):
            self.flush()
        self._objects.extend(objects)
        self._vectors.append(vectors)
        self._ids.update(keys)
        if len(self._objects) >= self._rows:
            self.flush()

    def flush(self) -> int:
        """Write what is held, with one upsert; return how many objects that was.

        Raises:
            StoreError: the write failed; what was held is dropped, nothing of it written.
        """
        if not self._objects:
            return 0
        objects, vectors = self._objects, np.concatenate(self._vectors)
        self._objects, self._vectors, self._ids = [], [], set()
        store = self._store
        result = store._upsert(store.spec(self._collection), self._user, Writes(objects, vectors))
        self.results.append(result)
        result.raise_for_failures()
        self.written += len(objects)
        return len(objects)

    aupsert = in_thread(upsert)
    aflush = in_thread(flush)

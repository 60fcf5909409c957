"""The partition cache: per (collection, user), the in-memory index searches run over.

A unit-vector matrix for cosine similarity and per-property BM25 postings, rebuilt when the
partition's generation token (replaced by every write transaction, from this or any other
process) changes, or updated in place when the write only added or deleted rows.
"""

from __future__ import annotations

import collections
import gc
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, Growing, IntArray
from agentic_memory.store.embedded.keyword import _finish, _KeywordIndex, _Postings, text_postings
from agentic_memory.store.embedded.sql import _table, decode_body
from agentic_memory.store.embedded.vectors import _CoarseIndex
from agentic_memory.store.types import CollectionSpec, StoreError

_CACHE_ENTRIES = 16


class _Partition:
    """The in-memory index of one (collection, user): rows in rid order, as a fresh load has them."""

    def __init__(
        self,
        token: str | None,
        lineage: str | None,
        removed: int,
        rowids: IntArray,
        ids: list[str],
        unit: FloatArray,
    ) -> None:
        """Hold the rows of one generation of the partition."""
        self.token = token
        self.lineage = lineage
        """Kept by writes that only add or delete rows: the cache is then updated, not reloaded."""
        self.removed = removed
        """The partition's count of deleting writes: unchanged, no cached row can be gone."""
        self._rowids = Growing(rowids)
        self.ids = ids
        self._unit = Growing(unit)
        self.keyword: _KeywordIndex | None = None
        """Built on the first keyword search, from the same generation as the vectors."""
        self.coarse: _CoarseIndex | None = None
        """Built on the first vector search of a large partition."""

    @property
    def rowids(self) -> IntArray:
        """Return the rows' rids, ascending."""
        return self._rowids.view

    @property
    def unit(self) -> FloatArray:
        """Return the rows scaled to unit length (zero rows stay zero): a dot product is the cosine."""
        return self._unit.view

    def drop(self, keep: npt.NDArray[np.bool_]) -> None:
        """Remove the rows not kept."""
        if keep.all():
            return
        self._rowids.keep(keep)
        self.ids = [i for i, k in zip(self.ids, keep.tolist(), strict=True) if k]
        self._unit.keep(keep)
        if self.keyword is not None:
            self.keyword.drop(keep)
        # Rows moved up: a fresh load would sample other rows for the axes.
        self.coarse = None

    def append(
        self, rids: IntArray, ids: list[str], unit: FloatArray, postings: _Postings | None
    ) -> None:
        """Add rows with larger rids at the end (``postings``: theirs, when keyword-indexed)."""
        if not ids:
            return
        self._rowids.append(rids)
        self.ids.extend(ids)
        self._unit.append(unit)
        if self.keyword is not None:
            if postings is None:
                raise StoreError("rows added without their postings")
            self.keyword.append(postings)
        if self.coarse is not None:
            if self.coarse.fits(self.rowids.size):
                self.coarse.append(unit)
            else:
                self.coarse = None


class PartitionCache:
    """The least recently used partitions' indexes (at most ``_CACHE_ENTRIES``).

    Callers hold the store's lock and read inside one snapshot.
    """

    def __init__(self, dims: int) -> None:
        """Start empty, for ``dims``-sized vectors."""
        self.dims = dims
        self._entries: collections.OrderedDict[tuple[str, str], _Partition] = (
            collections.OrderedDict()
        )

    def __getitem__(self, key: tuple[str, str]) -> _Partition:
        """Return the cached partition of (collection, user or "")."""
        return self._entries[key]

    def clear(self) -> None:
        """Forget every partition."""
        self._entries.clear()

    def drop_collection(self, name: str) -> None:
        """Forget the partitions of collection ``name``."""
        for key in [k for k in self._entries if k[0] == name]:
            del self._entries[key]

    def drop(self, name: str, user: str) -> None:
        """Forget one partition."""
        self._entries.pop((name, user), None)

    def partition(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None
    ) -> _Partition:
        """Return the in-memory index of a partition, brought up to date with the store.

        A partition whose rows were only added or deleted since it was cached is updated in
        place; otherwise it is reloaded. Either way the result equals a fresh load.
        """
        key = (spec.name, user or "")
        row = conn.execute(
            "SELECT token, lineage, removed FROM amem_generations "
            "WHERE collection = ? AND scope = ?",
            key,
        ).fetchone()
        token, lineage, removed = (row[0], row[1], int(row[2])) if row else (None, None, 0)
        cached = self._entries.get(key)
        if cached is not None and cached.token == token and token is not None:
            self._entries.move_to_end(key)
            return cached
        if cached is not None and lineage and cached.lineage == lineage:
            try:
                self.extend(conn, spec, user, cached, token, removed)
            except BaseException:
                # Half updated, it would pass for the generation it was extended from.
                del self._entries[key]
                raise
            entry = cached
        else:
            rids, ids, unit, _ = self.load_rows(conn, spec, user, after=0, terms=False)
            entry = _Partition(token, lineage, removed, rids, ids, unit)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > _CACHE_ENTRIES:
            self._entries.popitem(last=False)
        return entry

    def load_rows(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        *,
        after: int,
        terms: bool,
    ) -> tuple[IntArray, list[str], FloatArray, list[bytes]]:
        """Read the partition's rows with ``rid > after`` in rid order.

        Returns their rids, ids, unit vectors and, with ``terms``, their stored properties.
        """
        rids: list[int] = []
        ids: list[str] = []
        blobs: list[bytes] = []
        bodies: list[bytes] = []
        extra = ", body" if terms else ""
        for rid, oid, blob, *body in conn.execute(
            f"SELECT rid, id, vector{extra} FROM {_table(spec.name)} "
            "WHERE user IS ? AND rid > ? ORDER BY rid",
            (user, after),
        ):
            rids.append(rid)
            ids.append(oid)
            blobs.append(blob)
            if terms:
                bodies.append(body[0])
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rids), self.dims)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        unit = np.ascontiguousarray(matrix / norms, dtype=np.float32)
        return np.asarray(rids, dtype=np.int64), ids, unit, bodies

    def extend(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        cached: _Partition,
        token: str | None,
        removed: int,
    ) -> None:
        """Update ``cached`` in place: drop its deleted rows and add the rows added since.

        Under the same lineage no cached row was replaced and no rid was reused (see
        ``_bump``): the cached rows still present are unchanged, and every new row has a
        larger rid than all of them. Dropping the deleted ones and appending the new ones
        keeps the arrays in rid order, as a fresh load has them. Unless a write deleted rows
        since (``removed`` moved), only the new rows are read: O(rows added), whatever the
        partition holds.
        """
        largest = int(cached.rowids[-1]) if cached.rowids.size else 0
        if removed != cached.removed:
            still_there = np.fromiter(
                (
                    r[0]
                    for r in conn.execute(
                        f"SELECT rid FROM {_table(spec.name)} "
                        "WHERE user IS ? AND rid <= ? ORDER BY rid",
                        (user, largest),
                    )
                ),
                dtype=np.int64,
            )
            cached.drop(np.isin(cached.rowids, still_there, assume_unique=True))
        rids, ids, unit, bodies = self.load_rows(
            conn, spec, user, after=largest, terms=cached.keyword is not None
        )
        postings = None
        if cached.keyword is not None:
            postings = text_postings(spec, [decode_body(b) for b in bodies], cached.rowids.size)
        cached.append(rids, ids, unit, postings)
        cached.token = token
        cached.removed = removed

    def build_keyword_index(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None, part: _Partition
    ) -> _KeywordIndex:
        """Build per-property BM25 postings from the text of the partition's rows."""
        with _collector_paused():
            objects = [
                decode_body(body)
                for (body,) in conn.execute(
                    f"SELECT body FROM {_table(spec.name)} WHERE user IS ? ORDER BY rid", (user,)
                )
            ]
            if len(objects) != part.rowids.size:
                # Cannot happen inside one snapshot; refuse rather than misalign postings.
                raise StoreError("partition changed while its keyword index was built")
            return _finish(text_postings(spec, objects, 0))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a keyword index is built.

    The build makes a dict per row and a str per token (millions at 100k rows) and frees
    them all at the end, with no cycles among them; meanwhile each full collection walked
    every one of them, about a third of the build's time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

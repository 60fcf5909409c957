"""The partition cache: per (collection, user), the in-memory index searches run over.

A partition's rows are *slots* in rid order (the order stands in for the server's docIDs when
scores tie): unit vectors for cosine similarity, the BM25 postings of its keyword blocks
(``blocks.py``), the PCA projection of a large partition, and the filter columns searches
have used. A cache is current while the partition's generation token (replaced by every write
transaction, from this or any other process) is the one it was built under. When the token
moved, the cache compares the block ids it holds with the file's: rows in blocks it has not
seen are new, or changed when their birth differs from the slot's; rows of blocks gone that
are in no new block were deleted. It reads only those rows (vectors, postings, columns) and
updates the slots in place: a deleted row's slot is marked dead, a replaced row's postings
are replaced by a new chunk (``keyword._KeywordIndex``). The cache reloads instead once dead
slots or stale postings are a quarter of what it holds.

Loading a store's file leaves the vectors the blocks keep where they are
(``vectors.PendingUnits``): a search reads, scaled to unit length, the rows it scores, and a
thread the rest after it (a block without vectors, written by the code of an earlier layout,
has its rows' own vectors read at load). The first keyword search reads the blocks' postings:
no text is tokenised or decompressed. Either way the answers equal a fresh load's.
"""

from __future__ import annotations

import collections
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded import skipping as _skipping
from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, Growing, IntArray
from agentic_memory.store.embedded.blocks import (
    decode_projected,
    decode_rowinfo,
    decode_terms,
    inline_vectors,
)
from agentic_memory.store.embedded.filters import Column
from agentic_memory.store.embedded.keyword import _KeywordIndex
from agentic_memory.store.embedded.lists import decode_labels
from agentic_memory.store.embedded.postings import _Pairs, _Terms
from agentic_memory.store.embedded.sql import _column, _table
from agentic_memory.store.embedded.vectors import (
    PendingUnits,
    _CoarseIndex,
    decode_vectors,
    load_axes,
    load_centroids,
    normalise,
    project,
    unit_rows,
)
from agentic_memory.store.ranking import sorted_unique
from agentic_memory.store.types import CollectionSpec, StoreError

_CACHE_ENTRIES = 16
_READ_ROWS = 8192
"""Rows read per step when vectors are loaded, so that no full copy of them is ever held."""
_RELOAD_SHARE = 4
"""Reload once dead slots (or stale postings) are more than 1/4 of all..."""
_RELOAD_FLOOR = 1024
"""... and more than this many (small partitions reload in no time anyway)."""


class _Partition:
    """The in-memory index of one (collection, user)."""

    def __init__(self, token: str | None, dims: int, width: int) -> None:
        """Start empty, as of generation ``token``."""
        self.token = token
        self.width = width
        self.blocks: dict[int, tuple[IntArray, IntArray]] = {}
        """The keyword blocks the slots came from, and the rids and births each named (a
        superseded entry included: its birth is older than the slot's)."""
        self._rowids = Growing(np.zeros(0, dtype=np.int64))
        self._births = Growing(np.zeros(0, dtype=np.int64))
        self._alive = Growing(np.zeros(0, dtype=bool))
        self.dead = 0
        self._unit = Growing(np.zeros((0, dims), dtype=np.float32))
        self.pending: PendingUnits | None = None
        """The slots whose unit vectors a lazy load left in the file (None: none wait)."""
        self.conn: sqlite3.Connection | None = None
        """The connection of the snapshot the cache last returned the partition in."""
        self.keyword: _KeywordIndex | None = None
        """Built on the first keyword search."""
        self.axes: tuple[int, FloatArray64] | None = None
        """The partition's PCA axes in the file, if it has any."""
        self.centroids: IntArray | None = None
        """Its inverted lists' centroids in the file, if it has any."""
        self._coarse: _CoarseIndex | None = None
        self.columns: dict[str, Column] = {}
        """Filter columns, each loaded by the first search filtering on it."""

    @property
    def rowids(self) -> IntArray:
        """Return the slots' rids, ascending (a dead slot keeps the rid it had)."""
        return self._rowids.view

    @property
    def births(self) -> IntArray:
        """Return the birth of each slot's content (-1 when dead)."""
        return self._births.view

    @property
    def unit(self) -> FloatArray:
        """Return the slots' vectors scaled to unit length: a dot product is the cosine."""
        return self.rows()

    def rows(self, slots: IntArray | None = None) -> FloatArray:
        """Return the unit vectors of ``slots`` (every slot's when None), reading any that wait.

        Called in the snapshot the cache returned the partition in.
        """
        pending = self.pending
        if pending is not None:
            assert self.conn is not None
            pending.read(self.conn, slots)
            if slots is None or not pending.waiting.any():
                pending.stop()
                self.pending = None
        view = self._unit.view
        return view if slots is None else view[slots]

    def placed(self, rids: IntArray, births: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
        """Return the slots of a block's rows and which of its entries are their content.

        An entry a later write superseded has an older birth than its slot's.
        """
        slots = np.searchsorted(self.rowids, rids)
        return slots, self.births[slots] == births

    def forget(self) -> None:
        """Stop reading vectors for the partition: the cache drops it."""
        if self.pending is not None:
            self.pending.stop()

    @property
    def slots(self) -> int:
        """Return the number of slots, dead ones included."""
        return int(self._rowids.view.shape[0])

    @property
    def live(self) -> int:
        """Return the number of rows."""
        return self.slots - self.dead

    def alive(self) -> npt.NDArray[np.bool_] | None:
        """Return which slots hold a row, or None when all do."""
        return self._alive.view if self.dead else None

    def coarse(self) -> _CoarseIndex | None:
        """Return the PCA projection of the slots (built on first use), None without axes."""
        if self._coarse is None and self.axes is not None:
            self._coarse = _CoarseIndex(self.unit, self.axes, centroids=self.centroids)
        return self._coarse

    def append(self, rids: IntArray, births: IntArray, unit: FloatArray) -> None:
        """Add slots at the end (``rids`` ascending, above every slot's)."""
        self._rowids.append(rids)
        self._births.append(births)
        self._alive.append(np.ones(rids.size, dtype=bool))
        self._unit.append(unit)
        if self._coarse is not None:
            self._coarse.append(unit)
        if self.keyword is not None:
            self.keyword.grow(rids.size)

    def replace(self, slots: IntArray, births: IntArray, unit: FloatArray) -> None:
        """Give existing slots (dead or alive) new content."""
        self.dead -= int((~self._alive.view[slots]).sum())
        self._alive.view[slots] = True
        self._births.view[slots] = births
        self._unit.view[slots] = unit
        if self._coarse is not None:
            self._coarse.update(slots, unit)

    def kill(self, slots: IntArray) -> None:
        """Mark slots dead: their rows were deleted."""
        alive = self._alive.view[slots]
        slots = slots[alive]
        self.dead += int(slots.size)
        self._alive.view[slots] = False
        self._births.view[slots] = -1
        if self.keyword is not None:
            self.keyword.remove(slots)
        for column in self.columns.values():
            column.update(slots, [None] * slots.size)

    def worn(self) -> bool:
        """Return whether enough is dead or stale that a reload is worth it."""
        if self.dead > max(_RELOAD_FLOOR, self.slots // _RELOAD_SHARE):
            return True
        index = self.keyword
        return index is not None and index.stale > max(
            _RELOAD_FLOOR * 64, index.postings // _RELOAD_SHARE
        )


class _Reload(Exception):
    """The file changed in a way the cache does not update in place: load afresh."""


class PartitionCache:
    """The least recently used partitions' indexes (at most ``_CACHE_ENTRIES``).

    Callers hold the store's lock and read inside one snapshot.
    """

    def __init__(self, dims: int, path: Path | None = None) -> None:
        """Start empty, for ``dims``-sized vectors.

        ``path``: the store's file, if it has one (a partition's vectors are then read after
        its first search, see ``load``).
        """
        self.dims = dims
        self.path = path
        self._entries: collections.OrderedDict[tuple[str, str], _Partition] = (
            collections.OrderedDict()
        )
        self.loads = 0
        """Full loads so far (tests check that an edit did not cause one)."""

    def __getitem__(self, key: tuple[str, str]) -> _Partition:
        """Return the cached partition of (collection, user or "")."""
        return self._entries[key]

    def clear(self) -> None:
        """Forget every partition."""
        for key in list(self._entries):
            self.drop(*key)

    def drop_collection(self, name: str) -> None:
        """Forget the partitions of collection ``name``."""
        for key in [k for k in self._entries if k[0] == name]:
            self.drop(*key)

    def drop(self, name: str, user: str) -> None:
        """Forget one partition."""
        entry = self._entries.pop((name, user), None)
        if entry is not None:
            entry.forget()

    def partition(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None
    ) -> _Partition:
        """Return the in-memory index of a partition, brought up to date with the store.

        A cached partition is updated in place from the blocks that changed, unless it is
        worn (see ``_Partition.worn``); otherwise it is loaded. Either way it answers as a
        fresh load does.
        """
        key = (spec.name, user or "")
        row = conn.execute(
            "SELECT token FROM amem_generations WHERE collection = ? AND scope = ?", key
        ).fetchone()
        token = row[0] if row else None
        cached = self._entries.get(key)
        if cached is not None and cached.token == token and token is not None:
            self._entries.move_to_end(key)
            cached.conn = conn
            return cached
        entry: _Partition | None = None
        if cached is not None and token is not None and not cached.worn():
            try:
                self.extend(conn, spec, user, cached, token)
                entry = cached
            except _Reload:
                pass
            except BaseException:
                # Half updated, it would pass for the generation it was extended from.
                self.drop(*key)
                raise
        if entry is None:
            self.drop(*key)
            entry = self.load(conn, spec, user, token)
        entry.conn = conn
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > _CACHE_ENTRIES:
            self.drop(*next(iter(self._entries)))
        return entry

    def warm(self, spec: CollectionSpec, user: str | None, part: _Partition) -> None:
        """After a search: read the vectors a lazy load left, in a thread (see ``load``)."""
        if part.pending is not None and self.path is not None and part.token is not None:
            part.pending.start(self.path, part.token, spec.name, user or "")

    # -- loading ------------------------------------------------------------------------

    def load(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None, token: str | None
    ) -> _Partition:
        """Load a partition: its rows from the blocks, their vectors, its axes.

        When every block keeps its rows' vectors, none are read here (``PendingUnits``): a
        search reads those it scores and ``warm`` the rest, after the search.
        """
        self.loads += 1
        scope = user or ""
        part = _Partition(token, self.dims, len(spec.searchable))
        part.conn = conn
        part.axes = load_axes(conn, spec.name, scope, self.dims)
        part.centroids = load_centroids(conn, spec.name, scope)
        rids: list[IntArray] = []
        births: list[IntArray] = []
        for block, info in conn.execute(
            "SELECT block, rowinfo FROM amem_blocks WHERE collection = ? AND scope = ? "
            "ORDER BY block",
            (spec.name, scope),
        ):
            block_rids, block_births = decode_rowinfo(info)
            part.blocks[int(block)] = (block_rids, block_births)
            rids.append(block_rids)
            births.append(block_births)
        if not rids:
            return part
        all_rids, all_births = _current(np.concatenate(rids), np.concatenate(births))
        part._rowids = Growing(all_rids)
        part._births = Growing(all_births)
        part._alive = Growing(np.ones(all_rids.size, dtype=bool))
        (without,) = conn.execute(
            "SELECT coalesce(sum(rows), 0) FROM amem_blocks WHERE collection = ? AND scope = ? "
            "AND vectors IS NULL",
            (spec.name, scope),
        ).fetchone()
        lazy = self.path is not None and token is not None and not without
        part._unit = Growing.unfilled(all_rids.size, (self.dims,), np.float32, scattered=lazy)
        # Mostly blocks without vectors (written by older code): one pass over the rows.
        if 2 * int(without) > all_rids.size:
            self._scan_units(conn, spec.name, user, part)
        elif lazy:
            part.pending = PendingUnits(part._unit.view, self._places(part))
        else:
            missing = self._stored_units(conn, spec.name, scope, part)
            if missing.size:
                self._read_units(conn, spec.name, user, part, missing)
            # The blocks' vectors stand for the rows': check that the rows are those.
            (count,) = conn.execute(
                f"SELECT count(*) FROM {_table(spec.name)} WHERE user IS ?", (user,)
            ).fetchone()
            if count != all_rids.size:
                raise StoreError(
                    f"the keyword blocks of {spec.name!r} are out of step with its rows"
                )
        if part.axes is not None:
            part._coarse = self._stored_projection(conn, spec.name, scope, part, part.axes)
        return part

    @staticmethod
    def _places(part: _Partition) -> dict[int, tuple[IntArray, IntArray, int]]:
        """Per block: the slots whose current content it holds, their rows in it, its rows."""
        places = {}
        for block, (block_rids, block_births) in part.blocks.items():
            slots, mine = part.placed(block_rids, block_births)
            places[block] = (slots[mine], np.flatnonzero(mine), int(block_rids.size))
        return places

    def _stored_units(
        self, conn: sqlite3.Connection, collection: str, scope: str, part: _Partition
    ) -> IntArray:
        """Fill the slots' unit vectors from the blocks' vectors; return the slots left.

        Read block by block (a second pass over the blocks the load listed, in its snapshot),
        so that no more than one block's vectors are held besides the slots'; a block without
        vectors leaves its slots to the rows' own.
        """
        unit = part.unit
        missing: list[IntArray] = []
        for slots, mine, (blob,) in _listed_again(conn, "vectors", collection, scope, part):
            if blob is None:
                missing.append(slots[mine])
                continue
            stored = decode_vectors(blob, slots.size, self.dims)
            if stored is None:
                raise StoreError(f"the vectors of a keyword block of {collection!r} are damaged")
            if mine.all() and int(slots[-1]) - int(slots[0]) + 1 == slots.size:
                # A run of slots: scaled straight into place.
                normalise(stored, out=unit[int(slots[0]) : int(slots[-1]) + 1])
            else:
                unit[slots[mine]] = normalise(stored[mine])
        return np.sort(np.concatenate(missing)) if missing else np.zeros(0, dtype=np.int64)

    def _scan_units(
        self, conn: sqlite3.Connection, collection: str, user: str | None, part: _Partition
    ) -> None:
        """Fill every slot's unit vector from the rows' vectors, in one pass over the rows."""
        all_rids = part.rowids
        unit = part.unit
        table = _table(collection)
        at = 0
        (largest,) = conn.execute(f"SELECT max(rid) FROM {table}").fetchone()
        # A partition holding most of its table is read faster in one pass over the table
        # than through the user index (a lookup per row).
        scan = " NOT INDEXED" if 2 * all_rids.size >= int(largest or 0) else ""
        cursor = conn.execute(
            f"SELECT rid, vector FROM {table}{scan} WHERE user IS ? ORDER BY rid", (user,)
        )
        while rows := cursor.fetchmany(_READ_ROWS):
            end = at + len(rows)
            chunk_rids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            if end > all_rids.size or not np.array_equal(chunk_rids, all_rids[at:end]):
                raise StoreError(
                    f"the keyword blocks of {collection!r} are out of step with its rows"
                )
            unit_rows([r[1] for r in rows], self.dims, out=unit[at:end])
            at = end
        if at != all_rids.size:
            raise StoreError(f"the keyword blocks of {collection!r} are out of step with its rows")

    def _read_units(
        self,
        conn: sqlite3.Connection,
        collection: str,
        user: str | None,
        part: _Partition,
        slots: IntArray,
    ) -> None:
        """Fill the unit vectors of ``slots`` (ascending) from their rows' vectors."""
        for start in range(0, slots.size, _READ_ROWS):
            chunk = slots[start : start + _READ_ROWS]
            rows = sorted(
                conn.execute(
                    f"SELECT o.rid, o.vector FROM json_each(?) AS j CROSS JOIN "
                    f"{_table(collection)} AS o ON o.rid = j.value WHERE o.user IS ?",
                    (json.dumps(part.rowids[chunk].tolist()), user),
                ).fetchall()
            )
            if [r[0] for r in rows] != part.rowids[chunk].tolist():
                raise StoreError(
                    f"the keyword blocks of {collection!r} are out of step with its rows"
                )
            part.unit[chunk] = unit_rows([r[1] for r in rows], self.dims)

    def _stored_projection(
        self,
        conn: sqlite3.Connection,
        collection: str,
        scope: str,
        part: _Partition,
        axes: tuple[int, FloatArray64],
    ) -> _CoarseIndex:
        """Return the PCA projection of a loaded partition from its blocks' projections.

        Read block by block into place (a second pass over the blocks the load listed, in its
        snapshot): holding every block's value first was another copy of them all. Rows of a
        block without projections on these axes are projected here. The rows' inverted lists
        come from the blocks too when every block keeps them (else the lists label every row
        when first used).
        """
        width = axes[1].shape[0]
        projected = Growing.unfilled(part.slots, (width,), np.float32)
        labels: npt.NDArray[np.uint8] | None = None
        if part.centroids is not None:
            labels = np.empty(part.slots, dtype=np.uint8)
        missing: list[IntArray] = []
        read = _listed_again(conn, "axes, projected, labels", collection, scope, part)
        for slots, mine, (version, blob, held_labels) in read:
            if blob is not None and version == axes[0] and len(blob) == 4 * width * slots.size:
                projected.view[slots[mine]] = decode_projected(blob, slots.size)[mine]
                held = decode_labels(held_labels, slots.size)
                if labels is not None and held is not None:
                    labels[slots[mine]] = held[mine]
                else:
                    labels = None
            else:
                missing.append(slots[mine])
        if missing:
            redo = np.concatenate(missing)
            projected.view[redo] = project(part.unit[redo], axes[1])
            labels = None
        # The buffer itself: the projections are made, no vector is read for them.
        return _CoarseIndex(part._unit.view, axes, projected, part.centroids, labels)

    def keyword(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None, part: _Partition
    ) -> _KeywordIndex:
        """Return the partition's keyword index, loading it from its blocks the first time."""
        if part.keyword is not None:
            return part.keyword
        index = _KeywordIndex(part.width)
        index.grow(part.slots)
        decoded = []
        for slots, current, (postings,) in _listed_again(
            conn, "postings", spec.name, user or "", part
        ):
            lengths, terms = decode_terms(postings, slots.size)
            if not current.all():  # superseded entries left out
                slots, lengths, terms = slots[current], lengths[current], _keep(terms, current)
            decoded.append((slots, lengths, terms))
        if part.slots >= _skipping.PRUNE_ROWS:
            # Frequent terms get columns before any posting is placed, chosen from about 64
            # blocks' postings (the choice changes no answer, only what is skipped).
            sample = decoded[:: max(1, len(decoded) // 64)]
            index.choose_dense([terms for _, _, terms in sample], sum(s.size for s, _, _ in sample))
        for p, prop in enumerate(index.props):
            dense = index.dense[p]
            total = sum(
                terms[p].docs.size
                if dense is None
                else int(terms[p].counts[dense.find(terms[p].hashes) < 0].sum())
                for _, _, terms in decoded
            )
            prop.docs.reserve(total)
            prop.tf.reserve(total)
        for slots, lengths, terms in decoded:
            index.assign(slots, lengths.astype(np.float32), terms, loading=True)
        index.tighten_dense()
        part.keyword = index
        return index

    def column(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        part: _Partition,
        prop: str,
    ) -> Column:
        """Return a filter column of the partition, loading it the first time."""
        found = part.columns.get(prop)
        if found is not None:
            return found
        values: list[object] = [None] * part.slots
        rows = conn.execute(
            f"SELECT rid, {_column(prop)} FROM {_table(spec.name)} WHERE user IS ? ORDER BY rid",
            (user,),
        ).fetchall()
        if rows:
            rid_list, value_list = zip(*rows, strict=True)
            rids = np.array(rid_list, dtype=np.int64)
            if rids.size == part.slots and np.array_equal(rids, part.rowids):
                values = list(value_list)  # no dead slots: the rows are the slots, in order
            else:
                for slot, value in zip(
                    np.searchsorted(part.rowids, rids).tolist(), value_list, strict=True
                ):
                    values[slot] = value
        column = Column(spec.prop(prop).type, values)
        part.columns[prop] = column
        return column

    # -- updating in place ----------------------------------------------------------------

    def extend(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        part: _Partition,
        token: str,
    ) -> None:
        """Update ``part`` in place to the file's current blocks (raises ``_Reload`` if not).

        Reads the new blocks' row lists, the vectors (and loaded columns) of rows new or
        changed, and the postings of those rows when the keyword index is loaded: the cost of
        what changed, not of what the partition holds.
        """
        scope = user or ""
        if part.pending is not None:
            # Slots still waiting are read from the blocks they were loaded from, which this
            # snapshot may not hold: in place only once the thread has read them all.
            if not part.pending.settle():
                raise _Reload
            part.pending = None
        current = {
            int(b)
            for (b,) in conn.execute(
                "SELECT block FROM amem_blocks WHERE collection = ? AND scope = ?",
                (spec.name, scope),
            )
        }
        vanished = [b for b in part.blocks if b not in current]
        new = sorted(current.difference(part.blocks))
        infos: dict[int, tuple[IntArray, IntArray]] = {}
        for block, info in conn.execute(
            "SELECT block, rowinfo FROM amem_blocks WHERE block IN (SELECT value FROM json_each(?))",
            (json.dumps(new),),
        ):
            infos[int(block)] = decode_rowinfo(info)
        if len(infos) != len(new):
            raise StoreError("partition changed while its cache was updated")
        empty = np.zeros(0, dtype=np.int64)
        new_rids = np.concatenate([infos[b][0] for b in new]) if new else empty
        new_births = np.concatenate([infos[b][1] for b in new]) if new else empty
        named = sorted_unique(new_rids)
        new_rids, new_births = _current(new_rids, new_births)
        n = part.slots
        pos = np.searchsorted(part.rowids, new_rids)
        exists = pos < n
        exists[exists] = part.rowids[pos[exists]] == new_rids[exists]
        alive = np.zeros(new_rids.size, dtype=bool)
        alive[exists] = part._alive.view[pos[exists]]
        older = np.zeros(new_rids.size, dtype=bool)
        # A superseded entry a rewrite carried into a new block: the slot has newer content.
        older[alive] = new_births[alive] <= part.births[pos[alive]]
        changed = exists & ~older
        appended = ~exists
        if appended.any() and n and new_rids[appended].min() <= part.rowids[-1]:
            raise _Reload
        # A row named by a vanished block with the birth its slot holds, and by no new block,
        # was deleted (one whose slot holds a newer birth lost only a superseded entry).
        if vanished:
            old_rids = np.concatenate([part.blocks[b][0] for b in vanished])
            old_births = np.concatenate([part.blocks[b][1] for b in vanished])
            slots = np.searchsorted(part.rowids, old_rids)
            inside = slots < n
            inside[inside] = part.rowids[slots[inside]] == old_rids[inside]
            held = np.zeros(old_rids.size, dtype=bool)
            held[inside] = part.births[slots[inside]] == old_births[inside]
            part.kill(slots[held & ~np.isin(old_rids, named)])

        # Rows changed in place keep their slots; new rows get slots at the end.
        changed_slots = pos[changed]
        order = np.argsort(changed_slots)
        changed_slots, changed_births = changed_slots[order], new_births[changed][order]
        added_order = np.argsort(new_rids[appended])
        added_rids, added_births = (
            new_rids[appended][added_order],
            new_births[appended][added_order],
        )
        columns = list(part.columns)
        extra = "".join(f", {_column(c)}" for c in columns)
        table = _table(spec.name)
        if changed_slots.size:
            changed_rids = part.rowids[changed_slots]
            rows = conn.execute(
                f"SELECT o.rid{extra.replace(', ', ', o.')} FROM json_each(?) AS j "
                f"CROSS JOIN {table} AS o ON o.rid = j.value WHERE o.user IS ?",
                (json.dumps(changed_rids.tolist()), user),
            ).fetchall()
            rows.sort(key=lambda r: r[0])
            if len(rows) != changed_slots.size:
                raise StoreError("partition changed while its cache was updated")
            vectors = self._fresh_vectors(
                conn, table, user, infos, new, changed_rids, changed_births
            )
            part.replace(changed_slots, changed_births, normalise(vectors))
            for i, name in enumerate(columns):
                part.columns[name].update(changed_slots, [r[1 + i] for r in rows])
        if added_rids.size:
            first = n
            rows = conn.execute(
                f"SELECT rid{extra} FROM {table} WHERE user IS ? AND rid > ? ORDER BY rid",
                (user, int(part.rowids[-1]) if n else 0),
            ).fetchall()
            rids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            if not np.array_equal(rids, added_rids):
                raise StoreError("partition changed while its cache was updated")
            vectors = self._fresh_vectors(conn, table, user, infos, new, added_rids, added_births)
            part.append(added_rids, added_births, normalise(vectors))
            for i, name in enumerate(columns):
                part.columns[name].append([r[1 + i] for r in rows])
            added_slots = np.arange(first, first + added_rids.size)
        else:
            added_slots = empty

        if part.keyword is not None and (changed_slots.size or added_slots.size):
            self._assign_postings(
                conn, part, infos, new, np.concatenate((changed_slots, added_slots))
            )
        for block in vanished:
            del part.blocks[block]
        for block in new:
            part.blocks[block] = infos[block]
        axes = load_axes(conn, spec.name, scope, self.dims)
        if (axes is None) != (part.axes is None) or (
            axes is not None and part.axes is not None and axes[0] != part.axes[0]
        ):
            part.axes = axes
            part._coarse = None
        part.centroids = load_centroids(conn, spec.name, scope)
        if part._coarse is not None:
            part._coarse.set_centroids(part.centroids)
        part.token = token

    def _fresh_vectors(
        self,
        conn: sqlite3.Connection,
        table: str,
        user: str | None,
        infos: dict[int, tuple[IntArray, IntArray]],
        new: list[int],
        rids: IntArray,
        births: IntArray,
    ) -> FloatArray:
        """Return the vectors of rows ``rids`` (ascending): their entries of ``births``.

        Those are in the blocks the cache has not seen (``new``): each is read once, whole.
        """
        out = np.empty((rids.size, self.dims), dtype=np.float32)
        found = np.zeros(rids.size, dtype=bool)
        for block in new:
            block_rids, block_births = infos[block]
            place = np.searchsorted(rids, block_rids)
            mine = place < rids.size
            mine[mine] = (rids[place[mine]] == block_rids[mine]) & (
                births[place[mine]] == block_births[mine]
            )
            if not mine.any():
                continue
            (blob,) = conn.execute(
                "SELECT vectors FROM amem_blocks WHERE block = ?", (block,)
            ).fetchone()
            if blob is None:
                stored = inline_vectors(conn, table, user, block_rids[mine], self.dims)
            else:
                held = decode_vectors(blob, block_rids.size, self.dims)
                if held is None:
                    raise StoreError("the vectors of a keyword block of the store are damaged")
                stored = held[mine]
            out[place[mine]] = stored
            found[place[mine]] = True
        if not found.all():
            raise StoreError("partition changed while its cache was updated")
        return out

    def _assign_postings(
        self,
        conn: sqlite3.Connection,
        part: _Partition,
        infos: dict[int, tuple[IntArray, IntArray]],
        new: list[int],
        slots: IntArray,
    ) -> None:
        """Give ``slots`` (rows new or changed) the postings their new blocks hold."""
        index = part.keyword
        assert index is not None
        wanted = np.zeros(part.slots, dtype=bool)
        wanted[slots] = True
        for block in new:
            block_rids, block_births = infos[block]
            block_slots, current = part.placed(block_rids, block_births)
            keep = wanted[block_slots] & current
            if not keep.any():
                continue
            (blob,) = conn.execute(
                "SELECT postings FROM amem_blocks WHERE block = ?", (block,)
            ).fetchone()
            lengths, terms = decode_terms(blob, block_slots.size)
            index.assign(block_slots[keep], lengths[keep].astype(np.float32), _keep(terms, keep))


def _listed_again(
    conn: sqlite3.Connection, columns: str, collection: str, scope: str, part: _Partition
) -> Iterator[tuple[IntArray, npt.NDArray[np.bool_], tuple[Any, ...]]]:
    """Yield each block the load listed once more, in its snapshot, with ``columns``' values.

    With each: its rows' slots and which of its entries are their current content (the
    superseded ones are not). One block's values are held at a time.
    """
    listed = iter(part.blocks.items())
    for block, *values in conn.execute(
        f"SELECT block, {columns} FROM amem_blocks WHERE collection = ? AND scope = ? "
        "ORDER BY block",
        (collection, scope),
    ):
        seen, (block_rids, block_births) = next(listed, (None, (None, None)))
        if seen != block or block_rids is None or block_births is None:
            raise StoreError("partition changed while it was read")
        yield *part.placed(block_rids, block_births), tuple(values)
    if next(listed, None) is not None:
        raise StoreError("partition changed while it was read")


def _current(rids: IntArray, births: IntArray) -> tuple[IntArray, IntArray]:
    """Return each rid once, ascending, with its newest birth (its current content)."""
    order = np.lexsort((births, rids))
    rids, births = rids[order], births[order]
    last = np.ones(rids.size, dtype=bool)
    last[:-1] = rids[1:] != rids[:-1]
    return rids[last], births[last]


def _keep(terms: list[_Terms], keep: npt.NDArray[np.bool_]) -> list[_Terms]:
    """Return a block's postings of the rows kept only, renumbered 0.. in order."""
    number = np.cumsum(keep) - 1
    out = []
    for term in terms:
        pairs = term.pairs()
        mine = keep[pairs.docs]
        out.append(
            _Terms.of(_Pairs(pairs.pair_hash[mine], number[pairs.docs[mine]], pairs.tf[mine]))
        )
    return out

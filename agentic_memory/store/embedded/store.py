"""The embedded store: the catalogue, writes, reads and hybrid search.

One SQLite file for durability (``sql``; its connection and transactions: ``connection``),
numpy for ranking (``keyword``, ``vectors``) over an in-memory index per (collection, user)
(``cache``). Ranking follows the pinned Weaviate version (``ranking.WEAVIATE_VERSION``): the
rules live in ``agentic_memory.store.ranking``; ``docs/storage.md`` cites the server source.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.checks import absent_properties
from agentic_memory.store.embedded import blocks as _blocks
from agentic_memory.store.embedded.arrays import NO_HITS as _NO_HITS
from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, IntArray
from agentic_memory.store.embedded.blocks import PartitionBlocks, row_vectors
from agentic_memory.store.embedded.cache import _Partition
from agentic_memory.store.embedded.connection import SQLiteStore
from agentic_memory.store.embedded.filters import evaluable
from agentic_memory.store.embedded.filters import mask as _filter_mask
from agentic_memory.store.embedded.keyword import _bm25_top, _Postings, text_postings
from agentic_memory.store.embedded.sql import (
    _add_columns,
    _array_props,
    _bump,
    _column,
    _column_value,
    _columns,
    _compound_indexes,
    _describe,
    _filter_sql,
    _prop_sql,
    _spec_from_json,
    _spec_to_json,
    _stored,
    _structure,
    _table,
    create_object_table,
    decode_body,
    encode_body,
    filter_json,
    normalise_date,
)
from agentic_memory.store.embedded.vectors import _cosine_top, maintain_axes
from agentic_memory.store.ranking import (
    fuse_arrays,
    fusion_weights,
    keyword_candidates,
    order_fused,
    query_term_counts,
    vector_candidates,
)
from agentic_memory.store.types import (
    CollectionSpec,
    ConflictError,
    HybridQuery,
    InvalidInputError,
    Listing,
    MemoryObject,
    Page,
    Property,
    SchemaConflictError,
    SearchHit,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    Update,
    UpsertResult,
    Where,
    Writes,
    canonical_id,
)
from agentic_memory.store.types import check_finite as _finite

_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _by_ids(
    conn: sqlite3.Connection, table: str, user: str | None, ids: list[str], columns: str
) -> list[Any]:
    """Return ``columns`` of the partition's rows of canonical ``ids``: one query for all."""
    return conn.execute(
        f"SELECT {columns} FROM {table} WHERE user IS ? AND id IN (SELECT value FROM json_each(?))",
        (user, json.dumps(ids)),
    ).fetchall()


def _insert_sql(spec: CollectionSpec) -> str:
    """Return the statement that adds a row of ``_prepare`` with its rid and user in front."""
    names = "".join(f", {_column(p.name)}" for p in _columns(spec))
    marks = ", ?" * len(_columns(spec))
    return (
        f"INSERT INTO {_table(spec.name)} (rid, id, user, props, body, vector{names}) "
        f"VALUES (?, ?, ?, ?, ?, ?{marks})"
    )


def _update_sql(spec: CollectionSpec) -> str:
    """Return the statement that rewrites a row: ``_prepare``'s values after the id, then rid."""
    updates = "".join(f", {_column(p.name)} = ?" for p in _columns(spec))
    return f"UPDATE {_table(spec.name)} SET props = ?, body = ?, vector = ?{updates} WHERE rid = ?"


class EmbeddedStore(SQLiteStore):
    """A durable, serverless store in one directory; safe for several processes at once."""

    backend = "embedded"

    # -- schema ---------------------------------------------------------------------------

    def _ensure_collection(self, spec: CollectionSpec) -> None:
        def create(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT spec, dims FROM amem_collections WHERE name = ?", (spec.name,)
            ).fetchone()
            if row is not None:
                self._check_compatible(spec, _spec_from_json(row[0]), int(row[1]))
                _compound_indexes(conn, spec)
                return
            create_object_table(conn, spec)
            conn.execute(
                "INSERT INTO amem_collections (name, spec, dims, created_at) VALUES (?, ?, ?, ?)",
                (spec.name, _spec_to_json(spec), self.dims, datetime.now(UTC).isoformat()),
            )

        self._write(create)

    def _add_properties(
        self, name: str, properties: list[Property]
    ) -> tuple[CollectionSpec, list[str]]:
        def add(conn: sqlite3.Connection) -> tuple[CollectionSpec, list[str]]:
            row = conn.execute(
                "SELECT spec FROM amem_collections WHERE name = ?", (name,)
            ).fetchone()
            if row is None:
                raise UnknownCollectionError(f"collection {name!r} was dropped meanwhile")
            stored = _spec_from_json(row[0])
            added = absent_properties(stored, properties)
            if not added:
                return stored, []
            grown = dataclasses.replace(stored, properties=(*stored.properties, *added))
            _add_columns(conn, grown, added)
            conn.execute(
                "UPDATE amem_collections SET spec = ? WHERE name = ?", (_spec_to_json(grown), name)
            )
            return grown, [p.name for p in added]

        # One transaction: the columns, their indexes and the catalogue change together, and
        # a second process doing the same waits, then finds them and adds nothing.
        return self._write(add)

    def _check_compatible(self, spec: CollectionSpec, stored: CollectionSpec, dims: int) -> None:
        if dims != self.dims:
            raise SchemaConflictError(
                f"collection {spec.name!r} stores {dims}-dimensional vectors, this store was "
                f"opened with dims={self.dims}; use the embedding model it was built with "
                "or a new store directory"
            )
        if _structure(spec) != _structure(stored):
            raise SchemaConflictError(
                f"collection {spec.name!r} exists with a different schema: stored "
                f"{_describe(stored)}; requested {_describe(spec)}"
            )

    def _load_spec(self, name: str) -> CollectionSpec | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT spec, dims FROM amem_collections WHERE name = ?", (name,)
            ).fetchone()
        if row is None:
            return None
        spec = _spec_from_json(row[0])
        self._check_compatible(spec, spec, int(row[1]))
        return spec

    def _collections(self) -> list[str]:
        with self._read() as conn:
            return [r[0] for r in conn.execute("SELECT name FROM amem_collections ORDER BY name")]

    def _drop_collection(self, name: str) -> None:
        def drop(conn: sqlite3.Connection) -> None:
            conn.execute(f"DROP TABLE IF EXISTS {_table(name)}")
            conn.execute("DELETE FROM amem_collections WHERE name = ?", (name,))
            conn.execute("DELETE FROM amem_generations WHERE collection = ?", (name,))
            conn.execute("DELETE FROM amem_axes WHERE collection = ?", (name,))
            _blocks.drop_collection(conn, name)

        self._write(drop)
        with self._lock:
            self._cache.drop_collection(name)

    # -- writes ---------------------------------------------------------------------------

    def _upsert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        rows, postings, stored = self._prepare(spec, batch.objects, batch.vectors)
        obj_t = _table(spec.name)

        def write(conn: sqlite3.Connection) -> None:
            # One lookup for the whole batch, then one executemany per statement: a query
            # per object was most of the write time for large batches.
            existing = dict(_by_ids(conn, obj_t, user, [row[0] for row in rows], "id, rid"))
            rids = self._new_rids(conn, obj_t, [existing.get(row[0]) for row in rows])
            conn.executemany(
                _insert_sql(spec),
                [
                    (rid, oid, user, *rest)
                    for rid, (oid, *rest) in zip(rids.tolist(), rows, strict=True)
                    if oid not in existing
                ],
            )
            conn.executemany(
                _update_sql(spec),
                [(*rest, existing[oid]) for oid, *rest in rows if oid in existing],
            )
            # Every row of the batch joins a new block; a replaced row's old entry is superseded.
            self._reindex(
                conn, spec, user, rids, postings, stored, replaced=list(existing.values())
            )

        self._write_large(write, len(batch.objects))
        return UpsertResult(ids=[obj.id for obj in batch.objects])

    @staticmethod
    def _new_rids(conn: sqlite3.Connection, table: str, known: list[int | None]) -> IntArray:
        """Return the batch's rids: a replaced row keeps its own, new rows get the next ones.

        Given explicitly, as SQLite would have chosen them (the table's largest plus one), so
        that the keyword blocks written in the same transaction can name them.
        """
        (largest,) = conn.execute(f"SELECT max(rid) FROM {table}").fetchone()
        fresh = iter(range(int(largest or 0) + 1, int(largest or 0) + 1 + known.count(None)))
        return np.fromiter(
            (next(fresh) if rid is None else rid for rid in known), dtype=np.int64, count=len(known)
        )

    def _reindex(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        rids: IntArray,
        postings: _Postings,
        vectors: FloatArray,
        *,
        replaced: list[int],
    ) -> None:
        """Write the keyword blocks (vectors included) and axes of a batch; mark it changed.

        ``vectors``: the batch's vectors (rows, dims) float32, in the order of ``rids``.
        """
        blocks = PartitionBlocks(conn, spec.name, user or "", len(spec.searchable))
        # A replaced row's old entry is marked superseded, not rewritten out of its block.
        blocks.supersede(np.asarray(replaced, dtype=np.int64))
        blocks.add(rids, postings, vectors, self.dims)
        table = _table(spec.name)
        read = functools.partial(row_vectors, conn, spec.name, table, user, dims=self.dims)
        chosen = maintain_axes(conn, spec.name, user or "", table, user, blocks.rows(), read)
        if chosen == "axes":
            blocks.reproject(table, user, self.dims)
        elif chosen == "centroids":
            blocks.relabel(self.dims)
        _bump(conn, spec.name, user)

    def _insert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        rows, postings, stored = self._prepare(spec, batch.objects, batch.vectors)
        obj_t = _table(spec.name)
        guard, guard_params = _filter_sql(spec, batch.unless)

        def write(conn: sqlite3.Connection) -> None:
            # Checks and rows in one IMMEDIATE transaction: no other writer, in this process
            # or another, can come between them.
            existing = [r[0] for r in _by_ids(conn, obj_t, user, [row[0] for row in rows], "id")]
            if existing:
                raise ConflictError(
                    f"{len(existing)} object(s) already exist in {spec.name!r}: "
                    f"{', '.join(sorted(existing)[:3])}",
                    existing=existing,
                )
            if batch.unless:
                found = conn.execute(
                    f"SELECT id FROM {obj_t} WHERE user IS ?{guard} LIMIT 1", (user, *guard_params)
                ).fetchone()
                if found is not None:
                    raise ConflictError(
                        f"object {found[0]} of {spec.name!r} matches the insert's guard",
                        guarded=True,
                    )
            rids = self._new_rids(conn, obj_t, [None] * len(rows))
            conn.executemany(
                _insert_sql(spec),
                [
                    (rid, oid, user, *rest)
                    for rid, (oid, *rest) in zip(rids.tolist(), rows, strict=True)
                ],
            )
            self._reindex(conn, spec, user, rids, postings, stored, replaced=[])

        self._write_large(write, len(batch.objects))
        return UpsertResult(ids=[obj.id for obj in batch.objects])

    def _update(self, spec: CollectionSpec, user: str | None, update: Update) -> UpsertResult:
        obj_t = _table(spec.name)

        def write(conn: sqlite3.Connection) -> list[str]:
            # Read, change and write in one IMMEDIATE transaction: no other writer, in this
            # process or another, can come in between.
            # Sorted here: ``ORDER BY rid`` made SQLite walk the user's rows by rid instead
            # of looking the ids up (an update cost O(user), not O(ids)).
            rows = sorted(
                _by_ids(conn, obj_t, user, update.ids, "id, body, rid"), key=lambda row: int(row[2])
            )
            held = row_vectors(
                conn,
                spec.name,
                obj_t,
                user,
                np.asarray([r[2] for r in rows], dtype=np.int64),
                self.dims,
            )
            changed: list[MemoryObject] = []
            rids: list[int] = []
            for row, vector in zip(rows, held, strict=True):
                new = update.change(_stored(row, vector))
                if new is not None:
                    changed.append(new)
                    rids.append(int(row[2]))
            if not changed:
                return []
            prepared, postings, stored = self._prepare(
                spec, changed, _finite([o.vector for o in changed])
            )
            conn.executemany(
                _update_sql(spec),
                [(*rest, rid) for (_, *rest), rid in zip(prepared, rids, strict=True)],
            )
            # As an upsert of existing ids: the rows join a new block, their old entries are
            # superseded, in this same transaction.
            self._reindex(
                conn, spec, user, np.asarray(rids, dtype=np.int64), postings, stored, replaced=rids
            )
            return [o.id for o in changed]

        return UpsertResult(ids=self._write(write))

    def _prepare(
        self, spec: CollectionSpec, objects: list[MemoryObject], wide: FloatArray64
    ) -> tuple[list[tuple[Any, ...]], _Postings, FloatArray]:
        """Encode and tokenise a batch before the transaction.

        So a bad value aborts before any write and the write lock is held for the writes alone.

        Each row is (id, filterable text[] JSON, body, vector (empty: kept in the row's
        keyword block), *filterable column values); the postings number the objects 0..n-1 in
        batch order, as do the vectors (float32).
        """
        known = {p.name: p.type for p in spec.properties}
        indexed = _columns(spec)
        encoded: list[str] = []
        stored: list[dict[str, Any]] = []
        for obj in objects:
            props: dict[str, Any] = {}
            for key, value in obj.properties.items():
                if value is None:
                    continue
                ptype = known[key]
                if ptype == "date":
                    value = normalise_date(value)
                elif ptype == "number":
                    value = float(value)
                elif ptype == "text[]":
                    value = list(value)
                props[key] = value
            try:
                props_json = json.dumps(props, ensure_ascii=False, allow_nan=False)
                props_json.encode("utf-8")
            except (ValueError, UnicodeEncodeError) as exc:
                raise InvalidInputError(
                    f"object {obj.id}: properties cannot be stored: {exc}"
                ) from None
            encoded.append(props_json)
            stored.append(props)
        too_large = np.abs(wide).max(axis=1, initial=0.0) > _FLOAT32_MAX
        if too_large.any():
            first = objects[int(np.argmax(too_large))].id
            raise InvalidInputError(f"object {first}: vector values exceed the float32 range")
        vectors = wide.astype(np.float32)
        names = [prop.name for prop in indexed]
        arrays = bool(_array_props(spec))
        rows = [
            (
                canonical_id(obj.id),
                filter_json(spec, props) if arrays else None,
                encode_body(props_json),
                b"",
                *[_column_value(props.get(name)) for name in names],
            )
            for obj, props, props_json in zip(objects, stored, encoded, strict=True)
        ]
        return rows, text_postings(spec, stored, 0), vectors

    def _delete_rids(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None, rids: list[int]
    ) -> int:
        if not rids:
            return 0
        # The rows leave their keyword blocks (rewritten without them) in the same
        # transaction, so nothing of a deleted row stays in the file.
        PartitionBlocks(conn, spec.name, user or "", len(spec.searchable)).remove(
            np.asarray(rids, dtype=np.int64)
        )
        conn.execute(
            f"DELETE FROM {_table(spec.name)} WHERE rid IN (SELECT value FROM json_each(?))",
            (json.dumps(rids),),
        )
        _bump(conn, spec.name, user)
        return len(rids)

    def _delete(self, spec: CollectionSpec, ids: list[str], user: str | None) -> int:
        obj_t = _table(spec.name)
        wanted = [str(uuid.UUID(i)) for i in ids]

        def delete(conn: sqlite3.Connection) -> int:
            rids = [r[0] for r in _by_ids(conn, obj_t, user, wanted, "rid")]
            return self._delete_rids(conn, spec, user, rids)

        return self._write(delete)

    def _delete_where(self, spec: CollectionSpec, where: list[Where], user: str | None) -> int:
        obj_t = _table(spec.name)
        cond, params = _filter_sql(spec, where)

        def delete(conn: sqlite3.Connection) -> int:
            rids = [
                r[0]
                for r in conn.execute(
                    f"SELECT rid FROM {obj_t} WHERE user IS ?{cond}", (user, *params)
                )
            ]
            return self._delete_rids(conn, spec, user, rids)

        return self._write(delete)

    def _delete_user(self, spec: CollectionSpec, user: str) -> int:
        table = _table(spec.name)

        def delete(conn: sqlite3.Connection) -> int:
            (count,) = conn.execute(
                f"SELECT count(*) FROM {table} WHERE user IS ?", (user,)
            ).fetchone()
            conn.execute(f"DELETE FROM {table} WHERE user IS ?", (user,))
            # The partition's bookkeeping row names the user: it goes too. A cache of the
            # partition in any process then finds no token and reloads (empty), and a later
            # write starts a new token and lineage.
            conn.execute(
                "DELETE FROM amem_generations WHERE collection = ? AND scope = ?",
                (spec.name, user),
            )
            conn.execute(
                "DELETE FROM amem_axes WHERE collection = ? AND scope = ?", (spec.name, user)
            )
            _blocks.drop_partition(conn, spec.name, user)
            return int(count)

        removed = self._write(delete)
        with self._lock:
            self._cache.drop(spec.name, user)
        return removed

    # -- reads ----------------------------------------------------------------------------

    def _get(
        self, spec: CollectionSpec, id: str, user: str | None, include_vector: bool
    ) -> StoredObject | None:
        obj_t = _table(spec.name)
        with self._read() as conn:
            row = conn.execute(
                f"SELECT id, body, rid FROM {obj_t} WHERE user IS ? AND id = ?",
                (user, str(uuid.UUID(id))),
            ).fetchone()
            if row is None:
                return None
            vector = None
            if include_vector:
                rids = np.asarray([row[2]], dtype=np.int64)
                vector = row_vectors(conn, spec.name, obj_t, user, rids, self.dims)[0]
        return _stored(row, vector)

    def _list(self, spec: CollectionSpec, user: str | None, listing: Listing) -> list[StoredObject]:
        obj_t = _table(spec.name)
        cond, params = _filter_sql(spec, listing.where)
        order = "id ASC"
        if listing.sort_by is not None:
            direction = "DESC" if listing.descending else "ASC"
            key = _prop_sql(spec, listing.sort_by)
            if spec.prop(listing.sort_by).type == "text":
                key = f"amem_text_key({key})"
            # NULLs (objects without the property) come first ascending, last descending,
            # as Weaviate's comparator puts them.
            order = f"{key} {direction}, id ASC"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT id, body FROM {obj_t} WHERE user IS ?{cond} "
                f"ORDER BY {order} LIMIT ? OFFSET ?",
                (user, *params, listing.limit, listing.offset),
            ).fetchall()
        return [_stored(row) for row in rows]

    def _page_after(self, spec: CollectionSpec, user: str | None, page: Page) -> list[StoredObject]:
        obj_t = _table(spec.name)
        cond, params = _filter_sql(spec, page.where)
        keyset = "" if page.after is None else " AND id > ?"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT id, body, rid FROM {obj_t} WHERE user IS ?{keyset}{cond} "
                "ORDER BY id LIMIT ?",
                (user, *([] if page.after is None else [page.after]), *params, page.limit),
            ).fetchall()
            if not page.include_vector:
                return [_stored(row) for row in rows]
            rids = np.asarray(sorted(r[2] for r in rows), dtype=np.int64)
            held = row_vectors(conn, spec.name, obj_t, user, rids, self.dims)
        at = {rid: i for i, rid in enumerate(rids.tolist())}
        return [_stored(row, held[at[row[2]]]) for row in rows]

    def _count(self, spec: CollectionSpec, user: str | None, where: list[Where]) -> int:
        obj_t = _table(spec.name)
        cond, params = _filter_sql(spec, where)
        with self._read() as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {obj_t} WHERE user IS ?{cond}", (user, *params)
            ).fetchone()
        return int(row[0])

    def _users(self, spec: CollectionSpec) -> list[str]:
        obj_t = _table(spec.name)
        with self._read() as conn:
            return [
                r[0]
                for r in conn.execute(
                    f"SELECT DISTINCT user FROM {obj_t} WHERE user IS NOT NULL ORDER BY user"
                )
            ]

    # -- hybrid search --------------------------------------------------------------------

    def _hybrid(
        self, spec: CollectionSpec, user: str | None, search: HybridQuery
    ) -> list[SearchHit]:
        vector_weight, keyword_weight = fusion_weights(search.alpha)
        obj_t = _table(spec.name)
        with self._read() as conn:
            part = self._cache.partition(conn, spec, user)
            if part.live == 0:
                return []
            allowed = part.alive()
            if search.where:
                matching = self._matching(conn, spec, user, part, search.where)
                allowed = matching if allowed is None else matching & allowed
            # A side runs when its float32 weight is not zero, as on the server (alpha is
            # sent as a float32, so a tiny alpha is a pure keyword search there too).
            keyword = _NO_HITS
            counts = query_term_counts(search.query) if keyword_weight > 0 else {}
            if counts and spec.searchable:
                index = self._cache.keyword(conn, spec, user, part)
                keyword = _bm25_top(
                    part.live, index, counts, allowed, keyword_candidates(search.limit)
                )
            dense = _NO_HITS
            if vector_weight > 0:
                dense = _cosine_top(part, search.vector, allowed, vector_candidates(search.limit))
            sides: list[tuple[float, IntArray, FloatArray]] = []
            if vector_weight > 0:
                sides.append((float(vector_weight), *dense))
            if keyword_weight > 0:
                sides.append((float(keyword_weight), *keyword))
            keys, fused, secondary = fuse_arrays(sides)
            if keys.size == 0:
                return []
            # Ids and properties of the candidates only: the cache holds neither.
            rows = conn.execute(
                # CROSS JOIN pins the plan to rowid lookups instead of a scan of the user's rows.
                f"SELECT o.rid, o.id, o.body FROM json_each(?) AS j "
                f"CROSS JOIN {obj_t} AS o ON o.rid = j.value WHERE o.user IS ?",
                (json.dumps(part.rowids[keys].tolist()), user),
            ).fetchall()
            self._cache.warm(spec, user, part)
        found = {rid: (oid, body) for rid, oid, body in rows}
        if len(found) != keys.size:
            raise StoreError(f"the cached index of {spec.name!r} names rows that are gone")
        candidates = [found[rid] for rid in part.rowids[keys].tolist()]
        chosen = order_fused(fused, secondary, [c[0] for c in candidates], search.limit)
        keyword_of = dict(zip(keyword[0].tolist(), keyword[1].tolist(), strict=True))
        vector_of = dict(zip(dense[0].tolist(), dense[1].tolist(), strict=True))
        return [
            SearchHit(
                id=candidates[c][0],
                properties=decode_body(candidates[c][1]),
                score=float(fused[c]),
                keyword_score=keyword_of.get(int(keys[c])),
                vector_score=vector_of.get(int(keys[c])),
            )
            for c in chosen
        ]

    def _matching(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        part: _Partition,
        where: list[Where],
    ) -> npt.NDArray[np.bool_]:
        """Return which slots match ``where``: on the cached columns, or by SQL."""
        if evaluable(spec, where):
            columns = {c.prop: self._cache.column(conn, spec, user, part, c.prop) for c in where}
            return _filter_mask(columns, spec, where)
        cond, params = _filter_sql(spec, where)
        # One JSON array instead of a Python tuple per matching row.
        (matching,) = conn.execute(
            f"SELECT json_group_array(rid) FROM {_table(spec.name)} WHERE user IS ?{cond}",
            (user, *params),
        ).fetchone()
        rids = np.asarray(json.loads(matching), dtype=np.int64)
        allowed = np.zeros(part.slots, dtype=bool)
        # Every matching row is a live slot of the current partition (rids ascending).
        allowed[np.searchsorted(part.rowids, rids)] = True
        return allowed

"""The embedded backend: one SQLite file for durability, numpy for ranking.

Layout: ``<path>/store.sqlite3`` (WAL mode) holds a catalogue of collection schemas and, per
collection, an object table ``o_<Name>`` (id, user, JSON properties, float32 vector, and the
term counts of the searchable properties, tokenised once at write time). Searches run over an
in-memory index per (collection, user): a unit-vector matrix for cosine similarity and
per-property BM25 postings, both rebuilt when the partition's generation token (replaced by
every write transaction, from this or any other process) changes.

Ranking follows Weaviate v1.32.9 (BlockMax-WAND BM25 per property, ``relativeScoreFusion``,
its candidate limits and tie order): the rules live in ``agentic_memory.store.ranking``; ``docs/storage.md``
cites the server source and says why BM25 is computed in numpy rather than by SQLite FTS5.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import itertools
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from agentic_memory.store import ranking
from agentic_memory.store.base import MemoryStore, absent_properties
from agentic_memory.store.private import private_dir, private_file, tighten
from agentic_memory.store.ranking import (
    BM25_B,
    BM25_K1,
    HYBRID_CANDIDATES,
    WEAVIATE_EN_STOPWORDS,
    bm25_idf,
    fuse_arrays,
    fusion_weights,
    keyword_candidates,
    order_fused,
    per_property_limit,
    query_term_counts,
    query_terms,
    text_sort_key,
    tokenize,
    top_positions,
    top_rows,
    vector_candidates,
)
from agentic_memory.store.types import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    Property,
    SchemaConflictError,
    SearchHit,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    UpsertResult,
    Where,
)

DB_FILENAME = "store.sqlite3"
SCHEMA_VERSION = 2
_ZEROED_KEY = "free_space_zeroed"
"""``amem_meta`` key of a store file written with ``secure_delete`` since its creation."""

HYBRID_MIN_CANDIDATES = HYBRID_CANDIDATES
"""Kept for existing imports; see ``agentic_memory.store.ranking.HYBRID_CANDIDATES``."""

_BUSY_RETRIES = 8
_BUSY_TIMEOUT_MS = 30_000
_CACHE_ENTRIES = 16
EXACT_VECTOR_ROWS = 20_000
"""Up to this many rows a vector search scores every row; above, it runs in two passes."""
COARSE_DIMS = 64
COARSE_RERANK = 20
"""The coarse pass keeps ``COARSE_RERANK * candidates`` rows (at least 2000) for exact cosine."""
_FLOAT32_MAX = float(np.finfo(np.float32).max)

T = TypeVar("T")
FloatArray = npt.NDArray[np.float32]
FloatArray64 = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_NO_HITS: tuple[IntArray, FloatArray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))

__all__ = [
    "BM25_B",
    "BM25_K1",
    "HYBRID_MIN_CANDIDATES",
    "WEAVIATE_EN_STOPWORDS",
    "EmbeddedStore",
    "fuse_relative_score",
    "normalise_date",
    "query_terms",
    "tokenize",
]


_TERM_ENTRY = np.dtype([("hash", "<i8"), ("tf", "<u4"), ("prop", "<u2")])


@functools.lru_cache(maxsize=1 << 17)
def term_hash(term: str) -> int:
    """Return the signed 64-bit id a term is stored under (BLAKE2b; collisions ~2^-64)."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def encode_terms(
    spec: CollectionSpec, objects: list[dict[str, Any]]
) -> tuple[list[bytes], list[bytes]]:
    """Tokenise the searchable properties of a batch of objects once, at write time.

    Returns, per object, the token count of each searchable property (uint32 each) and one
    (term hash, term frequency, property index) entry per distinct term and property.
    """
    searchable = spec.searchable
    lengths: list[int] = []
    hashes: list[int] = []
    frequencies: list[int] = []
    props: list[int] = []
    ends: list[int] = []
    # Whole batch in plain lists, then three array fills: numpy calls per object (and
    # concatenating structured arrays) cost more than the tokenising itself.
    for properties in objects:
        for p, name in enumerate(searchable):
            value = properties.get(name) or ""
            tokens = tokenize(" ".join(value) if isinstance(value, list) else value)
            lengths.append(len(tokens))
            counts = collections.Counter(tokens)
            hashes.extend(map(term_hash, counts))
            frequencies.extend(counts.values())
            props.extend(itertools.repeat(p, len(counts)))
        ends.append(len(hashes))
    entries = np.empty(len(hashes), dtype=_TERM_ENTRY)
    entries["hash"] = hashes
    entries["tf"] = frequencies
    entries["prop"] = props
    entry_bytes = entries.tobytes()
    length_bytes = np.asarray(lengths, dtype="<u4").tobytes()
    width, size = 4 * len(searchable), _TERM_ENTRY.itemsize
    starts = [0, *ends][:-1]
    return (
        [length_bytes[i * width : (i + 1) * width] for i in range(len(objects))],
        [entry_bytes[a * size : b * size] for a, b in zip(starts, ends, strict=True)],
    )


@dataclass
class _PropertyPostings:
    """One searchable property's postings: (term, row) pairs sorted by term hash, then row."""

    hashes: IntArray
    """Sorted hashes of the terms the property holds (see ``term_hash``); term i's postings
    are ``indptr[i]:indptr[i+1]``, so a term's document frequency is their number."""
    indptr: IntArray
    docs: IntArray
    """Row index of each posting; within a term, in row order."""
    tf: FloatArray
    """The term's count in the property of the row."""
    weight: FloatArray64
    """``tf / (tf + k1 (1 - b + b len / avg_len))``, Weaviate's BlockMax term weight without a
    (k1 + 1) factor; a query multiplies it by each term's idf."""


@dataclass
class _KeywordIndex:
    """BM25 postings of one partition, per searchable property (as Weaviate keeps them)."""

    props: list[_PropertyPostings]
    lengths: FloatArray
    """(rows, searchable properties): token counts, for the length normalisation."""
    average: FloatArray64
    """Per property: the mean token count of the rows that have at least one token in it."""


@dataclass
class _Partition:
    token: str | None
    lineage: str | None
    """Kept by writes that only add or delete rows: the cache is then updated, not reloaded."""
    rowids: IntArray
    ids: list[str]
    unit: FloatArray
    """Rows scaled to unit length (zero rows stay zero), so a dot product is the cosine."""
    keyword: _KeywordIndex | None = None
    """Built on the first keyword search, from the same generation as the vectors."""
    coarse: _CoarseIndex | None = None
    """Built on the first vector search of a large partition."""


@dataclass
class _CoarseIndex:
    """A PCA projection of a large partition's unit vectors, for a first, cheaper pass."""

    mean: FloatArray
    basis: FloatArray
    """(COARSE_DIMS, dims): the leading principal axes."""
    projected: FloatArray
    """(rows, COARSE_DIMS): the centred unit vectors on those axes."""


class EmbeddedStore(MemoryStore):
    """A durable, serverless store in one directory; safe for several processes at once."""

    backend = "embedded"

    def __init__(self, path: str | Path, *, dims: int) -> None:
        """Open (creating if needed) the store in directory ``path`` for ``dims``-sized vectors."""
        super().__init__(dims=dims)
        if not isinstance(path, str | Path) or str(path) == "":
            raise InvalidInputError(f"store path must be a non-empty path, got {path!r}")
        self.path = Path(path).expanduser()
        if self.path.exists() and not self.path.is_dir():
            raise InvalidInputError(f"store path {self.path} exists and is not a directory")
        # Memories are private: the folder 0700, the database and its WAL files 0600.
        try:
            private_dir(self.path)
            private_file(self.path / DB_FILENAME)
        except OSError as exc:
            raise StoreError(f"cannot create the embedded store at {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        self._cache: collections.OrderedDict[tuple[str, str], _Partition] = (
            collections.OrderedDict()
        )
        conn = sqlite3.connect(
            str(self.path / DB_FILENAME),
            isolation_level=None,
            check_same_thread=False,
            timeout=_BUSY_TIMEOUT_MS / 1000,
        )
        self._conn: sqlite3.Connection | None = conn
        try:
            # Text sorts like Weaviate's: case-insensitively (agentic_memory.store.ranking.text_sort_key).
            conn.create_function("amem_text_key", 1, _sql_text_key, deterministic=True)
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            # Deleted rows and freed pages are overwritten with zeros, whatever the SQLite
            # build's default: forgotten memories must not stay readable in the file.
            conn.execute("PRAGMA secure_delete = ON")
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")
            self._write(self._create_catalogue)
            # Files made by an older version, before the database file was created private.
            tighten(self.path / (DB_FILENAME + suffix) for suffix in ("", "-wal", "-shm"))
        except BaseException:
            conn.close()
            self._conn = None
            raise

    # -- connection and transactions ------------------------------------------------------

    def close(self) -> None:
        """Close the database connection; later calls raise ``StoreError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._cache.clear()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the embedded store at {self.path} is closed")
        return self._conn

    def _retry(self, fn: Callable[[], T]) -> T:
        """Run ``fn``, retrying while another process holds the write lock past busy_timeout."""
        delay = 0.05
        for attempt in range(_BUSY_RETRIES):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                msg = str(exc)
                if ("locked" not in msg and "busy" not in msg) or attempt == _BUSY_RETRIES - 1:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in one IMMEDIATE transaction: all of it is written or none of it."""
        with self._lock:
            conn = self._db()

            def attempt() -> T:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                return result

            try:
                return self._retry(attempt)
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Give a connection for reads inside one snapshot (a deferred transaction)."""
        with self._lock:
            conn = self._db()
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    @staticmethod
    def _create_catalogue(conn: sqlite3.Connection) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS amem_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )
        row = conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO amem_meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            # Written with secure_delete from the start: no stale text in its free space.
            conn.execute(f"INSERT INTO amem_meta (key, value) VALUES ('{_ZEROED_KEY}', '1')")
        elif int(row[0]) == 1:
            _migrate_from_v1(conn)
        elif int(row[0]) != SCHEMA_VERSION:
            raise SchemaConflictError(
                f"store file has layout version {row[0]}, this code reads {SCHEMA_VERSION}"
            )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS amem_collections ("
            "name TEXT PRIMARY KEY, spec TEXT NOT NULL, dims INTEGER NOT NULL, "
            "created_at TEXT NOT NULL)"
        )
        # One random token per (collection, user) that every write replaces: a vector cache
        # built under another token is stale, whichever process wrote. The lineage changes
        # only when rows are replaced (or rids could be reused), so a cache of the same
        # lineage holds rows that are unchanged or deleted, and lacks only larger rids.
        conn.execute(
            "CREATE TABLE IF NOT EXISTS amem_generations ("
            "collection TEXT NOT NULL, scope TEXT NOT NULL, token TEXT NOT NULL, "
            "lineage TEXT NOT NULL DEFAULT '', PRIMARY KEY (collection, scope))"
        )
        _retokenize(conn)

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
            obj = _table(spec.name)
            columns = "".join(f", {_column(p.name)}" for p in _columns(spec))
            conn.execute(
                f"CREATE TABLE {obj} (rid INTEGER PRIMARY KEY, id TEXT NOT NULL, user TEXT, "
                "props TEXT NOT NULL, vector BLOB NOT NULL, "
                f"lengths BLOB NOT NULL, terms BLOB NOT NULL{columns})"
            )
            conn.execute(f'CREATE INDEX "ix_{spec.name}_user_id" ON {obj} (user, id)')
            _index_columns(conn, spec)
            _compound_indexes(conn, spec)
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

        self._write(drop)
        with self._lock:
            for key in [k for k in self._cache if k[0] == name]:
                del self._cache[key]

    # -- writes ---------------------------------------------------------------------------

    def _upsert(
        self,
        spec: CollectionSpec,
        objects: list[MemoryObject],
        user: str | None,
        vectors: FloatArray64,
    ) -> UpsertResult:
        rows = self._prepare(spec, objects, vectors)
        obj_t = _table(spec.name)
        columns = [_column(p.name) for p in _columns(spec)]
        names = "".join(f", {c}" for c in columns)
        marks = ", ?" * len(columns)
        updates = "".join(f", {c} = ?" for c in columns)

        def write(conn: sqlite3.Connection) -> None:
            # One lookup for the whole batch, then one executemany per statement: a query
            # per object was most of the write time for large batches.
            existing = dict(
                conn.execute(
                    f"SELECT id, rid FROM {obj_t} WHERE user IS ? "
                    "AND id IN (SELECT value FROM json_each(?))",
                    (user, json.dumps([row[0] for row in rows])),
                ).fetchall()
            )
            conn.executemany(
                f"INSERT INTO {obj_t} (id, user, props, vector, lengths, terms{names}) "
                f"VALUES (?, ?, ?, ?, ?, ?{marks})",
                [(oid, user, *rest) for oid, *rest in rows if oid not in existing],
            )
            conn.executemany(
                f"UPDATE {obj_t} SET props = ?, vector = ?, lengths = ?, terms = ?{updates} "
                "WHERE rid = ?",
                [(*rest, existing[oid]) for oid, *rest in rows if oid in existing],
            )
            # Replaced rows change in place (same rid): a cache cannot be extended past that.
            _bump(conn, spec.name, user, keeps_lineage=not existing)

        self._write(write)
        return UpsertResult(ids=[obj.id for obj in objects])

    def _insert(
        self,
        spec: CollectionSpec,
        objects: list[MemoryObject],
        user: str | None,
        vectors: FloatArray64,
        unless: list[Where],
    ) -> UpsertResult:
        rows = self._prepare(spec, objects, vectors)
        obj_t = _table(spec.name)
        columns = [_column(p.name) for p in _columns(spec)]
        names = "".join(f", {c}" for c in columns)
        marks = ", ?" * len(columns)
        guard, guard_params = _filter_sql(spec, unless)

        def write(conn: sqlite3.Connection) -> None:
            # Checks and rows in one IMMEDIATE transaction: no other writer, in this process
            # or another, can come between them.
            existing = [
                r[0]
                for r in conn.execute(
                    f"SELECT id FROM {obj_t} WHERE user IS ? "
                    "AND id IN (SELECT value FROM json_each(?))",
                    (user, json.dumps([row[0] for row in rows])),
                )
            ]
            if existing:
                raise ConflictError(
                    f"{len(existing)} object(s) already exist in {spec.name!r}: "
                    f"{', '.join(sorted(existing)[:3])}",
                    existing=existing,
                )
            if unless:
                found = conn.execute(
                    f"SELECT id FROM {obj_t} WHERE user IS ?{guard} LIMIT 1", (user, *guard_params)
                ).fetchone()
                if found is not None:
                    raise ConflictError(
                        f"object {found[0]} of {spec.name!r} matches the insert's guard",
                        guarded=True,
                    )
            conn.executemany(
                f"INSERT INTO {obj_t} (id, user, props, vector, lengths, terms{names}) "
                f"VALUES (?, ?, ?, ?, ?, ?{marks})",
                [(oid, user, *rest) for oid, *rest in rows],
            )
            _bump(conn, spec.name, user, keeps_lineage=True)

        self._write(write)
        return UpsertResult(ids=[obj.id for obj in objects])

    def _prepare(
        self, spec: CollectionSpec, objects: list[MemoryObject], wide: FloatArray64
    ) -> list[tuple[Any, ...]]:
        """Encode a batch before the transaction, so a bad value aborts before any write.

        Each row is (id, props JSON, vector, lengths, terms, *filterable column values).
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
        lengths, terms = encode_terms(spec, stored)
        return [
            (
                str(uuid.UUID(obj.id)),
                props_json,
                vector.tobytes(),
                length,
                term,
                *(_column_value(props.get(prop.name)) for prop in indexed),
            )
            for obj, props, props_json, vector, length, term in zip(
                objects, stored, encoded, vectors, lengths, terms, strict=True
            )
        ]

    def _delete_rids(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None, rids: list[int]
    ) -> int:
        if not rids:
            return 0
        table = _table(spec.name)
        # SQLite gives a new row the table's largest rid plus one, so rids are never reused
        # unless the largest row goes: only then may a cached partition mistake a new row for
        # one it holds, and the lineage must change.
        (largest,) = conn.execute(f"SELECT max(rid) FROM {table}").fetchone()
        _bump(conn, spec.name, user, keeps_lineage=largest not in rids)
        conn.execute(
            f"DELETE FROM {table} WHERE rid IN (SELECT value FROM json_each(?))",
            (json.dumps(rids),),
        )
        return len(rids)

    def _delete(self, spec: CollectionSpec, ids: list[str], user: str | None) -> int:
        obj_t = _table(spec.name)
        wanted = json.dumps([str(uuid.UUID(i)) for i in ids])

        def delete(conn: sqlite3.Connection) -> int:
            rids = [
                r[0]
                for r in conn.execute(
                    f"SELECT rid FROM {obj_t} WHERE user IS ? "
                    "AND id IN (SELECT value FROM json_each(?))",
                    (user, wanted),
                )
            ]
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
            return int(count)

        removed = self._write(delete)
        with self._lock:
            self._cache.pop((spec.name, user), None)
        return removed

    def erase_deleted(self) -> bool:
        """Make deleted data unrecoverable from the store's files.

        Deletions already overwrite their rows with zeros (``secure_delete``); this also
        removes the older copies of changed pages from the write-ahead log (a TRUNCATE
        checkpoint), and vacuums a store file written by a version without secure deletion
        once, since its free space may still hold text deleted back then.

        Returns:
            False when another process kept the log from being emptied (it is emptied at
            a later checkpoint); True otherwise.
        """
        with self._lock:
            conn = self._db()
            try:
                row = conn.execute(
                    "SELECT value FROM amem_meta WHERE key = ?", (_ZEROED_KEY,)
                ).fetchone()
                if row is None:
                    self._retry(lambda: conn.execute("VACUUM"))
                    self._write(
                        lambda c: c.execute(
                            "INSERT OR REPLACE INTO amem_meta (key, value) VALUES (?, '1')",
                            (_ZEROED_KEY,),
                        )
                    )
                busy = 1
                for _ in range(_BUSY_RETRIES):
                    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                    if not busy:
                        break
                    time.sleep(0.1)
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return not busy

    # -- reads ----------------------------------------------------------------------------

    def _get(
        self, spec: CollectionSpec, id: str, user: str | None, include_vector: bool
    ) -> StoredObject | None:
        obj_t = _table(spec.name)
        with self._read() as conn:
            row = conn.execute(
                f"SELECT id, props, vector FROM {obj_t} WHERE user IS ? AND id = ?",
                (user, str(uuid.UUID(id))),
            ).fetchone()
        if row is None:
            return None
        return _stored(row, include_vector)

    def _list(
        self,
        spec: CollectionSpec,
        user: str | None,
        where: list[Where],
        limit: int,
        offset: int,
        sort_by: str | None,
        descending: bool,
    ) -> list[StoredObject]:
        obj_t = _table(spec.name)
        cond, params = _filter_sql(spec, where)
        order = "id ASC"
        if sort_by is not None:
            direction = "DESC" if descending else "ASC"
            key = _prop_sql(spec, sort_by)
            if spec.prop(sort_by).type == "text":
                key = f"amem_text_key({key})"
            # NULLs (objects without the property) come first ascending, last descending,
            # as Weaviate's comparator puts them.
            order = f"{key} {direction}, id ASC"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT id, props, NULL FROM {obj_t} WHERE user IS ?{cond} "
                f"ORDER BY {order} LIMIT ? OFFSET ?",
                (user, *params, limit, offset),
            ).fetchall()
        return [_stored(row, False) for row in rows]

    def _page_after(
        self,
        spec: CollectionSpec,
        user: str | None,
        where: list[Where],
        after: str | None,
        limit: int,
        include_vector: bool,
    ) -> list[StoredObject]:
        obj_t = _table(spec.name)
        cond, params = _filter_sql(spec, where)
        keyset = "" if after is None else " AND id > ?"
        vector = "vector" if include_vector else "NULL"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT id, props, {vector} FROM {obj_t} WHERE user IS ?{keyset}{cond} "
                "ORDER BY id LIMIT ?",
                (user, *([] if after is None else [after]), *params, limit),
            ).fetchall()
        return [_stored(row, include_vector) for row in rows]

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
        self,
        spec: CollectionSpec,
        query: str,
        vector: list[float],
        alpha: float,
        limit: int,
        user: str | None,
        where: list[Where],
    ) -> list[SearchHit]:
        vector_weight, keyword_weight = fusion_weights(alpha)
        obj_t = _table(spec.name)
        with self._read() as conn:
            part = self._partition(conn, spec, user)
            if part.rowids.size == 0:
                return []
            allowed: npt.NDArray[np.bool_] | None = None
            if where:
                cond, params = _filter_sql(spec, where)
                # One JSON array instead of a Python tuple per matching row.
                (matching,) = conn.execute(
                    f"SELECT json_group_array(rid) FROM {obj_t} WHERE user IS ?{cond}",
                    (user, *params),
                ).fetchone()
                rids = np.asarray(json.loads(matching), dtype=np.int64)
                # part.rowids is sorted (loaded ORDER BY rid) and holds every matching rid.
                allowed = np.zeros(part.rowids.size, dtype=bool)
                allowed[np.searchsorted(part.rowids, rids)] = True
            # A side runs when its float32 weight is not zero, as on the server (alpha is
            # sent as a float32, so a tiny alpha is a pure keyword search there too).
            keyword = _NO_HITS
            counts = query_term_counts(query) if keyword_weight > 0 else {}
            if counts and spec.searchable:
                if part.keyword is None:
                    part.keyword = self._build_keyword_index(conn, spec, user, part)
                keyword = _bm25_top(part, part.keyword, counts, allowed, keyword_candidates(limit))
            dense = _NO_HITS
            if vector_weight > 0:
                dense = _cosine_top(part, vector, allowed, vector_candidates(limit))
            sides: list[tuple[float, IntArray, FloatArray]] = []
            if vector_weight > 0:
                sides.append((float(vector_weight), *dense))
            if keyword_weight > 0:
                sides.append((float(keyword_weight), *keyword))
            keys, fused, secondary = fuse_arrays(sides)
            chosen = order_fused(fused, secondary, [part.ids[k] for k in keys.tolist()], limit)
            top = keys[chosen].tolist()
            scores = fused[chosen].tolist()
            if not top:
                return []
            rows = conn.execute(
                # CROSS JOIN pins the plan to rowid lookups instead of a scan of the user's rows.
                f"SELECT o.rid, o.props FROM json_each(?) AS j "
                f"CROSS JOIN {obj_t} AS o ON o.rid = j.value WHERE o.user IS ?",
                (json.dumps([int(part.rowids[i]) for i in top]), user),
            ).fetchall()
        props = dict(rows)
        keyword_of = dict(zip(keyword[0].tolist(), keyword[1].tolist(), strict=True))
        vector_of = dict(zip(dense[0].tolist(), dense[1].tolist(), strict=True))
        return [
            SearchHit(
                id=part.ids[i],
                properties=json.loads(props[int(part.rowids[i])]),
                score=score,
                keyword_score=keyword_of.get(i),
                vector_score=vector_of.get(i),
            )
            for i, score in zip(top, scores, strict=True)
        ]

    def _partition(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None
    ) -> _Partition:
        """Return the in-memory index of a partition, brought up to date with the store.

        A partition whose rows were only added or deleted since it was cached is updated in
        place; otherwise it is reloaded. Either way the result equals a fresh load.
        """
        key = (spec.name, user or "")
        row = conn.execute(
            "SELECT token, lineage FROM amem_generations WHERE collection = ? AND scope = ?",
            key,
        ).fetchone()
        token, lineage = (row[0], row[1]) if row else (None, None)
        cached = self._cache.get(key)
        if cached is not None and cached.token == token and token is not None:
            self._cache.move_to_end(key)
            return cached
        if cached is not None and lineage and cached.lineage == lineage:
            entry = self._extend(conn, spec, user, cached, token)
        else:
            rids, ids, unit, _ = self._load_rows(conn, spec, user, after=0, terms=False)
            entry = _Partition(token=token, lineage=lineage, rowids=rids, ids=ids, unit=unit)
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return entry

    def _load_rows(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        *,
        after: int,
        terms: bool,
    ) -> tuple[IntArray, list[str], FloatArray, tuple[list[bytes], list[bytes]]]:
        """Read the partition's rows with ``rid > after`` in rid order.

        Returns their rids, ids, unit vectors and, with ``terms``, their length and term blobs.
        """
        rids: list[int] = []
        ids: list[str] = []
        blobs: list[bytes] = []
        length_blobs: list[bytes] = []
        term_blobs: list[bytes] = []
        extra = ", lengths, terms" if terms else ""
        for rid, oid, blob, *stats in conn.execute(
            f"SELECT rid, id, vector{extra} FROM {_table(spec.name)} "
            "WHERE user IS ? AND rid > ? ORDER BY rid",
            (user, after),
        ):
            rids.append(rid)
            ids.append(oid)
            blobs.append(blob)
            if terms:
                length_blobs.append(stats[0])
                term_blobs.append(stats[1])
        matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rids), self.dims)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        unit = np.ascontiguousarray(matrix / norms, dtype=np.float32)
        return np.asarray(rids, dtype=np.int64), ids, unit, (length_blobs, term_blobs)

    def _extend(
        self,
        conn: sqlite3.Connection,
        spec: CollectionSpec,
        user: str | None,
        cached: _Partition,
        token: str | None,
    ) -> _Partition:
        """Return ``cached`` without its deleted rows and with the rows added since.

        Under the same lineage no cached row was replaced and no rid was reused (see
        ``_bump``): the cached rows still present are unchanged, and every new row has a
        larger rid than all of them. Dropping the deleted ones and appending the new ones
        keeps the arrays in rid order, as a fresh load has them.
        """
        largest = int(cached.rowids[-1]) if cached.rowids.size else 0
        table = _table(spec.name)
        still_there = np.fromiter(
            (
                r[0]
                for r in conn.execute(
                    f"SELECT rid FROM {table} WHERE user IS ? AND rid <= ? ORDER BY rid",
                    (user, largest),
                )
            ),
            dtype=np.int64,
        )
        keep = np.isin(cached.rowids, still_there, assume_unique=True)
        rids, ids, unit, (length_blobs, term_blobs) = self._load_rows(
            conn, spec, user, after=largest, terms=cached.keyword is not None
        )
        kept_ids = [i for i, k in zip(cached.ids, keep.tolist(), strict=True) if k]
        keyword = None
        if cached.keyword is not None:
            postings = _drop_rows(_as_postings(cached.keyword), keep)
            added = _postings(length_blobs, term_blobs, len(spec.searchable), len(kept_ids))
            keyword = _finish(_merge_all(postings, added))
        # The PCA shortlist is rebuilt on demand: its sample would differ from a fresh load's.
        return _Partition(
            token=token,
            lineage=cached.lineage,
            rowids=np.concatenate((cached.rowids[keep], rids)),
            ids=kept_ids + ids,
            unit=np.concatenate((cached.unit[keep], unit)),
            keyword=keyword,
        )

    def _build_keyword_index(
        self, conn: sqlite3.Connection, spec: CollectionSpec, user: str | None, part: _Partition
    ) -> _KeywordIndex:
        """Assemble per-property BM25 postings from the term counts stored with each row."""
        length_blobs: list[bytes] = []
        term_blobs: list[bytes] = []
        for lengths_blob, terms_blob in conn.execute(
            f"SELECT lengths, terms FROM {_table(spec.name)} WHERE user IS ? ORDER BY rid",
            (user,),
        ):
            length_blobs.append(lengths_blob)
            term_blobs.append(terms_blob)
        if len(term_blobs) != part.rowids.size:
            # Cannot happen inside one snapshot; refuse rather than misalign postings.
            raise StoreError("partition changed while its keyword index was built")
        return _finish(_postings(length_blobs, term_blobs, len(spec.searchable), 0))


@dataclass
class _Pairs:
    """One property's (term, row) pairs sorted by term hash, then row."""

    pair_hash: IntArray
    docs: IntArray
    tf: FloatArray


@dataclass
class _Postings:
    """Every searchable property's pairs and the rows' lengths: a keyword index's raw material."""

    props: list[_Pairs]
    lengths: FloatArray


def _postings(
    length_blobs: list[bytes], term_blobs: list[bytes], width: int, first_row: int
) -> _Postings:
    """Decode stored term counts of consecutive rows numbered from ``first_row``."""
    n = len(term_blobs)
    lengths = np.frombuffer(b"".join(length_blobs), dtype="<u4").reshape(n, width)
    entries = np.frombuffer(b"".join(term_blobs), dtype=_TERM_ENTRY)
    per_row = np.fromiter(map(len, term_blobs), dtype=np.int64, count=n)
    doc = np.repeat(
        np.arange(first_row, first_row + n, dtype=np.int64), per_row // _TERM_ENTRY.itemsize
    )
    prop = entries["prop"]
    props: list[_Pairs] = []
    for p in range(width):
        mine = prop == p
        hashes = np.ascontiguousarray(entries["hash"][mine])
        # A row stores one entry per distinct term and property; a stable sort by term keeps
        # each term's rows in row order.
        order = np.argsort(hashes, kind="stable")
        props.append(
            _Pairs(
                pair_hash=hashes[order].astype(np.int64),
                docs=doc[mine][order],
                tf=entries["tf"][mine][order].astype(np.float32),
            )
        )
    return _Postings(props=props, lengths=lengths.astype(np.float32))


def _finish(postings: _Postings) -> _KeywordIndex:
    """Group each property's pairs by term and weigh them with its average length.

    A property's average counts only the rows that have at least one token in it, as the
    server's ``GetAveragePropertyLength`` counts only documents with postings.
    """
    lengths = postings.lengths
    present = (lengths > 0).sum(axis=0)
    total = lengths.sum(axis=0, dtype=np.float64)
    average = np.divide(total, present, out=np.zeros(lengths.shape[1]), where=present > 0)
    props: list[_PropertyPostings] = []
    for p, pairs in enumerate(postings.props):
        term_start = _term_starts(pairs.pair_hash)
        tf = pairs.tf.astype(np.float64)
        # Rows with postings in p have a positive length, so the average is positive here.
        norm = BM25_K1 * ((1 - BM25_B) + BM25_B * (lengths[pairs.docs, p] / average[p]))
        props.append(
            _PropertyPostings(
                hashes=pairs.pair_hash[term_start],
                indptr=np.append(term_start, pairs.pair_hash.size).astype(np.int64),
                docs=pairs.docs,
                tf=pairs.tf,
                weight=tf / (tf + norm),
            )
        )
    return _KeywordIndex(props=props, lengths=lengths, average=average)


def _as_postings(index: _KeywordIndex) -> _Postings:
    """Return the pairs of an index, one term hash per pair."""
    return _Postings(
        props=[
            _Pairs(np.repeat(pp.hashes, np.diff(pp.indptr)), pp.docs, pp.tf) for pp in index.props
        ],
        lengths=index.lengths,
    )


def _drop_rows(postings: _Postings, keep: npt.NDArray[np.bool_]) -> _Postings:
    """Remove the rows not kept and renumber the others, order unchanged."""
    if keep.all():
        return postings
    number = np.cumsum(keep) - 1
    props = []
    for pairs in postings.props:
        pair_keep = keep[pairs.docs]
        props.append(
            _Pairs(pairs.pair_hash[pair_keep], number[pairs.docs[pair_keep]], pairs.tf[pair_keep])
        )
    return _Postings(props=props, lengths=postings.lengths[keep])


def _merge_all(old: _Postings, added: _Postings) -> _Postings:
    """Return the pairs of the rows of ``old`` followed by the rows of ``added``."""
    return _Postings(
        props=[_merge_pairs(a, b) for a, b in zip(old.props, added.props, strict=True)],
        lengths=np.concatenate((old.lengths, added.lengths)),
    )


def _merge_pairs(old: _Pairs, added: _Pairs) -> _Pairs:
    """Merge two property's pair lists whose rows all come after the old ones.

    Within a term the old pairs come first: each pair's place in the merged order is its own
    place plus the number of pairs of the other side that sort before it.
    """
    if added.pair_hash.size == 0:
        return old
    term_start = _term_starts(old.pair_hash)
    terms = old.pair_hash[term_start]
    bounds = np.append(term_start, old.pair_hash.size)
    per_term = np.diff(bounds)
    # Counted per term, then spread over its pairs: a search per pair cost more than the rest.
    old_place = np.arange(old.pair_hash.size) + np.repeat(
        np.searchsorted(added.pair_hash, terms, "left"), per_term
    )
    new_place = (
        np.arange(added.pair_hash.size) + bounds[np.searchsorted(terms, added.pair_hash, "right")]
    )
    total = old.pair_hash.size + added.pair_hash.size
    pair_hash = np.empty(total, dtype=np.int64)
    docs = np.empty(total, dtype=np.int64)
    tf = np.empty(total, dtype=np.float32)
    pair_hash[old_place], pair_hash[new_place] = old.pair_hash, added.pair_hash
    docs[old_place], docs[new_place] = old.docs, added.docs
    tf[old_place], tf[new_place] = old.tf, added.tf
    return _Pairs(pair_hash, docs, tf)


def _term_starts(pair_hash: IntArray) -> IntArray:
    """Return where each term's run of pairs starts."""
    if pair_hash.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], pair_hash[1:] != pair_hash[:-1])))


def _bm25_top(
    part: _Partition,
    index: _KeywordIndex,
    counts: dict[str, int],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
) -> tuple[IntArray, FloatArray]:
    """Rank the partition like Weaviate's BlockMax-WAND BM25; return rows and raw scores.

    Each property is scored on its own (idf shared, ``agentic_memory.store.ranking.bm25_idf``; summed
    over the query terms in float64, kept as float32) and keeps its best
    ``per_property_limit`` rows; a row's score is the float32 sum of the properties that kept
    it, and the best ``candidates`` rows are returned. Ties at every cut keep the lowest
    rows, which stand in for the server's docIDs (write order). See ``docs/storage.md``.
    """
    n = part.rowids.size
    hashes = np.fromiter(map(term_hash, counts), dtype=np.int64, count=len(counts))
    # (terms, properties): where each term's postings start and end in each property.
    lo = np.zeros((hashes.size, len(index.props)), dtype=np.int64)
    hi = np.zeros_like(lo)
    for p, pp in enumerate(index.props):
        if pp.hashes.size == 0:
            continue
        at = np.searchsorted(pp.hashes, hashes)
        found = (at < pp.hashes.size) & (pp.hashes[np.minimum(at, pp.hashes.size - 1)] == hashes)
        lo[found, p] = pp.indptr[at[found]]
        hi[found, p] = pp.indptr[at[found] + 1]
    doc_freqs = (hi - lo).tolist()
    idfs = [bm25_idf(n, freqs, r) for freqs, r in zip(doc_freqs, counts.values(), strict=True)]
    if not any(idfs):
        return _NO_HITS
    keep_each = per_property_limit(candidates, len(index.props))
    total = np.zeros(n, dtype=np.float32)
    kept_rows: list[IntArray] = []
    for p, pp in enumerate(index.props):
        spans = [
            (idf, int(lo[t, p]), int(hi[t, p])) for t, idf in enumerate(idfs) if hi[t, p] > lo[t, p]
        ]
        if not spans:
            continue
        # bincount adds each row's contributions in input order, i.e. query-term order, in
        # float64: the same sums as the server's per-document loop over the terms.
        scores: FloatArray64 = np.asarray(
            np.bincount(
                np.concatenate([pp.docs[a:b] for _, a, b in spans]),
                weights=np.concatenate([idf * pp.weight[a:b] for idf, a, b in spans]),
                minlength=n,
            ),
            dtype=np.float64,
        )
        best, narrow = _best_rows(scores, allowed, keep_each)
        # float32 sums in property order, as combineResults adds the kept scores.
        total[best] += narrow
        kept_rows.append(best)
    if not kept_rows:
        return _NO_HITS
    rows = np.unique(np.concatenate(kept_rows))
    best = rows[top_positions(total[rows], candidates)]
    return best, total[best]


def _best_rows(
    scores: FloatArray64, allowed: npt.NDArray[np.bool_] | None, k: int
) -> tuple[IntArray, FloatArray]:
    """Return the ``k`` allowed rows with the best float32 scores (ties: lowest rows).

    Every posting scores above zero (idf and term weights are positive), so the matches are
    the rows with a score. On a large partition a strided sample first gives a lower bound:
    its k-th best value cannot exceed the whole partition's, so every row of the exact top k
    scores above the float32 just below it, and only those rows are narrowed and ranked.
    """
    bound = 0.0
    step = scores.size // (32 * k)
    if step > 1:
        sample = scores[::step]
        if allowed is not None:
            sample = sample[allowed[::step]]
        sample = sample[sample > 0].astype(np.float32)
        if sample.size >= k:
            kth = np.partition(sample, sample.size - k)[sample.size - k]
            bound = float(np.nextafter(kth, np.float32(-np.inf)))
    mask = scores > bound
    if allowed is not None:
        mask &= allowed
    pool = np.flatnonzero(mask)
    narrow = scores[pool].astype(np.float32)
    kept = top_positions(narrow, k)
    return pool[kept], narrow[kept]


def _cosine_top(
    part: _Partition,
    vector: list[float],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
    *,
    exact: bool = False,
) -> tuple[IntArray, FloatArray]:
    """Rank the partition by cosine similarity; return the candidate rows and their cosines.

    Large partitions are first ranked on a PCA projection (a quarter of the memory traffic)
    and only the best ``COARSE_RERANK * candidates`` rows get an exact cosine, the way an ANN
    index such as Weaviate's HNSW trades a little recall for speed. ``exact`` forces the full
    scan (the benchmark uses it to measure that recall).
    """
    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    if norm > 0:
        query = query / norm
    pool = np.flatnonzero(allowed) if allowed is not None else np.arange(part.rowids.size)
    shortlist = max(COARSE_RERANK * candidates, 2000)
    if not exact and part.rowids.size > EXACT_VECTOR_ROWS and pool.size > shortlist:
        if part.coarse is None:
            part.coarse = _coarse_index(part.unit)
        coarse = part.coarse
        # The mean's contribution is the same for every row, so it cannot change the order.
        approx = np.einsum("ij,j->i", coarse.projected, np.einsum("ij,j->i", coarse.basis, query))
        pool = np.sort(pool[np.argpartition(-approx[pool], shortlist - 1)[:shortlist]])
        sims = np.einsum("ij,j->i", part.unit[pool], query)
    else:
        # einsum runs numpy's own single-threaded loop: a multi-threaded BLAS matvec stalls
        # for tens of milliseconds when other processes share the cores.
        sims = np.einsum("ij,j->i", part.unit[pool] if allowed is not None else part.unit, query)
    # The server ranks by the float32 cosine distance 1 - dot (ties: lowest docID) and
    # reports 1 - distance as the raw vector score.
    distance = np.float32(1) - sims
    keep = top_rows(distance, np.arange(pool.size), candidates, smallest=True)
    return pool[keep], np.float32(1) - distance[keep]


def _coarse_index(unit: FloatArray) -> _CoarseIndex:
    rng = np.random.default_rng(0)
    sample = unit[rng.choice(unit.shape[0], size=min(unit.shape[0], 8192), replace=False)]
    mean = sample.mean(axis=0)
    _, _, vt = np.linalg.svd(sample - mean, full_matrices=False)
    basis = np.ascontiguousarray(vt[:COARSE_DIMS], dtype=np.float32)
    projected = np.ascontiguousarray((unit - mean) @ basis.T, dtype=np.float32)
    return _CoarseIndex(mean=mean.astype(np.float32), basis=basis, projected=projected)


def fuse_relative_score(sides: Sequence[tuple[float, Mapping[T, float]]]) -> dict[T, float]:
    """Return the fused scores of ``agentic_memory.store.ranking.fuse_relative_score`` (kept for callers)."""
    return ranking.fuse_relative_score(sides)[0]


def normalise_date(value: str) -> str:
    """Return an RFC 3339 date as UTC ``isoformat`` text, whose text order is time order."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise InvalidInputError(f"date must carry a timezone: {value!r}")
    # isoformat of a UTC time sorts as text: a missing fraction ("+") sorts before ".ffffff".
    return parsed.astimezone(UTC).isoformat()


def _table(name: str) -> str:
    # Collection names are validated against COLLECTION_NAME_RE, so quoting them is enough.
    return f'"o_{name}"'


def _bump(
    conn: sqlite3.Connection, collection: str, user: str | None, *, keeps_lineage: bool
) -> None:
    """Mark a partition changed.

    ``keeps_lineage``: the write only added rows with new, larger rids or deleted rows, so a
    cached copy stays valid for the rows that are still there (see ``EmbeddedStore._extend``).
    """
    conn.execute(
        "INSERT INTO amem_generations (collection, scope, token, lineage) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (collection, scope) DO UPDATE SET token = excluded.token, "
        "lineage = CASE WHEN ? THEN lineage ELSE excluded.lineage END",
        (collection, user or "", uuid.uuid4().hex, uuid.uuid4().hex, keeps_lineage),
    )


def _sql_text_key(value: str | None) -> str | None:
    return text_sort_key(value) if isinstance(value, str) else value


def _json_path(prop: str) -> str:
    return f"$.{prop}"


def _columns(spec: CollectionSpec) -> list[Property]:
    """Return the properties kept in an indexed column of their own as well as in the JSON.

    Filters and sorting read the column. Expression indexes on the JSON (layout 1) parsed
    every row's JSON once per index on every write, which doubled the cost of an insert.
    """
    return [p for p in spec.properties if p.filterable and p.type != "text[]"]


def _column(prop: str) -> str:
    # Property names match PROPERTY_NAME_RE, so quoting them is enough.
    return f'"p_{prop}"'


def _column_value(value: Any) -> Any:
    """Return what ``json_extract`` gives for an already normalised value (booleans: 0, 1)."""
    return int(value) if isinstance(value, bool) else value


def _index_columns(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    for prop in _columns(spec):
        conn.execute(
            f'CREATE INDEX "ix_{spec.name}_{prop.name}" '
            f"ON {_table(spec.name)} (user, {_column(prop.name)})"
        )


def _add_columns(conn: sqlite3.Connection, spec: CollectionSpec, added: list[Property]) -> None:
    """Give added filterable properties their column and index; existing rows hold NULL.

    NULL is what the JSON of those rows says too (no such key), so filters on the column and
    on the JSON agree without rewriting a row.
    """
    table = _table(spec.name)
    for prop in added:
        if prop.filterable and prop.type != "text[]":
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {_column(prop.name)}")
            conn.execute(
                f'CREATE INDEX IF NOT EXISTS "ix_{spec.name}_{prop.name}" '
                f"ON {table} (user, {_column(prop.name)})"
            )


def _compound_indexes(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    """Create the spec's compound indexes that are missing (also on stores made before them).

    Each ends with ``id``, the tie-breaker of every sorted listing, so a filtered, sorted page
    is read in index order without a sort.
    """
    for index in spec.indexes:
        # '-' cannot occur in a property name, so names of different indexes differ.
        name = f"cx_{spec.name}_{'-'.join(index)}"
        columns = ", ".join(_column(prop) for prop in index)
        conn.execute(
            f'CREATE INDEX IF NOT EXISTS "{name}" ON {_table(spec.name)} (user, {columns}, id)'
        )


def _prop_sql(spec: CollectionSpec, prop: str, alias: str = "") -> str:
    """Return a scalar property's SQL: its column, or its JSON path when it has none."""
    if any(p.name == prop for p in _columns(spec)):
        return f"{alias}{_column(prop)}"
    return f"json_extract({alias}props, '{_json_path(prop)}')"


TOKENIZER_VERSION = "2"
"""Version 2 splits text before lower-casing it, letter by letter (Go's order): version 1
lower-cased first, which split words at U+0130 ("İ" becomes "i" plus a combining dot) and
gave a word-final capital sigma the final form ("ς" instead of Go's "σ")."""

_RETOKENIZE_CHARS = ("\u0130", "\u03a3")


def _retokenize(conn: sqlite3.Connection) -> None:
    """Re-tokenise the few rows whose terms tokenizer version 1 got wrong; once per store.

    Runs in the opening transaction. Only rows holding U+0130 or a capital sigma can differ;
    their partitions get a new lineage, so caches reload them.
    """
    row = conn.execute("SELECT value FROM amem_meta WHERE key = 'tokenizer'").fetchone()
    if row is not None and row[0] == TOKENIZER_VERSION:
        return
    for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
        spec = _spec_from_json(spec_json)
        if not spec.searchable:
            continue
        table = _table(spec.name)
        like = " OR ".join("props LIKE ?" for _ in _RETOKENIZE_CHARS)
        rows = conn.execute(
            f"SELECT rid, user, props FROM {table} WHERE {like}",
            [f"%{c}%" for c in _RETOKENIZE_CHARS],
        ).fetchall()
        if not rows:
            continue
        lengths, terms = encode_terms(spec, [json.loads(r[2]) for r in rows])
        conn.executemany(
            f"UPDATE {table} SET lengths = ?, terms = ? WHERE rid = ?",
            [(a, b, r[0]) for a, b, r in zip(lengths, terms, rows, strict=True)],
        )
        for user in {r[1] for r in rows}:
            _bump(conn, spec.name, user, keeps_lineage=False)
    conn.execute(
        "INSERT INTO amem_meta (key, value) VALUES ('tokenizer', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (TOKENIZER_VERSION,),
    )


def _migrate_from_v1(conn: sqlite3.Connection) -> None:
    """Move filterable properties from JSON expression indexes to indexed columns.

    Runs inside the opening transaction: a crash leaves the layout-1 file untouched, and a
    second process that opens the store meanwhile waits and then finds layout 2.
    """
    conn.execute("ALTER TABLE amem_generations ADD COLUMN lineage TEXT NOT NULL DEFAULT ''")
    conn.execute("UPDATE amem_generations SET lineage = lower(hex(randomblob(16)))")
    for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
        spec = _spec_from_json(spec_json)
        table = _table(spec.name)
        indexed = _columns(spec)
        for prop in indexed:
            conn.execute(f'DROP INDEX IF EXISTS "ix_{spec.name}_{prop.name}"')
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {_column(prop.name)}")
        if indexed:
            conn.execute(
                f"UPDATE {table} SET "
                + ", ".join(
                    f"{_column(p.name)} = json_extract(props, '{_json_path(p.name)}')"
                    for p in indexed
                )
            )
        _index_columns(conn, spec)
    conn.execute(
        "UPDATE amem_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
    )


def _sql_value(prop: Property, value: Any) -> Any:
    if prop.type == "date":
        return normalise_date(value)
    if isinstance(value, bool):
        return int(value)
    return value


def _filter_sql(spec: CollectionSpec, where: list[Where], alias: str = "") -> tuple[str, list[Any]]:
    """Translate validated conditions to `` AND ...`` SQL with parameters (never inlined)."""
    parts: list[str] = []
    params: list[Any] = []
    props = f"{alias}props"
    for cond in where:
        prop = spec.prop(cond.prop)
        path = _json_path(cond.prop)
        expr = _prop_sql(spec, cond.prop, alias)
        if cond.op == "contains":
            parts.append(f"EXISTS (SELECT 1 FROM json_each({props}, ?) WHERE value = ?)")
            params += [path, cond.value]
        elif cond.op == "in":
            values = json.dumps([_sql_value(prop, v) for v in cond.value], ensure_ascii=False)
            if prop.type == "text[]":
                parts.append(
                    f"EXISTS (SELECT 1 FROM json_each({props}, ?) "
                    "WHERE value IN (SELECT value FROM json_each(?)))"
                )
                params += [path, values]
            else:
                parts.append(f"{expr} IN (SELECT value FROM json_each(?))")
                params.append(values)
        else:
            # ne uses IS NOT so objects without the property match, as Weaviate's NotEqual does.
            op = {"eq": "=", "ne": "IS NOT", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[
                cond.op
            ]
            parts.append(f"{expr} {op} ?")
            params.append(_sql_value(prop, cond.value))
    return "".join(f" AND {p}" for p in parts), params


def _stored(row: tuple[Any, ...], include_vector: bool) -> StoredObject:
    vector = None
    if include_vector and row[2] is not None:
        vector = np.frombuffer(row[2], dtype=np.float32).astype(np.float64).tolist()
    return StoredObject(id=row[0], properties=json.loads(row[1]), vector=vector)


def _spec_to_json(spec: CollectionSpec) -> str:
    return json.dumps(spec.to_dict(), ensure_ascii=False)


def _spec_from_json(raw: str) -> CollectionSpec:
    return CollectionSpec.from_dict(json.loads(raw))


def _structure(spec: CollectionSpec) -> tuple[Any, ...]:
    """Return the parts of a schema that shape storage; descriptions may differ freely."""
    return (
        spec.name,
        spec.per_user,
        tuple((p.name, p.type, p.searchable, p.filterable) for p in spec.properties),
    )


def _describe(spec: CollectionSpec) -> str:
    props = ", ".join(
        f"{p.name}:{p.type}{'+search' if p.searchable else ''}{'' if p.filterable else '-filter'}"
        for p in spec.properties
    )
    return f"per_user={spec.per_user} [{props}]"


def _translate(exc: sqlite3.Error) -> StoreError:
    msg = str(exc)
    if "no such table" in msg:
        return UnknownCollectionError(f"collection was dropped by another process ({msg})")
    return StoreError(f"embedded store error: {msg}")

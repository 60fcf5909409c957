"""The embedded backend: one SQLite file for durability, numpy for ranking.

Layout: ``<path>/store.sqlite3`` (WAL mode) holds a catalogue of collection schemas and, per
collection, an object table ``o_<Name>`` (id, user, JSON properties, float32 vector, and the
term counts of the searchable properties, tokenised once at write time). Searches run over an
in-memory index per (collection, user): a unit-vector matrix for cosine similarity and BM25F
postings, both rebuilt when the partition's generation token (replaced by every write
transaction, from this or any other process) changes.

Hybrid ranking is Weaviate's ``relativeScoreFusion``; see ``docs/storage.md`` for the source
and for why BM25 is computed in numpy rather than by SQLite FTS5.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import json
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from memstore.base import MemoryStore
from memstore.private import private_dir, private_file, tighten
from memstore.types import (
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

HYBRID_MIN_CANDIDATES = 100
"""Weaviate's ``hybrid.DefaultLimit``: each side retrieves ``max(limit, 100)`` candidates."""

WEAVIATE_EN_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
"""Weaviate's default ``en`` stopword preset, dropped from keyword queries as Weaviate does."""

_TOKEN_RE = re.compile(r"[^\W_]+")
_ASCII_WORDS = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in bytes(range(256)).lower())
_BUSY_RETRIES = 8
_BUSY_TIMEOUT_MS = 30_000
_CACHE_ENTRIES = 16
EXACT_VECTOR_ROWS = 20_000
"""Up to this many rows a vector search scores every row; above, it runs in two passes."""
COARSE_DIMS = 64
COARSE_RERANK = 20
"""The coarse pass keeps ``COARSE_RERANK * candidates`` rows (at least 2000) for exact cosine."""
BM25_K1 = 1.2
BM25_B = 0.75
"""Weaviate's default BM25 parameters (``invertedIndexConfig.bm25``)."""
_FLOAT32_MAX = float(np.finfo(np.float32).max)

T = TypeVar("T")
FloatArray = npt.NDArray[np.float32]
FloatArray64 = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def tokenize(text: str) -> list[str]:
    """Split text like Weaviate's ``word`` tokenisation: lower-cased runs of letters and digits."""
    if text.isascii():
        # Same result as the regex for ASCII, several times faster on large partitions.
        return text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    return _TOKEN_RE.findall(text.lower())


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


def query_terms(query: str) -> list[str]:
    """Return a query's distinct tokens in order, without Weaviate's ``en`` stopwords.

    Tokens are plain words: operators or punctuation in user text mean nothing special.
    """
    seen: dict[str, None] = {}
    for token in tokenize(query):
        if token not in WEAVIATE_EN_STOPWORDS:
            seen.setdefault(token, None)
    return list(seen)


@dataclass
class _KeywordIndex:
    """Postings of one partition, built from the term counts stored with every row."""

    hashes: IntArray
    """Sorted term hashes (see ``term_hash``); term i's postings are ``indptr[i]:indptr[i+1]``."""
    indptr: IntArray
    docs: IntArray
    """Row index of each posting; within a term, in row order."""
    tf: FloatArray
    """(postings, searchable properties): the term's count in each property of the row."""
    lengths: FloatArray
    """(rows, searchable properties): token counts, for the length normalisation."""
    weight: FloatArray
    """``tf (k1 + 1) / (tf + k1)`` per posting, where tf is the BM25F pseudo-frequency
    (the sum over properties of tf / (1 - b + b * len / avg_len)); a query only multiplies
    it by each term's idf."""


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
            order = f"{_prop_sql(spec, sort_by)} {direction}, id ASC"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT id, props, NULL FROM {obj_t} WHERE user IS ?{cond} "
                f"ORDER BY {order} LIMIT ? OFFSET ?",
                (user, *params, limit, offset),
            ).fetchall()
        return [_stored(row, False) for row in rows]

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
        candidates = max(limit, HYBRID_MIN_CANDIDATES)
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
            keyword: dict[int, float] = {}
            terms = query_terms(query) if alpha < 1 else []
            if terms and spec.searchable:
                if part.keyword is None:
                    part.keyword = self._build_keyword_index(conn, spec, user, part)
                keyword = _bm25_top(part, part.keyword, terms, allowed, candidates)
            dense: dict[int, float] = {}
            if alpha > 0:
                dense = _cosine_top(part, vector, allowed, candidates)
            fused = fuse_relative_score([(alpha, dense), (1 - alpha, keyword)])
            # Scores equal to 1e-9 are ties (float noise); ties are broken by object id.
            top = sorted(fused, key=lambda i: (-round(fused[i], 9), part.ids[i]))[:limit]
            if not top:
                return []
            rows = conn.execute(
                # CROSS JOIN pins the plan to rowid lookups instead of a scan of the user's rows.
                f"SELECT o.rid, o.props FROM json_each(?) AS j "
                f"CROSS JOIN {obj_t} AS o ON o.rid = j.value WHERE o.user IS ?",
                (json.dumps([int(part.rowids[i]) for i in top]), user),
            ).fetchall()
        props = dict(rows)
        return [
            SearchHit(
                id=part.ids[i],
                properties=json.loads(props[int(part.rowids[i])]),
                score=fused[i],
                keyword_score=keyword.get(i),
                vector_score=dense.get(i),
            )
            for i in top
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
            keyword = _finish(_merge_postings(postings, added))
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
        """Assemble BM25F postings from the term counts stored with each row (numpy only)."""
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
class _Postings:
    """(term, row) pairs sorted by term hash, then row: the raw material of a keyword index."""

    pair_hash: IntArray
    docs: IntArray
    tf: FloatArray
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
    hashes = np.ascontiguousarray(entries["hash"])
    # A stable sort by term keeps each term's rows in row order, so the entries of one
    # (term, row) pair (one per property) are adjacent.
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    doc = doc[order]
    new_pair = np.ones(hashes.size, dtype=bool)
    new_pair[1:] = (hashes[1:] != hashes[:-1]) | (doc[1:] != doc[:-1])
    pair_of_entry = np.cumsum(new_pair) - 1
    tf = np.zeros((int(new_pair.sum()), width), dtype=np.float32)
    tf[pair_of_entry, entries["prop"][order].astype(np.intp)] = entries["tf"][order]
    return _Postings(
        pair_hash=hashes[new_pair],
        docs=doc[new_pair],
        tf=tf,
        lengths=lengths.astype(np.float32),
    )


def _finish(postings: _Postings) -> _KeywordIndex:
    """Group sorted pairs by term and weigh them with the partition's average lengths."""
    pair_hash = postings.pair_hash
    term_start = _term_starts(pair_hash)
    lengths = postings.lengths
    avg = lengths.mean(axis=0, dtype=np.float64) if lengths.size else np.zeros(lengths.shape[1])
    norm = 1 - BM25_B + BM25_B * lengths / np.where(avg > 0, avg, 1.0)
    tfn = np.zeros(postings.docs.size, dtype=np.float64)
    # Property by property, in order: the same sums, in the same order, as a fresh build.
    for prop in range(lengths.shape[1]):
        tfn += postings.tf[:, prop] / norm[postings.docs, prop]
    return _KeywordIndex(
        hashes=pair_hash[term_start].astype(np.int64),
        indptr=np.concatenate((term_start, [pair_hash.size])).astype(np.int64),
        docs=postings.docs,
        tf=postings.tf,
        lengths=lengths,
        weight=(tfn * (BM25_K1 + 1) / (tfn + BM25_K1)).astype(np.float32),
    )


def _as_postings(index: _KeywordIndex) -> _Postings:
    """Return the pairs of an index, one term hash per pair."""
    return _Postings(
        pair_hash=np.repeat(index.hashes, np.diff(index.indptr)),
        docs=index.docs,
        tf=index.tf,
        lengths=index.lengths,
    )


def _drop_rows(postings: _Postings, keep: npt.NDArray[np.bool_]) -> _Postings:
    """Remove the rows not kept and renumber the others, order unchanged."""
    if keep.all():
        return postings
    pair_keep = keep[postings.docs]
    number = np.cumsum(keep) - 1
    return _Postings(
        pair_hash=postings.pair_hash[pair_keep],
        docs=number[postings.docs[pair_keep]],
        tf=postings.tf[pair_keep],
        lengths=postings.lengths[keep],
    )


def _merge_postings(old: _Postings, added: _Postings) -> _Postings:
    """Return the pairs of the rows of ``old`` followed by the rows of ``added``.

    Every added row comes after every old row, so within a term the old pairs come first:
    each pair's place in the merged order is its own place plus the number of pairs of the
    other side that sort before it.
    """
    if added.pair_hash.size == 0:
        return _Postings(
            old.pair_hash, old.docs, old.tf, np.concatenate((old.lengths, added.lengths))
        )
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
    tf = np.empty((total, old.tf.shape[1]), dtype=np.float32)
    pair_hash[old_place], pair_hash[new_place] = old.pair_hash, added.pair_hash
    docs[old_place], docs[new_place] = old.docs, added.docs
    tf[old_place], tf[new_place] = old.tf, added.tf
    return _Postings(pair_hash, docs, tf, np.concatenate((old.lengths, added.lengths)))


def _term_starts(pair_hash: IntArray) -> IntArray:
    """Return where each term's run of pairs starts."""
    if pair_hash.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], pair_hash[1:] != pair_hash[:-1])))


def _bm25_top(
    part: _Partition,
    index: _KeywordIndex,
    terms: list[str],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
) -> dict[int, float]:
    """Score the partition by BM25F (Weaviate's idf, k1, b); map row index to raw BM25."""
    n = part.rowids.size
    scores = np.zeros(n, dtype=np.float32)
    for term in terms:
        h = term_hash(term)
        t = int(np.searchsorted(index.hashes, h))
        if t >= index.hashes.size or index.hashes[t] != h:
            continue
        lo, hi = int(index.indptr[t]), int(index.indptr[t + 1])
        df = hi - lo
        idf = np.float32(np.log(1 + (n - df + 0.5) / (df + 0.5)))
        # A term's postings hold each document once, so fancy-index += is exact here.
        scores[index.docs[lo:hi]] += idf * index.weight[lo:hi]
    # Every matching document scores above zero: idf and the tf weight are both positive.
    matched = scores > 0
    if allowed is not None:
        matched &= allowed
    pool = np.flatnonzero(matched)
    if pool.size > candidates:
        pool = pool[np.argpartition(-scores[pool], candidates - 1)[:candidates]]
    return {int(i): float(scores[i]) for i in pool}


def _cosine_top(
    part: _Partition,
    vector: list[float],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
    *,
    exact: bool = False,
) -> dict[int, float]:
    """Rank the partition by cosine similarity; map row index to cosine for the candidates.

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
        pool = pool[np.argpartition(-approx[pool], shortlist - 1)[:shortlist]]
        sims = np.einsum("ij,j->i", part.unit[pool], query)
    else:
        # einsum runs numpy's own single-threaded loop: a multi-threaded BLAS matvec stalls
        # for tens of milliseconds when other processes share the cores.
        sims = np.einsum("ij,j->i", part.unit[pool] if allowed is not None else part.unit, query)
    if pool.size > candidates:
        keep = np.argpartition(-sims, candidates - 1)[:candidates]
        return {int(pool[k]): float(sims[k]) for k in keep}
    return {int(pool[k]): float(sims[k]) for k in range(pool.size)}


def _coarse_index(unit: FloatArray) -> _CoarseIndex:
    rng = np.random.default_rng(0)
    sample = unit[rng.choice(unit.shape[0], size=min(unit.shape[0], 8192), replace=False)]
    mean = sample.mean(axis=0)
    _, _, vt = np.linalg.svd(sample - mean, full_matrices=False)
    basis = np.ascontiguousarray(vt[:COARSE_DIMS], dtype=np.float32)
    projected = np.ascontiguousarray((unit - mean) @ basis.T, dtype=np.float32)
    return _CoarseIndex(mean=mean.astype(np.float32), basis=basis, projected=projected)


def fuse_relative_score(sides: list[tuple[float, dict[T, float]]]) -> dict[T, float]:
    """Fuse scored candidate sets the way Weaviate's ``FusionRelativeScore`` does.

    Each side's scores are min-max normalised over that side's candidates (all equal: each
    gets 1.0), multiplied by the side's weight and summed per object; an object missing from
    a side gets nothing from it.
    """
    fused: dict[T, float] = {}
    for weight, scores in sides:
        if not scores:
            continue
        low = min(scores.values())
        high = max(scores.values())
        for key, value in scores.items():
            norm = (value - low) / (high - low) if high != low else 1.0
            fused[key] = fused.get(key, 0.0) + weight * norm
    return fused


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

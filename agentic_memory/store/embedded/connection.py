"""The embedded store's SQLite file: its connection, transactions and upkeep.

``SQLiteStore`` opens the one database file of a store folder, runs every read in a
snapshot and every write in an IMMEDIATE transaction (retried while another process holds
the file), and gives deleted data's space and traces back. ``EmbeddedStore``
(``embedded.store``) builds the ``MemoryStore`` contract on it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from agentic_memory.paths import private_dir, private_file, tighten
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.embedded import blocks as _blocks
from agentic_memory.store.embedded.cache import PartitionCache
from agentic_memory.store.embedded.sql import (
    _ZEROED_KEY,
    DB_FILENAME,
    PAGE_SIZE,
    _bump,
    _create_catalogue,
    _sql_body_json,
    _sql_text_key,
    _translate,
    compact_pages,
    reclaim_pages,
)
from agentic_memory.store.locks import KeyLocks
from agentic_memory.store.types import InvalidInputError, StoreError

_CACHE_KIB = -131_072
"""SQLite's page cache while a large batch is written (SQLite's default, between, is 2 MB)."""
_LARGE_BATCH = 256
_BUSY_RETRIES = 8

_BUSY_TIMEOUT_MS = 30_000


T = TypeVar("T")


def _empty_log(conn: sqlite3.Connection) -> bool:
    """Checkpoint the write-ahead log into the file and cut it; False: a reader kept it."""
    busy = 1
    for _ in range(_BUSY_RETRIES):
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            break
        time.sleep(0.1)
    return not busy


class SQLiteStore(MemoryStore):
    """A ``MemoryStore`` kept in one SQLite file of a folder; the backend hooks are its child's."""

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
        # Every handle and process on this folder shares its exclusive blocks' lock files.
        self._exclusive = KeyLocks(self.path / "locks")
        self._in_transaction = False
        self._cache = PartitionCache(dims, self.path / DB_FILENAME)
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
            conn.create_function("amem_props", 1, _sql_body_json, deterministic=True)
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            # Deleted rows and freed pages are overwritten with zeros, whatever the SQLite
            # build's default: forgotten memories must not stay readable in the file.
            conn.execute("PRAGMA secure_delete = ON")
            # Takes effect only in a new, empty file (older ones: compact_pages below, and
            # reclaim_space for auto_vacuum): purges and forgets can give space back.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")
            self._write(_create_catalogue)
            compact_pages(conn)
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
        """Run ``fn`` in one IMMEDIATE transaction: all of it is written or none of it.

        Inside :meth:`transaction`, ``fn`` runs in a savepoint of that transaction instead.
        """
        with self._lock:
            conn = self._db()
            if self._in_transaction:
                return self._in_savepoint(conn, fn)

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

    @staticmethod
    def _in_savepoint(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        # One call stays all-or-nothing inside the caller's transaction.
        conn.execute("SAVEPOINT amem_write")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK TO amem_write")
            conn.execute("RELEASE amem_write")
            raise
        conn.execute("RELEASE amem_write")
        return result

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Make every read and write of this handle within the block one transaction.

        All the block's writes are committed together when it ends, or none of them when it
        raises. The block holds the store's write lock: other threads of this handle wait,
        other handles and processes wait up to the busy timeout (30 s) per attempt, so keep
        it short (no model or embedding calls inside).

        Raises:
            StoreError: a transaction is already open on this handle.
        """
        with self._lock:
            if self._in_transaction:
                raise StoreError("a transaction is already open on this store handle")
            conn = self._db()
            try:
                self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
            self._in_transaction = True
            try:
                yield
            except BaseException:
                self._in_transaction = False
                conn.execute("ROLLBACK")
                # Caches may hold what was read or created inside the rolled-back block.
                self._cache.clear()
                self._specs.clear()
                raise
            self._in_transaction = False
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                self._cache.clear()
                self._specs.clear()
                raise _translate(exc) from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Give a connection for reads inside one snapshot (a deferred transaction)."""
        with self._lock:
            conn = self._db()
            if self._in_transaction:
                yield conn
                return
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise _translate(exc) from exc

    def _write_large(self, fn: Callable[[sqlite3.Connection], T], rows: int) -> T:
        """``_write`` a batch of ``rows`` rows: with up to 128 MB of page cache if it is large.

        A row touches a leaf of each of its table's indexes; in a large partition those are
        read from the file again and again with the default 2 MB cache (+13-16 % rows
        written per second of CPU at 1M rows with 128 MB). The cache is given back after, so
        a process that searches holds no more than before.
        """
        if rows < _LARGE_BATCH:
            return self._write(fn)
        with self._lock:
            conn = self._db()
            conn.execute(f"PRAGMA cache_size = {_CACHE_KIB}")
            try:
                return self._write(fn)
            finally:
                conn.execute("PRAGMA cache_size = -2000")

    def erase_deleted(self) -> bool:
        """Make deleted data unrecoverable from the store's files.

        Deletions already overwrite their rows with zeros (``secure_delete``); this also
        rewrites the keyword blocks that still hold the term hashes and token counts of rows'
        earlier versions (superseded by upserts of their ids, see ``blocks.py``), removes the
        older copies of changed pages from the write-ahead log (a TRUNCATE checkpoint), and
        vacuums a store file written by a version without secure deletion once, since its
        free space may still hold text deleted back then.

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

                def compact(c: sqlite3.Connection) -> None:
                    # Same rows, same content; new tokens let caches take the new block ids.
                    for collection, scope in _blocks.compact_superseded(c):
                        _bump(c, collection, scope or None)

                self._write(compact)
                emptied = _empty_log(conn)
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return emptied

    def reclaim_space(self) -> int:
        """Give the pages of deleted rows back to the file system; return how many bytes.

        See :func:`~agentic_memory.store.embedded.sql.reclaim_pages` (nothing below a tenth
        of the file); then the write-ahead log is checkpointed, which cuts the file. Inside
        :meth:`transaction` nothing is done.
        """
        with self._lock:
            conn = self._db()
            if self._in_transaction:
                return 0
            try:
                freed = self._retry(lambda: reclaim_pages(conn))
                if freed:
                    _empty_log(conn)
            except sqlite3.Error as exc:
                raise _translate(exc) from exc
        return freed

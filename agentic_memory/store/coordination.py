"""Exclusion across machines for the Weaviate backend's create-only writes, through PostgreSQL.

Weaviate has no transaction and no conditional write, so ``WeaviateStore.insert`` makes its
checks and creates atomic by holding a lock per partition (collection and tenant) for their
duration. :class:`~agentic_memory.store.locks.KeyLocks` (threads and ``flock``) covers one
machine; :class:`PostgresLocks` covers every machine that uses the same PostgreSQL database,
with a transaction-level advisory lock per partition, and :class:`WriteLocks` holds both.

One setting chooses (:func:`coordination_setting`): ``AMEM_COORDINATOR_URI``, a PostgreSQL
URI or ``local`` (this machine only); when it is unset, the PostgreSQL database the
deployment already has: ``AMEM_POSTGRES_URI`` (the agent's checkpointer), else
``DATABASE_URI`` or ``POSTGRES_URI`` (LangGraph's server), else this machine only.

Why advisory locks and not a ledger of claimed ids (measured in
``bench/results/replicas.md``): a lock holds no state, so deletes (forgetting, retention,
TTL sweeps) need not be mirrored in PostgreSQL and an id can be created again after it was
deleted; PostgreSQL releases the lock of a holder whose connection ends, so a writer killed
mid-write blocks nobody; and the ``unless`` guard of a turn (no later turn in the thread) is
covered like the ids, which no unique key of a ledger can express without knowing the kinds.

Fail closed: when PostgreSQL is configured but cannot be reached, or the lock is not granted
within ``wait_seconds``, ``hold`` raises :class:`CoordinatorError` before anything is written.
A holder starts no create after ``hold_seconds``; PostgreSQL ends a session that stays idle
in its transaction for ``idle_seconds`` (longer than ``hold_seconds`` plus the client's insert
timeout), so a stuck holder releases the lock without another writer overlapping its writes.
The transaction commits when the writes are done: a commit that succeeds proves the lock was
held throughout; one that fails means the session ended meanwhile (PostgreSQL restarted, the
network dropped), and the write is reported as failed with its outcome unknown.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

from agentic_memory.store.locks import KeyLocks
from agentic_memory.store.types import InvalidInputError, StoreError

__all__ = [
    "COORDINATOR_ENV",
    "DEFAULT_URI_ENVS",
    "LOCAL",
    "Coordination",
    "CoordinatorError",
    "Held",
    "PostgresLocks",
    "WriteLocks",
    "coordination_setting",
    "lock_key",
]

logger = logging.getLogger(__name__)

COORDINATOR_ENV = "AMEM_COORDINATOR_URI"
"""The one setting: a PostgreSQL URI, or ``local`` for this machine's locks only."""

DEFAULT_URI_ENVS = ("AMEM_POSTGRES_URI", "DATABASE_URI", "POSTGRES_URI")
"""Read in this order when ``AMEM_COORDINATOR_URI`` is unset: the agent's checkpointer
(``graph/persistence.py``), then the database of LangGraph's server (it reads
``DATABASE_URI``, falling back to ``POSTGRES_URI``)."""

LOCAL = "local"
IN_MEMORY = ":memory:"
"""What ``langgraph dev`` (its in-memory runtime) puts in ``DATABASE_URI``: no database."""

NAMESPACE = 0x414D454D
"""First key of every advisory lock taken here ("AMEM"): PostgreSQL keeps two-key advisory
locks apart from one-key ones, so other users of the database (LangGraph's server) cannot
meet these."""

WAIT_SECONDS = 30.0
HOLD_SECONDS = 60.0
IDLE_SECONDS = 300.0
CONNECT_SECONDS = 5
IDLE_CONNECTIONS = 10
"""Connections kept open between writes: as many as LangGraph's server runs jobs at once per
replica by default (``N_JOBS_PER_WORKER``); more are opened (and closed after) beyond that."""

_PASSWORD_IN_URI = re.compile(r"(://[^:/@]+:)[^@]*@")
_PASSWORD_IN_DSN = re.compile(r"(password\s*=\s*)\S+", re.IGNORECASE)


class CoordinatorError(StoreError):
    """Writes cannot be coordinated: PostgreSQL is unreachable, or a lock was not held."""


def redact(uri: str) -> str:
    """Return ``uri`` without its password."""
    return _PASSWORD_IN_DSN.sub(r"\1***", _PASSWORD_IN_URI.sub(r"\1***@", uri))


@dataclass(frozen=True)
class Coordination:
    """Which writers ``insert`` excludes: this machine's, or every machine's through PostgreSQL."""

    uri: str | None
    """The PostgreSQL URI; ``None`` for this machine only."""
    source: str
    """Where the choice came from (an argument or the variable's name), for messages."""

    def describe(self) -> str:
        """Say where writes are coordinated, without the password."""
        if self.uri is None:
            return f"this machine only (file locks; {self.source})"
        return f"PostgreSQL at {redact(self.uri)} ({self.source})"


def coordination_setting(value: str | None = None) -> Coordination:
    """Resolve the coordination setting; an argument always wins over the environment.

    Args:
        value: A PostgreSQL URI, or ``"local"``; default ``AMEM_COORDINATOR_URI``, then the
            first of ``DEFAULT_URI_ENVS`` that is set, then this machine only.

    Raises:
        InvalidInputError: The value is not a PostgreSQL URI (``postgresql://`` or
            ``postgres://``, or a libpq ``key=value`` string) nor ``local``; the message names
            where it came from.
    """
    if value is not None and not isinstance(value, str):
        raise InvalidInputError(f"coordinator must be a string, got {type(value).__name__}")
    chosen, source = (value.strip(), "coordinator argument") if value is not None else ("", "")
    if not chosen:
        for name in (COORDINATOR_ENV, *DEFAULT_URI_ENVS):
            raw = os.environ.get(name, "").strip()
            if raw and not (name in DEFAULT_URI_ENVS and raw == IN_MEMORY):
                chosen, source = raw, name
                break
    if not chosen:
        return Coordination(None, f"no {COORDINATOR_ENV} nor PostgreSQL URI set")
    if chosen.lower() == LOCAL:
        return Coordination(None, f"{source}={LOCAL}")
    try:
        params = psycopg.conninfo.conninfo_to_dict(chosen)
    except psycopg.ProgrammingError as exc:
        raise InvalidInputError(
            f"{source} is not a PostgreSQL URI nor {LOCAL!r}: {redact(chosen)!r} ({exc})"
        ) from None
    if "://" in chosen and not chosen.startswith(("postgresql://", "postgres://")):
        raise InvalidInputError(
            f"{source} must be a postgresql:// URI or {LOCAL!r}, got {redact(chosen)!r}"
        )
    port = str(params.get("port") or "")
    if port and not all(p.strip().isdigit() for p in port.split(",")):
        raise InvalidInputError(f"{source} has an invalid port: {redact(chosen)!r}")
    return Coordination(chosen, source)


def lock_key(*key: str) -> int:
    """Return the second key of a partition's advisory lock (a stable signed 32-bit hash).

    Two partitions with the same hash only wait for each other; they never share writes.
    """
    digest = hashlib.blake2b(
        "\x1f".join(key).encode("utf-8", "surrogatepass"), digest_size=4
    ).digest()
    return int.from_bytes(digest, "little", signed=True)


class Held:
    """A held lock: ``check`` before each write refuses to write once it was held too long."""

    def __init__(self, what: str, hold_seconds: float | None) -> None:
        """Start the clock of a hold of ``what``; ``hold_seconds`` ``None``: no limit."""
        self.what = what
        self._deadline = None if hold_seconds is None else time.monotonic() + hold_seconds
        self._limit = hold_seconds

    def check(self) -> None:
        """Raise ``CoordinatorError`` if the lock has been held longer than allowed.

        PostgreSQL ends a session that idles in its transaction for ``IDLE_SECONDS``; a
        write started after ``HOLD_SECONDS`` could land after the lock was released.
        """
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise CoordinatorError(
                f"the write lock of {self.what} was held for more than {self._limit:g} s "
                "(Weaviate is answering slowly); stopped before writing more, so no other "
                "machine's write can overlap"
            )


class PostgresLocks:
    """Advisory locks per key in one PostgreSQL database, shared by every machine using it."""

    def __init__(
        self,
        uri: str,
        *,
        wait_seconds: float = WAIT_SECONDS,
        hold_seconds: float = HOLD_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
        connect_seconds: int = CONNECT_SECONDS,
        keep: int = IDLE_CONNECTIONS,
    ) -> None:
        """Prepare locks in the database at ``uri``; no connection is opened until ``hold``.

        Raises:
            InvalidInputError: ``hold_seconds`` is not below ``idle_seconds``, or a time is
                not positive.
        """
        for name, seconds in (
            ("wait_seconds", wait_seconds),
            ("hold_seconds", hold_seconds),
            ("idle_seconds", idle_seconds),
            ("connect_seconds", connect_seconds),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise InvalidInputError(f"{name} must be a positive number, got {seconds!r}")
        if hold_seconds >= idle_seconds:
            raise InvalidInputError("hold_seconds must be below idle_seconds")
        self.uri = uri
        self.wait_seconds = float(wait_seconds)
        self.hold_seconds = float(hold_seconds)
        self.idle_seconds = float(idle_seconds)
        self.connect_seconds = int(connect_seconds)
        self.keep = keep
        self._idle: list[psycopg.Connection[Any]] = []
        self._pool = threading.Lock()
        self._closed = False

    # -- connections ----------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(
                self.uri,
                autocommit=True,
                connect_timeout=self.connect_seconds,
                application_name="agentic-memory",
            )
        except psycopg.Error as exc:
            raise CoordinatorError(
                f"cannot coordinate writes through PostgreSQL at {redact(self.uri)}: "
                f"{str(exc).strip()}; nothing was written"
            ) from exc

    def _take(self) -> tuple[psycopg.Connection[Any], bool]:
        """Return an open connection and whether it was reused from the pool."""
        with self._pool:
            if self._closed:
                raise CoordinatorError("the PostgreSQL coordinator is closed: open a new store")
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE:
                    return conn, True
                conn.close()
        return self._connect(), False

    def _give_back(self, conn: psycopg.Connection[Any]) -> None:
        with self._pool:
            healthy = not conn.closed and conn.info.transaction_status == pq.TransactionStatus.IDLE
            if healthy and not self._closed and len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; later holds raise ``CoordinatorError``."""
        with self._pool:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- locks ----------------------------------------------------------------------------

    def _acquire(self, conn: psycopg.Connection[Any], key: int) -> None:
        # One round trip: the simple-query protocol runs the statements in order. Integers
        # only, formatted here, so nothing from the caller reaches the SQL text.
        conn.execute(
            f"BEGIN; SET LOCAL lock_timeout = '{int(self.wait_seconds * 1000)}ms'; "
            "SET LOCAL idle_in_transaction_session_timeout = "
            f"'{int(self.idle_seconds * 1000)}ms'; "
            f"SELECT pg_advisory_xact_lock({NAMESPACE}, {int(key)})"
        )

    @contextmanager
    def hold(self, *key: str) -> Iterator[Held]:
        """Hold the advisory lock of ``key`` in a transaction for the ``with`` block.

        Raises:
            CoordinatorError: PostgreSQL cannot be reached, or the lock was not granted in
                ``wait_seconds`` (nothing was written); or, after the block, the commit
                failed: the session ended while the block ran, so another machine may have
                written meanwhile.
        """
        what = " / ".join(key)
        number = lock_key(*key)
        conn, reused = self._take()
        try:
            try:
                self._acquire(conn, number)
            except psycopg.OperationalError:
                if not reused:
                    raise
                # A pooled connection PostgreSQL dropped since (a restart, an idle timeout
                # of a proxy): nothing was locked on it; try once on a new one.
                conn.close()
                conn = self._connect()
                self._acquire(conn, number)
        except psycopg.errors.LockNotAvailable as exc:
            self._discard(conn)
            raise CoordinatorError(
                f"another writer held the write lock of {what} for more than "
                f"{self.wait_seconds:g} s (PostgreSQL lock_timeout); nothing was written"
            ) from exc
        except psycopg.Error as exc:
            self._discard(conn)
            raise CoordinatorError(
                f"cannot coordinate writes through PostgreSQL at {redact(self.uri)}: "
                f"{str(exc).strip()}; nothing was written"
            ) from exc
        try:
            yield Held(what, self.hold_seconds)
        except BaseException:
            self._end(conn, "ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            self._discard(conn)
            raise CoordinatorError(
                f"the PostgreSQL session holding the write lock of {what} ended before the "
                f"write finished ({str(exc).strip()}): another machine may have written "
                "meanwhile, so this write is reported as failed; it may or may not be stored"
            ) from exc
        self._give_back(conn)

    def _end(self, conn: psycopg.Connection[Any], statement: str) -> None:
        try:
            conn.execute(statement)
        except psycopg.Error:
            self._discard(conn)
            return
        self._give_back(conn)

    @staticmethod
    def _discard(conn: psycopg.Connection[Any]) -> None:
        try:
            conn.close()
        except psycopg.Error:  # pragma: no cover - closing a broken connection
            pass


class WriteLocks:
    """What ``WeaviateStore.insert`` holds: this machine's lock, then PostgreSQL's when set."""

    def __init__(self, local: KeyLocks, remote: PostgresLocks | None = None) -> None:
        """Combine this machine's locks with PostgreSQL's (``None``: this machine only)."""
        self.local = local
        self.remote = remote

    @contextmanager
    def hold(self, *key: str) -> Iterator[Held]:
        """Hold ``key`` on this machine, then in PostgreSQL, for the ``with`` block.

        The machine's lock comes first, so the threads and processes of one machine queue
        locally and each machine has at most one session waiting per key.
        """
        with self.local.hold(*key):
            if self.remote is None:
                yield Held(" / ".join(key), None)
                return
            with self.remote.hold(*key) as held:
                yield held

    def close(self) -> None:
        """Close PostgreSQL's idle connections."""
        if self.remote is not None:
            self.remote.close()

"""Checkpointers for the working memory: SQLite by default, PostgreSQL when configured.

For the library and the CLI (``compile_graph(checkpointer=...)``) and the server:
``langgraph.json`` names :func:`open_checkpointer`, so ``langgraph dev`` keeps its threads in
the same private file, where deleting a thread deletes all of it (``docs/persistence.md``).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agentic_memory.checkpoints import SQLITE_META_TABLE, ZEROED_KEY
from agentic_memory.paths import private_dir, private_file, tighten

__all__ = [
    "POSTGRES_URI_ENV",
    "CheckpointerError",
    "adelete_thread",
    "adelete_threads_where",
    "athread_ids",
    "default_sqlite_path",
    "open_checkpointer",
    "postgres_checkpointer",
    "sqlite_checkpointer",
]

POSTGRES_URI_ENV = "AMEM_POSTGRES_URI"
SQLITE_FILE_NAME = "checkpoints.sqlite"
_DEFAULT_HOME = "~/.agentic-memory"
_PASSWORD_IN_URI = re.compile(r"(://[^:/@]+:)[^@]*@")
_PASSWORD_IN_DSN = re.compile(r"(password\s*=\s*)\S+", re.IGNORECASE)


class CheckpointerError(RuntimeError):
    """A checkpointer cannot be opened (bad path, missing or unreachable database)."""


def _redact(uri: str) -> str:
    return _PASSWORD_IN_DSN.sub(r"\1***", _PASSWORD_IN_URI.sub(r"\1***@", uri))


def default_sqlite_path() -> Path:
    """Return ``$AMEM_HOME/checkpoints.sqlite`` (``~/.agentic-memory`` when unset)."""
    home = os.environ.get("AMEM_HOME") or _DEFAULT_HOME
    return Path(home).expanduser() / SQLITE_FILE_NAME


def _prepare_sqlite_path(target: Path) -> bool:
    """Create the file's folders (0700) and the file itself (0600); return whether it is new."""
    if target.is_dir():
        raise CheckpointerError(f"checkpoint path {str(target)!r} is a directory, not a file")
    try:
        private_dir(target.parent)
    except OSError as exc:
        raise CheckpointerError(
            f"cannot create the checkpoint directory {str(target.parent)!r}: {exc}"
        ) from exc
    new = not target.exists() or target.stat().st_size == 0
    try:
        # Created private before SQLite opens it: its -wal and -shm files get the same mode.
        private_file(target)
    except OSError as exc:
        raise CheckpointerError(
            f"cannot create the checkpoint file {str(target)!r}: {exc}"
        ) from exc
    return new


async def _secure(saver: AsyncSqliteSaver, target: Path | None, *, new: bool) -> None:
    """Overwrite deleted data with zeros on this connection; mark a new file as such.

    Conversations are personal data: a deleted thread must not stay readable in the file's
    free pages, whatever the SQLite build's default. A file created with this setting is
    marked, so forgetting never needs to vacuum it (see ``agentic_memory.checkpoints``).
    """
    async with saver.lock:
        await saver.conn.execute("PRAGMA secure_delete = ON")
        if target is None:
            return
        if new:
            await saver.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {SQLITE_META_TABLE} "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            await saver.conn.execute(
                f"INSERT OR IGNORE INTO {SQLITE_META_TABLE} (key, value) VALUES (?, '1')",
                (ZEROED_KEY,),
            )
            await saver.conn.commit()
    # Files of an older version, created world-readable.
    files = [target.with_name(target.name + suffix) for suffix in ("", "-wal", "-shm")]
    await asyncio.to_thread(tighten, files)


@asynccontextmanager
async def sqlite_checkpointer(path: str | Path | None = None) -> AsyncIterator[AsyncSqliteSaver]:
    """Open the SQLite checkpointer at ``path`` (:func:`default_sqlite_path`; ``":memory:"``).

    The folder is created 0700 and the file 0600 (its ``-wal`` and ``-shm`` files follow),
    and the connection overwrites deleted data with zeros (``PRAGMA secure_delete``).

    Raises:
        CheckpointerError: The path is a directory or its directory cannot be created.
    """
    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")
    if isinstance(path, str) and not path.strip():
        raise CheckpointerError("checkpoint path is empty")
    target: Path | None = None
    new = False
    if path == ":memory:":
        conn_string = ":memory:"
    else:
        target = Path(path).expanduser() if path is not None else default_sqlite_path()
        new = await asyncio.to_thread(_prepare_sqlite_path, target)
        conn_string = str(target)
    async with AsyncSqliteSaver.from_conn_string(conn_string) as saver:
        if new:
            # Before any table: only an empty file takes it. Deleted threads and rolled-back
            # runs then give their pages back (agentic_memory.checkpoints).
            async with saver.lock:
                await saver.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        await saver.setup()
        await _secure(saver, target, new=new)
        yield saver


def _resolve_postgres_uri(uri: str | None) -> str:
    if uri is not None and not isinstance(uri, str):
        raise TypeError(f"uri must be a str, got {type(uri).__name__}")
    chosen = (uri or "").strip() or os.environ.get(POSTGRES_URI_ENV, "").strip()
    if not chosen:
        raise CheckpointerError(
            f"no PostgreSQL URI: pass uri=... or set {POSTGRES_URI_ENV} "
            "(for example postgresql://user:password@localhost:5432/agentic_memory)"
        )
    return chosen


_SETUP_LOCK = "agentic-memory: checkpointer setup"


async def _setup_once(saver: AsyncPostgresSaver, conn_string: str) -> None:
    """Run the checkpointer's migrations while no other process runs them.

    Replicas that start together on a new database would each create the same tables and
    insert the same migration rows (a unique violation that stops all but one); a session
    advisory lock on a connection of its own lets one migrate while the others wait, then
    find nothing left to do. The waiters poll rather than block in ``pg_advisory_lock``: a
    migration builds an index ``CONCURRENTLY``, which waits for every open transaction in
    the database, a blocked lock request included, and so would wait for its own waiters.
    """
    async with await psycopg.AsyncConnection.connect(conn_string, autocommit=True) as guard:
        while True:
            cur = await guard.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (_SETUP_LOCK,))
            row = await cur.fetchone()
            if row is not None and row[0]:
                break
            await asyncio.sleep(0.05)
        try:
            await saver.setup()
        finally:
            await guard.execute("SELECT pg_advisory_unlock(hashtext(%s))", (_SETUP_LOCK,))


@asynccontextmanager
async def postgres_checkpointer(uri: str | None = None) -> AsyncIterator[AsyncPostgresSaver]:
    """Open the PostgreSQL checkpointer and create or migrate its tables (``setup()``).

    ``uri`` (a libpq URI or DSN) wins over ``AMEM_POSTGRES_URI``.

    Raises:
        CheckpointerError: No URI is given or set, or the database cannot be reached (the
            password is redacted from the message).
    """
    conn_string = _resolve_postgres_uri(uri)
    async with AsyncExitStack() as stack:
        # Only opening and migrating is translated: errors raised by the caller's own
        # work inside the context must surface unchanged.
        try:
            saver = await stack.enter_async_context(
                AsyncPostgresSaver.from_conn_string(conn_string)
            )
            await _setup_once(saver, conn_string)
        except psycopg.OperationalError as exc:
            raise CheckpointerError(
                f"cannot use PostgreSQL at {_redact(conn_string)!r}: {str(exc).strip()}"
            ) from exc
        yield saver


@asynccontextmanager
async def open_checkpointer(
    *, sqlite_path: str | Path | None = None, postgres_uri: str | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Open the configured checkpointer: PostgreSQL if a URI is given or set, else SQLite."""
    if postgres_uri is not None or os.environ.get(POSTGRES_URI_ENV, "").strip():
        async with postgres_checkpointer(postgres_uri) as pg_saver:
            yield pg_saver
    else:
        async with sqlite_checkpointer(sqlite_path) as sqlite_saver:
            yield sqlite_saver


async def adelete_thread(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> None:
    """Delete every checkpoint and pending write of one thread (a no-op if it has none)."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
    await checkpointer.adelete_thread(thread_id)


async def athread_ids(
    checkpointer: BaseCheckpointSaver[Any], metadata: Mapping[str, Any]
) -> list[str]:
    """List the threads with a checkpoint whose metadata contains ``metadata``.

    Run metadata (``config={"metadata": {"user_id": ...}}``) is copied into each
    checkpoint's metadata, which is how threads are found per user. An empty ``metadata``
    is refused: it would match every thread.
    """
    if not isinstance(metadata, Mapping) or not metadata:
        raise ValueError("metadata filter must be a non-empty mapping")
    found: dict[str, None] = {}
    async for item in checkpointer.alist(None, filter=dict(metadata)):
        thread_id = item.config["configurable"].get("thread_id")
        if isinstance(thread_id, str):
            found.setdefault(thread_id, None)
    return list(found)


async def adelete_threads_where(
    checkpointer: BaseCheckpointSaver[Any], metadata: Mapping[str, Any]
) -> list[str]:
    """Delete every thread found by :func:`athread_ids`; return their ids."""
    thread_ids = await athread_ids(checkpointer, metadata)
    for thread_id in thread_ids:
        await checkpointer.adelete_thread(thread_id)
    return thread_ids

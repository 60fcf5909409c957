"""The checkpointer port: a user's threads in a LangGraph checkpointer, found and deleted.

Forgetting (:mod:`agentic_memory.forget`) needs three things of the working memory, whatever
checkpointer keeps it: which threads belong to a user (:func:`auser_threads`), who owns one
thread (:func:`athread_owner`), and deleting threads so that nothing of them stays readable
(:func:`adelete_threads`). Every checkpointer deletes through LangGraph's
``adelete_thread``; what differs per checkpointer is how deleted data is made unreadable,
which :func:`eraser_of` chooses:

* a SQLite checkpointer (``AsyncSqliteSaver``, :func:`agentic_memory.graph.persistence.
  sqlite_checkpointer`): deletions overwrite with zeros (``secure_delete``), a file written
  before that is vacuumed once (and marked in :data:`SQLITE_META_TABLE`), the write-ahead
  log, which keeps older copies of changed pages, is checkpointed and truncated, and the
  file gives its free pages back once a tenth of it is free;
* any other (PostgreSQL, the in-memory saver): the deleted rows are the database's to
  reclaim; nothing more is done here.

A run the graph rolls back (a refused input, a failed run) leaves nothing of itself in the
thread's history either: :func:`adrop_run` deletes the checkpoints and writes it made before
the restored one, and those of the subgraphs it ran, and makes the restored checkpoint's
parent the one the run started from (:meth:`CheckpointEraser.adrop`: SQLite, PostgreSQL and
the in-memory saver; another checkpointer keeps them, and says so in the log). A drop only
deletes and tries once, without waiting, to empty a SQLite write-ahead log, so that a flood
of refused inputs does not hold up other runs' checkpoint writes: a log another connection
is reading keeps its older copies until its next checkpoint, or until the user's threads
are forgotten (:func:`adelete_threads` empties the log, waiting for it).

:mod:`agentic_memory.graph.persistence` opens the checkpointers and marks a new SQLite file
with :data:`ZEROED_KEY` from here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

__all__ = [
    "OWNER_KEY",
    "RECLAIM_SHARE",
    "RUN_KEY",
    "SQLITE_META_TABLE",
    "ZEROED_KEY",
    "CheckpointEraser",
    "SqliteEraser",
    "ThreadsDeleted",
    "adelete_threads",
    "adrop_run",
    "athread_owner",
    "auser_threads",
    "eraser_of",
    "owner_of",
]

OWNER_KEY = "owner"
"""The state value in which the graph records the user a thread belongs to."""
RUN_KEY = "run_before"
"""The state key where a run under way keeps what a rollback restores, and its user."""
SQLITE_META_TABLE = "amem_meta"
"""A table of this package's own in a SQLite checkpoint file (LangGraph ignores it)."""
ZEROED_KEY = "free_space_zeroed"
"""Key of ``SQLITE_META_TABLE``: the file's deleted data has been overwritten since then."""
_ERASE_ATTEMPTS = 8
RECLAIM_SHARE = 0.1
"""Share of a SQLite file's pages that must be free before they are given back (as the
embedded store does: reusing free pages costs nothing, giving them back costs a write)."""
_PERSISTED_WAIT_S = 30.0
"""How long :func:`adrop_run` waits for the checkpoint a rollback wrote to be saved."""

logger = logging.getLogger("agentic_memory.checkpoints")


def owner_of(values: object, metadata: object) -> str:
    """Return the thread owner in a state's values, else the run's ``user_id`` ("" if none)."""
    owner = values.get(OWNER_KEY) if isinstance(values, Mapping) else None
    if isinstance(owner, str) and owner:
        return owner
    user = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    return user if isinstance(user, str) else ""


async def athread_owner(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> str | None:
    """Return the owner recorded in the thread's latest checkpoint ("" if none; None: no thread).

    The ``owner`` the graph keeps in the thread's state wins over the run metadata.
    """
    latest = await checkpointer.aget_tuple({"configurable": {"thread_id": thread_id}})
    if latest is None:
        return None
    return owner_of(latest.checkpoint.get("channel_values"), latest.metadata)


async def auser_threads(checkpointer: BaseCheckpointSaver[Any], user: str) -> list[str]:
    """Return the threads whose checkpoints belong to ``user``.

    A thread belongs to the user when its latest state records them as ``owner``, or when a
    run of it carried ``metadata={"user_id": user}``. A thread whose latest state has no
    owner (its runs were refused or failed, and rolled back) is the user's when an earlier
    checkpoint names them: as owner, or as the user of the run being rolled back
    (``run_before``), since that checkpoint still holds the run's input. Every checkpoint is
    read once (there is no index on state values), which is acceptable for this rare
    operation.
    """
    latest: dict[str, tuple[str, str]] = {}
    named: dict[str, set[str]] = {}
    by_metadata: set[str] = set()
    async for item in checkpointer.alist(None):
        configurable = item.config.get("configurable", {})
        thread_id = configurable.get("thread_id")
        if not isinstance(thread_id, str) or configurable.get("checkpoint_ns", ""):
            continue
        if (item.metadata or {}).get("user_id") == user:
            by_metadata.add(thread_id)
        checkpoint_id = str(item.checkpoint.get("id", ""))
        values = item.checkpoint.get("channel_values")
        owner = values.get(OWNER_KEY) if isinstance(values, Mapping) else None
        owner = owner if isinstance(owner, str) else ""
        if thread_id not in latest or checkpoint_id > latest[thread_id][0]:
            latest[thread_id] = (checkpoint_id, owner)
        seen = named.setdefault(thread_id, set())
        seen.add(owner)
        run = values.get(RUN_KEY) if isinstance(values, Mapping) else None
        if isinstance(run, Mapping) and isinstance(run.get("user"), str):
            seen.add(run["user"])
    owned = {
        t
        for t, (_, owner) in latest.items()
        if owner == user or (not owner and user in named.get(t, set()))
    }
    return sorted(owned | by_metadata)


class CheckpointEraser:
    """How one checkpointer makes deleted threads unreadable; this one: nothing to do.

    PostgreSQL and the in-memory saver need nothing beyond ``adelete_thread``. A
    checkpointer of an unknown kind cannot drop single checkpoints (:meth:`adrop`).
    """

    def __init__(self, checkpointer: BaseCheckpointSaver[Any]) -> None:
        self.checkpointer = checkpointer

    async def aprepare(self) -> None:
        """Make the deletions that follow overwrite what they delete."""

    async def aerase(self) -> bool:
        """Drop every copy of deleted data; return False when another process prevents it."""
        return True

    async def adrop(
        self, thread_id: str, checkpoint_ids: Sequence[str], *, head: str, parent: str | None
    ) -> bool:
        """Delete a rolled-back run's checkpoints; False: this checkpointer cannot.

        ``checkpoint_ids`` are the run's checkpoints of the thread's root namespace; the
        subgraphs the run ran (namespaces of their own, one per task, whose checkpoints lie
        between the first of them and ``head``) go too, with their writes. ``head``, the
        checkpoint kept, gets ``parent`` as its parent (LangGraph follows a parent when it
        replays or copies a checkpoint, and Studio shows it).
        """
        del thread_id, checkpoint_ids, head, parent
        return False

    async def _versions(self, thread_id: str, ids: Iterable[str]) -> set[tuple[str, str]]:
        """Return the (channel, version) pairs the given checkpoints of the thread hold."""
        found: set[tuple[str, str]] = set()
        for checkpoint_id in ids:
            config = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": "",
                    "checkpoint_id": checkpoint_id,
                }
            }
            saved = await self.checkpointer.aget_tuple(config)  # type: ignore[arg-type]
            if saved is not None:
                versions = saved.checkpoint.get("channel_versions", {})
                found |= {(str(c), str(v)) for c, v in versions.items()}
        return found


class MemoryEraser(CheckpointEraser):
    """LangGraph's in-memory saver: its dictionaries are edited directly."""

    checkpointer: InMemorySaver

    async def adrop(
        self, thread_id: str, checkpoint_ids: Sequence[str], *, head: str, parent: str | None
    ) -> bool:
        """Delete the checkpoints, their writes, and the channel values only they held."""
        saver = self.checkpointer
        dropped = set(checkpoint_ids)
        spaces = saver.storage.get(thread_id, {})
        stored = spaces.get("", {})
        kept = [cid for cid in stored if cid not in dropped]
        orphans = await self._versions(thread_id, dropped) - await self._versions(thread_id, kept)
        for checkpoint_id in dropped:
            stored.pop(checkpoint_id, None)
            saver.writes.pop((thread_id, "", checkpoint_id), None)
        for channel, version in orphans:
            saver.blobs.pop((thread_id, "", channel, version), None)
        first = min(dropped, default=head)
        for ns in [ns for ns, saved in spaces.items() if ns and _any_between(saved, first, head)]:
            del spaces[ns]
            for write in [k for k in saver.writes if k[:2] == (thread_id, ns)]:
                del saver.writes[write]
            for blob in [k for k in saver.blobs if k[:2] == (thread_id, ns)]:
                del saver.blobs[blob]
        if head in stored:
            checkpoint, metadata, _ = stored[head]
            stored[head] = (checkpoint, metadata, parent)
        return True


class PostgresEraser(CheckpointEraser):
    """LangGraph's PostgreSQL saver: rows of its three tables are deleted."""

    checkpointer: AsyncPostgresSaver

    async def adrop(
        self, thread_id: str, checkpoint_ids: Sequence[str], *, head: str, parent: str | None
    ) -> bool:
        """Delete the checkpoints, their writes, and the channel values only they held."""
        ids = list(checkpoint_ids)
        saver = self.checkpointer
        async with saver._cursor() as cur:
            await cur.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''",
                (thread_id,),
            )
            kept = [str(r["checkpoint_id"]) for r in await cur.fetchall()]
            await cur.execute(
                "SELECT DISTINCT checkpoint_ns FROM checkpoints WHERE thread_id = %s "
                "AND checkpoint_ns <> '' AND checkpoint_id >= %s AND checkpoint_id < %s",
                (thread_id, min(ids, default=head), head),
            )
            spaces = [str(r["checkpoint_ns"]) for r in await cur.fetchall()]
        kept = [cid for cid in kept if cid not in ids]
        orphans = await self._versions(thread_id, ids) - await self._versions(thread_id, kept)
        async with saver._cursor(pipeline=True) as cur:
            for table in ("checkpoint_writes", "checkpoints"):
                await cur.execute(
                    f"DELETE FROM {table} WHERE thread_id = %s AND checkpoint_ns = '' "
                    "AND checkpoint_id = ANY(%s)",
                    (thread_id, ids),
                )
            for channel, version in sorted(orphans):
                await cur.execute(
                    "DELETE FROM checkpoint_blobs WHERE thread_id = %s AND checkpoint_ns = '' "
                    "AND channel = %s AND version = %s",
                    (thread_id, channel, version),
                )
            for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
                await cur.execute(
                    f"DELETE FROM {table} WHERE thread_id = %s AND checkpoint_ns = ANY(%s)",
                    (thread_id, spaces),
                )
            await cur.execute(
                "UPDATE checkpoints SET parent_checkpoint_id = %s WHERE thread_id = %s "
                "AND checkpoint_ns = '' AND checkpoint_id = %s",
                (parent, thread_id, head),
            )
        return True


class SqliteEraser(CheckpointEraser):
    """A SQLite checkpointer: zeroed deletions, one vacuum of an old file, a truncated log."""

    checkpointer: AsyncSqliteSaver

    async def aprepare(self) -> None:
        """Make the connection overwrite what it deletes with zeros (``secure_delete``)."""
        async with self.checkpointer.lock:
            await self.checkpointer.conn.execute("PRAGMA secure_delete = ON")

    async def aerase(self) -> bool:
        """Empty the write-ahead log (vacuum a file written before secure deletion, once).

        Returns False when another connection kept the log from being emptied.
        """
        conn = self.checkpointer.conn
        async with self.checkpointer.lock:
            await conn.commit()
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {SQLITE_META_TABLE} "
                "(key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            async with conn.execute(
                f"SELECT value FROM {SQLITE_META_TABLE} WHERE key = ?", (ZEROED_KEY,)
            ) as cursor:
                zeroed = await cursor.fetchone()
            await conn.commit()
            if zeroed is None:
                # Written before secure deletion was on: its free space may hold old text.
                await conn.execute("VACUUM")
                await conn.execute(
                    f"INSERT OR REPLACE INTO {SQLITE_META_TABLE} (key, value) VALUES (?, '1')",
                    (ZEROED_KEY,),
                )
                await conn.commit()
            await self._areclaim(vacuum=True)
            busy = 1
            for _ in range(_ERASE_ATTEMPTS):
                async with conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cursor:
                    row = await cursor.fetchone()
                busy = int(row[0]) if row else 0
                if not busy:
                    break
                await asyncio.sleep(0.1)
        return not busy

    async def _areclaim(self, *, vacuum: bool) -> None:
        """Give the free pages back once a tenth of the file is free (under the lock).

        Incrementally in a file made with ``auto_vacuum = INCREMENTAL`` (every file
        ``sqlite_checkpointer`` creates since), else (``vacuum``) by one ``VACUUM`` that
        turns it on.
        """
        conn = self.checkpointer.conn
        values = []
        for pragma in ("page_count", "freelist_count", "auto_vacuum"):
            async with conn.execute(f"PRAGMA {pragma}") as cursor:
                row = await cursor.fetchone()
            values.append(int(row[0]) if row else 0)
        pages, free, mode = values
        if free < max(64, pages * RECLAIM_SHARE):
            return
        if mode == 2:
            # A script runs the pragma to its end; one execute() frees a single page.
            await conn.executescript("PRAGMA incremental_vacuum;")
        elif vacuum:
            await conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            await conn.execute("VACUUM")

    async def adrop(
        self, thread_id: str, checkpoint_ids: Sequence[str], *, head: str, parent: str | None
    ) -> bool:
        """Delete the checkpoints and their writes (zeroed), then try once to empty the log.

        The log is emptied only if no other connection is using it (no waiting, no retry:
        all of it holds the lock every checkpoint write of this saver takes); otherwise
        its copies of the deleted pages go at its next checkpoint, or when threads are
        forgotten (:meth:`aerase`, which also vacuums a file written before secure
        deletion).
        """
        ids = list(checkpoint_ids)
        marks = ", ".join("?" for _ in ids)
        conn = self.checkpointer.conn
        async with self.checkpointer.lock:
            await conn.execute("PRAGMA secure_delete = ON")
            for table in ("writes", "checkpoints"):
                await conn.execute(
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' "
                    f"AND checkpoint_id IN ({marks})",
                    (thread_id, *ids),
                )
                # A subgraph's namespace is its task's: only this run wrote in it.
                await conn.execute(
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns <> '' "
                    "AND checkpoint_id >= ? AND checkpoint_id < ?",
                    (thread_id, min(ids, default=head), head),
                )
            await conn.execute(
                "UPDATE checkpoints SET parent_checkpoint_id = ? WHERE thread_id = ? "
                "AND checkpoint_ns = '' AND checkpoint_id = ?",
                (parent, thread_id, head),
            )
            await conn.commit()
            # A large refused input must not leave the file its size: freeing its pages
            # costs about what writing them did; the VACUUM an older file needs does not.
            await self._areclaim(vacuum=False)
            async with conn.execute("PRAGMA busy_timeout") as cursor:
                row = await cursor.fetchone()
            await conn.execute("PRAGMA busy_timeout = 0")
            try:
                await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                await conn.execute(f"PRAGMA busy_timeout = {int(row[0]) if row else 0}")
        return True


def _any_between(saved: Mapping[str, object], first: str, head: str) -> bool:
    return any(first <= checkpoint_id < head for checkpoint_id in saved)


def eraser_of(checkpointer: BaseCheckpointSaver[Any]) -> CheckpointEraser:
    """Return how ``checkpointer`` makes deleted data unreadable."""
    if isinstance(checkpointer, AsyncSqliteSaver):
        return SqliteEraser(checkpointer)
    if isinstance(checkpointer, AsyncPostgresSaver):
        return PostgresEraser(checkpointer)
    if isinstance(checkpointer, InMemorySaver):
        return MemoryEraser(checkpointer)
    return CheckpointEraser(checkpointer)


async def adrop_run(
    checkpointer: BaseCheckpointSaver[Any], thread_id: str, since: str, head: str
) -> int:
    """Delete what a rolled-back run left in the thread's history; return how many checkpoints.

    ``since`` is the checkpoint the run's first node started from (the run's input is
    applied in it and in its parent, the ``input`` checkpoint), ``head`` the checkpoint the
    rollback wrote, which holds the thread as it was and is kept. Everything between them
    goes with their writes: the refused input, and what the run did before it was undone.
    Waits (up to 30 s) for ``head`` to be saved, since LangGraph saves checkpoints in the
    background, after the ones before it.
    """
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    deadline = time.monotonic() + _PERSISTED_WAIT_S
    saved_head: Any = {"configurable": {**config["configurable"], "checkpoint_id": head}}
    while await checkpointer.aget_tuple(saved_head) is None:
        if time.monotonic() > deadline:
            logger.warning("a rolled-back run of thread %r keeps its checkpoints", thread_id)
            return 0
        await asyncio.sleep(0.01)
    doomed: list[str] = []
    parent: str | None = None  # of the oldest doomed: the checkpoint the run started from
    async for saved in checkpointer.alist(config):
        checkpoint_id = str(saved.config["configurable"].get("checkpoint_id", ""))
        if checkpoint_id < since and (
            (saved.metadata or {}).get("source") != "input" or not doomed
        ):
            break
        if checkpoint_id < head:
            # Between ``since`` and ``head``, or the run's input applied (just before).
            doomed.append(checkpoint_id)
            before = (saved.parent_config or {}).get("configurable", {})
            parent = before.get("checkpoint_id")
            if checkpoint_id < since:
                break
    if not doomed:
        return 0
    dropped = await eraser_of(checkpointer).adrop(thread_id, doomed, head=head, parent=parent)
    if not dropped:
        logger.warning(
            "%s cannot delete single checkpoints: a rolled-back run of thread %r keeps its "
            "%d checkpoint(s)",
            type(checkpointer).__name__,
            thread_id,
            len(doomed),
        )
        return 0
    return len(doomed)


@dataclass
class ThreadsDeleted:
    """What :func:`adelete_threads` did."""

    threads: list[str] = field(default_factory=list)
    """Threads whose checkpoints were deleted."""
    kept: list[str] = field(default_factory=list)
    """Threads another user owns (the same id used by someone else): kept."""
    checkpoints: int = 0
    """Checkpoints deleted."""
    erased: bool = True
    """Whether every copy of the deleted data is gone (False: another process kept the
    write-ahead log from being emptied; it holds old pages until its next checkpoint)."""


async def adelete_threads(
    checkpointer: BaseCheckpointSaver[Any],
    user: str,
    threads: Iterable[str],
    *,
    erase: bool = False,
) -> ThreadsDeleted:
    """Delete ``user``'s threads among ``threads``, and make them unreadable.

    A thread whose latest state names another owner is kept. ``erase`` empties the
    checkpointer's logs even when nothing was deleted here (a server that shares the file
    deleted its threads' rows itself).
    """
    eraser = eraser_of(checkpointer)
    await eraser.aprepare()
    done = ThreadsDeleted()
    for thread_id in sorted(set(threads)):
        owner = await athread_owner(checkpointer, thread_id)
        if owner and owner != user:
            # The same thread id used by someone else: their working memory is not ours to drop.
            done.kept.append(thread_id)
            continue
        n = 0
        async for _ in checkpointer.alist({"configurable": {"thread_id": thread_id}}):
            n += 1
        await checkpointer.adelete_thread(thread_id)
        done.checkpoints += n
        if n:
            done.threads.append(thread_id)
    if done.checkpoints or erase:
        done.erased = await eraser.aerase()
    return done

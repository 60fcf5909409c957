"""The checkpointer port forget uses, on each supported checkpointer.

``agentic_memory.checkpoints`` finds a user's threads and deletes them on SQLite, PostgreSQL
and the in-memory saver alike (another owner's thread of the same id is kept), and makes the
deleted data unreadable the way each needs: a SQLite file overwrites with zeros, is vacuumed
once when it was written before that, and has its write-ahead log emptied.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from agentic_memory.checkpoints import (
    SQLITE_META_TABLE,
    ZEROED_KEY,
    CheckpointEraser,
    MemoryEraser,
    PostgresEraser,
    SqliteEraser,
    adelete_threads,
    auser_threads,
    eraser_of,
)
from agentic_memory.forget import forget_thread, forget_user
from agentic_memory.graph.persistence import postgres_checkpointer, sqlite_checkpointer
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

Opener = Callable[[], AbstractAsyncContextManager[BaseCheckpointSaver[Any]]]


class _Owned(TypedDict, total=False):
    said: list[str]
    owner: str


async def _talk(saver: BaseCheckpointSaver[Any], thread: str, user: str, text: str) -> None:
    """One turn that records its owner, as the agent's first step does."""

    async def own(state: _Owned) -> _Owned:
        return {"owner": user, "said": [*state.get("said", []), text]}

    builder: StateGraph[_Owned, None, _Owned, _Owned] = StateGraph(_Owned)
    builder.add_node("own", own)
    builder.add_edge(START, "own")
    graph = builder.compile(checkpointer=saver)
    await graph.ainvoke({"said": []}, {"configurable": {"thread_id": thread}})


async def _count(saver: BaseCheckpointSaver[Any], thread: str) -> int:
    return len([c async for c in saver.alist({"configurable": {"thread_id": thread}})])


def _openers(tmp_path: Path, postgres: str | None) -> dict[str, Opener]:
    @asynccontextmanager
    async def memory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        yield InMemorySaver()

    @asynccontextmanager
    async def sqlite() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        async with sqlite_checkpointer(tmp_path / "cp.sqlite") as saver:
            yield saver

    @asynccontextmanager
    async def postgres_saver() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        assert postgres is not None
        # The database is the session's: leave no thread for the other tests to find.
        threads = ("p-a1", "p-a2", "p-b1", "p-shared")
        async with postgres_checkpointer(postgres) as saver:
            for thread in threads:
                await saver.adelete_thread(thread)
            try:
                yield saver
            finally:
                for thread in threads:
                    await saver.adelete_thread(thread)

    openers: dict[str, Opener] = {"memory": memory, "sqlite": sqlite}
    if postgres is not None:
        openers["postgres"] = postgres_saver
    return openers


async def _port_on(open_saver: Opener, expected: type[CheckpointEraser]) -> None:
    async with open_saver() as saver:
        assert type(eraser_of(saver)) is expected
        await _talk(saver, "p-a1", "alice", "my ssn is 1")
        await _talk(saver, "p-a1", "alice", "again")
        await _talk(saver, "p-a2", "alice", "hello")
        await _talk(saver, "p-b1", "bob", "bob's")
        await _talk(saver, "p-shared", "bob", "bob uses this id too")
        assert await auser_threads(saver, "alice") == ["p-a1", "p-a2"]
        done = await adelete_threads(saver, "alice", ["p-a1", "p-a2", "p-shared", "p-none"])
        assert done.threads == ["p-a1", "p-a2"]
        assert done.kept == ["p-shared"]
        assert done.checkpoints > 2 and done.erased
        assert await auser_threads(saver, "alice") == []
        assert await _count(saver, "p-a1") == 0
        assert await _count(saver, "p-b1") > 0 and await _count(saver, "p-shared") > 0


async def test_the_port_on_the_in_memory_saver(tmp_path: Path) -> None:
    await _port_on(_openers(tmp_path, None)["memory"], MemoryEraser)


async def test_the_port_on_sqlite(tmp_path: Path) -> None:
    await _port_on(_openers(tmp_path, None)["sqlite"], SqliteEraser)


@pytest.mark.integration
async def test_the_port_on_postgres(tmp_path: Path, postgres_uri: str) -> None:
    await _port_on(_openers(tmp_path, postgres_uri)["postgres"], PostgresEraser)


async def test_an_old_sqlite_file_is_vacuumed_once_and_its_log_emptied(tmp_path: Path) -> None:
    """A file not made by ``sqlite_checkpointer`` (no zeroing yet) leaves nothing behind."""
    path = tmp_path / "old.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        await _talk(saver, "t-old", "alice", "a secret said long ago " * 40)
        done = await adelete_threads(saver, "alice", ["t-old"])
        assert done.threads == ["t-old"] and done.erased
        async with saver.conn.execute("PRAGMA secure_delete") as cursor:
            row = await cursor.fetchone()
        assert row is not None and row[0] == 1
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert b"a secret said long ago" not in path.read_bytes()
    with sqlite3.connect(path) as db:
        marks = db.execute(f"SELECT key FROM {SQLITE_META_TABLE}").fetchall()
    assert marks == [(ZEROED_KEY,)]


async def test_erase_runs_for_a_server_s_deletions_even_when_none_were_local(
    tmp_path: Path,
) -> None:
    """A server sharing the file deleted its rows itself: the log is emptied all the same."""
    path = tmp_path / "shared.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        await _talk(saver, "t-x", "alice", "x")
        assert (await adelete_threads(saver, "alice", [])).checkpoints == 0
        with sqlite3.connect(path) as db:
            assert (
                db.execute(
                    f"SELECT name FROM sqlite_master WHERE name = '{SQLITE_META_TABLE}'"
                ).fetchall()
                == []
            )
        await adelete_threads(saver, "alice", [], erase=True)
        with sqlite3.connect(path) as db:
            assert db.execute(f"SELECT key FROM {SQLITE_META_TABLE}").fetchall() == [(ZEROED_KEY,)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_forget_goes_through_the_port(tmp_path: Path, kind: str) -> None:
    embeddings = LocalEmbeddings()
    store = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    try:
        async with _openers(tmp_path, None)[kind]() as saver:
            await _talk(saver, "f-1", "alice", "one")
            await _talk(saver, "f-2", "alice", "two")
            await _talk(saver, "f-b", "bob", "bob's")
            report = await forget_thread(store, "alice", "f-1", checkpointer=saver)
            assert report.threads == ["f-1"] and await _count(saver, "f-1") == 0
            report = await forget_user(store, "alice", checkpointer=saver, embeddings=embeddings)
            assert report.threads == ["f-2"]
            assert report.deleted[("checkpointer", "checkpoints")] > 0
            assert await _count(saver, "f-b") > 0
    finally:
        store.close()

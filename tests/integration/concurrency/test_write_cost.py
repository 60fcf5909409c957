"""A message-log write costs O(thread), not O(user): counted in SQLite VM steps, not time.

SQLite's progress handler is called every N virtual-machine instructions; the number of calls
during one ``remember`` measures the rows it visits, independent of machine load.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.store import MemoryObject, make_id
from agentic_memory.store.embedded import EmbeddedStore
from tests.integration.concurrency.workers import DIMS, HashEmbeddings

_STEP = 50


def _fill(store: EmbeddedStore, threads: int, per_thread: int) -> None:
    """Give alice ``threads`` other threads of ``per_thread`` turns (straight into the store)."""
    emb = HashEmbeddings()
    store.ensure_collection(MESSAGES)
    batch: list[MemoryObject] = []
    for t in range(threads):
        for turn in range(per_thread):
            props = {
                "content": f"old {t} {turn}",
                "role": "human",
                "thread_id": f"old-{t}",
                "turn": turn,
                "created_at": "2026-01-01T00:00:00+00:00",
            }
            batch.append(
                MemoryObject(
                    make_id("msg", "alice", f"old-{t}", f"#{turn}"),
                    props,
                    emb.embed_query(props["content"]),
                )
            )
    store.upsert(MESSAGES.name, batch, user="alice")


def _steps_of_one_write(store: EmbeddedStore, log: MessageLog, thread: str) -> int:
    calls = 0

    def tick() -> int:
        nonlocal calls
        calls += 1
        return 0

    conn = store._conn
    assert isinstance(conn, sqlite3.Connection)
    conn.set_progress_handler(tick, _STEP)
    try:
        asyncio.run(
            log.aremember(
                "alice",
                thread,
                [
                    {"role": "user", "content": "hello", "id": f"h-{thread}"},
                    {"role": "ai", "content": "hi"},
                ],
            )
        )
    finally:
        conn.set_progress_handler(None, _STEP)
    return calls


def _cost(tmp_path: Path, other_rows: int) -> int:
    with EmbeddedStore(tmp_path / f"s{other_rows}", dims=DIMS) as store:
        _fill(store, threads=other_rows // 50, per_thread=50)
        log = MessageLog(store, HashEmbeddings())
        # A thread of its own with a few turns, like a conversation under way.
        for i in range(5):
            asyncio.run(log.aremember("alice", "now", [{"role": "user", "content": f"turn {i}"}]))
        return _steps_of_one_write(store, log, "now")


def test_a_write_does_not_visit_the_users_other_threads(tmp_path: Path) -> None:
    small, large = _cost(tmp_path, 200), _cost(tmp_path, 4000)
    # 20x the user's rows; the write visits the same rows (a little slack for index depth).
    assert large <= small * 1.3 + 10, (small, large)

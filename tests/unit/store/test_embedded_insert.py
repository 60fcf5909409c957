"""Embedded-store specifics of ``insert`` and compound indexes."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import ConflictError, MemoryObject, make_id
from agentic_memory.store.embedded import DB_FILENAME, EmbeddedStore

DIMS = 4


def _indexes(path: Path) -> set[str]:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


def _plan(path: Path) -> str:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        rows = conn.execute(
            'EXPLAIN QUERY PLAN SELECT id FROM "o_MessageLog" WHERE user IS ? '
            'AND "p_thread_id" = ? ORDER BY "p_turn" DESC, id ASC LIMIT 1',
            ("alice", "t"),
        ).fetchall()
    return " ".join(str(r[-1]) for r in rows)


def test_a_store_made_before_the_index_gets_it_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store"
    old_spec = replace(MESSAGES, indexes=())
    with EmbeddedStore(path, dims=DIMS) as store:
        store.ensure_collection(old_spec)
        store.upsert(
            MESSAGES.name,
            [
                MemoryObject(
                    make_id(str(i)),
                    {"content": "x", "role": "human", "thread_id": f"t{i % 3}", "turn": i},
                    [1.0, 0, 0, 0],
                )
                for i in range(30)
            ],
            user="alice",
        )
    assert "cx_MessageLog_thread_id-turn" not in _indexes(path)
    assert "ix_MessageLog_turn" in _plan(path)  # the O(user) walk this index removes
    with EmbeddedStore(path, dims=DIMS) as store:
        store.ensure_collection(MESSAGES)
        assert store.count(MESSAGES.name, user="alice") == 30
    assert "cx_MessageLog_thread_id-turn" in _indexes(path)
    assert "cx_MessageLog_thread_id-turn" in _plan(path)
    # Ensuring again is harmless, and an older spec without the hint still opens the store.
    with EmbeddedStore(path, dims=DIMS) as store:
        store.ensure_collection(MESSAGES)
        store.ensure_collection(old_spec)


def test_a_refused_insert_changes_nothing_and_a_created_one_extends_the_cache(
    tmp_path: Path,
) -> None:
    """A refused insert leaves the token and keyword blocks as they were; a created one adds a
    block, and a cached partition takes it in place instead of loading again."""
    with EmbeddedStore(tmp_path / "store", dims=DIMS) as store:
        store.ensure_collection(MESSAGES)
        props = {"content": "a", "thread_id": "t", "turn": 0}
        first = MemoryObject(make_id("a"), props, [1.0, 0, 0, 0])
        second = MemoryObject(make_id("b"), {**props, "content": "b"}, [0, 1.0, 0, 0])
        store.insert(MESSAGES.name, [first], user="alice")
        conn = store._conn
        assert conn is not None
        query = (
            "SELECT g.token, group_concat(b.block) FROM amem_generations AS g "
            "JOIN amem_blocks AS b ON b.collection = g.collection AND b.scope = g.scope "
            "WHERE g.collection = 'MessageLog'"
        )
        before = conn.execute(query).fetchone()
        assert store.hybrid(MESSAGES.name, query="", vector=[1.0, 0, 0, 0], alpha=1.0, user="alice")
        loads = store._cache.loads
        with pytest.raises(ConflictError):
            store.insert(MESSAGES.name, [second, first], user="alice")
        assert conn.execute(query).fetchone() == before
        assert store.get(MESSAGES.name, make_id("b"), user="alice") is None
        store.insert(MESSAGES.name, [second], user="alice")
        token, blocks = conn.execute(query).fetchone()
        assert token != before[0] and blocks != before[1]
        hits = store.hybrid(MESSAGES.name, query="", vector=[0, 1.0, 0, 0], alpha=1.0, user="alice")
        assert [h.id for h in hits][0] == make_id("b")
        assert store._cache.loads == loads

"""Purges and forgets give the space of what they deleted back: the store's file shrinks.

Before, purging 100,000 logged turns down to 1,000 left the file at 284 MB: SQLite keeps
freed pages for reuse. Now the file shrinks once a tenth of it is free: incrementally
(``auto_vacuum = INCREMENTAL``, every file created since) or, for an older file, by one
``VACUUM`` that turns incremental vacuuming on.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from agentic_memory.api import Memory
from agentic_memory.forget import forget_user
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.messages.schema import message_properties
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import MemoryObject, make_id
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.embedded.sql import DB_FILENAME, PAGE_SIZE

TURNS = 8000
"""Enough that the tables' own pages (16 KB each, about 40) are not a tenth of the file:
since each vector is kept once (layout 7), 4,000 turns make 7 MB and 100 turns with those
pages 0.74 MB."""
KEEP = 100
START = datetime(2026, 1, 1, tzinfo=UTC)


def _fill(store: EmbeddedStore, user: str, turns: int = TURNS) -> None:
    """Log ``turns`` turns of 50-turn threads directly (fast), oldest first."""
    rng = np.random.default_rng(3)
    store.ensure_collection(MESSAGES)
    for first in range(0, turns, 500):
        objects = []
        for i in range(first, min(turns, first + 500)):
            thread, turn = f"t{i // 50}", i % 50
            props = message_properties(
                f"turn {i} of a long conversation about trips and recipes " * 8,
                "human",
                thread,
                turn,
                (START + timedelta(seconds=i)).isoformat(),
                None,
                None,
                "",
                "",
            )
            vector = rng.standard_normal(store.dims).tolist()
            objects.append(MemoryObject(make_id("msg", user, thread, f"#{turn}"), props, vector))
        store.upsert(MESSAGES.name, objects, user=user).raise_for_failures()
    store.erase_deleted()


def _size(store: EmbeddedStore) -> int:
    return sum(p.stat().st_size for p in store.path.glob(DB_FILENAME + "*"))


def _auto_vacuum(path: Path) -> int:
    with sqlite3.connect(path / DB_FILENAME) as db:
        return int(db.execute("PRAGMA auto_vacuum").fetchone()[0])


def _log(store: EmbeddedStore, embeddings: LocalEmbeddings, cap: int | None) -> MessageLog:
    policy = RetentionPolicy(message_days=None, max_messages=cap, purge_interval_minutes=None)
    return MessageLog(store, embeddings, retention=policy)


def test_a_purge_gives_the_space_back(store: EmbeddedStore, embeddings: LocalEmbeddings) -> None:
    _fill(store, "alice")
    full = _size(store)
    report = asyncio.run(_log(store, embeddings, KEEP).apurge("alice"))
    assert report.remaining == KEEP
    assert _size(store) < full / 10, (full, _size(store))
    assert _auto_vacuum(store.path) == 2  # a new file vacuums incrementally


def test_an_older_file_is_rewritten_once_and_vacuums_incrementally_after(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    path = tmp_path / "old"
    path.mkdir()
    # A file an earlier version made: no incremental vacuuming, which only an empty file
    # (or a VACUUM) can switch on.
    with sqlite3.connect(path / DB_FILENAME) as db:
        db.execute("PRAGMA auto_vacuum = NONE")
        db.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # pages of today's size: kept at open
        db.execute("CREATE TABLE made_before (x)")
    with EmbeddedStore(path, dims=embeddings.dims) as store:
        assert _auto_vacuum(path) == 0
        _fill(store, "alice")
        full = _size(store)
        asyncio.run(_log(store, embeddings, KEEP).apurge("alice"))
        assert _size(store) < full / 10
        assert _auto_vacuum(path) == 2
        assert store.count(MESSAGES.name, user="alice") == KEEP


def test_forgetting_a_user_gives_the_space_back(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    _fill(store, "alice")
    _fill(store, "bob", turns=200)
    full = _size(store)
    asyncio.run(forget_user(store, "alice", embeddings=embeddings))
    assert _size(store) < full / 5
    assert store.count(MESSAGES.name, user="bob") == 200


def test_little_free_space_is_kept_for_reuse(
    store: EmbeddedStore, embeddings: LocalEmbeddings
) -> None:
    _fill(store, "alice")
    # A twentieth of the log goes: the pages stay in the file, ready for the next writes.
    asyncio.run(_log(store, embeddings, TURNS - TURNS // 20).apurge("alice"))
    assert store.reclaim_space() == 0
    mem = Memory(store, embeddings, retention=RetentionPolicy(max_messages=KEEP))
    before = _size(store)
    assert [r.messages.over_cap for r in mem.purge()] == [TURNS - TURNS // 20 - KEEP]
    assert _size(store) < before / 10

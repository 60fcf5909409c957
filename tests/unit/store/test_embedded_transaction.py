"""``EmbeddedStore.transaction``: every call of a handle inside the block, all or nothing.

What an import builds on: its writes (and the reads that decide them) are one SQLite
transaction, so a failure in the middle leaves the store as it was, and another writer
either sees none of it or all of it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from agentic_memory.store import (
    ConflictError,
    MemoryObject,
    StoreError,
    make_id,
)
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.store.conftest import DIMS, make_spec, vec

SPEC = make_spec("Tx")


def obj(key: str, rank: int) -> MemoryObject:
    return MemoryObject(make_id(key), {"body": key, "rank": rank}, vec(1, 0))


def ranks(store: EmbeddedStore) -> list[int]:
    return sorted(o.properties["rank"] for o in store.list_objects(SPEC.name, user="a"))


def test_a_block_commits_together_or_not_at_all(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s", dims=DIMS) as store:
        store.ensure_collection(SPEC)
        store.upsert(SPEC.name, [obj("kept", 0)], user="a")
        with pytest.raises(RuntimeError, match="stop"):
            with store.transaction():
                store.upsert(SPEC.name, [obj("x", 1)], user="a")
                store.delete(SPEC.name, [make_id("kept")], user="a")
                assert ranks(store) == [1]  # the block reads its own writes
                store.ensure_collection(make_spec("TxNew"))
                raise RuntimeError("stop")
        assert ranks(store) == [0]
        assert "TxNew" not in store.collections()
        with store.transaction():
            store.upsert(SPEC.name, [obj("y", 2)], user="a")
            store.upsert(SPEC.name, [obj("z", 3)], user="a")
        assert ranks(store) == [0, 2, 3]
        # Searches after a rolled-back block do not see what it wrote.
        hits = store.hybrid(SPEC.name, query="x", vector=vec(1, 0), user="a")
        assert make_id("x") not in [h.id for h in hits]


def test_a_failing_call_inside_a_block_undoes_only_itself(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s", dims=DIMS) as store:
        store.ensure_collection(SPEC)
        with store.transaction():
            store.upsert(SPEC.name, [obj("a1", 1)], user="a")
            with pytest.raises(ConflictError):
                store.insert(SPEC.name, [obj("a2", 2), obj("a1", 9)], user="a")
            store.upsert(SPEC.name, [obj("a3", 3)], user="a")
        assert ranks(store) == [1, 3]


def test_nested_blocks_are_refused(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s", dims=DIMS) as store:
        with store.transaction(), pytest.raises(StoreError, match="already open"):
            with store.transaction():
                pass


def test_another_handle_waits_for_the_block_and_sees_all_of_it(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "s", dims=DIMS) as store:
        store.ensure_collection(SPEC)
        started, read = threading.Event(), threading.Event()
        seen: list[list[int]] = []

        # Opened first: opening a handle writes the catalogue, so it waits for a block too.
        handle = EmbeddedStore(tmp_path / "s", dims=DIMS)
        handle.spec(SPEC.name)

        def other() -> None:
            with handle:
                started.wait(30)
                seen.append(ranks(handle))  # a reader sees the state before the block
                read.set()
                handle.upsert(SPEC.name, [obj("late", 9)], user="a")  # a writer waits
                seen.append(ranks(handle))

        thread = threading.Thread(target=other)
        thread.start()
        with store.transaction():
            store.upsert(SPEC.name, [obj("b1", 1)], user="a")
            started.set()
            assert read.wait(30)
            time.sleep(0.2)  # the other handle's write is now waiting for the lock
            store.upsert(SPEC.name, [obj("b2", 2)], user="a")
        thread.join(60)
        assert seen == [[], [1, 2, 9]]

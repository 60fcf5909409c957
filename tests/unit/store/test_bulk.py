"""Bulk writes (``MemoryStore.bulk``): checked at once, written in large batches, lose nothing.

The conformance cases run on every backend (Weaviate when ``WEAVIATE_URL`` answers); the
embedded store's own promises follow: one transaction per flush, keyword blocks built once
per flush (full, not merged batch after batch), all or nothing inside ``transaction()``, and
a process killed in the middle of a bulk load keeps every flush before the one it died in,
whole, and nothing of that one.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentic_memory.store import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    make_id,
)
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.store.conftest import DIMS, make_spec, vec


def _objects(prefix: str, count: int, start: int = 0) -> list[MemoryObject]:
    return [
        MemoryObject(
            make_id(prefix, str(i)),
            {"body": f"apple row {i} {prefix}", "rank": i % 7},
            vec(1, i % 5, i / 100),
        )
        for i in range(start, start + count)
    ]


def _stored(store: MemoryStore, name: str, user: str | None) -> dict[str, object]:
    return {
        o.id: (o.properties, o.vector)
        for o in store.iterate(name, user=user, include_vector=True, page_size=500)
    }


def test_bulk_writes_what_upserts_write_in_flushes(
    store: MemoryStore, coll: CollectionSpec, new_name: object
) -> None:
    # 1,000 objects given 37 at a time, flushed every 300: the same objects, vectors and
    # answers as the same batches upserted one by one into another collection.
    other = make_spec(new_name())  # type: ignore[operator]
    store.ensure_collection(other)
    objects = _objects("b", 1000)
    flushes: list[int] = []
    with store.bulk(coll.name, user="alice", rows=300) as writer:
        for start in range(0, 1000, 37):
            writer.upsert(objects[start : start + 37])
            flushes.append(writer.written)
            assert writer.held + writer.written == min(start + 37, 1000)
        assert writer.written == 999 and writer.held == 1
    assert writer.written == 1000 and writer.held == 0
    assert sorted(set(flushes)) == [0, 333, 666, 999]
    for start in range(0, 1000, 37):
        store.upsert(other.name, objects[start : start + 37], user="alice")
    assert _stored(store, coll.name, "alice") == _stored(store, other.name, "alice")
    for query in ("apple", "row 7", "b"):
        got = store.hybrid(coll.name, query=query, vector=vec(1, 2), user="alice", limit=20)
        want = store.hybrid(other.name, query=query, vector=vec(1, 2), user="alice", limit=20)
        assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in want]


def test_bulk_checks_each_batch_at_once_and_a_failed_block_keeps_what_was_written(
    store: MemoryStore, coll: CollectionSpec
) -> None:
    good = _objects("g", 50)
    with pytest.raises(RuntimeError, match="caller failed"):
        with store.bulk(coll.name, user="alice", rows=40) as writer:
            writer.upsert(good)  # 50 >= 40: written now
            bad = [*_objects("x", 3), MemoryObject(make_id("x", "bad"), {"rank": "seven"}, vec(1))]
            with pytest.raises(InvalidInputError):
                writer.upsert(bad)
            assert writer.held == 0, "nothing of a refused batch is kept"
            writer.upsert(_objects("h", 10))
            assert writer.held == 10
            raise RuntimeError("caller failed")
    stored = _stored(store, coll.name, "alice")
    assert sorted(stored) == sorted(o.id for o in good), "held objects are dropped, not written"
    with pytest.raises(InvalidInputError):
        with store.bulk(coll.name, rows=10):  # a per-user collection needs a user
            pass
    with pytest.raises(InvalidInputError, match="rows"):
        with store.bulk(coll.name, user="alice", rows=0):
            pass


def test_an_id_given_again_replaces_the_earlier_object(
    store: MemoryStore, coll: CollectionSpec
) -> None:
    first = _objects("r", 5)
    again = [MemoryObject(first[2].id, {"body": "replaced"}, vec(0, 1))]
    with store.bulk(coll.name, user="alice", rows=100) as writer:
        writer.upsert(first)
        writer.upsert(again)  # the five held objects are written first
        assert writer.written == 5 and writer.held == 1
        with pytest.raises(InvalidInputError, match="twice"):
            writer.upsert([*again, *again])
    got = store.get(coll.name, first[2].id, user="alice", include_vector=True)
    assert got is not None and got.properties == {"body": "replaced"}
    assert got.vector == vec(0, 1)
    assert store.count(coll.name, user="alice") == 5


def test_abulk_writes_from_a_coroutine(store: MemoryStore, coll: CollectionSpec) -> None:
    async def load() -> int:
        async with store.abulk(coll.name, user="alice", rows=64) as writer:
            for start in range(0, 200, 50):
                await writer.aupsert(_objects("a", 50, start))
        return writer.written

    assert asyncio.run(load()) == 200
    assert store.count(coll.name, user="alice") == 200


def test_embedded_bulk_builds_each_flush_s_blocks_once(tmp_path: Path) -> None:
    # Batches of 128 upserted one by one merge the partition's newest block again and again;
    # through a bulk writer each flush writes full blocks of 1,024 rows once.
    spec = make_spec("Blocks")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    conn = store._conn
    assert conn is not None

    def blocks_written() -> int:
        (seq,) = conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'amem_blocks'"
        ).fetchone()
        return int(seq)

    with store.bulk(spec.name, user="alice", rows=2048) as writer:
        for start in range(0, 4096, 128):
            writer.upsert(_objects("e", 128, start))
    bulk_blocks = blocks_written()
    assert bulk_blocks == 4 and writer.written == 4096
    sizes = [r[0] for r in conn.execute("SELECT rows FROM amem_blocks ORDER BY block")]
    assert sizes == [1024] * 4
    for start in range(0, 4096, 128):
        store.upsert(spec.name, _objects("f", 128, start), user="bob")
    assert blocks_written() - bulk_blocks > 32, "one block per upsert, and merges"

    store.close()


def test_embedded_bulk_inside_a_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    spec = make_spec("Tx")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    with pytest.raises(RuntimeError, match="late failure"):
        with store.transaction():
            with store.bulk(spec.name, user="alice", rows=30) as writer:
                writer.upsert(_objects("t", 100))
                assert writer.written == 100
            raise RuntimeError("late failure")
    assert store.count(spec.name, user="alice") == 0
    store.close()


_KILLED_BULK = textwrap.dedent(
    """
    import os, signal, sys
    import agentic_memory.store.embedded.store as embedded_store
    from agentic_memory.store import MemoryObject, make_id
    from agentic_memory.store.embedded import EmbeddedStore
    from tests.unit.store.conftest import make_spec, vec

    real = embedded_store.EmbeddedStore._reindex
    calls = []

    def reindex(self, *args, **kwargs):
        real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            # The third flush's rows and blocks are written, its transaction not committed.
            os.kill(os.getpid(), signal.SIGKILL)

    embedded_store.EmbeddedStore._reindex = reindex
    store = EmbeddedStore(sys.argv[1], dims=8)
    with store.bulk("Killed", user="alice", rows=500) as writer:
        for i in range(0, 2000, 50):
            writer.upsert([
                MemoryObject(make_id("k", str(n)), {"body": f"killed row {n}"}, vec(1, n % 5))
                for n in range(i, i + 50)
            ])
    print("finished without being killed")
    """
)


def test_a_process_killed_inside_a_bulk_flush_keeps_the_flushes_before_it_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store"
    store = EmbeddedStore(path, dims=DIMS)
    store.ensure_collection(make_spec("Killed"))
    store.close()
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_BULK, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert child.returncode == -signal.SIGKILL, child.stderr + child.stdout
    after = EmbeddedStore(path, dims=DIMS)
    stored = {o.id for o in after.iterate("Killed", user="alice")}
    assert stored == {make_id("k", str(n)) for n in range(1000)}, "two flushes, whole"
    hits = after.hybrid("Killed", query="killed row", vector=vec(1, 2), user="alice", limit=2000)
    assert len(hits) == 1000
    # The partition takes more writes as usual.
    after.upsert(
        "Killed", [MemoryObject(make_id("k", "late"), {"body": "late"}, vec(0, 1))], user="alice"
    )
    assert after.count("Killed", user="alice") == 1001
    after.close()

"""The vectors the embedded store keeps in its keyword blocks, once (layout 7).

A row's vector lives in the block of its current entry only: the row's own column is empty.
A cold load reads these blobs instead of every row, and ``get``/``iterate``/``update`` read
a row's vector from its block: a block whose vectors drifted from what was written would
rank and export the wrong vectors without any error, so every test here compares the blocks
and what reads return with the vectors the test wrote.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import agentic_memory.store.embedded as embedded
from agentic_memory.store import (
    MemoryObject,
    SearchHit,
    StoredObject,
    StoreError,
    Where,
    make_id,
)
from agentic_memory.store.embedded import DB_FILENAME, EmbeddedStore
from agentic_memory.store.embedded.blocks import decode_rowinfo
from agentic_memory.store.embedded.cache import PartitionCache
from agentic_memory.store.embedded.vectors import decode_vectors
from tests.unit.store.conftest import DIMS, make_spec, vec
from tests.unit.store.test_embedded_store import WRITER, _downgrade_to_layout_6

WORDS = "apple pear plum fig kiwi lime date grape melon berry cherry peach".split()


def _hits(hits: list[SearchHit]) -> list[tuple[str, float, float | None, float | None]]:
    return [(h.id, h.score, h.keyword_score, h.vector_score) for h in hits]


def _f32(vector: list[float]) -> list[float]:
    """Return a vector as the store gives it back: its float32 values."""
    back: list[float] = np.asarray(vector, dtype=np.float32).astype(np.float64).tolist()
    return back


def _blocks_hold(
    conn: sqlite3.Connection, name: str, user: str | None, written: dict[str, list[float]]
) -> int:
    """Assert the partition's rows hold no vector and its blocks the written ones.

    ``written``: each stored id's last written vector. A superseded entry (an older birth
    than the row's newest) is not checked: no read takes it. ``user``: None for a shared
    collection. Returns the number of blocks.
    """
    rows = conn.execute(
        f'SELECT rid, id, length(vector) FROM "o_{name}" WHERE user IS ?', (user,)
    ).fetchall()
    assert sorted(r[1] for r in rows) == sorted(written), "other rows stored than written"
    assert all(r[2] == 0 for r in rows), "a row of this layout keeps no vector of its own"
    id_of = {rid: oid for rid, oid, _ in rows}
    listed = [
        (decode_rowinfo(info), blob)
        for info, blob in conn.execute(
            "SELECT rowinfo, vectors FROM amem_blocks WHERE collection = ? AND scope = ?",
            (name, user or ""),
        )
    ]
    newest: dict[int, int] = {}
    for (rids, births), _ in listed:
        for rid, birth in zip(rids.tolist(), births.tolist(), strict=True):
            newest[rid] = max(birth, newest.get(rid, birth))
    assert sorted(newest) == sorted(id_of), "the blocks name other rows than are stored"
    for (rids, births), blob in listed:
        stored = decode_vectors(blob, rids.size, DIMS)
        assert stored is not None, "a block written by this code has no vectors"
        for rid, birth, vector in zip(rids.tolist(), births.tolist(), stored, strict=True):
            if newest[rid] == birth:
                assert vector.astype(np.float64).tolist() == _f32(written[id_of[rid]])
    return len(listed)


def _row_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many rows' own vectors a load reads from the object table."""
    read: list[int] = []
    for name in ("_scan_units", "_read_units"):
        real = getattr(PartitionCache, name)

        def spy(self: PartitionCache, *args: object, real: object = real, name: str = name) -> None:
            # (conn, collection, user, part) and, to read some rows only, their slots.
            part = args[3]
            read.append(part.slots if name == "_scan_units" else len(args[4]))  # type: ignore[attr-defined, arg-type]
            real(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(PartitionCache, name, spy)
    return read


@pytest.mark.parametrize("seed", [3, 19])
@pytest.mark.parametrize("vectors", ["exact", "two-pass"])
def test_block_vectors_are_the_written_ones_through_every_kind_of_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, vectors: str
) -> None:
    # Blocks of 8 rows, so that writes merge, rewrite and compact blocks all the time: new
    # rows, upserts and updates of existing ids in place (superseded entries), deletes by id
    # and by filter, forgetting a user, erase_deleted's compaction and, with tiny PCA
    # thresholds, axes chosen anew (every block reprojected). After each write every row's
    # own vector is empty, every block holds its current rows' written vectors, get,
    # iterate and update give them back, and a new process's first search reads no row yet
    # answers exactly as the writer's cache updated in place.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    if vectors == "two-pass":
        monkeypatch.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 10)
        monkeypatch.setattr(embedded.vectors, "COARSE_MIN_SHORTLIST", 6)
        monkeypatch.setattr(embedded.vectors, "COARSE_RERANK", 0)
        monkeypatch.setattr(embedded.vectors, "COARSE_DIMS", 3)
    rng = random.Random(seed)
    spec = make_spec("Units")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    written: dict[str, dict[str, list[float]]] = {"alice": {}, "bob": {}}

    def obj(oid: str) -> MemoryObject:
        body = " ".join(rng.choices(WORDS, k=rng.randint(1, 8)))
        return MemoryObject(
            oid,
            {"body": body, "rank": rng.randint(0, 5)},
            [rng.uniform(-1, 1) for _ in range(DIMS)],
        )

    read = _row_reads(monkeypatch)
    ops = ["add"] * 4 + ["replace", "update", "delete", "delete_where", "forget", "erase"]
    seen: set[str] = set()
    for step in range(45):
        user = rng.choice(["alice", "alice", "bob"])
        mine = written[user]
        op = "add" if step < 4 or len(mine) < 3 else rng.choice(ops)
        seen.add(op)
        if op == "add":
            batch = [
                obj(make_id(user, str(step), str(k))) for k in range(rng.choice([1, 2, 5, 11]))
            ]
            store.upsert(spec.name, batch, user=user)
            mine.update((o.id, list(o.vector)) for o in batch)
        elif op == "replace":
            batch = [obj(i) for i in rng.sample(sorted(mine), min(len(mine), rng.choice([1, 3])))]
            store.upsert(spec.name, batch, user=user)
            mine.update((o.id, list(o.vector)) for o in batch)
        elif op == "update":
            chosen = rng.sample(sorted(mine), min(len(mine), 2))
            given: dict[str, list[float]] = {}

            def change(
                old: StoredObject,
                given: dict[str, list[float]] = given,
                mine: dict[str, list[float]] = mine,
            ) -> MemoryObject:
                # The vector passed to the change is the one stored (read from the block).
                assert old.vector == _f32(mine[old.id])
                new = obj(old.id)
                given[new.id] = list(new.vector)
                return new

            store.update(spec.name, chosen, change, user=user)
            assert sorted(given) == sorted(chosen)
            mine.update(given)
        elif op == "delete":
            gone = rng.sample(sorted(mine), min(len(mine), rng.choice([1, 2])))
            store.delete(spec.name, gone, user=user)
            for i in gone:
                del mine[i]
        elif op == "delete_where":
            rank = rng.randint(0, 5)
            kept = {
                o.id
                for o in store.list_objects(spec.name, user=user, limit=1000)
                if o.properties.get("rank") != rank
            }
            store.delete_where(spec.name, [Where("rank", "eq", rank)], user=user)
            for i in [i for i in mine if i not in kept]:
                del mine[i]
        elif op == "forget":
            store.delete_user(spec.name, user)
            mine.clear()
            continue
        else:
            store.erase_deleted()
        conn = store._conn
        assert conn is not None
        for someone in ("alice", "bob"):
            _blocks_hold(conn, spec.name, someone, written[someone])
        listed = store.iterate(spec.name, user=user, include_vector=True, page_size=7)
        assert {o.id: o.vector for o in listed} == {i: _f32(v) for i, v in mine.items()}
        one = rng.choice(sorted(mine))
        got = store.get(spec.name, one, user=user, include_vector=True)
        assert got is not None and got.vector == _f32(mine[one])
        query: dict[str, object] = {
            "query": " ".join(rng.choices(WORDS, k=2)),
            "vector": [rng.uniform(-1, 1) for _ in range(DIMS)],
            "alpha": rng.choice([0.5, 1.0]),
            "limit": 20,
            "user": user,
        }
        want = _hits(store.hybrid(spec.name, **query))  # type: ignore[arg-type]
        read.clear()
        fresh = EmbeddedStore(tmp_path, dims=DIMS)
        got_hits = _hits(fresh.hybrid(spec.name, **query))  # type: ignore[arg-type]
        fresh.close()
        assert read == [], f"a cold load read {read} rows' vectors at step {step} ({op})"
        assert got_hits == want, (step, op)
    assert seen == set(ops), f"the random walk missed {set(ops) - seen}"
    store.close()


def _layout_5(db: Path) -> None:
    """Rewrite a layout-6 file as layout 5 wrote it: no unit vectors, no centroids."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("ALTER TABLE amem_blocks DROP COLUMN unit")
    conn.execute("ALTER TABLE amem_axes DROP COLUMN centroids")
    conn.execute("ALTER TABLE amem_axes DROP COLUMN centroid_rows")
    conn.execute("UPDATE amem_meta SET value = '5' WHERE key = 'schema_version'")
    conn.close()


@pytest.mark.parametrize("layout", [6, 5])
def test_an_older_store_moves_its_vectors_into_the_blocks_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: int
) -> None:
    # Layouts 5 and 6 kept each vector in its row (layout 6 a unit copy in the block too).
    # Opening such a file moves the vectors into the blocks in the opening transaction: a
    # crash inside leaves the file as it was; another process holding the file open defers
    # the vacuum, not the move; the answers, and every vector read back, stay the same; the
    # file shrinks once the next open alone with it vacuums it.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 16)
    rng = random.Random(8)
    specs = [make_spec("Old"), make_spec("OldShared", per_user=False)]
    store = EmbeddedStore(tmp_path, dims=DIMS)
    written: dict[tuple[str, str | None], dict[str, list[float]]] = {}
    for spec in specs:
        store.ensure_collection(spec)
        for user in ("alice", "bob") if spec.per_user else (None,):
            mine = written.setdefault((spec.name, user), {})
            for start in range(0, 100, 16):
                batch = [
                    MemoryObject(
                        make_id(str(user), str(i)),
                        {"body": " ".join(rng.choices(WORDS, k=rng.randint(1, 8)))},
                        [rng.uniform(-1, 1) for _ in range(DIMS)],
                    )
                    for i in range(start, min(start + 16, 100))
                ]
                store.upsert(spec.name, batch, user=user)
                mine.update((o.id, list(o.vector)) for o in batch)
            edits = [
                MemoryObject(i, {"body": "edited"}, [rng.uniform(-1, 1) for _ in range(DIMS)])
                for i in sorted(mine)[::13]
            ]
            store.upsert(spec.name, edits, user=user)  # superseded entries
            mine.update((o.id, list(o.vector)) for o in edits)

    def answers(s: EmbeddedStore) -> list[object]:
        out: list[object] = []
        for spec in specs:
            for user in ("alice", "bob") if spec.per_user else (None,):
                out.append(
                    {o.id: o.vector for o in s.iterate(spec.name, user=user, include_vector=True)}
                )
                for i, word in enumerate(WORDS[:4]):
                    hits = s.hybrid(
                        spec.name, query=word, vector=vec(1, i), alpha=0.6, limit=30, user=user
                    )
                    out.append(_hits(hits))
        return out

    before = answers(store)
    assert before[0] == {i: _f32(v) for i, v in written[("Old", "alice")].items()}
    store.close()
    db = tmp_path / DB_FILENAME
    _downgrade_to_layout_6(db)
    if layout == 5:
        _layout_5(db)
    old_bytes = db.stat().st_size

    def crash(*_: object) -> None:
        raise RuntimeError("power cut")

    real = embedded.blocks.move_vectors

    calls: list[str] = []

    def move_then_crash(conn: sqlite3.Connection, name: str, *args: object) -> None:
        real(conn, name, *args)  # type: ignore[arg-type]
        calls.append(name)
        if len(calls) == 2:
            crash()

    monkeypatch.setattr(embedded.sql, "move_vectors", move_then_crash)
    with pytest.raises(RuntimeError, match="power cut"):
        EmbeddedStore(tmp_path, dims=DIMS)
    monkeypatch.setattr(embedded.sql, "move_vectors", real)
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone() == (
        str(layout),
    )
    assert "vectors" not in {r[1] for r in conn.execute("PRAGMA table_info(amem_blocks)")}
    assert conn.execute('SELECT min(length(vector)) FROM "o_Old"').fetchone() == (4 * DIMS,)
    conn.close()

    other = sqlite3.connect(db, isolation_level=None)
    other.execute("SELECT count(*) FROM amem_meta").fetchone()
    read = _row_reads(monkeypatch)
    migrated = EmbeddedStore(tmp_path, dims=DIMS)
    assert answers(migrated) == before
    assert read == [], "a migrated store reads its vectors from the blocks"
    mconn = migrated._conn
    assert mconn is not None
    assert mconn.execute("SELECT count(*) FROM amem_blocks WHERE unit IS NOT NULL").fetchone() == (
        0,
    )
    for (name, user), mine in written.items():
        _blocks_hold(mconn, name, user, mine)
    assert mconn.execute("SELECT value FROM amem_meta WHERE key = 'vacuum_pending'").fetchone()
    migrated.close()
    other.close()

    reopened = EmbeddedStore(tmp_path, dims=DIMS)
    assert answers(reopened) == before
    reopened.close()
    assert db.stat().st_size < old_bytes


def test_a_block_written_by_older_code_is_read_from_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process of layout 6 that had the file open before it was migrated writes rows with
    # their vectors and blocks without: a load reads those rows' vectors (that block's
    # alone), get and iterate read them from the rows, and writes that rewrite the block
    # leave them where they are. Every answer stays the one of the vectors written.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 16)
    spec = make_spec("Mixed")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    rng = random.Random(4)
    written: dict[str, list[float]] = {}
    for start in range(0, 64, 16):
        batch = [
            MemoryObject(
                make_id(str(i)), {"body": f"row {i}"}, [rng.uniform(-1, 1) for _ in range(8)]
            )
            for i in range(start, start + 16)
        ]
        store.upsert(spec.name, batch, user="alice")
        written.update((o.id, list(o.vector)) for o in batch)
    query: dict[str, object] = {"query": "row", "vector": vec(1, 2), "limit": 40, "user": "alice"}
    want = _hits(store.hybrid(spec.name, **query))  # type: ignore[arg-type]
    conn = store._conn
    assert conn is not None
    # What such a process leaves: one block's vectors in its rows, none in the block.
    block, info, blob = conn.execute(
        "SELECT block, rowinfo, vectors FROM amem_blocks ORDER BY block LIMIT 1 OFFSET 1"
    ).fetchone()
    rids, _ = decode_rowinfo(info)
    stored = decode_vectors(blob, rids.size, DIMS)
    assert stored is not None
    conn.executemany(
        f'UPDATE "o_{spec.name}" SET vector = ? WHERE rid = ?',
        [(v.tobytes(), rid) for rid, v in zip(rids.tolist(), stored, strict=True)],
    )
    conn.execute("UPDATE amem_blocks SET vectors = NULL WHERE block = ?", (block,))
    read = _row_reads(monkeypatch)
    fresh = EmbeddedStore(tmp_path, dims=DIMS)
    assert _hits(fresh.hybrid(spec.name, **query)) == want  # type: ignore[arg-type]
    assert read == [rids.size], "the rows of that block alone should have been read"
    listed = fresh.iterate(spec.name, user="alice", include_vector=True)
    assert {o.id: o.vector for o in listed} == {i: _f32(v) for i, v in written.items()}
    # Rewrites of that block: a delete of one of its rows, an edit of another.
    some = sorted(written)
    held = {r[0] for r in conn.execute(f'SELECT id FROM "o_{spec.name}" WHERE length(vector) > 0')}
    gone, edited = sorted(held)[:2]
    fresh.delete(spec.name, [gone], user="alice")
    del written[gone]
    fresh.upsert(spec.name, [MemoryObject(edited, {"body": "edited"}, vec(0, 3))], user="alice")
    written[edited] = vec(0, 3)
    listed = fresh.iterate(spec.name, user="alice", include_vector=True)
    assert {o.id: o.vector for o in listed} == {i: _f32(v) for i, v in written.items()}
    assert len(some) == 64
    fresh.close()
    store.close()


def test_a_failed_write_leaves_blocks_and_rows_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The vectors are written and rewritten in the rows' transaction: a write that fails at
    # its very end (the generation bump, after blocks were added and merged) leaves blocks
    # and rows as they were.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    spec = make_spec("Crash")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    ids = [make_id(str(i)) for i in range(30)]
    written = {i: vec(1, n) for n, i in enumerate(ids)}
    store.upsert(
        spec.name,
        [MemoryObject(i, {"body": f"row {n}"}, written[i]) for n, i in enumerate(ids)],
        user="alice",
    )
    conn = store._conn
    assert conn is not None
    snapshot = conn.execute("SELECT * FROM amem_blocks ORDER BY block").fetchall()
    rows = conn.execute(f'SELECT * FROM "o_{spec.name}" ORDER BY rid').fetchall()

    def fail(*_: object) -> None:
        raise RuntimeError("killed")

    monkeypatch.setattr(embedded.store, "_bump", fail)
    with pytest.raises(RuntimeError, match="killed"):
        store.upsert(
            spec.name,
            [MemoryObject(ids[n], {"body": "edited"}, vec(0, 1, n)) for n in (1, 9, 17)]
            + [MemoryObject(make_id("new"), {"body": "new"}, vec(0, 0, 1))],
            user="alice",
        )
    assert conn.execute("SELECT * FROM amem_blocks ORDER BY block").fetchall() == snapshot
    assert conn.execute(f'SELECT * FROM "o_{spec.name}" ORDER BY rid').fetchall() == rows
    monkeypatch.undo()
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    store.upsert(spec.name, [MemoryObject(ids[1], {"body": "edited"}, vec(0, 1))], user="alice")
    written[ids[1]] = vec(0, 1)
    _blocks_hold(conn, spec.name, "alice", written)
    store.close()


def test_block_vectors_are_the_written_ones_when_processes_write_one_user_at_once(
    tmp_path: Path,
) -> None:
    # Three processes append to one user's partition while this one rewrites rows in place
    # and deletes some: every block still holds its rows' written vectors, and a cold search
    # answers as this process's cache updated in place.
    path = tmp_path / "store"
    spec = make_spec("Shared_Units")
    store = EmbeddedStore(path, dims=DIMS)
    store.ensure_collection(spec)
    seed = [make_id("seed", str(i)) for i in range(20)]
    written = {i: vec(1, n) for n, i in enumerate(seed)}
    store.upsert(
        spec.name,
        [MemoryObject(i, {"body": f"seed {n}"}, written[i]) for n, i in enumerate(seed)],
        user="alice",
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), spec.name, str(w), "30"],
            cwd=Path(__file__).resolve().parents[3],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    turn = 0
    while any(p.poll() is None for p in workers):
        oid = seed[turn % 20]
        store.upsert(
            spec.name, [MemoryObject(oid, {"body": f"edit {turn}"}, vec(0, 1, turn))], user="alice"
        )
        written[oid] = vec(0, 1, turn)
        if turn % 7 == 6:
            store.delete(spec.name, [oid], user="alice")
            del written[oid]
        turn += 1
    for p in workers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    written.update({make_id(str(w), str(i)): vec(0, 1, i) for w in range(3) for i in range(30)})
    conn = store._conn
    assert conn is not None
    _blocks_hold(conn, spec.name, "alice", written)
    query: dict[str, object] = {
        "query": "item edit",
        "vector": vec(0, 1),
        "limit": 50,
        "user": "alice",
    }
    fresh = EmbeddedStore(path, dims=DIMS)
    got = _hits(fresh.hybrid(spec.name, **query))  # type: ignore[arg-type]
    fresh.close()
    assert got == _hits(store.hybrid(spec.name, **query))  # type: ignore[arg-type]
    store.close()


def test_erase_deleted_takes_an_edited_rows_old_vector_out_of_the_blocks(tmp_path: Path) -> None:
    # An upsert of an existing id leaves the old version's entry, vector included, in its
    # block until the block is compacted; erase_deleted compacts it, and a delete takes
    # every entry of the row at once.
    spec = make_spec("Erase")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    ids = [make_id(str(i)) for i in range(12)]
    store.upsert(
        spec.name,
        [MemoryObject(i, {"body": f"row {n}"}, vec(1, n, 0.5)) for n, i in enumerate(ids)],
        user="alice",
    )
    conn = store._conn
    assert conn is not None
    old = np.asarray(vec(1, 3, 0.5), dtype=np.float32).tobytes()
    gone = np.asarray(vec(1, 7, 0.5), dtype=np.float32).tobytes()

    def held(blob: bytes) -> bool:
        return any(
            blob in vectors for (vectors,) in conn.execute("SELECT vectors FROM amem_blocks")
        )

    assert held(old) and held(gone)
    store.upsert(spec.name, [MemoryObject(ids[3], {"body": "edited"}, vec(0, 1))], user="alice")
    assert held(old), "superseded, not yet compacted"
    store.delete(spec.name, [ids[7]], user="alice")
    assert not held(gone)
    assert store.erase_deleted()
    assert not held(old)
    written = {i: vec(1, n, 0.5) for n, i in enumerate(ids) if n != 7}
    written[ids[3]] = vec(0, 1)
    _blocks_hold(conn, spec.name, "alice", written)
    store.close()


@pytest.mark.parametrize("damage", ["short", "double"])
def test_damaged_block_vectors_are_a_store_error_that_changes_nothing(
    tmp_path: Path, damage: str
) -> None:
    # The vectors are kept once: a block whose vectors have a size its rows do not fit (a
    # damaged file) cannot be read around. Searches and reads of that partition raise a
    # store error saying so, and writes that would rewrite the block fail before writing
    # anything; another user's partition is unaffected.
    spec = make_spec("Damaged")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    for user in ("alice", "bob"):
        store.upsert(
            spec.name,
            [
                MemoryObject(make_id(user, str(n)), {"body": f"row {n}"}, vec(1, n, n % 3))
                for n in range(20)
            ],
            user=user,
        )
    conn = store._conn
    assert conn is not None
    (block, blob) = conn.execute(
        "SELECT block, vectors FROM amem_blocks WHERE scope = 'alice'"
    ).fetchone()
    conn.execute(
        "UPDATE amem_blocks SET vectors = ? WHERE block = ?",
        (blob[:12] if damage == "short" else blob + blob, block),
    )
    snapshot = conn.execute("SELECT * FROM amem_blocks ORDER BY block").fetchall()
    fresh = EmbeddedStore(tmp_path, dims=DIMS)
    with pytest.raises(StoreError, match="damaged"):
        fresh.hybrid(spec.name, query="row", vector=vec(1, 2), user="alice")
    with pytest.raises(StoreError, match="damaged"):
        fresh.get(spec.name, make_id("alice", "3"), user="alice", include_vector=True)
    with pytest.raises(StoreError, match="damaged"):
        fresh.delete(spec.name, [make_id("alice", "3")], user="alice")
    assert conn.execute("SELECT * FROM amem_blocks ORDER BY block").fetchall() == snapshot
    assert len(fresh.hybrid(spec.name, query="row", vector=vec(1, 2), user="bob", limit=30)) == 20
    fresh.close()
    store.close()

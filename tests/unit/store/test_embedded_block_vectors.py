"""The unit vectors the embedded store's keyword blocks keep: always the rows', whatever writes.

A cold load reads them instead of every row's vector, so a block whose vectors drifted from
its rows would rank with the wrong vectors without any error: every test here compares the
blocks with the rows' own vectors, and a cold load's answers with a load that reads the rows.
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
from agentic_memory.store import MemoryObject, SearchHit, Where, make_id
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.embedded.blocks import decode_rowinfo, decode_unit
from agentic_memory.store.embedded.cache import PartitionCache
from agentic_memory.store.embedded.vectors import unit_rows
from tests.unit.store.conftest import DIMS, make_spec, vec
from tests.unit.store.test_embedded_store import WRITER

WORDS = "apple pear plum fig kiwi lime date grape melon berry cherry peach".split()


def _hits(hits: list[SearchHit]) -> list[tuple[str, float, float | None, float | None]]:
    return [(h.id, h.score, h.keyword_score, h.vector_score) for h in hits]


def _blocks_match_rows(conn: sqlite3.Connection, name: str, user: str) -> int:
    """Assert every block of the partition keeps its current rows' exact unit vectors.

    A superseded entry (an older birth than the row's newest) is not checked: no load reads
    it. Returns the number of blocks.
    """
    vectors = dict(
        conn.execute(f'SELECT rid, vector FROM "o_{name}" WHERE user IS ?', (user,)).fetchall()
    )
    listed = [
        (decode_rowinfo(info), blob)
        for info, blob in conn.execute(
            "SELECT rowinfo, unit FROM amem_blocks WHERE collection = ? AND scope = ?",
            (name, user),
        )
    ]
    newest: dict[int, int] = {}
    for (rids, births), _ in listed:
        for rid, birth in zip(rids.tolist(), births.tolist(), strict=True):
            newest[rid] = max(birth, newest.get(rid, birth))
    assert sorted(newest) == sorted(vectors), "the blocks name other rows than are stored"
    for (rids, births), blob in listed:
        stored = decode_unit(blob, rids.size, DIMS)
        assert stored is not None, "a block written by this code has no unit vectors"
        current = np.array(
            [newest[r] == b for r, b in zip(rids.tolist(), births.tolist(), strict=True)]
        )
        want = unit_rows([vectors[r] for r in rids[current].tolist()], DIMS)
        np.testing.assert_array_equal(stored[current], want)
    return len(listed)


def _row_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many rows' vectors a load reads from the object table."""
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


def _answers_from_rows(path: Path, name: str, queries: list[dict[str, object]]) -> list[object]:
    """Answer ``queries`` from a fresh store that ignores the blocks' vectors (reads the rows)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embedded.cache, "decode_unit", lambda *_: None)
        store = EmbeddedStore(path, dims=DIMS)
        try:
            return [_hits(store.hybrid(name, **q)) for q in queries]  # type: ignore[arg-type]
        finally:
            store.close()


@pytest.mark.parametrize("seed", [3, 19])
@pytest.mark.parametrize("vectors", ["exact", "two-pass"])
def test_block_vectors_stay_the_rows_through_every_kind_of_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, vectors: str
) -> None:
    # Blocks of 8 rows, so that writes merge, rewrite and compact blocks all the time: new
    # rows, upserts and updates of existing ids in place (superseded entries), deletes by id
    # and by filter, forgetting a user, erase_deleted's compaction and, with tiny PCA
    # thresholds, axes chosen anew (every block reprojected). After each write every block
    # holds its rows' exact unit vectors, and a new process's first search reads no row's
    # vector yet answers exactly as a load from the rows does. Filling blocks without
    # vectors is turned off: every block must get its vectors from the write that made it.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    monkeypatch.setattr(embedded.blocks.PartitionBlocks, "fill_units", lambda *_: 0)
    if vectors == "two-pass":
        monkeypatch.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 10)
        monkeypatch.setattr(embedded.vectors, "COARSE_MIN_SHORTLIST", 6)
        monkeypatch.setattr(embedded.vectors, "COARSE_RERANK", 0)
        monkeypatch.setattr(embedded.vectors, "COARSE_DIMS", 3)
    rng = random.Random(seed)
    spec = make_spec("Units")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    ids: dict[str, list[str]] = {"alice": [], "bob": []}

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
        mine = ids[user]
        op = "add" if step < 4 or len(mine) < 3 else rng.choice(ops)
        seen.add(op)
        if op == "add":
            batch = [
                obj(make_id(user, str(step), str(k))) for k in range(rng.choice([1, 2, 5, 11]))
            ]
            store.upsert(spec.name, batch, user=user)
            mine += [o.id for o in batch]
        elif op == "replace":
            chosen = rng.sample(mine, min(len(mine), rng.choice([1, 3])))
            store.upsert(spec.name, [obj(i) for i in chosen], user=user)
        elif op == "update":
            chosen = rng.sample(mine, min(len(mine), 2))
            store.update(spec.name, chosen, lambda o: obj(o.id), user=user)
        elif op == "delete":
            gone = rng.sample(mine, min(len(mine), rng.choice([1, 2])))
            store.delete(spec.name, gone, user=user)
            for i in gone:
                mine.remove(i)
        elif op == "delete_where":
            rank = rng.randint(0, 5)
            kept = {
                o.id
                for o in store.list_objects(spec.name, user=user, limit=1000)
                if o.properties.get("rank") != rank
            }
            store.delete_where(spec.name, [Where("rank", "eq", rank)], user=user)
            mine[:] = [i for i in mine if i in kept]
        elif op == "forget":
            store.delete_user(spec.name, user)
            mine.clear()
            continue
        else:
            store.erase_deleted()
        conn = store._conn
        assert conn is not None
        for someone in ("alice", "bob"):
            _blocks_match_rows(conn, spec.name, someone)
        query: dict[str, object] = {
            "query": " ".join(rng.choices(WORDS, k=2)),
            "vector": [rng.uniform(-1, 1) for _ in range(DIMS)],
            "alpha": rng.choice([0.5, 1.0]),
            "limit": 20,
            "user": user,
        }
        read.clear()
        fresh = EmbeddedStore(tmp_path, dims=DIMS)
        got = _hits(fresh.hybrid(spec.name, **query))  # type: ignore[arg-type]
        fresh.close()
        assert read == [], f"a cold load read {read} rows' vectors at step {step} ({op})"
        assert got == _answers_from_rows(tmp_path, spec.name, [query])[0], (step, op)
    assert seen == set(ops), f"the random walk missed {set(ops) - seen}"
    store.close()


def _strip_units(db: Path, *, drop_column: bool) -> None:
    """Make the file as code before block vectors wrote it (no ``unit`` column or values)."""
    conn = sqlite3.connect(db, isolation_level=None)
    if drop_column:
        # Layout 5: the code before block vectors (and before the lists' centroids).
        conn.execute("ALTER TABLE amem_blocks DROP COLUMN unit")
        conn.execute("UPDATE amem_meta SET value = '5' WHERE key = 'schema_version'")
    else:
        conn.execute("UPDATE amem_blocks SET unit = NULL")
    conn.close()


def test_a_store_written_before_block_vectors_is_read_and_filled_by_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file of the previous code has no unit column: opening adds it, a load reads the
    # rows' vectors for the blocks without theirs (every block, then fewer), with the same
    # answers, and each write fills at most _FILL_ROWS rows' blocks in its own transaction
    # until none is left. A block the previous code writes later (no unit) is read from
    # the rows too.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 16)
    monkeypatch.setattr(embedded.store, "_FILL_ROWS", 20)
    rng = random.Random(8)
    spec = make_spec("Old")
    store = EmbeddedStore(tmp_path / "s", dims=DIMS)
    store.ensure_collection(spec)
    ids = [make_id(str(i)) for i in range(100)]

    def obj(oid: str) -> MemoryObject:
        body = " ".join(rng.choices(WORDS, k=rng.randint(1, 8)))
        return MemoryObject(oid, {"body": body}, [rng.uniform(-1, 1) for _ in range(DIMS)])

    for start in range(0, 100, 16):
        store.upsert(spec.name, [obj(i) for i in ids[start : start + 16]], user="alice")
    store.upsert(spec.name, [obj(i) for i in ids[::13]], user="alice")  # superseded entries
    store.close()
    db = tmp_path / "s" / embedded.DB_FILENAME
    _strip_units(db, drop_column=True)
    queries: list[dict[str, object]] = [
        {"query": w, "vector": vec(1, i), "alpha": 0.6, "limit": 30, "user": "alice"}
        for i, w in enumerate(WORDS[:4])
    ]
    want = _answers_from_rows(tmp_path / "s", spec.name, queries)
    read = _row_reads(monkeypatch)
    old = EmbeddedStore(tmp_path / "s", dims=DIMS)
    assert [_hits(old.hybrid(spec.name, **q)) for q in queries] == want  # type: ignore[arg-type]
    assert read == [100], "every row's vector should have been read once"
    conn = old._conn
    assert conn is not None
    (empty, total) = conn.execute(
        "SELECT count(*) FILTER (WHERE unit IS NULL), count(*) FROM amem_blocks"
    ).fetchone()
    assert empty == total > 5, "opening alone should write no vectors"
    assert conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone() == (
        str(embedded.SCHEMA_VERSION),
    )
    filled: list[int] = []
    reads: list[list[int]] = []
    for _ in range(20):  # 7 blocks, one or two filled per write
        before = conn.execute("SELECT count(*) FROM amem_blocks WHERE unit IS NULL").fetchone()
        new = obj(make_id("new", str(len(filled))))
        old.upsert(spec.name, [new], user="alice")
        ids.append(new.id)
        after = conn.execute("SELECT count(*) FROM amem_blocks WHERE unit IS NULL").fetchone()
        filled.append(before[0] - after[0])
        if after == (0,):
            break
        # Part-filled: a new process reads the rows of the blocks still without vectors
        # (all rows in one pass while those are most of them).
        read.clear()
        fresh = EmbeddedStore(tmp_path / "s", dims=DIMS)
        got = [_hits(fresh.hybrid(spec.name, **q)) for q in queries]  # type: ignore[arg-type]
        fresh.close()
        reads.append(list(read))
        assert got == _answers_from_rows(tmp_path / "s", spec.name, queries)
    assert conn.execute("SELECT count(*) FROM amem_blocks WHERE unit IS NULL").fetchone() == (0,)
    assert reads[0] == [101], "mostly without vectors: one pass over the rows"
    assert any(len(r) == 1 and 0 < r[0] < 50 for r in reads), reads
    # _FILL_ROWS of 20: one block of 16 rows per write (two when a merge joined two).
    assert min(filled) >= 1 and max(filled) <= 2 and len(filled) > 2, filled
    _blocks_match_rows(conn, spec.name, "alice")
    # The previous code, still running somewhere, writes a block without vectors.
    old.upsert(spec.name, [obj(ids[5])], user="alice")
    (newest, size) = conn.execute(
        "SELECT block, rows FROM amem_blocks ORDER BY block DESC LIMIT 1"
    ).fetchone()
    conn.execute("UPDATE amem_blocks SET unit = NULL WHERE block = ?", (newest,))
    read.clear()
    fresh = EmbeddedStore(tmp_path / "s", dims=DIMS)
    got = [_hits(fresh.hybrid(spec.name, **q)) for q in queries]  # type: ignore[arg-type]
    fresh.close()
    assert read == [size], "the rows of that block alone should have been read"
    assert got == _answers_from_rows(tmp_path / "s", spec.name, queries)
    old.close()


def test_a_failed_write_leaves_the_block_vectors_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The vectors are written, filled and rewritten in the rows' transaction: a write that
    # fails at its very end (the generation bump, after blocks were added, merged and
    # filled) leaves blocks and rows as they were.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    spec = make_spec("Crash")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    ids = [make_id(str(i)) for i in range(30)]
    store.upsert(
        spec.name,
        [MemoryObject(i, {"body": f"row {n}"}, vec(1, n)) for n, i in enumerate(ids)],
        user="alice",
    )
    conn = store._conn
    assert conn is not None
    conn.execute(
        "UPDATE amem_blocks SET unit = NULL WHERE block = (SELECT min(block) FROM amem_blocks)"
    )
    snapshot = conn.execute("SELECT * FROM amem_blocks ORDER BY block").fetchall()

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
    monkeypatch.undo()
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    store.upsert(spec.name, [MemoryObject(ids[1], {"body": "edited"}, vec(0, 1))], user="alice")
    _blocks_match_rows(conn, spec.name, "alice")
    store.close()


def test_block_vectors_stay_the_rows_when_processes_write_one_user_at_once(
    tmp_path: Path,
) -> None:
    # Three processes append to one user's partition while this one rewrites rows in place
    # and deletes some: every block still holds its rows' vectors, and a cold search reads
    # them with the answers of a load from the rows.
    path = tmp_path / "store"
    spec = make_spec("Shared_Units")
    store = EmbeddedStore(path, dims=DIMS)
    store.ensure_collection(spec)
    seed = [make_id("seed", str(i)) for i in range(20)]
    store.upsert(
        spec.name,
        [MemoryObject(i, {"body": f"seed {n}"}, vec(1, n)) for n, i in enumerate(seed)],
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
        store.upsert(
            spec.name,
            [MemoryObject(seed[turn % 20], {"body": f"edit {turn}"}, vec(0, 1, turn))],
            user="alice",
        )
        if turn % 7 == 6:
            store.delete(spec.name, [seed[turn % 20]], user="alice")
        turn += 1
    for p in workers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    conn = store._conn
    assert conn is not None
    _blocks_match_rows(conn, spec.name, "alice")
    query: dict[str, object] = {
        "query": "item edit",
        "vector": vec(0, 1),
        "limit": 50,
        "user": "alice",
    }
    fresh = EmbeddedStore(path, dims=DIMS)
    got = _hits(fresh.hybrid(spec.name, **query))  # type: ignore[arg-type]
    fresh.close()
    assert got == _answers_from_rows(path, spec.name, [query])[0]
    store.close()


def test_erase_deleted_takes_an_edited_rows_old_vector_out_of_the_blocks(tmp_path: Path) -> None:
    # An upsert of an existing id leaves the old version's entry, unit vector included, in
    # its block until the block is compacted; erase_deleted compacts it, and a delete takes
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
    old = unit_rows([np.asarray(vec(1, 3, 0.5), dtype=np.float32).tobytes()], DIMS).tobytes()
    gone = unit_rows([np.asarray(vec(1, 7, 0.5), dtype=np.float32).tobytes()], DIMS).tobytes()

    def held(blob: bytes) -> bool:
        return any(blob in unit for (unit,) in conn.execute("SELECT unit FROM amem_blocks"))

    assert held(old) and held(gone)
    store.upsert(spec.name, [MemoryObject(ids[3], {"body": "edited"}, vec(0, 1))], user="alice")
    assert held(old), "superseded, not yet compacted"
    store.delete(spec.name, [ids[7]], user="alice")
    assert not held(gone)
    assert store.erase_deleted()
    assert not held(old)
    _blocks_match_rows(conn, spec.name, "alice")
    store.close()


@pytest.mark.parametrize(
    "damage",
    ["short", "double"],
    ids=["a size no rows fit", "rows of another width"],
)
def test_a_damaged_blocks_vectors_are_read_from_the_rows_and_rewritten(
    tmp_path: Path, damage: str
) -> None:
    # Vectors of a size that is not the rows' (a damaged file) are taken for none: a load
    # reads that block's rows, with the same answers, and the next writes (an edit that
    # merges the block, a new row) leave every block's vectors equal to its rows'.
    spec = make_spec("Damaged")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    for start in range(0, 60, 20):
        store.upsert(
            spec.name,
            [
                MemoryObject(make_id(str(n)), {"body": f"row {n}"}, vec(1, n, n % 3))
                for n in range(start, start + 20)
            ],
            user="alice",
        )
    conn = store._conn
    assert conn is not None
    query: dict[str, object] = {"query": "row", "vector": vec(1, 2), "limit": 60, "user": "alice"}
    want = _answers_from_rows(tmp_path, spec.name, [query])
    for block, unit in conn.execute("SELECT block, unit FROM amem_blocks").fetchall():
        damaged = unit[:12] if damage == "short" else unit + unit
        conn.execute("UPDATE amem_blocks SET unit = ? WHERE block = ?", (damaged, block))
    fresh = EmbeddedStore(tmp_path, dims=DIMS)
    assert [_hits(fresh.hybrid(spec.name, **query))] == want  # type: ignore[arg-type]
    fresh.close()
    # The first write after the damage: new rows enough for their block to be merged with
    # the damaged one before it, in the transaction that would repair it.
    added = [MemoryObject(make_id(f"new{n}"), {"body": "new"}, vec(0, n)) for n in range(20)]
    store.upsert(spec.name, added, user="alice")
    edits = [
        MemoryObject(make_id(str(n)), {"body": f"row {n}!"}, vec(0, n)) for n in range(0, 60, 7)
    ]
    store.upsert(spec.name, edits, user="alice")
    _blocks_match_rows(conn, spec.name, "alice")
    store.close()

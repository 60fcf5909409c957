"""What only the embedded backend promises: its files, processes, transactions and open_store."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import agentic_memory.store.embedded as embedded
from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    Property,
    SearchHit,
    StoreError,
    Where,
    amem_home,
    make_id,
    open_store,
)
from agentic_memory.store.embedded import (
    DB_FILENAME,
    EmbeddedStore,
    normalise_date,
    query_terms,
    tokenize,
)
from agentic_memory.store.ranking import fuse_relative_score, sorted_unique
from tests.unit.store.conftest import DIMS, count_extensions, make_spec, vec

WRITER = textwrap.dedent(
    """
    import sys
    from agentic_memory.store import MemoryObject, make_id
    from agentic_memory.store.embedded import EmbeddedStore
    from tests.unit.store.conftest import make_spec, vec

    path, name, worker, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = EmbeddedStore(path, dims=8)
    spec = make_spec(name)
    store.ensure_collection(spec)
    for i in range(count):
        store.upsert(
            name,
            [MemoryObject(make_id(worker, str(i)), {"body": f"w{worker} item {i}"}, vec(0, 1, i))],
            user="alice",
        )
    store.close()
    """
)


def test_concurrent_writer_processes_and_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "store"
    spec = make_spec("Shared_Proc")
    reader = EmbeddedStore(path, dims=DIMS)
    reader.ensure_collection(spec)
    reader.upsert(
        spec.name, [MemoryObject(make_id("seed"), {"body": "seed"}, vec(1, 0))], user="alice"
    )
    # Build the reader's vector cache before the other processes write.
    assert len(reader.hybrid(spec.name, query="", vector=vec(0, 1), alpha=1.0, user="alice")) == 1

    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), spec.name, str(w), "40"],
            cwd=Path(__file__).resolve().parents[3],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    while any(p.poll() is None for p in workers):
        reader.count(spec.name, user="alice")
        reader.hybrid(spec.name, query="item", vector=vec(0, 1), user="alice")
    for p in workers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    assert reader.count(spec.name, user="alice") == 121
    hits = reader.hybrid(spec.name, query="", vector=vec(0, 1), alpha=1.0, limit=200, user="alice")
    assert len(hits) == 121  # the cache saw the other processes' writes
    assert reader.get(spec.name, make_id("2", "39"), user="alice") is not None
    reader.close()


def test_failed_transaction_leaves_store_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Atomic")
    store.ensure_collection(spec)
    store.upsert(
        spec.name, [MemoryObject(make_id("a"), {"body": "kept zebra"}, vec(1, 0))], user="u"
    )

    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(embedded.store, "_bump", explode)
    batch = [
        MemoryObject(make_id("a"), {"body": "replaced"}, vec(0, 1)),
        MemoryObject(make_id("b"), {"body": "new zebra"}, vec(0, 1)),
    ]
    with pytest.raises(RuntimeError):
        store.upsert(spec.name, batch, user="u")
    with pytest.raises(RuntimeError):
        store.delete_where(spec.name, [Where("body", "eq", "kept zebra")], user="u")
    monkeypatch.undo()
    assert store.count(spec.name, user="u") == 1
    got = store.get(spec.name, make_id("a"), user="u")
    assert got is not None and got.properties == {"body": "kept zebra"}
    hits = store.hybrid(spec.name, query="zebra", vector=vec(1, 0), alpha=0.0, user="u")
    assert [h.id for h in hits] == [make_id("a")]
    store.close()


def test_vector_beyond_float32_range_is_refused(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Huge")
    store.ensure_collection(spec)
    with pytest.raises(InvalidInputError, match="float32"):
        store.upsert(spec.name, [MemoryObject(make_id("h"), {}, vec(1e300, 0))], user="u")
    assert store.count(spec.name, user="u") == 0
    store.close()


def test_zero_vectors_score_zero_cosine(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Zero")
    store.ensure_collection(spec)
    store.upsert(
        spec.name,
        [MemoryObject(make_id("z"), {}, vec()), MemoryObject(make_id("o"), {}, vec(1, 0))],
        user="u",
    )
    hits = store.hybrid(spec.name, query="", vector=vec(1, 0), alpha=1.0, user="u")
    assert [(h.id, h.vector_score) for h in hits] == [(make_id("o"), 1.0), (make_id("z"), 0.0)]
    store.close()


def test_layout_on_disk_and_catalogue(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "deep" / "store", dims=DIMS)
    store.ensure_collection(make_spec("Layout"))
    store.close()
    assert (tmp_path / "deep" / "store" / DB_FILENAME).is_file()
    import sqlite3

    conn = sqlite3.connect(tmp_path / "deep" / "store" / DB_FILENAME)
    spec_json, dims = conn.execute(
        "SELECT spec, dims FROM amem_collections WHERE name = 'Layout'"
    ).fetchone()
    conn.close()
    assert dims == DIMS
    assert json.loads(spec_json)["per_user"] is True


def test_closed_store_message(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.close()
    store.close()  # closing twice is harmless
    with pytest.raises(StoreError, match="closed"):
        store.collections()


def test_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(InvalidInputError, match="not a directory"):
        EmbeddedStore(target, dims=DIMS)
    with pytest.raises(InvalidInputError):
        EmbeddedStore(tmp_path, dims=0)


def test_query_terms_are_plain_distinct_words_without_stopwords() -> None:
    assert query_terms('Zebra AND "lion*" -the zebra') == ["zebra", "lion"]
    assert query_terms("the of and") == []
    assert query_terms("  ?! ") == []
    assert tokenize("Café-crème 東京タワー🍕pizza_time") == [
        "café",
        "crème",
        "東京タワー",
        "pizza",
        "time",
    ]


def test_fusion_arithmetic() -> None:
    # Sides in the server's order: vector first, keyword last.
    fused, secondary = fuse_relative_score(
        [(0.7, {"a": 0.9, "b": 0.5, "c": 0.1}), (0.3, {"a": 2.0, "d": 8.0})]
    )
    assert fused == pytest.approx({"a": 0.7 * 1.0 + 0.0, "b": 0.7 * 0.5, "c": 0.0, "d": 0.3})
    # The secondary sort value is the raw score in the last set that holds the object.
    assert secondary == pytest.approx({"a": 2.0, "b": 0.5, "c": 0.1, "d": 8.0})
    # Everything is float32 arithmetic, as in Go.
    assert fused["b"] == float(
        np.float32(0.7)
        * ((np.float32(0.5) - np.float32(0.1)) / (np.float32(0.9) - np.float32(0.1)))
    )
    assert fuse_relative_score([(0.5, {"x": 3.0}), (0.5, {})]) == ({"x": 0.5}, {"x": 3.0})


def test_dates_normalise_to_sortable_utc() -> None:
    assert normalise_date("2026-01-01T05:00:00+02:00") == "2026-01-01T03:00:00+00:00"
    assert normalise_date("2026-01-01T03:00:00.5Z") == "2026-01-01T03:00:00.500000+00:00"
    assert normalise_date("2026-01-01T03:00:00Z") < normalise_date("2026-01-01T03:00:00.1Z")


# -- open_store -------------------------------------------------------------------------------


def test_open_store_defaults_to_embedded_under_amem_home(tmp_path: Path) -> None:
    store = open_store(DIMS)
    assert isinstance(store, EmbeddedStore)
    assert store.path == amem_home() / "store"
    assert amem_home() == tmp_path / "amem-home"  # set by the root conftest
    store.close()


def test_open_store_reads_amem_store_and_arguments_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMEM_STORE", "Embedded")
    store = open_store(DIMS, path=tmp_path / "elsewhere")
    assert isinstance(store, EmbeddedStore) and store.path == tmp_path / "elsewhere"
    store.close()
    monkeypatch.setenv("AMEM_STORE", "weaviate")
    store = open_store(DIMS, backend="embedded", path=tmp_path / "x")
    assert isinstance(store, EmbeddedStore)
    store.close()


def test_open_store_rejects_unknown_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError, match="unknown store backend 'sqlite'"):
        open_store(DIMS, backend="sqlite")
    monkeypatch.setenv("AMEM_STORE", "chroma")
    with pytest.raises(InvalidInputError, match="AMEM_STORE"):
        open_store(DIMS)
    with pytest.raises(InvalidInputError, match="path"):
        open_store(DIMS, backend="weaviate", path="/tmp/x")


def test_amem_home_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMEM_HOME")
    assert amem_home() == Path("~/.agentic-memory").expanduser()


def test_two_pass_vector_search_matches_the_exact_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With 8-d vectors the 64-axis projection is lossless, so both passes must agree exactly.
    monkeypatch.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 500)
    rng = np.random.default_rng(3)
    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Coarse")
    store.ensure_collection(spec)
    vectors = rng.normal(size=(3000, DIMS))
    store.upsert(
        spec.name,
        [MemoryObject(make_id(str(i)), {"rank": i}, v.tolist()) for i, v in enumerate(vectors)],
        user="u",
    )
    query = rng.normal(size=DIMS).tolist()
    hits = store.hybrid(spec.name, query="", vector=query, alpha=1.0, limit=20, user="u")
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ (np.asarray(query) / np.linalg.norm(query))
    best = np.argsort(-sims)[:20]
    assert [h.id for h in hits] == [make_id(str(i)) for i in best]
    assert [h.vector_score for h in hits] == pytest.approx(sims[best].tolist(), abs=1e-5)
    filtered = store.hybrid(
        spec.name,
        query="",
        vector=query,
        alpha=1.0,
        limit=5,
        user="u",
        where=[Where("rank", "lt", 1000)],
    )
    best_low = [int(i) for i in np.argsort(-sims) if i < 1000][:5]
    assert [h.id for h in filtered] == [make_id(str(i)) for i in best_low]
    store.close()


def test_bm25_uses_weaviates_idf_and_per_user_statistics(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Bm25")
    store.ensure_collection(spec)
    texts = ["zebra zebra lion", "zebra lion tiger", "lion tiger bear", "tiger bear wolf"]
    store.upsert(
        spec.name,
        [MemoryObject(make_id(t), {"body": t}, vec(1, 0)) for t in texts],
        user="u",
    )
    # Another user's many zebras must not change u's document frequencies.
    store.upsert(
        spec.name,
        [MemoryObject(make_id("o", str(i)), {"body": "zebra"}, vec(1, 0)) for i in range(20)],
        user="other",
    )
    hits = store.hybrid(spec.name, query="zebra", vector=vec(1, 0), alpha=0.0, user="u")
    idf = math.log(1 + (4 - 2 + 0.5) / (2 + 0.5))  # N = 4 documents, n = 2 hold "zebra"
    # All bodies have the average length, so tf is not length-normalised; BlockMax WAND has
    # no (k1 + 1) factor.
    assert [h.id for h in hits] == [make_id(texts[0]), make_id(texts[1])]
    assert hits[0].keyword_score == float(np.float32(idf * (2 / (2 + 1.2))))
    assert hits[1].keyword_score == float(np.float32(idf * (1 / (1 + 1.2))))
    # A term in more than half the documents still counts (FTS5's idf would floor it at 1e-6).
    hits = store.hybrid(spec.name, query="lion", vector=vec(1, 0), alpha=0.0, user="u")
    assert hits[0].keyword_score == pytest.approx(math.log(1 + 1.5 / 3.5) / 2.2)
    store.close()


def test_ne_matches_objects_without_the_property_and_global_scope_works(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Scopes")
    store.ensure_collection(spec)
    store.upsert(
        spec.name,
        [
            MemoryObject(make_id("k"), {"kind": "a"}, vec(1, 0)),
            MemoryObject(make_id("none"), {}, vec(1, 0)),
        ],
        user=GLOBAL_SCOPE,
    )
    listed = store.list_objects(spec.name, user=GLOBAL_SCOPE, where=[Where("kind", "ne", "a")])
    assert [o.id for o in listed] == [make_id("none")]
    assert store.users(spec.name) == [GLOBAL_SCOPE]
    store.close()


def _downgrade_to_layout_1(db: Path, spec_name: str, props: list[str]) -> None:
    """Rewrite a store file into layout 1: filterable properties only in JSON, with
    expression indexes on it (what stores written before layout 2 hold)."""
    import sqlite3

    conn = sqlite3.connect(db, isolation_level=None)
    table = f'"o_{spec_name}"'
    for prop in props:
        conn.execute(f'DROP INDEX "ix_{spec_name}_{prop}"')
        conn.execute(f'ALTER TABLE {table} DROP COLUMN "p_{prop}"')
        conn.execute(
            f'CREATE INDEX "ix_{spec_name}_{prop}" ON {table} '
            f"(user, json_extract(props, '$.{prop}'))"
        )
    conn.execute("ALTER TABLE amem_generations DROP COLUMN lineage")
    conn.execute("UPDATE amem_meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()


def _downgrade_to_layout_2(db: Path) -> None:
    """Rewrite a store file into layout 2, as the code before layout 3 wrote it: no count of
    deleting writes, no (user) index, 4 KB pages."""
    import sqlite3

    conn = sqlite3.connect(db, isolation_level=None)
    for (name,) in conn.execute("SELECT name FROM amem_collections").fetchall():
        conn.execute(f'DROP INDEX "ix_{name}_user"')
    conn.execute("ALTER TABLE amem_generations DROP COLUMN removed")
    conn.execute("UPDATE amem_meta SET value = '2' WHERE key = 'schema_version'")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("VACUUM")
    conn.execute("PRAGMA journal_mode = WAL")
    assert conn.execute("PRAGMA page_size").fetchone() == (4096,)
    conn.close()


def test_layout_1_store_is_migrated_on_open_with_the_same_answers(tmp_path: Path) -> None:
    import sqlite3

    store = EmbeddedStore(tmp_path, dims=DIMS)
    spec = make_spec("Migrated")
    store.ensure_collection(spec)
    store.upsert(
        spec.name,
        [
            MemoryObject(
                make_id(str(i)),
                {
                    "title": f"item {i}",
                    "kind": "even" if i % 2 == 0 else "odd",
                    "rank": i,
                    "weight": i / 4,
                    "flag": i % 3 == 0,
                    "at": f"2026-01-{i + 1:02d}T10:00:00+02:00",
                    "tags": [f"t{i % 3}"],
                },
                vec(1, i),
            )
            for i in range(12)
        ]
        + [MemoryObject(make_id("bare"), {"title": "no filterable values"}, vec(0, 1))],
        user="alice",
    )
    queries: list[list[Where]] = [
        [Where("kind", "eq", "even")],
        [Where("kind", "ne", "even")],
        [Where("rank", "gte", 5), Where("flag", "eq", True)],
        [Where("weight", "lt", 1.0)],
        [Where("at", "gt", "2026-01-06T00:00:00Z")],
        [Where("rank", "in", [1, 2, 11])],
        [Where("tags", "contains", "t1")],
    ]

    def answers(s: EmbeddedStore) -> list[list[str]]:
        out = [
            [o.id for o in s.list_objects(spec.name, user="alice", where=q, limit=50)]
            for q in queries
        ]
        out.append(
            [
                o.id
                for o in s.list_objects(
                    spec.name, user="alice", sort_by="at", descending=True, limit=50
                )
            ]
        )
        out.append(
            [
                h.id
                for h in s.hybrid(
                    spec.name, query="item", vector=vec(1, 3), where=queries[2], user="alice"
                )
            ]
        )
        return out

    before = answers(store)
    store.close()
    filterable = [p.name for p in spec.properties if p.filterable and p.type != "text[]"]
    assert filterable == ["title", "body", "kind", "rank", "weight", "flag", "at"]
    _downgrade_to_layout_3(tmp_path / DB_FILENAME)
    _downgrade_to_layout_2(tmp_path / DB_FILENAME)
    _downgrade_to_layout_1(tmp_path / DB_FILENAME, spec.name, filterable)

    migrated = EmbeddedStore(tmp_path, dims=DIMS)
    assert answers(migrated) == before
    assert all(before[:6]), "every filter matches something, so the comparison means something"
    migrated.close()

    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    assert conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone() == (
        str(embedded.SCHEMA_VERSION),
    )
    # Every row is in a keyword block, so caches load and update without tokenising.
    assert conn.execute("SELECT sum(rows) FROM amem_blocks").fetchone() == (13,)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(amem_generations)")]
    assert "lineage" not in columns and "removed" not in columns
    # The indexes are on the columns now, not on JSON expressions.
    for prop in filterable:
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (f"ix_{spec.name}_{prop}",)
        ).fetchone()
        assert f'"p_{prop}"' in sql and "json_extract" not in sql
    conn.close()


def _layout_2_answers(s: EmbeddedStore, specs: list[CollectionSpec]) -> list[object]:
    out: list[object] = []
    for spec in specs:
        user = "alice" if spec.per_user else None
        out.append(s.count(spec.name, user=user))
        out.append([o.id for o in s.list_objects(spec.name, user=user, sort_by="rank", limit=500)])
        for query, alpha in (("apple pear", 0.5), ("fig", 0.0), ("", 1.0), ("kiwi lime", 0.3)):
            hits = s.hybrid(
                spec.name, query=query, vector=vec(1, 2, 3), alpha=alpha, limit=30, user=user
            )
            out.append([(h.id, h.score, h.keyword_score, h.vector_score) for h in hits])
        out.append(
            [
                h.id
                for h in s.hybrid(
                    spec.name,
                    query="apple",
                    vector=vec(0, 1),
                    user=user,
                    where=[Where("rank", "lt", 40)],
                )
            ]
        )
    return out


def test_layout_2_store_is_migrated_on_open_with_the_same_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Layout 3 counts deleting writes per partition, indexes each object table by user and
    # uses 16 KB pages. A layout-2 file (what the code before it wrote) is migrated on open:
    # the schema in the opening transaction, the page size by VACUUM once no other process
    # has the file open; the answers stay the same throughout.
    rng = random.Random(5)
    words = "apple pear plum fig kiwi lime date grape".split()
    specs = [make_spec("MigPer"), make_spec("MigShared", per_user=False)]
    store = EmbeddedStore(tmp_path, dims=DIMS)
    for spec in specs:
        store.ensure_collection(spec)
        for user in ("alice", "bob") if spec.per_user else (None,):
            store.upsert(
                spec.name,
                [
                    MemoryObject(
                        make_id(spec.name, str(user), str(i)),
                        {"body": " ".join(rng.choices(words, k=6)), "rank": i},
                        [rng.uniform(-1, 1) for _ in range(DIMS)],
                    )
                    for i in range(120)
                ],
                user=user,
            )
        user = "alice" if spec.per_user else None
        store.delete(spec.name, [make_id(spec.name, str(user), str(i)) for i in (3, 50)], user=user)
    before = _layout_2_answers(store, specs)
    store.close()
    db = tmp_path / DB_FILENAME
    _downgrade_to_layout_3(db)
    _downgrade_to_layout_2(db)

    # A crash inside the migration (here: after its first statement) leaves the layout-2
    # file as it was.
    def crash(*_: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(embedded.sql, "_user_index", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        EmbeddedStore(tmp_path, dims=DIMS)
    monkeypatch.undo()
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone() == (
        "2",
    )
    columns = [r[1] for r in conn.execute("PRAGMA table_info(amem_generations)")]
    assert "removed" not in columns
    assert conn.execute("PRAGMA page_size").fetchone() == (4096,)
    conn.close()

    # Another process has the file open: the schema is migrated, the pages stay 4 KB.
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("SELECT count(*) FROM amem_meta").fetchone()
    migrated = EmbeddedStore(tmp_path, dims=DIMS)
    assert _layout_2_answers(migrated, specs) == before
    with migrated._read() as conn:
        assert conn.execute("PRAGMA page_size").fetchone() == (4096,)
        assert conn.execute(
            "SELECT value FROM amem_meta WHERE key = 'schema_version'"
        ).fetchone() == (str(embedded.SCHEMA_VERSION),)
    extra = MemoryObject(make_id("extra"), {"body": "apple"}, vec(1, 2, 3))
    migrated.upsert(specs[0].name, [extra], user="alice")
    migrated.delete(specs[0].name, [extra.id], user="alice")
    assert _layout_2_answers(migrated, specs) == before
    migrated.close()
    other.close()

    # Alone with the file, the next open rewrites it with 16 KB pages.
    reopened = EmbeddedStore(tmp_path, dims=DIMS)
    with reopened._read() as conn:
        assert conn.execute("PRAGMA page_size").fetchone() == (embedded.sql.PAGE_SIZE,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        (rows,) = conn.execute(
            "SELECT sum(rows) FROM amem_blocks WHERE collection = ? AND scope = 'alice'",
            (specs[0].name,),
        ).fetchone()
        assert rows == 118
        for spec in specs:
            (plan,) = conn.execute(
                f'EXPLAIN QUERY PLAN SELECT rid FROM "o_{spec.name}" WHERE user IS ? AND rid > ?',
                ("alice", 5),
            ).fetchall()
            assert f"ix_{spec.name}_user" in plan[3], plan
    assert _layout_2_answers(reopened, specs) == before
    reopened.upsert(specs[0].name, [extra], user="alice")
    assert _layout_2_answers(reopened, specs) != before
    reopened.delete(specs[0].name, [extra.id], user="alice")
    assert _layout_2_answers(reopened, specs) == before
    reopened.close()


def test_store_of_a_newer_layout_is_refused(tmp_path: Path) -> None:
    import sqlite3

    EmbeddedStore(tmp_path, dims=DIMS).close()
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    conn.execute("UPDATE amem_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(StoreError, match="layout version 99"):
        EmbeddedStore(tmp_path, dims=DIMS)


def _live_view(store: EmbeddedStore, spec: CollectionSpec, user: str) -> dict[str, object]:
    """What a cached partition holds for its live rows, keyed by rid (slots may differ)."""
    part = store._cache[(spec.name, user)]
    alive = part.alive()
    live = np.arange(part.slots) if alive is None else np.flatnonzero(alive)
    rids = part.rowids[live]
    view: dict[str, object] = {"rids": rids.tolist(), "unit": part.unit[live]}
    index = part.keyword
    assert index is not None
    view["lengths"] = index.lengths[live]
    view["average"] = index.average
    view["norm"] = index.norm()[:, live]
    view["postings"] = [
        (pairs.pair_hash.tolist(), part.rowids[pairs.docs].tolist(), pairs.tf.tolist())
        for pairs in (
            # The same pairs ordered by (term, rid) whatever the slots.
            _sorted_by_rid(p, part.rowids)
            for p in index.canonical()
        )
    ]
    coarse = part._coarse
    view["axes"] = None if part.axes is None else (part.axes[0], part.axes[1].tolist())
    view["projected"] = None if coarse is None else coarse.projected.view[live]
    lists = None if coarse is None else coarse._lists
    view["centroids"] = None if part.centroids is None else part.centroids.tolist()
    if lists is not None:
        view["labels"] = lists.labels[live]
    return view


def _sorted_by_rid(pairs: embedded.keyword._Pairs, rowids: np.ndarray) -> embedded.keyword._Pairs:
    order = np.lexsort((rowids[pairs.docs], pairs.pair_hash))
    return embedded.keyword._Pairs(pairs.pair_hash[order], pairs.docs[order], pairs.tf[order])


@pytest.mark.parametrize("seed", [7, 11, 23])
@pytest.mark.parametrize("vectors", ["exact", "two-pass", "lists"])
@pytest.mark.parametrize("block_rows", [1024, 8])
def test_a_cached_partition_is_updated_in_place_and_equals_a_fresh_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, vectors: str, block_rows: int
) -> None:
    # A reader keeps its cache while a second connection (as another process would) adds,
    # replaces and deletes rows; after every write the reader's answers and in-memory index
    # must be exactly those of a store opened afresh, and the reader must have updated its
    # cache in place every time (new rows appended, replaced rows given a new postings chunk
    # and re-projected, deleted rows' slots marked dead), never reloaded it. With blocks of 8
    # rows, replaced rows leave superseded entries in many blocks, which merges, compactions
    # and deletes then drop.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", block_rows)
    if vectors != "exact":
        # Tiny thresholds, so the PCA shortlist runs on these few rows (3 axes of 8 dims).
        monkeypatch.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 10)
        monkeypatch.setattr(embedded.vectors, "COARSE_MIN_SHORTLIST", 6)
        monkeypatch.setattr(embedded.vectors, "COARSE_RERANK", 0)
        monkeypatch.setattr(embedded.vectors, "COARSE_DIMS", 3)
    probes: list[int] = []
    if vectors == "lists":
        # And the inverted lists: 16 lists, a probe takes about 8 rows; rows changed since
        # the lists were sorted are sorted in again after 3 changes.
        monkeypatch.setattr(embedded.vectors, "IVF_ROWS", 10)
        monkeypatch.setattr(embedded.lists, "PROBE_ROWS", 8)
        monkeypatch.setattr(embedded.lists, "_REBUILD_FLOOR", 3)
        real_probe = embedded.lists.InvertedLists.probe

        def probe(self: object, *args: object) -> object:
            found = real_probe(self, *args)  # type: ignore[arg-type]
            probes.append(found[0].size)
            return found

        monkeypatch.setattr(embedded.lists.InvertedLists, "probe", probe)
    extended = count_extensions(monkeypatch)
    projected_in_place: list[int] = []
    for method in ("append", "update"):
        real = getattr(embedded.vectors._CoarseIndex, method)

        def spy(self: object, *args: object, real: object = real) -> None:
            projected_in_place.append(1)
            real(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(embedded.vectors._CoarseIndex, method, spy)
    axes_versions: set[int] = set()
    rng = random.Random(seed)
    words = "apple pear plum fig kiwi lime date grape melon berry cherry peach".split()
    spec = make_spec("Grow")
    reader = EmbeddedStore(tmp_path, dims=DIMS)
    reader.ensure_collection(spec)
    writer = EmbeddedStore(tmp_path, dims=DIMS)
    ids: list[str] = []

    def obj(oid: str) -> MemoryObject:
        body = " ".join(rng.choices(words, k=rng.randint(1, 12)))
        title = " ".join(rng.choices(words, k=rng.randint(0, 3)))
        vector = [rng.uniform(-1, 1) for _ in range(DIMS)]
        return MemoryObject(oid, {"body": body, "title": title}, vector)

    expected_extensions = 0
    stale_seen = dead_seen = False
    for step in range(60):
        op = (
            "add"
            if step < 3
            else rng.choice(["add"] * 4 + ["replace", "delete", "delete", "other"])
        )
        if op == "add":
            batch = [obj(make_id(f"{step}-{k}")) for k in range(rng.choice([1, 1, 2, 4, 9]))]
            writer.upsert(spec.name, batch, user="alice")
            ids += [o.id for o in batch]
        elif op == "replace":
            chosen = rng.sample(ids, min(len(ids), rng.choice([1, 1, 3])))
            writer.upsert(spec.name, [obj(i) for i in chosen], user="alice")
        elif op == "delete":
            gone = rng.choice(ids)
            writer.delete(spec.name, [gone], user="alice")
            ids.remove(gone)
        else:
            writer.upsert(spec.name, [obj(make_id(f"bob-{step}"))], user="bob")
        # The reader cached alice's partition at the previous step; bob's write leaves it
        # current.
        expected_extensions += step > 0 and op != "other"
        query = " ".join(rng.choices(words, k=2))
        vector = [rng.uniform(-1, 1) for _ in range(DIMS)]
        fresh = EmbeddedStore(tmp_path, dims=DIMS)
        for alpha in (0.0, 0.5, 1.0):
            got = reader.hybrid(
                spec.name, query=query, vector=vector, alpha=alpha, limit=20, user="alice"
            )
            want = fresh.hybrid(
                spec.name, query=query, vector=vector, alpha=alpha, limit=20, user="alice"
            )
            assert [(h.id, h.score, h.keyword_score, h.vector_score) for h in got] == [
                (h.id, h.score, h.keyword_score, h.vector_score) for h in want
            ], (step, op, alpha)
        mine, theirs = _live_view(reader, spec, "alice"), _live_view(fresh, spec, "alice")
        for field, value in theirs.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(mine[field], value, err_msg=f"{field}, step {step}")
            else:
                assert mine[field] == value, (field, step, op)
        part = reader._cache[(spec.name, "alice")]
        assert part.keyword is not None
        stale_seen |= part.keyword.stale > 0
        dead_seen |= part.dead > 0
        if part.axes is not None:
            axes_versions.add(part.axes[0])
        assert vectors != "exact" or part.axes is None
        fresh.close()
    assert len(extended) == expected_extensions > 40
    assert reader._cache.loads == 1, "every change should have been taken in place"
    assert stale_seen and dead_seen, "replaced and deleted rows should have been seen"
    if vectors != "exact":
        assert len(axes_versions) > 1, "the partition doubled, so the axes were chosen again"
        assert projected_in_place, "some rows should have been projected on existing axes"
    if vectors == "lists":
        assert probes, "the inverted lists should have been probed"
        assert min(probes) < len(ids) // 2, "a probe should have scanned part of the rows"
    reader.close()
    writer.close()


def _downgrade_to_layout_6(db: Path) -> None:
    """Rewrite a store file into layout 6, as the code before layout 7 wrote it: each row's
    vector in its row, the blocks' unit vectors beside them, no ``vectors`` in the blocks."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for spec_json, dims in conn.execute("SELECT spec, dims FROM amem_collections").fetchall():
        name = embedded.sql._spec_from_json(spec_json).name
        newest: dict[int, tuple[int, bytes]] = {}
        listed = conn.execute(
            "SELECT block, rowinfo, vectors FROM amem_blocks WHERE collection = ?", (name,)
        ).fetchall()
        for block, rowinfo, blob in listed:
            rids, births = embedded.blocks.decode_rowinfo(rowinfo)
            vectors = np.frombuffer(blob, dtype="<f4").reshape(rids.size, dims)
            for rid, birth, vector in zip(rids.tolist(), births.tolist(), vectors, strict=True):
                if rid not in newest or newest[rid][0] < birth:
                    newest[rid] = (birth, vector.tobytes())
            unit = embedded.vectors.normalise(vectors)
            conn.execute("UPDATE amem_blocks SET unit = ? WHERE block = ?", (unit.tobytes(), block))
        conn.executemany(
            f'UPDATE "o_{name}" SET vector = ? WHERE rid = ?',
            [(vector, rid) for rid, (_, vector) in newest.items()],
        )
    conn.execute("ALTER TABLE amem_blocks DROP COLUMN vectors")
    conn.execute("UPDATE amem_meta SET value = '6' WHERE key = 'schema_version'")
    conn.execute("DELETE FROM amem_meta WHERE key = 'vacuum_pending'")
    conn.execute("COMMIT")
    conn.close()


def _downgrade_to_layout_4(db: Path) -> None:
    """Rewrite a store file into layout 4, as the code before layout 5 wrote it: no keyword
    blocks or axes, and a lineage and a count of deleting writes per partition."""
    _downgrade_to_layout_6(db)
    conn = sqlite3.connect(db, isolation_level=None)

    conn.execute("BEGIN")
    conn.execute("DROP TABLE amem_blocks")
    conn.execute("DROP TABLE amem_axes")
    conn.execute("ALTER TABLE amem_generations ADD COLUMN lineage TEXT NOT NULL DEFAULT ''")
    conn.execute("UPDATE amem_generations SET lineage = lower(hex(randomblob(16)))")
    conn.execute("ALTER TABLE amem_generations ADD COLUMN removed INTEGER NOT NULL DEFAULT 0")
    conn.execute("UPDATE amem_meta SET value = '4' WHERE key = 'schema_version'")
    conn.execute("COMMIT")
    conn.close()


def _downgrade_to_layout_3(db: Path, tokenize: object = None) -> None:
    """Rewrite a store file into layout 3, as the code before layout 4 wrote it: properties
    as plain JSON, every row's term counts (by ``tokenize``, if given) in ``lengths`` and
    ``terms``, no ``body``."""
    _downgrade_to_layout_4(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    monkey = embedded.keyword.tokenize
    try:
        if tokenize is not None:
            embedded.keyword.tokenize = tokenize  # type: ignore[assignment]
        for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
            spec = embedded.sql._spec_from_json(spec_json)
            table, old = f'"o_{spec.name}"', f'"o3_{spec.name}"'
            columns = "".join(f', "p_{p.name}"' for p in embedded.sql._columns(spec))
            conn.execute(
                f"CREATE TABLE {old} (rid INTEGER PRIMARY KEY, id TEXT NOT NULL, user TEXT, "
                "props TEXT NOT NULL, vector BLOB NOT NULL, "
                f"lengths BLOB NOT NULL, terms BLOB NOT NULL{columns})"
            )
            rows = conn.execute(
                f"SELECT rid, id, user, body, vector{columns} FROM {table}"
            ).fetchall()
            for rid, oid, user, body, vector, *values in rows:
                props = embedded.sql.decode_body_json(body)
                lengths, terms = embedded.encode_terms(spec, [json.loads(props)])
                conn.execute(
                    f"INSERT INTO {old} VALUES (?, ?, ?, ?, ?, ?, ?{', ?' * len(values)})",
                    (rid, oid, user, props, vector, lengths[0], terms[0], *values),
                )
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE {old} RENAME TO {table}")
            embedded.sql._object_indexes(conn, spec)
    finally:
        embedded.keyword.tokenize = monkey
    conn.execute("UPDATE amem_meta SET value = '3' WHERE key = 'schema_version'")
    conn.execute("DELETE FROM amem_meta WHERE key = 'vacuum_pending'")
    conn.execute("COMMIT")
    conn.close()


def test_layout_3_store_is_migrated_on_open_with_the_same_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Layout 4 stores properties compressed and no term counts: keyword indexes tokenise the
    # stored text. A layout-3 file is migrated in the opening transaction (a crash in it
    # leaves the file as it was), gives the same answers, and shrinks once vacuumed.
    rng = random.Random(7)
    words = "apple pear plum fig kiwi lime date grape quince melon".split()
    note = Property("note", "text", filterable=False)
    specs = [
        dataclasses.replace(s, properties=(*s.properties, note))
        for s in (make_spec("MigPer"), make_spec("MigShared", per_user=False))
    ]
    store = EmbeddedStore(tmp_path, dims=DIMS)
    for spec in specs:
        store.ensure_collection(spec)
        for user in ("alice", "bob") if spec.per_user else (None,):
            store.upsert(
                spec.name,
                [
                    MemoryObject(
                        make_id(spec.name, str(user), str(i)),
                        {
                            "body": " ".join(rng.choices(words, k=40)),
                            "rank": i,
                            "tags": [f"t{i % 3}", "ünïcode"],
                            "note": f"note {i % 7}",
                        },
                        [rng.uniform(-1, 1) for _ in range(DIMS)],
                    )
                    for i in range(150)
                ],
                user=user,
            )
        user = "alice" if spec.per_user else None
        store.delete(spec.name, [make_id(spec.name, str(user), str(i)) for i in (3, 50)], user=user)

    def answers(s: EmbeddedStore) -> list[object]:
        out = _layout_2_answers(s, specs)
        for spec in specs:
            user = "alice" if spec.per_user else None
            out.append(
                [
                    (o.id, o.properties, o.vector)
                    for o in s.iterate(
                        spec.name,
                        user=user,
                        where=[Where("tags", "contains", "t1")],
                        page_size=40,
                        include_vector=True,
                    )
                ]
            )
            # "note" has no column: sorting by it reads the compressed JSON.
            out.append(
                [o.id for o in s.list_objects(spec.name, user=user, sort_by="note", limit=500)]
            )
        return out

    before = answers(store)
    assert all(before), "every query finds something, so the comparison means something"
    store.close()
    db = tmp_path / DB_FILENAME
    _downgrade_to_layout_3(db)
    layout_3_bytes = db.stat().st_size

    def crash(*_: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(embedded.sql, "_object_indexes", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        EmbeddedStore(tmp_path, dims=DIMS)
    monkeypatch.undo()
    conn = sqlite3.connect(db, isolation_level=None)
    assert conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone() == (
        "3",
    )
    columns = [r[1] for r in conn.execute(f'PRAGMA table_info("o_{specs[0].name}")')]
    assert "terms" in columns and "body" not in columns
    conn.close()

    # Another process has the file open: the layout is migrated, the file not yet vacuumed.
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("SELECT count(*) FROM amem_meta").fetchone()
    migrated = EmbeddedStore(tmp_path, dims=DIMS)
    assert answers(migrated) == before
    with migrated._read() as conn:
        assert conn.execute(
            "SELECT value FROM amem_meta WHERE key = 'schema_version'"
        ).fetchone() == (str(embedded.SCHEMA_VERSION),)
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("o_{specs[0].name}")')]
        assert "body" in columns and "terms" not in columns and "lengths" not in columns
        assert conn.execute("SELECT value FROM amem_meta WHERE key = 'vacuum_pending'").fetchone()
    migrated.close()
    other.close()

    # Alone with the file, the next open vacuums it: smaller, same answers.
    reopened = EmbeddedStore(tmp_path, dims=DIMS)
    with reopened._read() as conn:
        pending = conn.execute("SELECT 1 FROM amem_meta WHERE key = 'vacuum_pending'").fetchone()
        assert pending is None
    assert db.stat().st_size < layout_3_bytes
    assert answers(reopened) == before
    reopened.close()


def test_text_written_under_tokenizer_1_is_searched_with_todays_tokens(tmp_path: Path) -> None:
    # Tokenizer 1 lower-cased before splitting: "İstanbul" became "i" + "stanbul" and a final
    # capital sigma "ς"; Weaviate (Go) splits first and maps letter by letter. Layout 3 kept
    # those counts per row; layout 4 tokenises the stored text with today's tokenizer.
    import re

    spec = make_spec("Old")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    texts = {"a": "İstanbul ΟΔΟΣ", "b": "plain words", "c": "Σ alone"}
    store.upsert(
        spec.name,
        [MemoryObject(make_id(k), {"body": v}, vec(1, 0)) for k, v in texts.items()],
        user="u",
    )
    store.close()
    old_tokenize = lambda text: re.findall(r"[^\W_]+", text.lower())  # noqa: E731
    _downgrade_to_layout_3(tmp_path / DB_FILENAME, old_tokenize)
    with sqlite3.connect(tmp_path / DB_FILENAME) as conn:
        (stored,) = conn.execute(
            f'SELECT terms FROM "o_{spec.name}" WHERE id = ?', (make_id("a"),)
        ).fetchone()
    assert embedded.term_hash("stanbul").to_bytes(8, "little", signed=True) in stored
    reopened = EmbeddedStore(tmp_path, dims=DIMS)
    for query, expected in (("istanbul", "a"), ("οδοσ", "a"), ("σ", "c")):
        hits = reopened.hybrid(spec.name, query=query, vector=vec(1, 0), alpha=0.0, user="u")
        assert [h.id for h in hits] == [make_id(expected)], query
    assert reopened.hybrid(spec.name, query="stanbul", vector=vec(1, 0), alpha=0.0, user="u") == []
    reopened.close()


def test_postings_of_the_stored_text_equal_the_term_counts_layout_3_stored() -> None:
    # Layout 4 tokenises the text when a keyword index is built; the postings must be the
    # ones decoded from the per-row term counts layouts 1-3 stored, bit for bit.
    rng = random.Random(11)
    words = ["apple", "Äpfel", "İstanbul", "ΟΔΟΣ", "东京", "x_y", "naïve", "42", "the", "e\u0301"]
    spec = make_spec("Postings")
    objects: list[dict[str, object]] = []
    for i in range(300):
        props: dict[str, object] = {"rank": i}
        if i % 4:
            props["body"] = " ".join(rng.choices(words, k=rng.randint(0, 30)))
        if i % 3:
            props["title"] = rng.choice(words) + "-" + rng.choice(words)
        if i % 5:
            props["tags"] = rng.choices(words, k=rng.randint(0, 4))
        objects.append(props)
    for first_row in (0, 17):
        mine = embedded.keyword.text_postings(spec, objects, first_row)
        lengths, terms = embedded.encode_terms(spec, objects)
        stored = embedded.keyword._postings(lengths, terms, len(spec.searchable), first_row)
        np.testing.assert_array_equal(mine.lengths, stored.lengths)
        assert mine.lengths.dtype == stored.lengths.dtype
        assert len(mine.props) == len(stored.props) == 3
        for a, b in zip(mine.props, stored.props, strict=True):
            assert b.pair_hash.size > 0
            for field in ("pair_hash", "docs", "tf"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
                assert getattr(a, field).dtype == getattr(b, field).dtype
    empty = embedded.keyword.text_postings(spec, [{}, {"body": ""}], 0)
    assert all(p.pair_hash.size == 0 for p in empty.props)
    np.testing.assert_array_equal(empty.lengths, np.zeros((2, 3), dtype=np.float32))


def test_stored_properties_round_trip_and_damage_is_a_store_error(tmp_path: Path) -> None:
    from agentic_memory.store.embedded.sql import decode_body, encode_body

    for props in ({}, {"a": "x"}, {"text": "ünïcode " * 50, "n": 1.5, "tags": ["a", "b"]}):
        text = json.dumps(props, ensure_ascii=False)
        body = encode_body(text)
        assert decode_body(body) == props
        # Short JSON stays raw (deflating would lengthen it); long JSON is deflated.
        assert body[:1] == (b"\x01" if len(text) > 100 else b"\x00")
        assert len(body) <= len(text.encode()) + 1
    long = encode_body(json.dumps({"text": "word " * 100}))
    with pytest.raises(StoreError, match="damaged"):
        decode_body(long[:-5])
    with pytest.raises(StoreError, match="unknown encoding"):
        decode_body(b"\x07{}")
    # A damaged row read through the store is a store error too, not a crash.
    spec = make_spec("Damaged")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    store.upsert(spec.name, [MemoryObject(make_id("d"), {"body": "word " * 100}, vec(1))], user="u")
    with store._read() as conn:
        conn.execute(f'UPDATE "o_{spec.name}" SET body = substr(body, 1, 20)')
    with pytest.raises(StoreError, match="damaged"):
        store.get(spec.name, make_id("d"), user="u")
    store.close()


def _sql_matching(store: EmbeddedStore, spec: CollectionSpec, where: list[Where]) -> set[str]:
    """The ids SQLite's filter (``sql._filter_sql``, what lists and counts use) selects."""
    return {o.id for o in store.list_objects(spec.name, user="alice", where=where, limit=10_000)}


def _column_matching(store: EmbeddedStore, spec: CollectionSpec, where: list[Where]) -> set[str]:
    """The ids a search's filter over the cached columns selects (every live row a candidate)."""
    hits = store.hybrid(
        spec.name, query="", vector=vec(1), alpha=1.0, limit=10_000, user="alice", where=where
    )
    return {h.id for h in hits}


@pytest.mark.parametrize("seed", [3, 5])
def test_filters_on_cached_columns_select_what_sql_selects_as_rows_change(
    tmp_path: Path, seed: int
) -> None:
    # A search filters on columns cached with the partition and updated in place when another
    # connection adds, replaces (with values never seen before, or none) and deletes rows:
    # after every write they must select exactly the rows SQL selects, NULLs, dates in other
    # time zones, bools and integers near 2^53 included.
    rng = random.Random(seed)
    spec = make_spec("Cols")
    reader = EmbeddedStore(tmp_path, dims=DIMS)
    reader.ensure_collection(spec)
    writer = EmbeddedStore(tmp_path, dims=DIMS)
    kinds = ["a", "B", "b", "é", "z", "", "a b", "Zebra", "ä"]
    ids: list[str] = []

    def props() -> dict[str, object]:
        out: dict[str, object] = {"body": "x"}
        if rng.random() < 0.8:
            out["kind"] = rng.choice(kinds) + rng.choice(["", "", str(rng.randint(0, 3))])
        if rng.random() < 0.8:
            out["rank"] = rng.choice([rng.randint(-5, 5), 2**53 - rng.randint(0, 2)])
        if rng.random() < 0.8:
            out["weight"] = rng.choice([0.5, -1.25, 3.0, rng.uniform(-2, 2)])
        if rng.random() < 0.8:
            out["flag"] = rng.random() < 0.5
        if rng.random() < 0.8:
            hour = rng.randint(0, 23)
            out["at"] = f"2026-01-0{rng.randint(1, 3)}T{hour:02d}:00:00+0{rng.randint(0, 2)}:00"
        return out

    def value(prop: str) -> object:
        if prop == "kind":
            return rng.choice(kinds) + rng.choice(["", "1"])
        if prop == "rank":
            return rng.choice([rng.randint(-5, 5), 2**53 - 1])
        if prop == "weight":
            return rng.choice([0.5, -1.25, 0.0])
        if prop == "flag":
            return rng.random() < 0.5
        return f"2026-01-02T{rng.randint(0, 23):02d}:00:00+01:00"

    def condition() -> Where:
        prop = rng.choice(["kind", "rank", "weight", "flag", "at"])
        # Text and bools have no order (the store refuses ranges on them).
        ops = ["eq", "ne", "in"]
        if prop in ("rank", "weight", "at"):
            ops += ["gt", "gte", "lt", "lte"]
        op = rng.choice(ops)
        if op == "in":
            return Where(prop, "in", [value(prop), value(prop)])
        return Where(prop, op, value(prop))

    checked = 0
    for step in range(40):
        op = "add" if step < 2 else rng.choice(["add", "add", "replace", "delete"])
        if op == "add":
            batch = [
                MemoryObject(make_id(f"{step}-{k}"), props(), vec(1, k))
                for k in range(rng.randint(1, 6))
            ]
            writer.upsert(spec.name, batch, user="alice")
            ids += [o.id for o in batch]
        elif op == "replace":
            chosen = rng.sample(ids, min(3, len(ids)))
            writer.upsert(
                spec.name, [MemoryObject(i, props(), vec(1, 1)) for i in chosen], user="alice"
            )
        else:
            gone = rng.choice(ids)
            writer.delete(spec.name, [gone], user="alice")
            ids.remove(gone)
        for _ in range(6):
            where = [condition() for _ in range(rng.choice([1, 1, 2]))]
            assert _column_matching(reader, spec, where) == _sql_matching(reader, spec, where), (
                step,
                where,
            )
            checked += 1
    part = reader._cache[(spec.name, "alice")]
    assert set(part.columns) == {"kind", "rank", "weight", "flag", "at"}
    assert reader._cache.loads == 1, "the columns should have been updated in place"
    assert checked > 150
    reader.close()
    writer.close()


def test_a_loaded_partition_reads_its_projections_and_reprojects_a_damaged_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A partition with PCA axes keeps its rows' projections in its blocks, written with the
    # rows (and again for every block when the axes are chosen anew): a process loading it
    # projects nothing, and gets the bits projecting would give. A block whose projections
    # are missing or of other axes is projected afresh, with the same answers.
    monkeypatch.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 10)
    monkeypatch.setattr(embedded.vectors, "COARSE_MIN_SHORTLIST", 6)
    monkeypatch.setattr(embedded.vectors, "COARSE_RERANK", 0)
    monkeypatch.setattr(embedded.vectors, "COARSE_DIMS", 3)
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 16)  # several blocks
    rng = random.Random(5)
    spec = make_spec("Proj")
    writer = EmbeddedStore(tmp_path, dims=DIMS)
    writer.ensure_collection(spec)

    def obj(oid: str) -> MemoryObject:
        return MemoryObject(oid, {"body": "fig"}, [rng.uniform(-1, 1) for _ in range(DIMS)])

    ids = [make_id(str(i)) for i in range(70)]
    for start in range(0, 70, 7):  # 10, 20 and 40 rows crossed: axes chosen three times
        writer.upsert(spec.name, [obj(i) for i in ids[start : start + 7]], user="alice")
    writer.upsert(spec.name, [obj(i) for i in ids[3:60:9]], user="alice")  # replaced
    writer.delete(spec.name, ids[5:50:11], user="alice")
    conn = writer._conn
    assert conn is not None
    (versions,) = conn.execute(
        "SELECT count(DISTINCT axes) FROM amem_blocks WHERE collection = 'Proj' AND projected "
        "IS NOT NULL AND axes = (SELECT rows FROM amem_axes WHERE collection = 'Proj')"
    ).fetchone()
    (blocks,) = conn.execute(
        "SELECT count(*) FROM amem_blocks WHERE collection = 'Proj'"
    ).fetchone()
    assert versions == 1 and blocks >= 3
    query = {"query": "fig", "vector": vec(1, 1, 1), "alpha": 0.7, "limit": 9, "user": "alice"}
    want = writer.hybrid(spec.name, **query)  # type: ignore[arg-type]
    projected_here: list[int] = []
    real = embedded.cache.project

    def spy(unit: np.ndarray, *args: object, **kwargs: object) -> object:
        projected_here.append(len(unit))
        return real(unit, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(embedded.cache, "project", spy)
    monkeypatch.setattr(
        embedded.vectors._CoarseIndex,
        "__init__",
        _no_projection(embedded.vectors._CoarseIndex.__init__),
    )
    fresh = EmbeddedStore(tmp_path, dims=DIMS)
    assert _hits(fresh.hybrid(spec.name, **query)) == _hits(want)  # type: ignore[arg-type]
    assert projected_here == []
    part = fresh._cache[(spec.name, "alice")]
    coarse = part.coarse()
    assert coarse is not None
    np.testing.assert_array_equal(coarse.projected.view, real(part.unit, coarse.fixed))
    fresh.close()
    # Damage: one block loses its projections, another claims other axes.
    first, second = (r[0] for r in conn.execute("SELECT block FROM amem_blocks LIMIT 2"))
    conn.execute("UPDATE amem_blocks SET projected = NULL WHERE block = ?", (first,))
    conn.execute("UPDATE amem_blocks SET axes = axes + 1 WHERE block = ?", (second,))
    damaged = EmbeddedStore(tmp_path, dims=DIMS)
    assert _hits(damaged.hybrid(spec.name, **query)) == _hits(want)  # type: ignore[arg-type]
    assert projected_here, "the damaged blocks' rows should have been projected afresh"
    part = damaged._cache[(spec.name, "alice")]
    coarse = part.coarse()
    assert coarse is not None
    np.testing.assert_array_equal(coarse.projected.view, real(part.unit, coarse.fixed))
    damaged.close()
    writer.close()


def _hits(hits: list[SearchHit]) -> list[tuple[str, float, float | None, float | None]]:
    return [(h.id, h.score, h.keyword_score, h.vector_score) for h in hits]


def _no_projection(real: object) -> object:
    """Wrap ``_CoarseIndex.__init__`` so that it refuses to project every row itself."""

    def init(
        self: object,
        unit: np.ndarray,
        axes: object,
        projected: object = None,
        centroids: object = None,
        labels: object = None,
    ) -> None:
        assert projected is not None, "a loaded partition should not project all its rows"
        real(self, unit, axes, projected, centroids, labels)  # type: ignore[operator]

    return init


def _block_terms(conn: sqlite3.Connection) -> dict[int, set[int]]:
    """Every keyword block's term hashes, by block id."""
    out: dict[int, set[int]] = {}
    for block, rowinfo, postings in conn.execute(
        "SELECT block, rowinfo, postings FROM amem_blocks"
    ):
        rids, _ = embedded.blocks.decode_rowinfo(rowinfo)
        _, props = embedded.blocks.decode_terms(postings, rids.size)
        out[block] = {int(h) for terms in props for h in terms.hashes.tolist()}
    return out


def test_an_edit_writes_one_small_block_and_erase_deleted_drops_superseded_terms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rewriting rows in place (an upsert of existing ids) must not rewrite the blocks that
    # held them: their old entries are marked superseded. erase_deleted then rewrites those
    # blocks without them (the old text's term hashes leave the file), and deleting a row
    # takes every entry of it, superseded ones included, out of the file at once.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 10)
    spec = make_spec("Edits")
    store = EmbeddedStore(tmp_path, dims=DIMS)
    store.ensure_collection(spec)
    ids = [make_id(str(i)) for i in range(40)]
    for start in range(0, 40, 10):
        store.upsert(
            spec.name,
            [
                MemoryObject(i, {"body": f"plain row {n}" + " platypus" * (n == 3)}, vec(1, n))
                for n, i in enumerate(ids)
            ][start : start + 10],
            user="alice",
        )
    conn = store._conn
    assert conn is not None
    before = _block_terms(conn)
    assert len(before) == 4
    secret = embedded.term_hash("platypus")
    store.upsert(spec.name, [MemoryObject(ids[3], {"body": "quokka"}, vec(0, 1))], user="alice")
    store.upsert(spec.name, [MemoryObject(ids[3], {"body": "edited"}, vec(0, 1))], user="alice")
    store.upsert(spec.name, [MemoryObject(ids[25], {"body": "edited"}, vec(0, 1))], user="alice")
    after = _block_terms(conn)
    assert set(before) <= set(after), "the blocks that held the rows were rewritten"
    assert any(secret in terms for terms in after.values())  # superseded, not yet dropped
    (marked,) = conn.execute("SELECT count(*) FROM amem_superseded").fetchone()
    # Row 3's first and row 25's only entry; the one-row block of "quokka" had all its rows
    # superseded, so it was compacted away at once.
    assert marked == 2
    hits = store.hybrid(spec.name, query="quokka edited", vector=vec(0, 1), alpha=0.0, user="alice")
    assert [h.id for h in hits] == sorted([ids[3], ids[25]])
    assert store.count(spec.name, user="alice") == 40
    assert store.erase_deleted()
    after = _block_terms(conn)
    assert not any(secret in terms for terms in after.values())
    assert conn.execute("SELECT count(*) FROM amem_superseded").fetchone() == (0,)
    assert conn.execute("SELECT sum(rows) FROM amem_blocks").fetchone() == (40,)
    # A delete removes every entry of the row, whatever blocks they are in.
    store.upsert(spec.name, [MemoryObject(ids[7], {"body": "wombat"}, vec(0, 1))], user="alice")
    store.upsert(spec.name, [MemoryObject(ids[7], {"body": "again"}, vec(0, 1))], user="alice")
    store.delete(spec.name, [ids[7]], user="alice")
    wombat = embedded.term_hash("wombat")
    assert not any(wombat in terms for terms in _block_terms(conn).values())
    assert conn.execute("SELECT count(*) FROM amem_superseded").fetchone() == (0,)
    fresh = EmbeddedStore(tmp_path, dims=DIMS)
    for query in ("plain row", "again wombat edited quokka"):
        for alpha in (0.0, 0.5):
            got = store.hybrid(spec.name, query=query, vector=vec(1, 1), alpha=alpha, user="alice")
            want = fresh.hybrid(spec.name, query=query, vector=vec(1, 1), alpha=alpha, user="alice")
            assert _hits(got) == _hits(want)
    fresh.close()
    store.close()


COLD_SEARCH = textwrap.dedent(
    """
    import sys
    from agentic_memory.store import MemoryObject, make_id
    from agentic_memory.store.embedded import EmbeddedStore
    from tests.unit.store.conftest import make_spec, vec

    store = EmbeddedStore(sys.argv[1], dims=8)
    spec = make_spec("Cold_Imports")
    store.ensure_collection(spec)
    store.upsert(
        spec.name,
        [MemoryObject(make_id(str(i)), {"body": f"note {i}"}, vec(1, i)) for i in range(50)],
        user="alice",
    )
    store.upsert(spec.name, [MemoryObject(make_id("3"), {"body": "edited"}, vec(0, 1))], user="alice")
    store.delete(spec.name, [make_id("4")], user="alice")
    fresh = EmbeddedStore(sys.argv[1], dims=8)
    hits = fresh.hybrid(spec.name, query="note edited", vector=vec(0, 1), user="alice")
    assert hits, "the search found nothing"
    print("numpy.ma" in sys.modules)
    """
)


def test_a_cold_search_does_not_import_numpy_ma(tmp_path: Path) -> None:
    # np.unique imports numpy.ma on its first call (30-60 ms once per process): the first
    # search of a new process, e.g. a server's first recall, paid it.
    done = subprocess.run(
        [sys.executable, "-c", COLD_SEARCH, str(tmp_path / "store")],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("size", [0, 1, 2, 7, 1000])
def test_sorted_unique_is_numpy_unique(size: int) -> None:
    rng = np.random.default_rng(size)
    values = rng.integers(-5, 20, size=size).astype(np.int64)
    before = values.copy()
    got = sorted_unique(values)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.unique(values))
    assert np.array_equal(values, before), "the input was changed"

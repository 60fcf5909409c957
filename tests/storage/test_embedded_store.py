"""What only the embedded backend promises: its files, processes, transactions and open_store."""

from __future__ import annotations

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
    InvalidInputError,
    MemoryObject,
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
from agentic_memory.store.ranking import fuse_relative_score
from tests.storage.conftest import DIMS, count_extensions, make_spec, vec

WRITER = textwrap.dedent(
    """
    import sys
    from agentic_memory.store import MemoryObject, make_id
    from agentic_memory.store.embedded import EmbeddedStore
    from tests.storage.conftest import make_spec, vec

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
            cwd=Path(__file__).resolve().parents[2],
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
    _downgrade_to_layout_1(tmp_path / DB_FILENAME, spec.name, filterable)

    migrated = EmbeddedStore(tmp_path, dims=DIMS)
    assert answers(migrated) == before
    assert all(before[:6]), "every filter matches something, so the comparison means something"
    migrated.close()

    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    assert conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone() == (
        str(embedded.SCHEMA_VERSION),
    )
    # Every partition got a lineage, so caches can be extended from the first write on.
    assert conn.execute("SELECT count(*) FROM amem_generations WHERE lineage = ''").fetchone() == (
        0,
    )
    # The indexes are on the columns now, not on JSON expressions.
    for prop in filterable:
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (f"ix_{spec.name}_{prop}",)
        ).fetchone()
        assert f'"p_{prop}"' in sql and "json_extract" not in sql
    conn.close()


def test_store_of_a_newer_layout_is_refused(tmp_path: Path) -> None:
    import sqlite3

    EmbeddedStore(tmp_path, dims=DIMS).close()
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    conn.execute("UPDATE amem_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(StoreError, match="layout version 99"):
        EmbeddedStore(tmp_path, dims=DIMS)


@pytest.mark.parametrize("seed", [7, 11, 23])
def test_a_cached_partition_is_updated_in_place_and_equals_a_fresh_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # A reader keeps its cache while a second connection (as another process would) adds,
    # replaces and deletes rows; after every write the reader's answers and in-memory index
    # must be exactly those of a store opened afresh, whether it updated its cache in place
    # (rows only added or deleted) or reloaded it (a row replaced, or the largest rid gone).
    extended = count_extensions(monkeypatch)
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
    for step in range(40):
        op = (
            "add"
            if step < 3
            else rng.choice(["add"] * 3 + ["replace", "delete", "delete", "other"])
        )
        if op == "add":
            batch = [obj(make_id(f"{step}-{k}")) for k in range(rng.randint(1, 4))]
            writer.upsert(spec.name, batch, user="alice")
            ids += [o.id for o in batch]
            in_place = step > 0  # the reader cached alice's partition at the previous step
        elif op == "replace":
            writer.upsert(spec.name, [obj(rng.choice(ids))], user="alice")
            in_place = False
        elif op == "delete":
            gone = rng.choice(ids)
            with writer._read() as conn:
                (largest,) = conn.execute(f'SELECT max(rid) FROM "o_{spec.name}"').fetchone()
                (rid,) = conn.execute(
                    f'SELECT rid FROM "o_{spec.name}" WHERE id = ?', (gone,)
                ).fetchone()
            writer.delete(spec.name, [gone], user="alice")
            ids.remove(gone)
            # Deleting the table's largest rid lets SQLite reuse it: the reader must reload.
            in_place = rid != largest
        else:
            writer.upsert(spec.name, [obj(make_id(f"bob-{step}"))], user="bob")
            in_place = False  # alice's partition did not change: the cache is still current
        expected_extensions += in_place
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
        mine = reader._cache[(spec.name, "alice")]
        theirs = fresh._cache[(spec.name, "alice")]
        assert mine.ids == theirs.ids
        np.testing.assert_array_equal(mine.rowids, theirs.rowids)
        np.testing.assert_array_equal(mine.unit, theirs.unit)
        assert mine.keyword is not None and theirs.keyword is not None
        np.testing.assert_array_equal(mine.keyword.lengths, theirs.keyword.lengths)
        np.testing.assert_array_equal(mine.keyword.average, theirs.keyword.average)
        assert len(mine.keyword.props) == len(theirs.keyword.props) == len(spec.searchable)
        for p, (a, b) in enumerate(zip(mine.keyword.props, theirs.keyword.props, strict=True)):
            for field in ("hashes", "indptr", "docs", "tf", "weight"):
                np.testing.assert_array_equal(
                    getattr(a, field), getattr(b, field), err_msg=f"{field} of property {p}"
                )
        fresh.close()
    assert len(extended) == expected_extensions > 10
    reader.close()
    writer.close()


def test_terms_of_tokenizer_1_are_rewritten_once_on_open(tmp_path: Path) -> None:
    # Tokenizer 1 lower-cased before splitting: "İstanbul" became "i" + "stanbul" and a final
    # capital sigma "ς"; Weaviate (Go) splits first and maps letter by letter.
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
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    old_tokenize = lambda text: re.findall(r"[^\W_]+", text.lower())  # noqa: E731
    monkey = embedded.keyword.tokenize
    try:
        embedded.keyword.tokenize = old_tokenize  # type: ignore[assignment]
        for key in ("a", "c"):
            props = {"body": texts[key]}
            lengths, terms = embedded.encode_terms(spec, [props])
            conn.execute(
                f'UPDATE "o_{spec.name}" SET lengths = ?, terms = ? WHERE id = ?',
                (lengths[0], terms[0], make_id(key)),
            )
    finally:
        embedded.keyword.tokenize = monkey
    conn.execute("DELETE FROM amem_meta WHERE key = 'tokenizer'")
    conn.close()
    reopened = EmbeddedStore(tmp_path, dims=DIMS)
    for query, expected in (("istanbul", "a"), ("οδοσ", "a"), ("σ", "c")):
        hits = reopened.hybrid(spec.name, query=query, vector=vec(1, 0), alpha=0.0, user="u")
        assert [h.id for h in hits] == [make_id(expected)], query
    with reopened._read() as conn2:
        (version,) = conn2.execute("SELECT value FROM amem_meta WHERE key = 'tokenizer'").fetchone()
    assert version == embedded.TOKENIZER_VERSION
    reopened.close()

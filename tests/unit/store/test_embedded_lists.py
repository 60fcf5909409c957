"""The inverted lists of a large partition's vector side, and BM25 sized by its matches.

The thresholds are lowered so that the approximate path runs on a few thousand rows; the
default ones keep every partition of up to 150,000 rows off it (up to 20,000 exact).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import agentic_memory.store.embedded as embedded
from agentic_memory.store import MemoryObject, Where, make_id
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.embedded.lists import decode_centroids
from tests.unit.store.conftest import DIMS, make_spec

ROWS = 3000


@pytest.fixture
def small_lists(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Run the lists on small partitions; return the size of every probe's pool."""
    monkeypatch.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 200)
    monkeypatch.setattr(embedded.vectors, "IVF_ROWS", 500)
    monkeypatch.setattr(embedded.vectors, "COARSE_MIN_SHORTLIST", 40)
    monkeypatch.setattr(embedded.vectors, "COARSE_RERANK", 2)
    monkeypatch.setattr(embedded.lists, "LIST_ROWS", 100)
    monkeypatch.setattr(embedded.lists, "PROBE_ROWS", 300)
    pools: list[int] = []
    real = embedded.lists.InvertedLists.probe

    def probe(self: embedded.lists.InvertedLists, *args: object) -> object:
        found = real(self, *args)  # type: ignore[arg-type]
        pools.append(found[0].size)
        return found

    monkeypatch.setattr(embedded.lists.InvertedLists, "probe", probe)
    return pools


def _clustered(rng: np.random.Generator, rows: int) -> np.ndarray:
    centres = rng.normal(size=(40, DIMS))
    return centres[rng.integers(0, 40, size=rows)] + 0.35 * rng.normal(size=(rows, DIMS))


def _fill(path: Path, vectors: np.ndarray) -> tuple[EmbeddedStore, str]:
    store = EmbeddedStore(path, dims=DIMS)
    spec = make_spec("Big")
    store.ensure_collection(spec)
    for start in range(0, vectors.shape[0], 500):
        store.upsert(
            spec.name,
            [
                MemoryObject(make_id(str(i)), {"rank": i, "body": f"w{i % 7}"}, v.tolist())
                for i, v in enumerate(vectors[start : start + 500], start)
            ],
            user="u",
        )
    return store, spec.name


def _exact(
    vectors: np.ndarray, query: np.ndarray, k: int, keep: np.ndarray | None = None
) -> list[str]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ (query / np.linalg.norm(query))
    order = [int(i) for i in np.argsort(-sims, kind="stable") if keep is None or keep[i]]
    return [make_id(str(i)) for i in order[:k]]


def _vector_hits(store: EmbeddedStore, name: str, query: np.ndarray, **kw: object) -> list[str]:
    hits = store.hybrid(name, query="", vector=query.tolist(), alpha=1.0, user="u", **kw)  # type: ignore[arg-type]
    return [h.id for h in hits]


def test_probing_the_nearest_lists_finds_what_the_exact_scan_finds(
    tmp_path: Path, small_lists: list[int]
) -> None:
    # Recall@10 of the lists against the exact scan, on clustered vectors (as embeddings
    # of a knowledge base are); each probe must read a fraction of the partition.
    rng = np.random.default_rng(1)
    vectors = _clustered(rng, ROWS)
    store, name = _fill(tmp_path, vectors)
    found = 0
    for _ in range(40):
        query = vectors[rng.integers(ROWS)] + 0.2 * rng.normal(size=DIMS)
        got = _vector_hits(store, name, query, limit=10)
        found += len(set(got) & set(_exact(vectors, query, 10)))
    assert small_lists and max(small_lists) < ROWS // 2
    assert found / 400 >= 0.9
    store.close()


def test_upserts_deletes_and_filters_are_seen_on_the_lists_at_once(
    tmp_path: Path, small_lists: list[int]
) -> None:
    rng = np.random.default_rng(2)
    vectors = _clustered(rng, ROWS)
    store, name = _fill(tmp_path, vectors)
    query = rng.normal(size=DIMS) * 3
    _vector_hits(store, name, query, limit=5)  # lists built
    loads = store._cache.loads
    # Rewritten in place to point at the query: first at once, whichever list it left.
    moved = make_id("17")
    store.upsert(name, [MemoryObject(moved, {"rank": 17}, query.tolist())], user="u")
    assert _vector_hits(store, name, query, limit=5)[0] == moved
    store.delete(name, [moved], user="u")
    assert moved not in _vector_hits(store, name, query, limit=50)
    added = make_id("new")
    store.upsert(name, [MemoryObject(added, {"rank": 1}, (query * 2).tolist())], user="u")
    assert _vector_hits(store, name, query, limit=5)[0] == added
    assert store._cache.loads == loads, "the edits should have been taken in place"
    # A filter letting half the rows through: every hit passes it, and the lists are
    # probed for as many allowed rows as without one.
    small_lists.clear()
    keep = np.arange(ROWS) < ROWS // 2
    got = _vector_hits(store, name, query, limit=10, where=[Where("rank", "lt", ROWS // 2)])
    assert small_lists, "a filter leaving many rows should still probe the lists"
    assert all(
        int(i) < ROWS // 2 for i in (store.get(name, h, user="u").properties["rank"] for h in got)
    )  # type: ignore[union-attr]
    keep[17] = False  # deleted above
    assert len(set(got) & set(_exact(vectors, query, 10, keep))) >= 8
    store.close()


def test_centroids_are_stored_with_the_axes_and_a_reload_answers_the_same(
    tmp_path: Path, small_lists: list[int]
) -> None:
    rng = np.random.default_rng(3)
    vectors = _clustered(rng, ROWS)
    store, name = _fill(tmp_path, vectors)
    queries = [rng.normal(size=DIMS) for _ in range(5)]
    before = [_vector_hits(store, name, q, limit=10) for q in queries]
    conn = store._conn
    assert conn is not None
    (axes, blob, tag, version) = conn.execute(
        "SELECT axes, centroids, centroid_rows, rows FROM amem_axes WHERE collection = ?", (name,)
    ).fetchone()
    centroids = decode_centroids(blob)
    assert centroids is not None and centroids.shape[0] >= embedded.lists.MIN_LISTS
    assert tag == version
    again = EmbeddedStore(tmp_path, dims=DIMS)
    assert [_vector_hits(again, name, q, limit=10) for q in queries] == before
    again.close()
    # A file written before the lists (axes alone) still answers, scanning every row's
    # projection; its next write adds the centroids without choosing new axes. So does one
    # whose axes a process of layout 5 chose again (the centroids are of earlier axes).
    for stale in ("centroids = NULL", "centroid_rows = centroid_rows - 1"):
        conn.execute(f"UPDATE amem_axes SET {stale} WHERE collection = ?", (name,))
        probe = EmbeddedStore(tmp_path, dims=DIMS)
        small_lists.clear()
        assert _vector_hits(probe, name, queries[0], limit=10)
        assert small_lists == []
        probe.close()
        conn.execute(
            "UPDATE amem_axes SET centroids = ?, centroid_rows = rows WHERE collection = ?",
            (blob, name),
        )
    conn.execute("UPDATE amem_axes SET centroids = NULL WHERE collection = ?", (name,))
    old = EmbeddedStore(tmp_path, dims=DIMS)
    small_lists.clear()
    assert _vector_hits(old, name, queries[0], limit=10)
    assert small_lists == []
    (version,) = conn.execute("SELECT rows FROM amem_axes WHERE collection = ?", (name,)).fetchone()
    old.upsert(name, [MemoryObject(make_id("0"), {"rank": 0}, vectors[0].tolist())], user="u")
    (stored, filled, tag, after) = conn.execute(
        "SELECT axes, centroids, centroid_rows, rows FROM amem_axes WHERE collection = ?", (name,)
    ).fetchone()
    assert after == version and stored == axes and tag == version
    assert filled is not None and decode_centroids(filled) is not None
    upgraded = [_vector_hits(old, name, q, limit=10) for q in queries]
    assert small_lists, "the upgraded partition should probe its lists"
    again = EmbeddedStore(tmp_path, dims=DIMS)
    assert [_vector_hits(again, name, q, limit=10) for q in queries] == upgraded
    again.close()
    old.close()
    store.close()


def test_a_writer_killed_while_choosing_centroids_loses_nothing(tmp_path: Path) -> None:
    # The centroids are chosen inside the write transaction that crossed the threshold: a
    # process killed there leaves the file as the last commit left it, and the next write
    # chooses them.
    script = textwrap.dedent(
        f"""
        import os, sys
        import numpy as np
        sys.path.insert(0, {str(Path.cwd())!r})
        import agentic_memory.store.embedded as embedded
        from agentic_memory.store import MemoryObject, make_id
        from agentic_memory.store.embedded import EmbeddedStore
        from tests.unit.store.conftest import make_spec
        embedded.vectors.EXACT_VECTOR_ROWS = 200
        store = EmbeddedStore({str(tmp_path)!r}, dims={DIMS})
        spec = make_spec("Big")
        store.ensure_collection(spec)
        rng = np.random.default_rng(4)
        def batch(first):
            return [MemoryObject(make_id(str(i)), {{"rank": i}}, rng.normal(size={DIMS}).tolist())
                    for i in range(first, first + 150)]
        store.upsert(spec.name, batch(0), user="u")
        def die(*args, **kwargs):
            os._exit(9)
        embedded.vectors.choose_centroids = die
        store.upsert(spec.name, batch(150), user="u")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    monkey = pytest.MonkeyPatch()
    monkey.setattr(embedded.vectors, "EXACT_VECTOR_ROWS", 200)
    try:
        store = EmbeddedStore(tmp_path, dims=DIMS)
        assert store.count("Big", user="u") == 150
        conn = store._conn
        assert conn is not None
        assert conn.execute("SELECT count(*) FROM amem_axes").fetchone() == (0,)
        assert len(store.hybrid("Big", query="", vector=[1.0] * DIMS, alpha=1.0, user="u")) > 0
        store.upsert(
            "Big",
            [
                MemoryObject(make_id(str(i)), {"rank": i}, [float(i % 5 + 1)] * DIMS)
                for i in range(150, 300)
            ],
            user="u",
        )
        (blob,) = conn.execute("SELECT centroids FROM amem_axes").fetchone()
        assert blob is not None and decode_centroids(blob) is not None
        store.close()
    finally:
        monkey.undo()


def test_bm25_of_a_few_matches_allocates_nothing_sized_by_the_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rare term on a large partition: its scores are kept per matching row. The answers
    # are those of the per-slot arrays (SPARSE_SHARE 0 forces those).
    rng = np.random.default_rng(5)
    slots = 20_000
    words = [f"w{i}" for i in range(300)]
    spec = make_spec("Kw")
    objects = [
        {
            "title": " ".join(rng.choice(words, size=int(rng.integers(1, 9))))
            + (" rare" if i % 997 == 0 else "")
        }
        for i in range(slots)
    ]
    postings = embedded.keyword.text_postings(spec, objects, 0)
    index = embedded.keyword._KeywordIndex(len(spec.searchable))
    index.grow(slots)
    everything = np.arange(slots)
    terms = [embedded.keyword._Terms.of(p) for p in postings.props]
    index.assign(everything, postings.lengths, terms)
    index.remove(np.arange(0, slots, 5))
    allowed = np.ones(slots, dtype=bool)
    allowed[np.arange(0, slots, 5)] = False
    allowed[np.arange(1, slots, 3)] = False
    sizes: list[int] = []
    real = np.bincount

    def bincount(x: np.ndarray, weights: object = None, minlength: int = 0) -> np.ndarray:
        sizes.append(max(minlength, int(x.max()) + 1 if x.size else 0))
        return real(x, weights=weights, minlength=minlength)  # type: ignore[arg-type]

    for query in ({"rare": 1}, {"rare": 1, "w3": 1}, {"w1": 1, "w2": 1}):
        for mask in (None, allowed):
            monkeypatch.setattr(embedded.keyword.np, "bincount", bincount)
            sizes.clear()
            sparse = embedded.keyword._bm25_top(index.slots, index, query, mask, 50)
            if query == {"rare": 1}:
                assert max(sizes) < slots // 100
            monkeypatch.setattr(embedded.keyword.np, "bincount", real)
            monkeypatch.setattr(embedded.keyword, "SPARSE_SHARE", 0)
            dense = embedded.keyword._bm25_top(index.slots, index, query, mask, 50)
            monkeypatch.undo()
            np.testing.assert_array_equal(sparse[0], dense[0])
            np.testing.assert_array_equal(sparse[1], dense[1])


def test_a_cold_load_reads_each_rows_list_from_its_block(
    tmp_path: Path, small_lists: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writes keep each row's inverted list in its block (computed with the centroids
    # the axes came with), so a new process labels no row; its answers are those of a
    # process that labels every row itself.
    rng = np.random.default_rng(3)
    vectors = _clustered(rng, ROWS)
    store, name = _fill(tmp_path, vectors)
    store.close()
    labelled: list[int] = []
    real = embedded.lists.label_rows

    def spy(projected: np.ndarray, centroids: np.ndarray) -> object:
        labelled.append(projected.shape[0])
        return real(projected, centroids)

    monkeypatch.setattr(embedded.lists, "label_rows", spy)
    queries = [vectors[rng.integers(ROWS)] + 0.2 * rng.normal(size=DIMS) for _ in range(10)]
    cold = EmbeddedStore(tmp_path, dims=DIMS)
    got = [_vector_hits(cold, name, q, limit=10) for q in queries]
    cold.close()
    assert small_lists and labelled == [], f"a cold load labelled {labelled} rows"
    monkeypatch.setattr(embedded.blocks, "decode_labels", lambda *_: None)
    monkeypatch.setattr(embedded.cache, "decode_labels", lambda *_: None)
    relabelled = EmbeddedStore(tmp_path, dims=DIMS)
    assert [_vector_hits(relabelled, name, q, limit=10) for q in queries] == got
    assert sum(labelled) == ROWS, "without stored lists every row is labelled once"
    relabelled.close()

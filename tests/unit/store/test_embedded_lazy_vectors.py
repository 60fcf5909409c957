"""A cold load leaves a partition's vectors in the file: searches read what they score.

Each case compares a lazily loaded store with one that reads every vector at load (its
cache given no file path), over the same file: the answers must be the same, bit for bit,
whatever is read when, by the search or the thread that reads the rest.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

import agentic_memory.store.embedded as embedded
from agentic_memory.store import MemoryObject, SearchHit, StoreError, make_id
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.embedded.cache import _Partition
from tests.unit.store.conftest import DIMS
from tests.unit.store.test_embedded_lists import ROWS, _clustered, _fill, small_lists

__all__ = ["small_lists"]

Query = tuple[str, list[float], float]


def _queries(rng: np.random.Generator, vectors: np.ndarray, count: int) -> list[Query]:
    out: list[Query] = []
    for n in range(count):
        near = vectors[rng.integers(vectors.shape[0])] + 0.2 * rng.normal(size=DIMS)
        out.append((f"w{n % 7}" if n % 3 else "", near.tolist(), (1.0, 0.5, 0.75)[n % 3]))
    return out


def _answers(store: EmbeddedStore, name: str, queries: list[Query]) -> list[list[SearchHit]]:
    return [
        store.hybrid(name, query=text, vector=vector, alpha=alpha, limit=10, user="u")
        for text, vector, alpha in queries
    ]


def _file(path: Path, seed: int) -> tuple[np.random.Generator, np.ndarray, EmbeddedStore, str]:
    """Write ``ROWS`` clustered rows; return the generator, the vectors, the writer, the name."""
    rng = np.random.default_rng(seed)
    vectors = _clustered(rng, ROWS)
    writer, name = _fill(path, vectors)
    return rng, vectors, writer, name


def _written(path: Path, seed: int) -> tuple[np.random.Generator, np.ndarray, str]:
    """``_file`` with the writer closed: every store of the test opens the file afresh."""
    rng, vectors, writer, name = _file(path, seed)
    writer.close()
    return rng, vectors, name


def _eager(path: Path) -> EmbeddedStore:
    store = EmbeddedStore(path, dims=DIMS)
    store._cache.path = None  # every vector read at load, as before lazy loads
    return store


def _part(store: EmbeddedStore, name: str) -> _Partition:
    return store._cache[(name, "u")]


@pytest.fixture
def no_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave the rest of the vectors to the searches: no thread reads them."""
    monkeypatch.setattr(embedded.vectors.PendingUnits, "start", lambda *args: None)


def test_a_cold_search_reads_only_what_it_scores_and_answers_as_a_full_load(
    tmp_path: Path, small_lists: list[int], no_thread: None
) -> None:
    rng, vectors, name = _written(tmp_path, 11)
    queries = _queries(rng, vectors, 30)
    lazy, eager = EmbeddedStore(tmp_path, dims=DIMS), _eager(tmp_path)
    first = _answers(lazy, name, queries[:1])
    pending = _part(lazy, name).pending
    assert pending is not None
    assert 0 < int(pending.waiting.sum()) < ROWS, "the first search read every vector"
    assert first + _answers(lazy, name, queries[1:]) == _answers(eager, name, queries)
    assert _part(eager, name).pending is None
    lazy.close()
    eager.close()


def test_the_thread_reads_the_rest_then_edits_are_taken_in_place(
    tmp_path: Path, small_lists: list[int]
) -> None:
    rng, vectors, name = _written(tmp_path, 12)
    queries = _queries(rng, vectors, 12)
    lazy, eager = EmbeddedStore(tmp_path, dims=DIMS), _eager(tmp_path)
    first = _answers(lazy, name, queries[:1])
    pending = _part(lazy, name).pending
    assert pending is not None
    assert first + _answers(lazy, name, queries[1:]) == _answers(eager, name, queries)
    assert pending.settle(), "the thread left vectors unread"
    _answers(lazy, name, queries[:1])
    assert _part(lazy, name).pending is None, "a search after the thread should let go of it"
    loads = lazy._cache.loads
    edits = [
        MemoryObject(make_id(str(i)), {"rank": i, "body": "w1 moved"}, (vectors[i] * -1).tolist())
        for i in (5, 700, 2999)
    ] + [MemoryObject(make_id("new"), {"rank": 1, "body": "w2"}, vectors[3].tolist())]
    for store in (lazy, eager):
        store.upsert(name, edits, user="u")
        store.delete(name, [make_id("42")], user="u")
    assert _answers(lazy, name, queries) == _answers(eager, name, queries)
    assert lazy._cache.loads == loads, "the edits should have been taken in place"
    assert _part(lazy, name).pending is None
    lazy.close()
    eager.close()


def test_a_write_before_the_rest_is_read_reloads_and_answers_right(
    tmp_path: Path, small_lists: list[int], no_thread: None
) -> None:
    rng, vectors, writer, name = _file(tmp_path, 13)
    queries = _queries(rng, vectors, 10)
    lazy = EmbeddedStore(tmp_path, dims=DIMS)
    _answers(lazy, name, queries[:1])
    part = _part(lazy, name)
    assert part.pending is not None
    loads = lazy._cache.loads
    # Another handle rewrites rows (their blocks go) and adds some.
    moved = [
        MemoryObject(make_id(str(i)), {"rank": i, "body": "w3"}, vectors[(i + 1) % ROWS].tolist())
        for i in range(0, ROWS, 97)
    ]
    writer.upsert(name, moved, user="u")
    got = _answers(lazy, name, queries)
    assert lazy._cache.loads == loads + 1, "slots still waiting must not be updated in place"
    fresh = _eager(tmp_path)
    assert got == _answers(fresh, name, queries)
    for store in (lazy, fresh, writer):
        store.close()


def test_a_thread_is_not_started_on_a_generation_the_file_left(
    tmp_path: Path, small_lists: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng, vectors, writer, name = _file(tmp_path, 14)
    lazy = EmbeddedStore(tmp_path, dims=DIMS)
    with monkeypatch.context() as patch:
        patch.setattr(embedded.vectors.PendingUnits, "start", lambda *args: None)
        _answers(lazy, name, _queries(rng, vectors, 1))
    part = _part(lazy, name)
    pending = part.pending
    assert pending is not None and part.token is not None
    writer.upsert(name, [MemoryObject(make_id("x"), {"rank": 1}, vectors[0].tolist())], user="u")
    opened = []
    connect = sqlite3.connect

    def counted(*args: object, **kwargs: object) -> sqlite3.Connection:
        opened.append(args)
        return connect(*args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(embedded.vectors.sqlite3, "connect", counted)
        for _ in range(3):  # a search after a refusal does not try again
            pending.start(tmp_path / "store.sqlite3", part.token, name, "u")
    assert pending._thread is None and len(opened) == 1
    waiting = int(pending.waiting.sum())
    assert waiting and not pending.settle()
    for store in (lazy, writer):
        store.close()


def test_a_damaged_block_is_an_error_not_an_answer(
    tmp_path: Path, small_lists: list[int], no_thread: None
) -> None:
    rng, vectors, name = _written(tmp_path, 15)
    with sqlite3.connect(tmp_path / "store.sqlite3") as raw:
        raw.execute("UPDATE amem_blocks SET vectors = substr(vectors, 1, 100)")
        before = raw.execute("SELECT count(*), total(length(vectors)) FROM amem_blocks").fetchone()
    lazy = EmbeddedStore(tmp_path, dims=DIMS)
    for text, vector, alpha in _queries(rng, vectors, 3):
        if alpha == 0.5 and text:
            continue
        with pytest.raises(StoreError, match="damaged"):
            lazy.hybrid(name, query=text, vector=vector, alpha=alpha, user="u")
    lazy.close()
    with sqlite3.connect(tmp_path / "store.sqlite3") as raw:
        after = raw.execute("SELECT count(*), total(length(vectors)) FROM amem_blocks").fetchone()
    assert after == before


def test_closing_the_store_stops_the_thread(tmp_path: Path, small_lists: list[int]) -> None:
    rng, vectors, name = _written(tmp_path, 16)
    lazy = EmbeddedStore(tmp_path, dims=DIMS)
    _answers(lazy, name, _queries(rng, vectors, 1))
    pending = _part(lazy, name).pending
    assert pending is not None
    lazy.close()
    assert pending._thread is None or not pending._thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name == "amem-partition-vectors"]


def test_searches_from_threads_while_the_rest_is_read_answer_as_a_full_load(
    tmp_path: Path, small_lists: list[int]
) -> None:
    rng, vectors, name = _written(tmp_path, 17)
    queries = _queries(rng, vectors, 40)
    eager = _eager(tmp_path)
    expected = _answers(eager, name, queries)
    lazy = EmbeddedStore(tmp_path, dims=DIMS)
    got: dict[int, list[list[SearchHit]]] = {}

    def search(part: int) -> None:
        got[part] = _answers(lazy, name, queries[part::4])

    workers = [threading.Thread(target=search, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for n in range(4):
        assert got[n] == expected[n::4]
    lazy.close()
    eager.close()


def test_a_transactions_own_writes_are_searched_and_no_thread_reads_the_committed_file(
    tmp_path: Path, small_lists: list[int]
) -> None:
    rng, vectors, name = _written(tmp_path, 18)
    queries = _queries(rng, vectors, 6)
    lazy = EmbeddedStore(tmp_path, dims=DIMS)
    alone = rng.normal(size=DIMS) * 5
    added = MemoryObject(make_id("inside"), {"rank": 1, "body": "w1"}, alone.tolist())
    with lazy.transaction():
        lazy.upsert(name, [added], user="u")
        hits = lazy.hybrid(name, query="", vector=alone.tolist(), alpha=1.0, user="u")
        assert hits[0].id == make_id("inside")
        pending = _part(lazy, name).pending
        assert pending is None or pending._thread is None
    after = _answers(lazy, name, queries)
    eager = _eager(tmp_path)
    assert after == _answers(eager, name, queries)
    lazy.close()
    eager.close()


def test_two_users_partitions_load_lazily_side_by_side_and_stay_apart(
    tmp_path: Path, small_lists: list[int]
) -> None:
    rng, vectors, writer, name = _file(tmp_path, 19)
    theirs = vectors[::-1] * 2
    for start in range(0, ROWS, 500):
        writer.upsert(
            name,
            [
                MemoryObject(make_id("v", str(i)), {"rank": i, "body": f"w{i % 5}"}, v.tolist())
                for i, v in enumerate(theirs[start : start + 500], start)
            ],
            user="v",
        )
    writer.close()
    queries = _queries(rng, vectors, 16)
    own = {make_id(str(i)) for i in range(ROWS)}
    lazy, eager = EmbeddedStore(tmp_path, dims=DIMS), _eager(tmp_path)
    for n, (text, vector, alpha) in enumerate(queries):
        for user in ("u", "v"):
            got = lazy.hybrid(name, query=text, vector=vector, alpha=alpha, limit=10, user=user)
            want = eager.hybrid(name, query=text, vector=vector, alpha=alpha, limit=10, user=user)
            assert got == want
            assert all((h.id in own) == (user == "u") for h in got)
            if n == 0:
                assert lazy._cache[(name, user)].pending is not None, "not loaded lazily"
    for user in ("u", "v"):
        pending = lazy._cache[(name, user)].pending
        assert pending is None or pending.settle()
    lazy.close()
    eager.close()

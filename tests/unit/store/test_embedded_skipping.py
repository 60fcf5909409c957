"""Keyword search that skips (``skipping.py``) returns what scoring every posting returns.

Large partitions score their keyword side with columns of frequent terms and bounds per
window, and skip the rows that cannot enter a property's top k. Every test here compares
that path with the exhaustive scorer on the same index, exactly: the same rows, the same
float32 scores, the same order, for random queries (frequent and rare terms, repeats,
filters) and both candidate counts a hybrid search asks for (100 and above), on indexes
that went through random writes: new rows, rows replaced (stale postings), rows deleted.
The thresholds are lowered so that the pruned path runs on a few thousand rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import agentic_memory.store.embedded as embedded
from agentic_memory.store import MemoryObject, Where, make_id
from agentic_memory.store.embedded import EmbeddedStore, skipping
from agentic_memory.store.embedded import keyword as kw
from agentic_memory.store.ranking import keyword_candidates, top_positions
from tests.unit.store.conftest import DIMS, make_spec


def _vocabulary(size: int) -> tuple[list[str], np.ndarray]:
    words = [f"w{i}" for i in range(size)]
    share = 1.0 / np.arange(1, size + 1) ** 1.1
    return words, share / share.sum()


def _text(rng: np.random.Generator, words: list[str], share: np.ndarray, most: int) -> str:
    count = int(rng.integers(0, most))
    return " ".join(rng.choice(words, size=count, p=share))


@pytest.fixture
def pruning(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Prune from 0 slots with windows of 8 slots; count what the pruned path did."""
    monkeypatch.setattr(skipping, "PRUNE_ROWS", 0)
    monkeypatch.setattr(kw, "PRUNE_ROWS", 0)
    monkeypatch.setattr(skipping, "WINDOW_BITS", 3)
    seen = {"pruned": 0, "fallback": 0, "listed above 2": 0, "scored": 0}
    real_top, real_listed = skipping.pruned_top, skipping.DenseTerms.listed

    def top(*args: Any, **kwargs: Any) -> object:
        got = real_top(*args, **kwargs)
        seen["pruned" if got is not None else "fallback"] += 1
        return got

    def listed(
        self: skipping.DenseTerms, column: int, level: int, below: int | None = None
    ) -> object:
        # Rows of frequent terms only, chosen by frequency (the windows ruled little out).
        seen["listed above 2"] += level > 2
        return real_listed(self, column, level, below)

    def positions(scores: np.ndarray, k: int) -> object:
        # The rows the pruned path scored exactly in the end.
        seen["scored"] += scores.size
        return top_positions(scores, k)

    monkeypatch.setattr(kw, "pruned_top", top)
    monkeypatch.setattr(skipping.DenseTerms, "listed", listed)
    monkeypatch.setattr(skipping, "top_positions", positions)
    return seen


def _matches(index: kw._KeywordIndex, query: dict[str, int], mask: np.ndarray | None) -> int:
    """Return the (property, row) pairs a query matches: what the exhaustive path scores."""
    hashes = np.array([kw.term_hash(t) for t in query], dtype=np.int64)
    total = 0
    for p in range(index.width):
        found = index.lookup_property(p, hashes)
        rows = np.unique(np.concatenate([r for r, _ in found]))
        total += int(rows.size if mask is None else mask[rows].sum())
    return total


def _exhaustive(monkeypatch: pytest.MonkeyPatch, *args: Any) -> tuple[np.ndarray, np.ndarray]:
    with monkeypatch.context() as patch:
        patch.setattr(kw, "PRUNE_ROWS", 1 << 60)
        return kw._bm25_top(*args)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pruned_top_equals_the_exhaustive_scorer_through_writes(
    monkeypatch: pytest.MonkeyPatch, pruning: dict[str, int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    words, share = _vocabulary(400)
    spec = make_spec("Skip")  # three searchable properties: title, body, tags
    index = kw._KeywordIndex(len(spec.searchable))

    def content(count: int) -> kw._Postings:
        objects = [
            {
                "title": _text(rng, words, share, 6),
                "body": _text(rng, words, share, 40),
                "tags": [str(w) for w in rng.choice(words[:30], size=int(rng.integers(0, 3)))],
            }
            for _ in range(count)
        ]
        return kw.text_postings(spec, objects, 0)

    def write(slots: np.ndarray) -> None:
        postings = content(slots.size)
        index.assign(slots, postings.lengths, [kw._Terms.of(p) for p in postings.props])

    index.grow(2500)
    write(np.arange(2500))
    alive = np.ones(2500, dtype=bool)
    checked = matched = scored = 0
    for step in range(12):
        op = ["add", "replace", "delete"][step % 3]
        if op == "add":
            added = int(rng.integers(1, 300))
            index.grow(added)
            alive = np.concatenate((alive, np.ones(added, dtype=bool)))
            write(np.arange(index.slots - added, index.slots))
        elif op == "replace":
            write(np.sort(rng.choice(index.slots, size=int(rng.integers(1, 200)), replace=False)))
        else:
            gone = np.sort(rng.choice(index.slots, size=int(rng.integers(1, 200)), replace=False))
            index.remove(gone)
            alive[gone] = False
        live = int(alive.sum())
        for _ in range(25):
            terms = rng.choice(
                words[:60] if rng.random() < 0.5 else words, size=int(rng.integers(1, 6))
            )
            query: dict[str, int] = {}
            for term in terms.tolist():
                query[term] = query.get(term, 0) + 1
            mask: np.ndarray | None = alive.copy() if not alive.all() else None
            if rng.random() < 0.4:
                mask = alive & (rng.random(index.slots) < rng.choice([0.05, 0.5, 0.9]))
            for limit in (10, 150, 1000):
                want = _exhaustive(monkeypatch, live, index, query, mask, keyword_candidates(limit))
                before = pruning["scored"]
                got = kw._bm25_top(live, index, query, mask, keyword_candidates(limit))
                np.testing.assert_array_equal(got[0], want[0], err_msg=f"{step} {query}")
                np.testing.assert_array_equal(got[1], want[1], err_msg=f"{step} {query}")
                checked += 1
                if limit == 10:
                    matched += _matches(index, query, mask)
                    scored += pruning["scored"] - before
    assert checked == 12 * 25 * 3
    # Both ways ran: pruned, and exhaustive where the seeds found fewer than k matches
    # (often, with k up to 1,100 on a few thousand rows, or a filter letting 5 % through).
    assert pruning["pruned"] > 100 and pruning["fallback"] > 0, pruning
    assert pruning["listed above 2"] > 0, pruning
    # Across the queries of limit 10, far fewer rows were scored than they matched.
    assert scored * 2 < matched, (scored, matched)


def _check_columns(index: kw._KeywordIndex) -> int:
    """Assert every dense column holds its term's live frequencies and count; return columns."""
    checked = 0
    for p, pairs in enumerate(index.canonical()):
        dense = index.dense[p]
        if dense is None:
            continue
        for column, term in enumerate(dense.hashes.tolist()):
            mine = pairs.pair_hash == term
            want = np.zeros(index.slots, dtype=np.int64)
            want[pairs.docs[mine]] = pairs.tf[mine].astype(np.int64)
            np.testing.assert_array_equal(dense.cols[column].astype(np.int64), want)
            assert dense.df[column] == int(mine.sum())
            for level in (2, 3):
                listed = set(dense.listed(column, level).tolist())
                assert listed == set(np.flatnonzero(want >= level).tolist())
            checked += 1
    return checked


@pytest.mark.parametrize("seed", [4, 5])
def test_dense_columns_follow_writes_and_hybrid_answers_equal_the_exhaustive_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pruning: dict[str, int], seed: int
) -> None:
    # A reader keeps its partition cached (dense columns included) while a writer adds,
    # replaces (upserts and updates of existing ids), and deletes rows, by id and by filter;
    # blocks of 8 rows, so that superseded entries, merges and compactions occur. After
    # every write the reader's hybrid answers, pure keyword (alpha 0) and hybrid (0.5), for
    # 100 and 160 keyword candidates, with and without filters, equal the exhaustive scorer's
    # on the same cache and a fresh store's, and its columns equal its postings.
    monkeypatch.setattr(embedded.blocks, "BLOCK_ROWS", 8)
    rng = np.random.default_rng(seed)
    words, share = _vocabulary(300)
    spec = make_spec("Churn")
    reader = EmbeddedStore(tmp_path, dims=DIMS)
    reader.ensure_collection(spec)
    writer = EmbeddedStore(tmp_path, dims=DIMS)
    ids: list[str] = []

    def obj(oid: str) -> MemoryObject:
        return MemoryObject(
            oid,
            {
                "title": _text(rng, words, share, 5),
                "body": _text(rng, words, share, 30),
                "rank": int(rng.integers(0, 4)),
            },
            rng.uniform(-1, 1, DIMS).tolist(),
        )

    batch = [obj(make_id("first", str(i))) for i in range(400)]
    writer.upsert(spec.name, batch, user="u")
    ids += [o.id for o in batch]
    compared = 0
    for step in range(14):
        op = ["add", "replace", "update", "delete", "delete_where", "add", "replace"][step % 7]
        if op == "add":
            batch = [obj(make_id(str(step), str(i))) for i in range(int(rng.integers(1, 40)))]
            writer.upsert(spec.name, batch, user="u")
            ids += [o.id for o in batch]
        elif op == "replace":
            chosen = rng.choice(ids, size=min(len(ids), int(rng.integers(1, 30))), replace=False)
            writer.upsert(spec.name, [obj(str(i)) for i in chosen], user="u")
        elif op == "update":
            chosen = rng.choice(ids, size=min(len(ids), 10), replace=False).tolist()
            writer.update(spec.name, chosen, lambda o: obj(o.id), user="u")
        elif op == "delete":
            gone = rng.choice(ids, size=min(len(ids), int(rng.integers(1, 20))), replace=False)
            writer.delete(spec.name, gone.tolist(), user="u")
            ids = [i for i in ids if i not in set(gone.tolist())]
        else:
            writer.delete_where(spec.name, [Where("rank", "eq", int(rng.integers(0, 4)))], user="u")
            ids = [o.id for o in writer.list_objects(spec.name, user="u", limit=10_000)]
        fresh = EmbeddedStore(tmp_path, dims=DIMS)
        for _ in range(6):
            query = " ".join(rng.choice(words[:40] if rng.random() < 0.6 else words, size=3))
            vector = rng.uniform(-1, 1, DIMS).tolist()
            where = [Where("rank", "lt", 2)] if rng.random() < 0.3 else []
            for alpha in (0.0, 0.5):
                for limit in (10, 160):
                    asked = {"query": query, "vector": vector, "alpha": alpha, "limit": limit}
                    got = _answers(reader.hybrid(spec.name, user="u", where=where, **asked))
                    with monkeypatch.context() as patch:
                        patch.setattr(kw, "PRUNE_ROWS", 1 << 60)
                        want = _answers(reader.hybrid(spec.name, user="u", where=where, **asked))
                    assert got == want, (step, op, asked)
                    assert got == _answers(
                        fresh.hybrid(spec.name, user="u", where=where, **asked)
                    ), (step, op)
                    compared += 1
        fresh.close()
        part = reader._cache[(spec.name, "u")]
        assert part.keyword is not None
        assert _check_columns(part.keyword) > 0
    assert reader._cache.loads == 1, "the reader's cache should have been updated in place"
    assert compared == 14 * 6 * 4
    assert pruning["pruned"] > 50, pruning
    reader.close()
    writer.close()


def _answers(hits: list[Any]) -> list[tuple[str, float, float | None, float | None]]:
    return [(h.id, h.score, h.keyword_score, h.vector_score) for h in hits]

"""Differential tests: the embedded store against the reference model of Weaviate's ranking.

Generated corpora (``differential.py``) are written to an embedded store and to the model
(``weaviate_reference.py``); every generated query must give the same hits in the same order
with the same fused, keyword and vector scores, compared exactly (both sides compute in
float32 like the server; the generated vectors make cosines exact).

``AMEM_DIFFERENTIAL_QUERIES`` sets the number of queries (default 10,000, about 20 s here);
``AMEM_DIFFERENTIAL_CHURN_CORPORA`` the number of churn corpora (default 12, 20 queries after
each of four steps); ``AMEM_DIFFERENTIAL_SEED`` moves the seeds. A failure names the seed
that reproduces it. The model's own churn mechanics are tested in ``test_reference_churn.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.store import differential as diff
from tests.unit.store import weaviate_reference as ref

QUERIES = int(os.environ.get("AMEM_DIFFERENTIAL_QUERIES", "10000"))
SEED = int(os.environ.get("AMEM_DIFFERENTIAL_SEED", "1"))
PER_CORPUS = 40
CHURN_CORPORA = int(os.environ.get("AMEM_DIFFERENTIAL_CHURN_CORPORA", "12"))
CHURN_QUERIES = 20


def test_embedded_store_ranks_like_the_reference_model(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path, dims=diff.DIMS)
    schemas = diff.specs("Diff")
    for spec in schemas.values():
        store.ensure_collection(spec)
    ran = 0
    corpora = 0
    differences: list[str] = []
    seed = SEED * 1_000_003
    while ran < QUERIES:
        seed += 1
        case = diff.corpus(seed, min(PER_CORPUS, QUERIES - ran))
        spec = schemas[len(case.searchable)]
        user = f"u{seed}"
        shard = diff.load(store, spec, user, case)
        corpora += 1
        for n, query in enumerate(case.queries):
            got, want = diff.compare(store, spec, user, shard, query)
            ran += 1
            if got != want:
                differences.append(
                    f"seed {seed} query {n} {query!r}:\n  store {got[:5]}\n  model {want[:5]}"
                )
        # Keep memory flat: a corpus is never read again.
        store.delete_user(spec.name, user)
    store.close()
    assert not differences, f"{len(differences)} of {ran} queries differ:\n" + "\n".join(
        differences[:10]
    )
    assert ran >= min(QUERIES, 1) and corpora > 0


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("İstanbul ISTANBUL", ["istanbul", "istanbul"]),
        ("ΟΔΟΣ οδος", ["οδοσ", "οδος"]),
        ("cafe\u0301 café", ["cafe", "café"]),
        ("snake_case x² ½ Ⅻ", ["snake", "case", "x²", "½", "ⅻ"]),
        ("東京タワー🍕pizza", ["東京タワー", "pizza"]),
    ],
)
def test_tokenisation_edge_cases_match_the_model(text: str, tokens: list[str]) -> None:
    from agentic_memory.store.ranking import tokenize

    assert tokenize(text) == ref.tokenize_word(text) == tokens


def test_embedded_store_after_churn_ranks_like_the_model_with_exact_statistics(
    tmp_path: Path,
) -> None:
    # Writes, a flush, deletes and rewrites, another flush, a compaction: after each step the
    # embedded store must rank exactly like the model with exact statistics, and its
    # differences from the model with the server's statistics (D2, D3, D4, D7 and the 1.32
    # memtable bound) stay within what docs/storage.md reports (churn_whatif.py).
    store = EmbeddedStore(tmp_path, dims=diff.DIMS)
    schemas = diff.specs("Churn")
    for spec in schemas.values():
        store.ensure_collection(spec)
    exact_differences: list[str] = []
    differing = {"S1 + memtable": 0, "S1 + S2": 0, "S12": 0}
    overlap = dict.fromkeys(differing, 0.0)
    ran = dict.fromkeys(differing, 0)
    seed = SEED * 7_000_003
    for n in range(CHURN_CORPORA):
        case = diff.churn_corpus(seed + n, CHURN_QUERIES)
        spec = schemas[len(case.searchable)]
        user = f"c{seed + n}"
        shard = ref.Shard(list(case.searchable))
        diff.churn_first(store, spec, user, case, shard)
        for state, step in (
            ("fresh", None),
            ("S1 + memtable", "flush, phase 2"),
            ("S1 + S2", "flush"),
            ("S12", "compact"),
        ):
            if step == "flush, phase 2":
                shard.flush()
                diff.churn_second(store, spec, user, case, shard)
            elif step == "flush":
                shard.flush()
            elif step == "compact":
                shard.compact()
            for i, query in enumerate(case.queries):
                got = diff.store_rows(store, spec, user, query)
                want = diff.model_rows_with(shard, spec, query, diff.EXACT)
                if got != want:
                    exact_differences.append(
                        f"seed {seed + n} {state} query {i} {query!r}:\n  store {got[:4]}"
                        f"\n  model {want[:4]}"
                    )
                if state != "fresh":
                    server = diff.model_rows_with(shard, spec, query, diff.SERVER)
                    ran[state] += 1
                    differing[state] += [r[0] for r in got] != [r[0] for r in server]
                    overlap[state] += diff.top10_overlap(got, server)
        store.delete_user(spec.name, user)
    store.close()
    assert not exact_differences, f"{len(exact_differences)} differ:\n" + "\n".join(
        exact_differences[:5]
    )
    # The server's statistics change some rankings (else the model would not model them) ...
    assert sum(differing.values()) > 0, differing
    # ... and, on this churn, keep nine in ten of every top 10 on average (measured 0.98-0.99).
    for state, count in ran.items():
        assert overlap[state] / count >= 0.95, (state, overlap[state] / count)


def test_best_rows_on_large_partitions_equals_an_exact_top_k() -> None:
    # Above 64 k rows a sampled lower bound prunes the rows to rank; the chosen rows (ties:
    # lowest rows) must be exactly those of a full sort by (float32 score desc, row asc).
    import numpy as np

    from agentic_memory.store.embedded import _best_rows

    rng = np.random.default_rng(3)
    for case in range(60):
        n = int(rng.integers(7_000, 40_000))
        k = int(rng.choice([100, 110, 220]))
        levels = rng.choice([3, 50, 10_000])  # few levels: many exact ties at the cut
        scores = rng.integers(0, levels, size=n).astype(np.float64) * 0.37
        scores[rng.random(n) < rng.choice([0.0, 0.5, 0.95])] = 0.0
        allowed = None if case % 3 else rng.random(n) < 0.4
        rows, values = _best_rows(scores, allowed, k)
        narrow = scores.astype(np.float32)
        candidates = [i for i in range(n) if scores[i] > 0 and (allowed is None or allowed[i])]
        expected = sorted(candidates, key=lambda i: (-narrow[i], i))[:k]
        assert sorted(rows.tolist()) == sorted(expected), case
        assert values.tolist() == narrow[rows].tolist()


def test_a_large_partition_ranks_like_the_model(tmp_path: Path) -> None:
    # 7,200 objects with few distinct words: every property holds thousands of matches, so
    # the sampled bound, the per-property cut (110) and the 100-candidate cut all decide.
    import random

    from agentic_memory.store import MemoryObject, Where, make_id

    rng = random.Random(11)
    words = "zebra lion tiger bear wolf otter heron crane apple pear plum fig".split()
    store = EmbeddedStore(tmp_path, dims=diff.DIMS)
    spec = diff.specs("Large")[2]
    store.ensure_collection(spec)
    shard = ref.Shard(searchable=["title", "body"])
    objects = []
    for i in range(7_200):
        props = {
            "title": " ".join(rng.choices(words, k=rng.randint(1, 4))),
            "body": " ".join(rng.choices(words, k=rng.randint(0, 12))),
            "rank": rng.randint(0, 9),
        }
        vector = diff._vector(rng)
        objects.append(MemoryObject(make_id("large", str(i)), props, vector))
        shard.put(objects[-1].id, props, vector)
    store.upsert(spec.name, objects, user="big").raise_for_failures()
    for n in range(10):
        query = diff.Query(
            " ".join(rng.choices(words, k=rng.randint(1, 3))),
            diff._vector(rng),
            rng.choice([0.0, 0.3, 0.7]),
            rng.choice([5, 10, 100]),
            [Where("rank", "gt", 4)] if n % 4 == 0 else [],
        )
        got, want = diff.compare(store, spec, "big", shard, query)
        assert got == want, (n, query)
    store.close()

"""Benchmark the embedded store: upsert throughput and hybrid-search latency at growing sizes.

Texts are 50-100 words sampled (Zipf-like, by real frequency) from the English words of the
Python standard library's own source, embedded with the offline WordLlama model. All
objects belong to one user of a per-user collection (the worst case: one big partition).
Query embedding time is reported apart from search time.

Run:
    python bench/store_bench.py                      # 1k, 10k, 100k; 200 queries each
    python bench/store_bench.py --sizes 1000,10000 --queries 100

``--baseline FILE`` also times another version of the embedded store on the same file, query
by query, interleaved with this one, and prints the ratios (timings on a shared machine are
noisy; ratios from one interleaved run are not). FILE is the single-file ``embedded.py`` of a
revision before the store became a package, for example
``git show <rev>:agentic_memory/store/embedded.py > /tmp/embedded_old.py``.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import os
import platform
import re
import sqlite3
import statistics
import sys
import sysconfig
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from agentic_memory.kinds.episodes import EPISODES
from agentic_memory.models.embeddings import embedding_dims, get_embeddings
from agentic_memory.store import MemoryObject, Where, make_id
from agentic_memory.store.embedded import EXACT_VECTOR_ROWS, EmbeddedStore, _cosine_top

USER = "bench-user"
BATCH = 500
RESULTS = Path(__file__).parent / "results" / "store.md"


def vocabulary(size: int = 6000) -> tuple[list[str], np.ndarray]:
    """Return the most frequent lower-case words of the stdlib sources and their weights."""
    counts: collections.Counter[str] = collections.Counter()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    word = re.compile(r"\b[a-z]{3,12}\b")
    for path in sorted(stdlib.glob("*.py")):
        counts.update(word.findall(path.read_text(encoding="utf-8", errors="ignore")))
    words, freq = zip(*counts.most_common(size), strict=True)
    weights = np.asarray(freq, dtype=np.float64)
    return list(words), weights / weights.sum()


def make_texts(
    n: int, words: list[str], p: np.ndarray, rng: np.random.Generator, lo: int, hi: int
) -> list[str]:
    """Sample ``n`` texts of ``lo``..``hi`` words by word frequency."""
    lengths = rng.integers(lo, hi + 1, size=n)
    picks = rng.choice(len(words), size=int(lengths.sum()), p=p)
    out: list[str] = []
    start = 0
    for length in lengths:
        out.append(" ".join(words[i] for i in picks[start : start + length]))
        start += length
    return out


def vector_recall(store: EmbeddedStore, qvecs: list[list[float]]) -> float:
    """Return the mean share of the exact top-100 cosine rows that the two-pass search keeps."""
    with store._read() as conn:  # the bench looks inside on purpose: recall is not in the API
        part = store._cache.partition(conn, EPISODES, USER)
        part.rows()  # every vector read in this snapshot (a cold load reads none)
    found = []
    for v in qvecs:
        fast = set(_cosine_top(part, v, None, 100)[0].tolist())
        exact = set(_cosine_top(part, v, None, 100, exact=True)[0].tolist())
        found.append(len(fast & exact) / len(exact))
    return statistics.fmean(found)


def percentile(values: list[float], q: float) -> float:
    """Return the q-th percentile of ``values``."""
    return float(np.percentile(np.asarray(values), q))


def time_searches(
    store: EmbeddedStore, texts: list[str], vectors: list[list[float]], where: list[Where]
) -> list[float]:
    """Time one hybrid search per query (milliseconds, query embedding excluded)."""
    out = []
    for q, v in zip(texts, vectors, strict=True):
        t0 = time.perf_counter()
        hits = store.hybrid(
            EPISODES.name, query=q, vector=v, alpha=0.5, limit=10, user=USER, where=where
        )
        out.append((time.perf_counter() - t0) * 1000)
        assert hits, "every benchmark query should find something"
    return out


def load_baseline(path: Path) -> type[EmbeddedStore]:
    """Import an ``embedded.py`` of another revision and return its store class."""
    spec = importlib.util.spec_from_file_location("embedded_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["embedded_baseline"] = module
    spec.loader.exec_module(module)
    cls: type[EmbeddedStore] = module.EmbeddedStore
    # An older class may lack hooks added to the interface since; only searches are timed.
    cls.__abstractmethods__ = frozenset()
    return cls


def compare(
    baseline: type[EmbeddedStore],
    path: Path,
    dims: int,
    size: int,
    texts: list[str],
    vectors: list[list[float]],
    where: list[Where],
) -> str:
    """Time the baseline and this store on the same queries, interleaved; return a line."""
    old, new = baseline(path, dims=dims), EmbeddedStore(path, dims=dims)
    first = {}
    for name, store in (("baseline", old), ("current", new)):
        t0 = time.perf_counter()
        store.hybrid(EPISODES.name, query=texts[0], vector=vectors[0], user=USER, where=where)
        first[name] = (time.perf_counter() - t0) * 1000
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    for q, v in zip(texts, vectors, strict=True):
        for name, store in (("baseline", old), ("current", new)):
            t0 = time.perf_counter()
            store.hybrid(
                EPISODES.name, query=q, vector=v, alpha=0.5, limit=10, user=USER, where=where
            )
            times[name].append((time.perf_counter() - t0) * 1000)
    old.close()
    new.close()
    b, c = times["baseline"], times["current"]
    label = "filtered" if where else "plain"
    return (
        f"{size:>7} {label:8} baseline p50 {percentile(b, 50):.2f} p95 {percentile(b, 95):.2f} "
        f"(first {first['baseline']:.0f}) | current p50 {percentile(c, 50):.2f} "
        f"p95 {percentile(c, 95):.2f} (first {first['current']:.0f}) | current/baseline "
        f"p50 x{percentile(c, 50) / percentile(b, 50):.2f} p95 x{percentile(c, 95) / percentile(b, 95):.2f}"
    )


def run(
    sizes: list[int],
    queries: int,
    path: Path,
    seed: int,
    baseline: type[EmbeddedStore] | None = None,
) -> list[dict[str, float]]:
    """Grow the store through ``sizes``, measuring writes and searches at each size."""
    rng = np.random.default_rng(seed)
    words, p = vocabulary()
    embeddings = get_embeddings()
    dims = embedding_dims(embeddings)
    store = EmbeddedStore(path, dims=dims)
    store.ensure_collection(EPISODES)
    base_time = datetime(2026, 1, 1, tzinfo=UTC)
    rows: list[dict[str, float]] = []
    stored = 0
    query_texts = make_texts(queries, words, p, rng, 4, 10)
    for size in sizes:
        texts = make_texts(size - stored, words, p, rng, 50, 100)
        t0 = time.perf_counter()
        vectors = embeddings.embed_documents(texts)
        embed_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for start in range(0, len(texts), BATCH):
            batch = [
                MemoryObject(
                    id=make_id("bench", str(stored + start + i)),
                    properties={
                        "conversation": text,
                        "conversation_summary": text[:200],
                        "context_tags": [text.split()[0], text.split()[-1]],
                        "thread_id": f"t{(stored + start + i) % 1000}",
                        "created_at": (
                            base_time + timedelta(minutes=stored + start + i)
                        ).isoformat(),
                        "importance": float((stored + start + i) % 10) / 10,
                    },
                    vector=vec,
                )
                for i, (text, vec) in enumerate(
                    zip(texts[start : start + BATCH], vectors[start : start + BATCH], strict=True)
                )
            ]
            store.upsert(EPISODES.name, batch, user=USER)
        upsert_s = time.perf_counter() - t0
        new = size - stored
        stored = size

        qvecs: list[list[float]] = []
        embed_ms: list[float] = []
        for q in query_texts:
            t0 = time.perf_counter()
            qvecs.append(embeddings.embed_query(q))
            embed_ms.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        store.hybrid(EPISODES.name, query=query_texts[0], vector=qvecs[0], user=USER)
        cold_ms = (time.perf_counter() - t0) * 1000  # first search loads the vector matrix

        plain = time_searches(store, query_texts, qvecs, [])
        recall = vector_recall(store, qvecs) if size > EXACT_VECTOR_ROWS else 1.0
        cutoff = (base_time + timedelta(minutes=size // 2)).isoformat()
        filtered = time_searches(store, query_texts, qvecs, [Where("created_at", "gt", cutoff)])
        if baseline is not None:
            for where in ([], [Where("created_at", "gt", cutoff)]):
                print(compare(baseline, path, dims, size, query_texts, qvecs, where), flush=True)
        row = {
            "size": size,
            "embed_docs_per_s": new / embed_s,
            "upsert_per_s": new / upsert_s,
            "cold_ms": cold_ms,
            "p50": percentile(plain, 50),
            "p95": percentile(plain, 95),
            "mean": statistics.fmean(plain),
            "f_p50": percentile(filtered, 50),
            "f_p95": percentile(filtered, 95),
            "embed_q_p50": percentile(embed_ms, 50),
            "recall": recall,
            "load": os.getloadavg()[0],
        }
        rows.append(row)
        print(
            f"{size:>7} objects: upsert {row['upsert_per_s']:,.0f}/s, search p50 {row['p50']:.2f} ms "
            f"p95 {row['p95']:.2f} ms, filtered p95 {row['f_p95']:.2f} ms, cold {cold_ms:.0f} ms, "
            f"query embedding p50 {row['embed_q_p50']:.2f} ms, vector recall@100 {recall:.3f}",
            flush=True,
        )
    store.close()
    return rows


def machine_note() -> str:
    """Describe the machine the numbers come from."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores (shared with other jobs while measured), "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, numpy {np.__version__}"
    )


def render(rows: list[dict[str, float]], queries: int) -> str:
    """Render the results as the markdown page written to ``bench/results/store.md``."""
    lines = [
        "# Embedded store benchmark",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python bench/store_bench.py` "
        f"({queries} queries per size, hybrid alpha 0.5, limit 10, one user holding every object).",
        "",
        f"Machine: {machine_note()}.",
        "",
        "| objects | upsert/s | search p50 ms | search p95 ms | filtered p95 ms | first search ms | query embed p50 ms | doc embed/s | vector recall@100 | load avg |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['size']):,} | {r['upsert_per_s']:,.0f} | {r['p50']:.2f} | {r['p95']:.2f} "
            f"| {r['f_p95']:.2f} | {r['cold_ms']:.0f} | {r['embed_q_p50']:.2f} "
            f"| {r['embed_docs_per_s']:,.0f} | {r['recall']:.3f} | {r['load']:.1f} |"
        )
    by_size = {int(r["size"]): r for r in rows}
    if 10_000 in by_size and 100_000 in by_size:
        a, b = by_size[10_000], by_size[100_000]
        lines += [
            "",
            f"10k → 100k (10x the objects): p50 x{b['p50'] / a['p50']:.2f}, "
            f"p95 x{b['p95'] / a['p95']:.2f}, filtered p95 x{b['f_p95'] / a['f_p95']:.2f}.",
        ]
    lines += [
        "",
        "Search times exclude the query embedding (its own column). 'First search' includes",
        "building the partition's in-memory index (vectors and BM25 postings); the next search",
        "after any write to the partition rebuilds it. 'load avg' is the 1-minute load average",
        "when the size finished: the 2 cores were shared with other jobs, so absolute times",
        "are pessimistic.",
        "Filtered = `created_at > midpoint` (half the objects), applied to both sides.",
        f"Above {EXACT_VECTOR_ROWS:,} objects the vector side runs in two passes (PCA shortlist,",
        "then exact cosine); recall@100 is the share of the exact top-100 it keeps.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Parse the options, run the benchmark, print and save the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="cumulative store sizes")
    parser.add_argument("--queries", type=int, default=200, help="queries timed per size")
    parser.add_argument(
        "--path", type=Path, default=None, help="store directory (default: temporary)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS, help="markdown results file")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="an embedded.py to compare with (see above)"
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if not sizes or sizes[0] <= 0 or args.queries <= 0:
        parser.error("sizes and queries must be positive")
    with tempfile.TemporaryDirectory(prefix="amem-bench-") as tmp:
        baseline = load_baseline(args.baseline) if args.baseline else None
        rows = run(sizes, args.queries, args.path or Path(tmp) / "store", args.seed, baseline)
    report = render(rows, args.queries)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()

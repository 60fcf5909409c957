"""Recall of the vector side's inverted lists against the exact scan, on real embeddings.

Above ``vectors.IVF_ROWS`` rows the embedded store ranks only the rows of the inverted lists
nearest the query (``agentic_memory/store/embedded/lists.py``): k-means lists of the PCA
projections, probed until they hold ``lists.PROBE_ROWS`` rows, then an exact cosine of the
best of those. This bench measures what that loses on vectors of the real models, with the
store's own code (``_cosine_top`` on an in-memory partition built as a load builds it): the
share of the exact scan's top 10 among the lists' top 10 (recall@10), and of the exact
100 vector candidates of a hybrid search among the lists' 100.

Data sets and models:

- ``locomo``: the 2,760 turns of the five LoCoMo conversations (``/work/shared/data``), each
  queried by the conversation's questions; WordLlama (256-d) and all-MiniLM-L6-v2 (384-d).
- ``chunks``: the scale bench's knowledge chunks (``bench/knowledge_corpus.py``), queried by
  2-6 consecutive words of a chunk; WordLlama at ``--chunks`` rows, MiniLM at ``--minilm-chunks``.

Geometry: the store makes one list per 2,048 rows (16 to 256 of them) and probes about
24,576 rows: 16 % of a partition of 150,000 rows (where the lists start), 2.5 % of a million.
"At 150k" and "at 1M" make and probe the lists of a data set as the store would at those
sizes, scaled to its rows (as many lists, the same share of the rows probed).

Run: ``python bench/lists_recall.py [--chunks 200000] [--minilm-chunks 20000] [--queries 300]
[--out bench/results/lists_recall.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))
from bench.knowledge_corpus import vocabulary

LOCOMO = next(
    (
        up / "shared" / "data" / "locomo-dev.json"
        for up in Path(__file__).resolve().parents
        if (up / "shared" / "data" / "locomo-dev.json").exists()
    ),
    Path("locomo-dev.json"),
)
"""The LoCoMo file beside the checkout (``../shared/data``, also from a worktree), if any."""
MILLION = 1_000_000


class Partition:
    """A partition's vector side as a load builds it: unit vectors, PCA axes, lists."""

    def __init__(self, unit: np.ndarray) -> None:
        from agentic_memory.store.embedded import lists, vectors

        self.unit = unit
        self.live = unit.shape[0]
        rng = np.random.default_rng(0)
        sample = unit[np.sort(rng.choice(self.live, min(self.live, 8192), replace=False))]
        fixed = vectors.choose_axes(sample)
        centroids = lists.choose_centroids(vectors.project(sample, fixed), self.live)
        self._coarse = vectors._CoarseIndex(unit, (self.live, fixed), centroids=centroids)

    @property
    def slots(self) -> int:
        """Return the number of rows."""
        return int(self.live)

    def rows(self, slots: np.ndarray | None = None) -> np.ndarray:
        """Return the unit vectors of ``slots`` (all when None)."""
        return self.unit if slots is None else self.unit[slots]

    def coarse(self) -> Any:
        """Return the PCA projection and its lists."""
        return self._coarse


def recall(unit: np.ndarray, queries: np.ndarray, at_rows: int) -> dict[str, float]:
    """Return recall@10 and the share of the 100 exact candidates kept, over ``queries``.

    The lists are made and probed as the store makes them for a partition of ``at_rows``
    rows, scaled to the data set's rows: as many lists, holding as large a share of the rows
    each, and as large a share of the rows probed.
    """
    from agentic_memory.store.embedded import lists, vectors
    from agentic_memory.store.ranking import vector_candidates

    saved = (lists.LIST_ROWS, lists.PROBE_ROWS, vectors.IVF_ROWS, vectors.EXACT_VECTOR_ROWS)
    rows = unit.shape[0]
    try:
        share = rows / at_rows
        count = min(lists.MAX_LISTS, max(lists.MIN_LISTS, at_rows // lists.LIST_ROWS))
        lists.LIST_ROWS = max(1, rows // count)
        lists.PROBE_ROWS = max(10, round(lists.PROBE_ROWS * share))
        vectors.IVF_ROWS = vectors.EXACT_VECTOR_ROWS = 0
        part = Partition(unit)
        ten, kept, cpu = [], [], []
        wanted = vector_candidates(10)
        for q in queries.tolist():
            start = time.process_time()
            fast_rows, fast_sims = vectors._cosine_top(part, q, None, wanted)
            cpu.append(time.process_time() - start)
            exact_rows, exact_sims = vectors._cosine_top(part, q, None, wanted, exact=True)
            top = set(fast_rows[np.argsort(-fast_sims, kind="stable")[:10]].tolist())
            best = set(exact_rows[np.argsort(-exact_sims, kind="stable")[:10]].tolist())
            ten.append(len(top & best) / len(best))
            kept.append(len(set(fast_rows.tolist()) & set(exact_rows.tolist())) / exact_rows.size)
        return {
            "rows": rows,
            "lists": part.coarse().centroids.shape[0],
            "probe": lists.PROBE_ROWS,
            "recall_10": float(np.mean(ten)),
            "recall_10_min": float(np.min(ten)),
            "kept_100": float(np.mean(kept)),
            "cpu_ms_p50": float(np.median(cpu) * 1000),
        }
    finally:
        lists.LIST_ROWS, lists.PROBE_ROWS, vectors.IVF_ROWS, vectors.EXACT_VECTOR_ROWS = saved


def _unit(matrix: list[list[float]] | np.ndarray) -> np.ndarray:
    from agentic_memory.store.embedded.vectors import normalise

    return normalise(np.asarray(matrix, dtype=np.float32))


def locomo(path: Path) -> tuple[list[str], list[str]]:
    """Return the turns of the conversations and their questions."""
    data = json.loads(path.read_text(encoding="utf-8"))
    turns, questions = [], []
    for item in data:
        for key, value in item["conversation"].items():
            if key.startswith("session_") and isinstance(value, list):
                turns += [f"{t['speaker']}: {t['text']}" for t in value]
        questions += [str(q["question"]) for q in item["qa"]]
    return turns, questions


def chunks(count: int, queries: int) -> tuple[list[str], list[str]]:
    """Return ``count`` knowledge chunks of the scale bench's corpus and queries near them."""
    words, p = vocabulary()
    rng = np.random.default_rng(17)
    lengths = rng.integers(50, 101, size=count)
    picks = rng.choice(len(words), size=int(lengths.sum()), p=p)
    ends = np.cumsum(lengths)
    texts = [
        " ".join(words[i] for i in picks[e - n : e])
        for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)
    ]
    asked = []
    for i in rng.choice(count, size=queries, replace=False).tolist():
        split = texts[i].split()
        k = int(rng.integers(2, 7))
        at = int(rng.integers(0, len(split) - k))
        asked.append(" ".join(split[at : at + k]))
    return texts, asked


def docstrings(count: int, queries: int) -> tuple[list[str], list[str]]:
    """Return ``count`` chunks of about 60 words of real prose, and queries from them.

    The docstrings of the Python modules installed here (the standard library and the
    packages of this environment): English technical text, by topic, unlike the scale
    bench's chunks of words drawn at random.
    """
    import ast
    import sysconfig

    roots = {Path(sysconfig.get_paths()[k]) for k in ("stdlib", "purelib", "platlib")}
    texts: list[str] = []
    for root in sorted(roots):
        for path in sorted(root.rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="ignore"))
            except (SyntaxError, ValueError, RecursionError):
                continue
            for node in ast.walk(tree):
                if isinstance(
                    node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                ):
                    doc = ast.get_docstring(node)
                    words = doc.split() if doc else []
                    texts += [" ".join(words[i : i + 60]) for i in range(0, len(words), 60)]
            if len(texts) >= 2 * count:
                break
    texts = list(dict.fromkeys(t for t in texts if len(t.split()) >= 20))
    rng = np.random.default_rng(23)
    picked = [
        texts[i] for i in np.sort(rng.choice(len(texts), min(count, len(texts)), replace=False))
    ]
    asked = []
    for i in rng.choice(len(picked), size=queries, replace=False).tolist():
        split = picked[i].split()
        k = int(rng.integers(4, 9))
        at = int(rng.integers(0, len(split) - k))
        asked.append(" ".join(split[at : at + k]))
    return picked, asked


def main() -> None:
    """Embed, build, measure; print (and write) the table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--minilm-chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--docstrings", type=int, default=200_000)
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from agentic_memory.models.embeddings import LocalEmbeddings, MiniLMEmbeddings
    from agentic_memory.models.minilm import minilm_dims, minilm_model_dir

    folder = minilm_model_dir()
    models: dict[str, Any] = {
        "WordLlama": LocalEmbeddings(),
        "MiniLM": MiniLMEmbeddings(folder, minilm_dims(folder), batch_size=32, runtime="fp32"),
    }
    turns, questions = locomo(args.locomo)
    results: list[tuple[str, str, int, dict[str, Any], float]] = []
    for name, model in models.items():
        start = time.perf_counter()
        unit = _unit(model.embed_documents(turns))
        asked = _unit(model.embed_documents(questions[: args.queries]))
        took = time.perf_counter() - start
        print(f"locomo {name}: {len(turns)} turns embedded in {took:.0f} s", flush=True)
        for at in (150_000, MILLION):
            results.append(("LoCoMo turns", name, at, recall(unit, asked, at), took))
    if args.docstrings > 0:
        texts, asked_texts = docstrings(args.docstrings, args.queries)
        start = time.perf_counter()
        unit = _unit(models["WordLlama"].embed_documents(texts))
        asked = _unit(models["WordLlama"].embed_documents(asked_texts))
        took = time.perf_counter() - start
        print(f"docstrings: {len(texts)} chunks embedded in {took:.0f} s", flush=True)
        for at in (150_000, MILLION):
            results.append(("docstrings", "WordLlama", at, recall(unit, asked, at), took))
    for name, count in (("WordLlama", args.chunks), ("MiniLM", args.minilm_chunks)):
        if count <= 0:
            continue
        texts, asked_texts = chunks(count, args.queries)
        start = time.perf_counter()
        unit = _unit(models[name].embed_documents(texts))
        asked = _unit(models[name].embed_documents(asked_texts))
        took = time.perf_counter() - start
        print(f"chunks {name}: {count} chunks embedded in {took:.0f} s", flush=True)
        for at in (150_000, MILLION):
            results.append(("knowledge chunks", name, at, recall(unit, asked, at), took))
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python bench/lists_recall.py "
        f"--chunks {args.chunks} --minilm-chunks {args.minilm_chunks} --docstrings "
        f"{args.docstrings} --queries {args.queries}` "
        f"({platform.machine()}, {os.cpu_count()} cores shared, load average "
        f"{os.getloadavg()[0]:.1f}).",
        "",
        "| data | model | lists as at | rows | lists | rows probed | recall@10 (mean) | recall@10 (worst query) "
        "| exact 100 candidates kept | vector side CPU p50 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for data, model_name, at, r, _ in results:
        lines.append(
            f"| {data} | {model_name} | {at:,} | {r['rows']:,} | {r['lists']} | {r['probe']:,} "
            f"| {r['recall_10']:.4f} | {r['recall_10_min']:.2f} | {r['kept_100']:.4f} "
            f"| {r['cpu_ms_p50']:.2f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")


if __name__ == "__main__":
    main()

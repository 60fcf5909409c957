"""Search latency: active revisions as a store filter versus over-fetch and post-filter.

Run: ``python bench/knowledge_filter_bench.py [--sources 20 200 1000] [--queries 50]``

Each knowledge base has ``sources`` Markdown files of five long paragraphs each, ingested with the
offline embeddings into a fresh embedded store. The same queries run with the ``in`` filter
over all active revisions and with the post-filter path (``IN_FILTER_MAX_REVISIONS`` forced
to 0); the median latency per query is printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import agentic_memory.kinds.knowledge.search as knowledge
from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.knowledge import search_knowledge
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

_WORDS = (
    "pump valve boiler filter gauge motor belt sensor relay switch cable panel fuse duct "
    "fan coil seal bearing gear shaft spring nozzle tank hose clamp bracket lever"
).split()


def _write_sources(folder: Path, count: int, rng: random.Random) -> None:
    for i in range(count):
        paragraphs = []
        for _ in range(5):
            words = [rng.choice(_WORDS) for _ in range(110)]
            paragraphs.append(" ".join(words).capitalize() + ".")
        (folder / f"manual_{i:04d}.md").write_text(f"# Manual {i}\n\n" + "\n\n".join(paragraphs))


def main() -> None:
    """Measure both search paths for each knowledge-base size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, nargs="+", default=[20, 200, 1000])
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    embeddings = LocalEmbeddings()
    rng = random.Random(3)
    queries = [" ".join(rng.sample(_WORDS, 3)) for _ in range(args.queries)]
    print("| sources | chunks | in-filter ms | post-filter ms |")
    print("|---:|---:|---:|---:|")
    for count in args.sources:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "docs"
            folder.mkdir()
            _write_sources(folder, count, rng)
            with EmbeddedStore(Path(tmp) / "store", dims=embeddings.dims) as store:
                report = ingest_paths(
                    [folder], kb="bench", store=store, embeddings=embeddings, chunk_size=500
                )
                assert report.ok
                results = []
                saved = knowledge.IN_FILTER_MAX_REVISIONS
                for limit in (10**9, 0):
                    knowledge.IN_FILTER_MAX_REVISIONS = limit
                    search_knowledge(store, embeddings, "bench", queries[0])
                    times = []
                    for query in queries:
                        started = time.perf_counter()
                        search_knowledge(store, embeddings, "bench", query, k=5)
                        times.append((time.perf_counter() - started) * 1000)
                    results.append(statistics.median(times))
                knowledge.IN_FILTER_MAX_REVISIONS = saved
                print(
                    f"| {count} | {report.chunks_written} | {results[0]:.1f} | {results[1]:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

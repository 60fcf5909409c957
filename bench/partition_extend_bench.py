"""First search after writes to a large embedded partition: extended cache vs full reload.

A long-lived reader (a server) has a partition of ``--objects`` knowledge-like chunks cached;
another connection adds a 110-chunk "file", then replaces it (110 chunks added, 110
deleted). After each write the reader's next search updates its cached index in place; a
process that opens the store afresh loads the whole partition. Both are timed, ``--repeat``
times.

Run: ``python bench/partition_extend_bench.py [--objects 100000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from agentic_memory.store import CollectionSpec, MemoryObject, Property, Where, make_id
from agentic_memory.store.embedded import EmbeddedStore

_SPEC = CollectionSpec(
    name="Chunks",
    per_user=False,
    properties=(
        Property("text", "text", searchable=True, filterable=False),
        Property("title", "text", searchable=True),
        Property("source", "text"),
    ),
)


def main() -> None:
    """Build the partition, then time extension against a full load."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(1)
    vectors = np.random.default_rng(1)
    # Zipf-like term frequencies over a 20,000-word vocabulary, 120 tokens per chunk.
    words = [f"w{i}" for i in range(20_000)]
    weights = [1 / (i + 1) for i in range(len(words))]

    def chunks(count: int, tag: str) -> list[MemoryObject]:
        return [
            MemoryObject(
                make_id(tag, str(i)),
                {
                    "text": " ".join(rng.choices(words, weights, k=120)),
                    "title": f"document {tag}",
                    "source": tag,
                },
                vectors.standard_normal(256).tolist(),
            )
            for i in range(count)
        ]

    query = vectors.standard_normal(256).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        reader = EmbeddedStore(path, dims=256)
        reader.ensure_collection(_SPEC)
        for start in range(0, args.objects, 2000):
            reader.upsert(_SPEC.name, chunks(min(2000, args.objects - start), f"base{start}"))
        started = time.perf_counter()
        reader.hybrid(_SPEC.name, query="w1 w50 w300", vector=query)
        print(
            f"{args.objects:,} objects; first search (full load): {time.perf_counter() - started:.2f} s"
        )
        writer = EmbeddedStore(path, dims=256)

        def timed(label: str) -> None:
            started = time.perf_counter()
            reader.hybrid(_SPEC.name, query="w1 w50 w300", vector=query)
            updated = time.perf_counter() - started
            fresh = EmbeddedStore(path, dims=256)
            started = time.perf_counter()
            fresh.hybrid(_SPEC.name, query="w1 w50 w300", vector=query)
            reloaded = time.perf_counter() - started
            fresh.close()
            print(
                f"{label}: updated in place {updated:.2f} s, full load {reloaded:.2f} s "
                f"({reloaded / updated:.1f}x)"
            )

        for round_ in range(args.repeat):
            writer.upsert(_SPEC.name, chunks(110, f"file{round_}"))
            timed("+110 rows (a new file)")
            # A changed file: its new chunks are written, then the old ones deleted.
            writer.upsert(_SPEC.name, chunks(110, f"file{round_}v2"))
            writer.delete_where(_SPEC.name, [Where("source", "eq", f"file{round_}")])
            timed("+110 / -110 rows (a changed file)")
        writer.close()
        reader.close()


if __name__ == "__main__":
    main()

"""One large partition, side by side with LanceDB: ingest, file size, new writes, queries.

The same ``--objects`` knowledge-base chunks go into this embedded store, optionally the
embedded store of another checkout (``--baseline DIR``, run in a subprocess), and LanceDB
(0.40, the ``bench`` dependency group): texts of 50-100 words sampled by frequency from the
English words of the Python standard library's source, the knowledge-base schema
(``knowledge_collection``: title, source, sha256, page / chunk / character numbers), and
256-d vectors scattered around 300 random centres (fixed seed), so that the vectors have
the structure real embeddings have and the PCA shortlist has something to find.

Measured per system:

- **ingest docs/s**: writes of 2,000 objects from empty to ``--objects`` (LanceDB: ``add``
  of 2,000 rows, plus building its full-text index at the end).
- **file size MB**: ``store.sqlite3`` after ``close`` (its log checkpointed), or LanceDB's
  folder.
- **searchable after write**: ``--trials`` times, write ``--new`` new objects and run a
  hybrid search for one of them; the time from the start of the write to the result, the
  write alone, and whether the new object came first.
- **first search s**: the first hybrid search after the ingest, which builds the in-memory
  index of the partition (ours: unit vectors and BM25 postings, tokenising the stored text).
- **hybrid p50 / p95** (alpha 0.5, limit 10, ``--queries`` queries of 2-6 words and a vector
  near a stored one), and **filtered p50 / p95** (``chunk_index < 50``: half the objects).

LanceDB runs with its full-text index on ``text`` and no vector index (an exact scan, as
ours is up to 20,000 rows; above that ours shortlists with a PCA projection), hybrid with its
default RRF reranker, filters as pre-filters. This store and LanceDB are queried in one
process, query by query, interleaved; the baseline runs the same queries in its own process
right before. The machine is shared: compare ratios within one run, never single timings.

With ``--rounds N`` (and ``--baseline``), the baseline and this checkout each run N times in
processes of their own, alternating, and the table gives each metric's median over the rounds;
LanceDB then runs alone. A single sequential run puts whatever load the machine has at that
moment on one side only.

Run: ``python bench/partition_growth_bench.py [--objects 100000] [--queries 200] [--trials 10]
[--new 100] [--baseline DIR [--rounds N]] [--out bench/results/partition_growth.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: the repository's root makes ``bench`` importable; appended, so that
    # a baseline run's checkout (first on the path) still provides ``agentic_memory``.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
from bench.knowledge_corpus import DIMS as _DIMS
from bench.knowledge_corpus import Embedded, Lance, query_near, vocabulary

_BATCH = 2000
_SEED = 11


@dataclass
class Data:
    """The documents, their vectors, and the queries every system gets."""

    texts: list[str]
    vectors: np.ndarray
    queries: list[tuple[str, list[float]]]
    words: list[str]


def make_data(objects: int, extra: int, queries: int) -> Data:
    """Return ``objects + extra`` documents (the extra ones for new writes) and the queries."""
    words, p = vocabulary()
    rng = np.random.default_rng(_SEED)
    total = objects + extra
    lengths = rng.integers(50, 101, size=total)
    picks = rng.choice(len(words), size=int(lengths.sum()), p=p)
    texts: list[str] = []
    start = 0
    for length in lengths:
        texts.append(" ".join(words[i] for i in picks[start : start + length]))
        start += length
    centres = rng.standard_normal((300, _DIMS))
    vectors = (
        centres[rng.integers(0, 300, size=total)] + 0.8 * rng.standard_normal((total, _DIMS))
    ).astype(np.float32)
    asked: list[tuple[str, list[float]]] = []
    for _ in range(queries):
        i = int(rng.integers(0, objects))
        asked.append(query_near(rng, texts[i], vectors[i]))
    return Data(texts=texts, vectors=vectors, queries=asked, words=list(words))


System = Embedded | Lance


def measure(
    names: list[str], objects: int, queries: int, trials: int, new: int
) -> dict[str, dict[str, Any]]:
    """Build and query the named systems in this process, interleaved; return their numbers."""
    data = make_data(objects, trials * new, queries)
    with tempfile.TemporaryDirectory() as tmp:
        systems: list[System] = [
            Embedded(Path(tmp) / n) if n == "embedded" else Lance(Path(tmp) / n) for n in names
        ]
        out: dict[str, dict[str, Any]] = {s.name: {} for s in systems}
        # Ingest: batch by batch, alternating systems.
        spent = dict.fromkeys(out, 0.0)
        for first in range(0, objects, _BATCH):
            rows = range(first, min(objects, first + _BATCH))
            for system in systems:
                start = time.perf_counter()
                system.write(
                    list(rows),
                    data.texts[rows.start : rows.stop],
                    data.vectors[rows.start : rows.stop],
                )
                spent[system.name] += time.perf_counter() - start
        for system in systems:
            start = time.perf_counter()
            system.finish()
            spent[system.name] += time.perf_counter() - start
            out[system.name]["ingest"] = objects / spent[system.name]
            start = time.perf_counter()
            system.search(*data.queries[0], filtered=False)  # load / warm up
            out[system.name]["first_search"] = time.perf_counter() - start
        # Queries, interleaved.
        for filtered in (False, True):
            times: dict[str, list[float]] = {s.name: [] for s in systems}
            for text, vector in data.queries:
                for system in systems:
                    start = time.perf_counter()
                    system.search(text, vector, filtered)
                    times[system.name].append((time.perf_counter() - start) * 1000)
            key = "filtered" if filtered else "hybrid"
            for name, series in times.items():
                out[name][f"{key}_p50"] = statistics.median(series)
                out[name][f"{key}_p95"] = float(np.percentile(series, 95))
        # New writes: write, then search for one of the new documents.
        found = dict.fromkeys(out, 0)
        written: dict[str, list[float]] = {name: [] for name in out}
        searchable: dict[str, list[float]] = {name: [] for name in out}
        for trial in range(trials):
            rows = range(objects + trial * new, objects + (trial + 1) * new)
            target = rows.start + new // 2
            words = data.texts[target].split()
            for system in systems:
                start = time.perf_counter()
                system.write(
                    list(rows),
                    data.texts[rows.start : rows.stop],
                    data.vectors[rows.start : rows.stop],
                )
                wrote = time.perf_counter()
                hits = system.search(" ".join(words[:8]), data.vectors[target].tolist(), False)
                done = time.perf_counter()
                written[system.name].append((wrote - start) * 1000)
                searchable[system.name].append((done - start) * 1000)
                found[system.name] += bool(hits) and hits[0] == system.doc_id(target)
        for system in systems:
            record = out[system.name]
            record["write_p50"] = statistics.median(written[system.name])
            record["searchable_p50"] = statistics.median(searchable[system.name])
            record["searchable_max"] = max(searchable[system.name])
            record["found"] = f"{found[system.name]}/{trials}"
            record["size_mb"] = system.size() / 1e6
            record["objects"] = objects
    return out


def _baseline(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
        "import partition_growth_bench as b; "
        "print(json.dumps(b.measure(['embedded'], *map(int, sys.argv[3:7]))['embedded']))"
    )
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(path.resolve()),
            str(Path(__file__).parent.resolve()),
            str(args.objects),
            str(args.queries),
            str(args.trials),
            str(args.new),
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(path.resolve())},
        cwd=path,
    )
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def _alternating(path: Path, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Measure the baseline and this checkout ``--rounds`` times each, alternating runs.

    Each run is a process of its own; the medians over the rounds are returned (baseline,
    this checkout). Alternating spreads changes of the machine's load over both.
    """
    mine_path = Path(__file__).resolve().parent.parent
    runs: dict[Path, list[dict[str, Any]]] = {path: [], mine_path: []}
    for _ in range(args.rounds):
        for checkout in runs:
            runs[checkout].append(_baseline(checkout, args))

    def median(records: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in records[0].items():
            if isinstance(value, int | float):
                out[key] = statistics.median(r[key] for r in records)
            else:
                out[key] = " ".join(str(r[key]) for r in records)
        return out

    return median(runs[path]), median(runs[mine_path])


def _rows(results: dict[str, dict[str, Any]]) -> Iterator[str]:
    yield (
        "| system | ingest docs/s | file MB | write + search new ms (p50) | max | write ms (p50) "
        "| new doc first | first search s | hybrid p50 ms | hybrid p95 ms | filtered p50 ms "
        "| filtered p95 ms |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for name, r in results.items():
        yield (
            f"| {name} | {r['ingest']:,.0f} | {r['size_mb']:.1f} | {r['searchable_p50']:.1f} "
            f"| {r['searchable_max']:.1f} | {r['write_p50']:.1f} | {r['found']} "
            f"| {r['first_search']:.2f} | {r['hybrid_p50']:.2f} | {r['hybrid_p95']:.2f} | {r['filtered_p50']:.2f} "
            f"| {r['filtered_p95']:.2f} |"
        )


def _sizes(args: argparse.Namespace) -> tuple[int, int, int, int]:
    return args.objects, args.queries, args.trials, args.new


def main() -> None:
    """Measure, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--new", type=int, default=100)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout")
    parser.add_argument("--baseline-label", default="embedded, before")
    parser.add_argument("--label", default="embedded")
    parser.add_argument("--no-lancedb", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --baseline: run both checkouts this many times, alternating, each in a "
        "process of its own, and report medians (LanceDB then runs alone)",
    )
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    if args.baseline is not None and args.rounds > 1:
        results[args.baseline_label], results[args.label] = _alternating(args.baseline, args)
        mine = {} if args.no_lancedb else measure(["lancedb"], *_sizes(args))
    else:
        if args.baseline is not None:
            results[args.baseline_label] = _baseline(args.baseline, args)
        names = ["embedded"] + ([] if args.no_lancedb else ["lancedb"])
        mine = measure(names, *_sizes(args))
        results[args.label] = mine["embedded"]
    if "lancedb" in mine:
        results["lancedb 0.40"] = mine["lancedb"]
    lines = list(_rows(results))
    if "lancedb 0.40" in results:
        ours, lance = results[args.label], results["lancedb 0.40"]
        lines += [
            "",
            f"{args.label} / lancedb: file size x{ours['size_mb'] / lance['size_mb']:.2f}, "
            f"ingest x{ours['ingest'] / lance['ingest']:.2f}, "
            f"new doc searchable x{ours['searchable_p50'] / lance['searchable_p50']:.2f}, "
            f"hybrid p95 x{ours['hybrid_p95'] / lance['hybrid_p95']:.2f}, "
            f"filtered p95 x{ours['filtered_p95'] / lance['filtered_p95']:.2f}",
        ]
    if args.baseline is not None:
        ours, base = results[args.label], results[args.baseline_label]
        lines += [
            "",
            f"{args.label} / {args.baseline_label}: file size "
            f"x{ours['size_mb'] / base['size_mb']:.2f}, ingest x{ours['ingest'] / base['ingest']:.2f}, "
            f"first search x{ours['first_search'] / base['first_search']:.2f}, "
            f"new doc searchable x{ours['searchable_p50'] / base['searchable_p50']:.2f}, "
            f"hybrid p95 x{ours['hybrid_p95'] / base['hybrid_p95']:.2f}, "
            f"filtered p95 x{ours['filtered_p95'] / base['filtered_p95']:.2f}",
        ]
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        header = (
            "# One large partition, side by side with LanceDB\n\n"
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python "
            f"bench/partition_growth_bench.py --objects {args.objects} --queries {args.queries} "
            f"--trials {args.trials} --new {args.new}"
            f"{' --baseline DIR' if args.baseline else ''}"
            f"{f' --rounds {args.rounds}' if args.rounds > 1 else ''}` "
            f"({platform.processor() or platform.machine()}, {os.cpu_count()} cores shared "
            f"with other jobs, load average {load:.1f}, Python {platform.python_version()}, "
            f"SQLite {sqlite3.sqlite_version}). See the script's docstring for the data and "
            "what each column measures.\n\n"
        )
        args.out.write_text(header + table + "\n")


if __name__ == "__main__":
    main()

"""One large partition at 100k or 1M objects: embedded store, LanceDB, live Weaviate; each phase in its own process.

Measures what issues 22 and 32 ask of the embedded store where a knowledge base grows: ingest
(plain inserts, and until searchable: LanceDB builds its indexes after), the first search of a
new process (cold start), hybrid and filtered p50 / p95, how soon an in-place edit (an upsert
of 10 existing ids) and 100 new objects are searchable, peak memory growth of a searching
process, and the file size; and the first recall of a new process on a user's message log of
``--messages`` messages.

Data: knowledge-base chunks (``knowledge_collection``) of 50-100 words sampled by frequency
from the English words of the Python standard library's source, with 256-d vectors scattered
around 300 random centres, generated in chunks of 10,000 from fixed seeds (so 1M objects never
sit in memory at once). Both systems get the same batches of 2,000, alternating, with their
properties (the keyword stems included) made before the clock starts. LanceDB (0.40, the
``bench`` dependency group) gets a full-text index on ``text`` and an ``IVF_HNSW_SQ`` vector
index, built after the inserts ("ready to search" counts both, "ingest" the inserts alone),
hybrid search with its default RRF reranker, filters as pre-filters; an in-place edit is a
``merge_insert`` on ``id``. With ``--weaviate``, the ``WeaviateStore`` on one node of the
pinned server (``make weaviate-server``; the launcher starts it on the run's folder in each
phase and stops it) gets the same batches and the same calls as the embedded store; its
memory is the server process's peak resident set (it holds nothing else) plus the client
process's growth, its disk the node's data folder after a clean stop.

Phases: ``build`` (every system, one process, interleaved; after each system's last batch,
the time until a search finds its last document first), then per system ``query`` in a
fresh process: open and first search (cold), ``--queries`` hybrid and filtered searches
(``chunk_index < 50``: half the objects), then five rounds of rewriting 10 existing objects in
place and searching for one of them by its new text, and five of writing 100 new ones (each
timed from the write until a search finds that one first, searching again every 50 ms, and
counted when the first search did); peak
memory growth is the process's peak resident set minus its size before the store was opened.
The 2 cores of this machine are shared with other jobs: compare the ratios of one run. A
baseline (the code before a change) runs the same way with its checkout first on the path:
``PYTHONPATH=../before python bench/scale_bench.py ...``.

Run: ``python bench/scale_bench.py [--objects 100000] [--queries 200] [--messages 20000]
[--no-lancedb] [--weaviate] [--out bench/results/scale.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: the repository's root makes ``bench`` importable; appended, so that
    # a baseline run's checkout (first on the path) still provides ``agentic_memory``.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
from bench.knowledge_corpus import DIMS as _DIMS
from bench.knowledge_corpus import Embedded, Lance, Weaviate, properties, query_near, vocabulary

_BATCH = 2000
_CHUNK = 10_000
_SEED = 11
_EDITS = 10
_NEW = 100
_ROUNDS = 5
_SEARCHABLE_TIMEOUT_S = 120.0


def _open(folder: Path, name: str) -> Embedded | Lance:
    if name == "lancedb":
        return Lance(folder / name, vector_index=True)
    return Weaviate(folder / name) if name == "weaviate" else Embedded(folder / name)


def _searchable(
    system: Embedded | Lance, i: int, text: str, vector: np.ndarray, start: float
) -> tuple[float, bool]:
    """Search for document ``i`` by its words and vector until it comes first.

    Return the ms since ``start`` and whether the first search found it first.
    """
    searches = 0
    while True:
        hits = system.search(" ".join(text.split()[:8]), vector.tolist(), False)
        searches += 1
        waited = time.perf_counter() - start
        if hits and hits[0] == system.doc_id(i):
            return waited * 1000, searches == 1
        if waited > _SEARCHABLE_TIMEOUT_S:
            raise RuntimeError(f"{system.name}: document {i} not found first after {waited:.0f} s")
        time.sleep(0.05)


class Corpus:
    """Documents generated chunk by chunk from fixed seeds: row i is always the same."""

    def __init__(self) -> None:
        """Read the vocabulary and draw the vector centres."""
        self.words, self.p = vocabulary()
        self.centres = np.random.default_rng(_SEED).standard_normal((300, _DIMS))

    def chunk(self, number: int, salt: int = 0) -> tuple[list[str], np.ndarray]:
        """Return the texts and vectors of rows ``number * _CHUNK`` onwards."""
        rng = np.random.default_rng([_SEED, number, salt])
        lengths = rng.integers(50, 101, size=_CHUNK)
        picks = rng.choice(len(self.words), size=int(lengths.sum()), p=self.p)
        ends = np.cumsum(lengths)
        texts = [
            " ".join(self.words[i] for i in picks[e - n : e])
            for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)
        ]
        vectors = (
            self.centres[rng.integers(0, 300, size=_CHUNK)]
            + 0.8 * rng.standard_normal((_CHUNK, _DIMS))
        ).astype(np.float32)
        return texts, vectors


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def build(folder: Path, objects: int, names: list[str], queries: int) -> dict[str, Any]:
    """Ingest ``objects`` documents into each system, interleaved; save the queries."""
    corpus = Corpus()
    systems = [_open(folder, n) for n in names]
    spent = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    index = dict.fromkeys(names, 0.0)
    searchable: dict[str, float] = {}
    rng = np.random.default_rng(_SEED + 1)
    asked: list[tuple[str, list[float]]] = []
    per_chunk = -(-queries // max(1, objects // _CHUNK))
    for number in range(-(-objects // _CHUNK)):
        texts, vectors = corpus.chunk(number)
        first = number * _CHUNK
        count = min(_CHUNK, objects - first)
        for at in range(0, count, _BATCH):
            end = min(count, at + _BATCH)
            ids = list(range(first + at, first + end))
            # The documents' properties (stems included) are the caller's work: made
            # before the clock, the same for both systems.
            props = [properties(i, t) for i, t in zip(ids, texts[at:end], strict=True)]
            for system in systems:
                start, cpu_start = time.perf_counter(), time.process_time()
                system.write(ids, texts[at:end], vectors[at:end], props)
                spent[system.name] += time.perf_counter() - start
                cpu[system.name] += time.process_time() - cpu_start
                if ids[-1] == objects - 1:
                    # The last batch: what is left to do (LanceDB's indexes) is ready-to-search time.
                    start = time.perf_counter()
                    system.finish()
                    index[system.name] = time.perf_counter() - start
                    searchable[system.name], _ = _searchable(
                        system, ids[-1], texts[end - 1], vectors[end - 1], time.perf_counter()
                    )
        for _ in range(per_chunk):
            i = int(rng.integers(0, count))
            asked.append(query_near(rng, texts[i], vectors[i]))
    out: dict[str, Any] = {}
    for system in systems:
        out[system.name] = {
            "ingest": objects / spent[system.name],
            "ingest_cpu": objects / cpu[system.name],
            "ready_s": spent[system.name] + index[system.name],
            "index_s": index[system.name],
            "searchable_ms": searchable[system.name],
            "size_mb": system.size() / 1e6,
        }
    (folder / "queries.json").write_text(json.dumps(asked[:queries]))
    return out


def query(folder: Path, name: str, objects: int) -> dict[str, Any]:
    """Measure one system in this fresh process: cold start, queries, edits, new writes."""
    corpus = Corpus()
    asked = json.loads((folder / "queries.json").read_text())
    edits_texts, edits_vectors = corpus.chunk(0, salt=1)
    # Imported before the clock and the memory baseline: a server has them loaded already.
    if name == "embedded":
        import agentic_memory.kinds.knowledge
        import agentic_memory.store.embedded
    elif name == "weaviate":
        import agentic_memory.kinds.knowledge
        import agentic_memory.store.weaviate  # noqa: F401
    else:
        import lancedb  # noqa: F401
    before = _rss_mb()
    start, cpu_start = time.perf_counter(), time.process_time()
    # A Weaviate's open includes starting its server on the data the build left.
    system = _open(folder, name)
    system.search(asked[0][0], asked[0][1], filtered=False)
    out: dict[str, Any] = {
        "cold_s": time.perf_counter() - start,
        "cold_cpu_s": time.process_time() - cpu_start,
    }
    # "again": the hybrid queries once more, after the filtered ones: by then the vectors a
    # cold load left in the file have been read, so the first pass and this one differ by
    # what a search pays while they are.
    for key, filtered in (("hybrid", False), ("filtered", True), ("again", False)):
        times = []
        cpu = []
        for text, vector in asked:
            start, cpu_start = time.perf_counter(), time.process_time()
            system.search(text, vector, filtered)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - cpu_start) * 1000)
        out[f"{key}_p50"] = statistics.median(times)
        out[f"{key}_p95"] = float(np.percentile(times, 95))
        out[f"{key}_cpu_p50"] = statistics.median(cpu)
        out[f"{key}_cpu_p95"] = float(np.percentile(cpu, 95))
    if type(system) is Embedded:
        out.update(system.vector_recall([v for _, v in asked]))
    if isinstance(system, Lance):
        system.finished = True
    rng = np.random.default_rng(_SEED + 2)
    for kind, count in (("edit", _EDITS), ("new", _NEW)):
        total: list[float] = []
        found = 0
        for r in range(_ROUNDS):
            at = r * _NEW
            if kind == "edit":
                ids = sorted(rng.choice(objects, size=count, replace=False).tolist())
            else:
                ids = list(range(objects + at, objects + at + count))
            texts = edits_texts[at : at + count]
            vectors = edits_vectors[at : at + count]
            start = time.perf_counter()
            system.write(ids, texts, vectors)
            # Until a search finds one of them first (the write included).
            ms, first = _searchable(
                system, ids[count // 2], texts[count // 2], vectors[count // 2], start
            )
            total.append(ms)
            found += first
        out[f"{kind}_p50"] = statistics.median(total)
        out[f"{kind}_max"] = max(total)
        out[f"{kind}_found"] = f"{found}/{_ROUNDS}"
    out["peak_mb"] = _peak_mb() - before
    out["rss_mb"] = _rss_mb() - before
    if isinstance(system, Weaviate):
        out["client_peak_mb"] = out["peak_mb"]
        out["server_rss_mb"], out["server_peak_mb"] = system.server_mb()
        out["peak_mb"] += out["server_peak_mb"]
        system.close()
    return out


def messages_build(folder: Path, count: int) -> None:
    """Write a message log of ``count`` messages for one user."""
    from agentic_memory.kinds.messages import MESSAGES
    from agentic_memory.store import MemoryObject, make_id
    from agentic_memory.store.embedded import EmbeddedStore

    rng = np.random.default_rng(_SEED)
    corpus = Corpus()
    texts, vectors = corpus.chunk(0, salt=2)
    store = EmbeddedStore(folder, dims=_DIMS)
    store.ensure_collection(MESSAGES)
    rows = []
    for n in range(count):
        thread, turn = f"t-{n // 50}", n % 50
        words = texts[n % _CHUNK].split()[: int(rng.integers(5, 40))]
        props = {
            "content": " ".join(words),
            "role": "human" if turn % 2 == 0 else "ai",
            "thread_id": thread,
            "turn": turn,
            "created_at": "2026-01-01T00:00:00+00:00",
        }
        rows.append(
            MemoryObject(make_id("msg", thread, str(turn)), props, vectors[n % _CHUNK].tolist())
        )
        if len(rows) == _BATCH:
            store.upsert(MESSAGES.name, rows, user="alice")
            rows = []
    if rows:
        store.upsert(MESSAGES.name, rows, user="alice")
    store.close()


def messages_query(folder: Path) -> dict[str, Any]:
    """Open the message log in this fresh process and time its first and later searches."""
    from agentic_memory.kinds.messages import MESSAGES
    from agentic_memory.store.embedded import EmbeddedStore

    corpus = Corpus()
    texts, vectors = corpus.chunk(1, salt=2)
    start, cpu = time.perf_counter(), time.process_time()
    store = EmbeddedStore(folder, dims=_DIMS)
    store.hybrid(MESSAGES.name, query=texts[0][:40], vector=vectors[0].tolist(), user="alice")
    cold = (time.perf_counter() - start) * 1000
    cold_cpu = (time.process_time() - cpu) * 1000
    times = []
    for i in range(1, 51):
        start = time.perf_counter()
        store.hybrid(MESSAGES.name, query=texts[i][:40], vector=vectors[i].tolist(), user="alice")
        times.append((time.perf_counter() - start) * 1000)
    store.close()
    return {"cold_ms": cold, "cold_cpu_ms": cold_cpu, "p50": statistics.median(times)}


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--phase", *args], check=True, capture_output=True, text=True
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Run the phases and write the markdown table."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--messages", type=int, default=20_000, help="0: skip the message log")
    parser.add_argument("--no-lancedb", action="store_true")
    parser.add_argument(
        "--weaviate", action="store_true", help="also the pinned Weaviate server, one node"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--phase", nargs="*", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        phase, folder, *rest = args.phase
        if phase == "build":
            print(json.dumps(build(Path(folder), int(rest[0]), rest[2:], int(rest[1]))))
        elif phase == "query":
            print(json.dumps(query(Path(folder), rest[0], int(rest[1]))))
        elif phase == "messages-build":
            messages_build(Path(folder), int(rest[0]))
            print("{}")
        else:
            print(json.dumps(messages_query(Path(folder))))
        return
    names = ["embedded"] + ([] if args.no_lancedb else ["lancedb"])
    names += ["weaviate"] if args.weaviate else []
    tmp = Path(tempfile.mkdtemp(prefix="amem-scale-", dir=args.dir))
    try:
        built = _child("build", str(tmp), str(args.objects), str(args.queries), *names)
        print("built", built, flush=True)
        results = {
            n: {**built[n], **_child("query", str(tmp), n, str(args.objects))} for n in names
        }
        for n in names:
            print(n, results[n], flush=True)
        msgs: dict[str, Any] = {}
        if args.messages:
            _child("messages-build", str(tmp / "messages"), str(args.messages))
            msgs = _child("messages-query", str(tmp / "messages"))
            print("messages", msgs, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = render(args, results, msgs)
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")


def render(
    args: argparse.Namespace, results: dict[str, dict[str, Any]], msgs: dict[str, Any]
) -> str:
    """Return the results as markdown."""
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python bench/scale_bench.py "
        f"--objects {args.objects} --queries {args.queries} --messages {args.messages}"
        f"{' --no-lancedb' if args.no_lancedb else ''}{' --weaviate' if args.weaviate else ''}` "
        f"({platform.machine()}, {os.cpu_count()} cores shared with other jobs, load average "
        f"{os.getloadavg()[0]:.1f}, Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}).",
        "",
        "| system | objects | ingest docs/s (CPU) | ready to search s (index) "
        "| searchable after ingest ms | cold first search s (CPU) | hybrid p50 / p95 ms "
        "| filtered p50 / p95 ms | 10 rewritten searchable ms (p50, max) "
        "| 100 new searchable ms (p50, max) | found first | peak memory growth MB | file MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        cold_cpu = f" ({r['cold_cpu_s']:.2f})" if "cold_cpu_s" in r else ""
        lines.append(
            f"| {name} | {args.objects:,} | {r['ingest']:,.0f} ({r.get('ingest_cpu', 0):,.0f}) "
            f"| {r.get('ready_s', 0):.1f} ({r.get('index_s', 0):.1f}) "
            f"| {r.get('searchable_ms', 0):.0f} | {r['cold_s']:.2f}{cold_cpu} "
            f"| {r['hybrid_p50']:.2f} / {r['hybrid_p95']:.2f} "
            f"| {r['filtered_p50']:.2f} / {r['filtered_p95']:.2f} "
            f"| {r['edit_p50']:.0f}, {r['edit_max']:.0f} "
            f"| {r['new_p50']:.0f}, {r['new_max']:.0f} | {r['edit_found']} {r['new_found']} "
            f"| {r['peak_mb']:.0f} | {r['size_mb']:.0f} |"
        )
    ours = results["embedded"]
    lines += [
        "",
        f"embedded: filtered p95 / hybrid p95 x{ours['filtered_p95'] / ours['hybrid_p95']:.2f}; "
        f"the hybrid queries again after the filtered ones: p50 {ours['again_p50']:.2f} / p95 "
        f"{ours['again_p95']:.2f} ms.",
        f"embedded CPU per query (`time.process_time`): hybrid p50 {ours['hybrid_cpu_p50']:.2f} / "
        f"p95 {ours['hybrid_cpu_p95']:.2f} ms, filtered p50 {ours['filtered_cpu_p50']:.2f} / "
        f"p95 {ours['filtered_cpu_p95']:.2f} ms. Vector side against the exact scan: recall@10 "
        f"{ours['recall_10']:.4f}, candidates kept {ours['recall_candidates']:.4f}.",
    ]
    if "lancedb" in results:
        lance = results["lancedb"]
        lines.append(
            f"embedded / lancedb: ingest x{ours['ingest'] / lance['ingest']:.2f}, file x"
            f"{ours['size_mb'] / lance['size_mb']:.2f}, cold x{ours['cold_s'] / lance['cold_s']:.2f}, "
            f"hybrid p95 x{ours['hybrid_p95'] / lance['hybrid_p95']:.2f}, filtered p95 x"
            f"{ours['filtered_p95'] / lance['filtered_p95']:.2f}, peak memory growth x"
            f"{ours['peak_mb'] / lance['peak_mb']:.2f}."
        )
    if "weaviate" in results:
        wv = results["weaviate"]
        lines += [
            f"weaviate memory: server peak resident {wv['server_peak_mb']:.0f} MB (after the "
            f"run {wv['server_rss_mb']:.0f} MB), client process growth {wv['client_peak_mb']:.0f}"
            " MB; its cold first search includes starting the server on its data.",
            f"weaviate / embedded: ingest x{wv['ingest'] / ours['ingest']:.2f}, disk x"
            f"{wv['size_mb'] / ours['size_mb']:.2f}, cold x{wv['cold_s'] / ours['cold_s']:.2f}, "
            f"hybrid p50 x{wv['hybrid_p50'] / ours['hybrid_p50']:.2f}, hybrid p95 x"
            f"{wv['hybrid_p95'] / ours['hybrid_p95']:.2f}, filtered p95 x"
            f"{wv['filtered_p95'] / ours['filtered_p95']:.2f}, 100 new searchable x"
            f"{wv['new_p50'] / ours['new_p50']:.2f}, 10 edited searchable x"
            f"{wv['edit_p50'] / ours['edit_p50']:.2f}, peak memory x"
            f"{wv['peak_mb'] / ours['peak_mb']:.2f}.",
        ]
    if msgs:
        lines.append(
            f"Message log of {args.messages:,} messages, one user: first search of a new process "
            f"(open included) {msgs['cold_ms']:.0f} ms, later searches p50 {msgs['p50']:.2f} ms."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

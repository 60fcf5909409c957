"""Cost of one message-log write, and of a recall right after one, as a user's log grows.

For each size (1k, 5k and 20k messages), a fresh embedded store gets one user whose log holds
that many messages (in threads of 50 turns, written straight into the store); then
``--writes`` calls of ``MessageLog.remember`` each log one turn (a human message and an
answer, with ids, as the graph's ``log_turn`` does) on one of ten new threads. Reported:
milliseconds per call (p50, p95) and SQLite virtual-machine steps per call (in thousands; a
count of the work done, independent of machine load). Then ``--recalls`` rounds of: one
write, a ``MessageLog.recall`` (timed: "after a write", the store's cached index must catch
up with the write) and another recall (timed: "cached"), interleaved so that load changes
hit both alike; reported as medians and their ratio. Embeddings are a fixed-cost hash, so the
numbers are the store's.

``--baseline PATH`` also measures another checkout of the code (for example the commit before
a change) in a subprocess, and writes both into one table.

Run: ``python bench/message_write_bench.py [--sizes 1000,5000,20000] [--writes 200]
[--recalls 40] [--baseline DIR] [--out bench/results/message_write.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

_DIMS = 256
_STEP = 1000


class _HashEmbeddings(Embeddings):
    """A deterministic stand-in with a fixed, tiny cost per text."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            seed = hashlib.sha256(text.encode("utf-8")).digest()
            out.append([(seed[i % 32] - 127.5) / 127.5 for i in range(_DIMS)])
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def write_history(store: Any, emb: Embeddings, size: int, content: Callable[[int], str]) -> None:
    """Write ``size`` messages (``content(n)`` each) of user alice straight into ``store``.

    In threads of 50 turns, alternating human and AI, 2,000 rows per upsert.
    """
    from agentic_memory.kinds.messages import MESSAGES
    from agentic_memory.store import MemoryObject, make_id

    rows = []
    for n in range(size):
        thread, turn = f"old-{n // 50}", n % 50
        props: dict[str, Any] = {
            "content": content(n),
            "role": "human" if turn % 2 == 0 else "ai",
            "thread_id": thread,
            "turn": turn,
            "created_at": "2026-01-01T00:00:00+00:00",
        }
        vector = emb.embed_query(props["content"])
        rows.append(MemoryObject(make_id("msg", "alice", thread, f"#{turn}"), props, vector))
        if len(rows) == 2000:
            store.upsert(MESSAGES.name, rows, user="alice")
            rows = []
    if rows:
        store.upsert(MESSAGES.name, rows, user="alice")


def measure(sizes: list[int], writes: int, recalls: int = 40) -> list[dict[str, Any]]:
    """Measure the code importable in this process; one result per size."""
    # Imported here, from whichever checkout of the code this process runs.
    from agentic_memory.kinds.messages import MESSAGES, MessageLog
    from agentic_memory.store.embedded import EmbeddedStore

    emb = _HashEmbeddings()
    results = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            store = EmbeddedStore(tmp, dims=_DIMS)
            store.ensure_collection(MESSAGES)
            write_history(store, emb, size, lambda n: f"message {n} of the history")
            log = MessageLog(store, emb)
            steps = 0

            def tick() -> int:
                nonlocal steps
                steps += 1
                return 0

            def one(i: int, log: MessageLog = log) -> None:
                asyncio.run(
                    log.aremember(
                        "alice",
                        f"new-{i % 10}",
                        [
                            {"role": "user", "content": f"question {i}", "id": f"h{i}"},
                            {"role": "ai", "content": f"answer {i}", "id": f"a{i}"},
                        ],
                    )
                )

            for i in range(10):  # warm-up: the first turns of the ten threads
                one(i)
            times = []
            conn = store._conn
            assert isinstance(conn, sqlite3.Connection)
            conn.set_progress_handler(tick, _STEP)
            for i in range(10, 10 + writes):
                start = time.perf_counter()
                one(i)
                times.append((time.perf_counter() - start) * 1000)
            conn.set_progress_handler(None, _STEP)
            asyncio.run(log.arecall("alice", "warm up the cached index", k=5))
            after: list[float] = []
            cached: list[float] = []
            for r in range(recalls):
                one(10 + writes + r)
                for series, query in (
                    (after, f"what did we say about message {(r * 37) % size}"),
                    (cached, f"history of message {(r * 53) % size}"),
                ):
                    start = time.perf_counter()
                    asyncio.run(log.arecall("alice", query, k=5))
                    series.append((time.perf_counter() - start) * 1000)
            store.close()
            times.sort()
            results.append(
                {
                    "size": size,
                    "p50": statistics.median(times),
                    "p95": times[int(0.95 * (len(times) - 1))],
                    "ksteps": steps * _STEP / writes / 1000,
                    "recall_cached": statistics.median(cached),
                    "recall_after": statistics.median(after),
                    "rows": size + 2 * (10 + writes + recalls),
                }
            )
    return results


def in_checkout(path: Path, module: str, function: str, *args: Any) -> Any:
    """Return ``module.function(*args)`` run in a subprocess on the code of checkout ``path``.

    ``module`` is a bench script of this checkout's ``bench/``; ``agentic_memory`` comes from
    ``path``. The arguments and the result travel as JSON.
    """
    env = {**os.environ, "PYTHONPATH": str(path.resolve())}
    # ``bench`` is this checkout's folder alone, so that a checkout's older bench scripts
    # never stand in for these; ``agentic_memory`` comes from the path, i.e. from ``path``.
    code = (
        "import json, sys, types; sys.path.insert(0, sys.argv[1]); "
        "pkg = types.ModuleType('bench'); pkg.__path__ = [sys.argv[2]]; "
        "sys.modules['bench'] = pkg; "
        f"from bench import {module} as b; "
        f"print(json.dumps(b.{function}(*json.loads(sys.argv[3]))))"
    )
    bench = str(Path(__file__).parent.resolve())
    call = [sys.executable, "-c", code, str(path.resolve()), bench, json.dumps(args)]
    done = subprocess.run(call, check=True, capture_output=True, text=True, env=env, cwd=path)
    return json.loads(done.stdout.strip().splitlines()[-1])


def add_baseline_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--baseline DIR`` (another checkout), its label, this checkout's, and ``--out``."""
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout")
    parser.add_argument("--baseline-label", default="before")
    parser.add_argument("--label", default="after")
    parser.add_argument("--out", type=Path, default=None)


def main() -> None:
    """Measure, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--recalls", type=int, default=40)
    add_baseline_arguments(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    if args.baseline is not None:
        before = in_checkout(
            args.baseline, "message_write_bench", "measure", sizes, args.writes, args.recalls
        )
        runs.append((args.baseline_label, before))
    runs.append((args.label, measure(sizes, args.writes, args.recalls)))
    lines = [
        "| code | messages of the user | write p50 ms | write p95 ms | SQLite steps per write (k) "
        "| recall cached p50 ms | recall after a write p50 ms | after / cached |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, results in runs:
        for r in results:
            lines.append(
                f"| {label} | {r['size']:,} | {r['p50']:.2f} | {r['p95']:.2f} | {r['ksteps']:.1f} "
                f"| {r['recall_cached']:.2f} | {r['recall_after']:.2f} "
                f"| x{r['recall_after'] / r['recall_cached']:.2f} |"
            )
    for label, results in runs:
        first, last = results[0], results[-1]
        lines.append("")
        lines.append(
            f"{label}: {last['size']:,} vs {first['size']:,} messages: p50 x"
            f"{last['p50'] / first['p50']:.2f}, steps x{last['ksteps'] / first['ksteps']:.2f}"
        )
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        header = (
            "# Message-log write and recall cost\n\n"
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python bench/message_write_bench.py"
            f" --writes {args.writes} --recalls {args.recalls}"
            f"{' --baseline DIR' if args.baseline else ''}` "
            f"({platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores shared with other jobs, load average {load:.1f}, "
            f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}).\n\n"
            "One write = `MessageLog.remember` of one turn (a human message and an answer, "
            "with ids) on a new thread, in a user whose log already holds the given number "
            "of messages (threads of 50 turns). Embeddings are a fixed-cost hash, so the "
            "times are the store's. SQLite steps = virtual-machine instructions per write "
            "(progress handler), a measure of rows visited that does not depend on load. "
            "Recall = `MessageLog.recall(k=5)`: 'after a write' follows a one-turn write, "
            "'cached' follows that recall; medians of the interleaved rounds.\n\n"
        )
        args.out.write_text(header + table + "\n")


if __name__ == "__main__":
    main()

"""Resident memory over many turns of the message log, as the graph drives it (issue 22).

One user's log holds ``--messages`` messages (threads of 50 turns, 5-40 words each drawn by
frequency from the standard library's English words, written straight into the store); then
``--turns`` turns each log a question and an answer (``MessageLog.aremember``, threads of 50
turns) and recall the user's log for a new question (``MessageLog.arecall``, k=5), which is
what the graph's ``log_turn`` and recall do per turn. Every 100 turns the process's resident
set (``VmRSS``, after a garbage collection) is read. The index of the partition grows with
the rows (2 per turn), so some growth is the data's; the rest is what the process keeps per
turn. Embeddings are a fixed-cost hash (``message_write_bench._HashEmbeddings``), so the
numbers are the store's and the recall's. Last, the memory Python holds after the recall's
re-ranking has seen 1,500 new turns of ~2,800 characters each (``tracemalloc``): what its
cache of the turns' keywords keeps.

``--baseline DIR`` runs the same turns with another checkout of the code first (a
subprocess), for a before / after table of one run.

Run: ``python bench/memory_creep_bench.py [--messages 20000] [--turns 1000] [--baseline DIR]
[--out bench/results/memory_creep.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import sqlite3
import sys
import tempfile
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: the repository's root makes ``bench`` importable; appended, so that
    # a baseline run's checkout (first on the path) still provides ``agentic_memory``.
    sys.path.append(str(Path(__file__).resolve().parent.parent))
from bench.knowledge_corpus import vocabulary
from bench.message_write_bench import (
    _HashEmbeddings,
    add_baseline_arguments,
    in_checkout,
    write_history,
)

_EVERY = 100


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(messages: int, turns: int) -> dict[str, Any]:
    """Run the turns with the code importable in this process; return RSS every 100 turns."""
    from agentic_memory.kinds.messages import MESSAGES, MessageLog
    from agentic_memory.store.embedded import EmbeddedStore

    words, p = vocabulary()
    rng = np.random.default_rng(7)
    emb = _HashEmbeddings()

    def sentence(low: int, high: int) -> str:
        return " ".join(words[i] for i in rng.choice(len(words), int(rng.integers(low, high)), p=p))

    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedStore(tmp, dims=len(emb.embed_query("x")))
        store.ensure_collection(MESSAGES)
        write_history(store, emb, messages, lambda n: sentence(5, 40))
        log = MessageLog(store, emb)

        async def run() -> list[float]:
            rss = []
            for i in range(turns):
                await log.aremember(
                    "alice",
                    f"new-{i // 50}",
                    [
                        {"role": "user", "content": sentence(5, 25), "id": f"h{i}"},
                        {"role": "ai", "content": sentence(10, 40), "id": f"a{i}"},
                    ],
                )
                await log.arecall("alice", sentence(3, 12), k=5)
                if (i + 1) % _EVERY == 0:
                    gc.collect()
                    rss.append(_rss_mb())
            return rss

        rss = asyncio.run(run())
        store.close()
    return {"rss": rss, "long_mb": long_turns(words, p)}


def long_turns(words: list[str], p: np.ndarray, turns: int = 1500) -> float:
    """Return the MB Python holds after recall re-ranks ``turns`` new turns of ~2,800 characters.

    The re-ranking keeps the keywords of the turns it saw; this is what that keeps.
    """
    from agentic_memory.kinds.messages import recall

    rng = np.random.default_rng(3)
    texts = [" ".join(words[i] for i in rng.choice(len(words), 450, p=p)) for _ in range(turns)]
    gc.collect()
    tracemalloc.start()
    for n, text in enumerate(texts):
        recall._own_keywords("Caroline", f"{n} {text}")
    gc.collect()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return size / 1e6


def _per_100(rss: list[float]) -> float:
    """Least-squares growth per 100 turns over the second half of the run."""
    half = rss[len(rss) // 2 :]
    if len(half) < 2:
        return 0.0
    slope = np.polyfit(np.arange(len(half)), np.asarray(half), 1)[0]
    return float(slope)


def main() -> None:
    """Measure, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--turns", type=int, default=1000)
    add_baseline_arguments(parser)
    args = parser.parse_args()
    runs: list[tuple[str, dict[str, Any]]] = []
    if args.baseline is not None:
        before = in_checkout(
            args.baseline, "memory_creep_bench", "measure", args.messages, args.turns
        )
        runs.append((args.baseline_label, before))
        print(runs[-1], flush=True)
    runs.append((args.label, measure(args.messages, args.turns)))
    print(runs[-1], flush=True)
    marks = [_EVERY * (i + 1) for i in range(args.turns // _EVERY)]
    lines = [
        "| code | " + " | ".join(f"RSS MB at {m}" for m in marks) + " | MB per 100 turns "
        "(second half) | MB kept after 1,500 long turns recalled |",
        "|---|" + "---:|" * (len(marks) + 2),
    ]
    for label, result in runs:
        cells = " | ".join(f"{v:.1f}" for v in result["rss"])
        lines.append(
            f"| {label} | {cells} | {_per_100(result['rss']):.2f} | {result['long_mb']:.1f} |"
        )
    load = os.getloadavg()[0]
    report = (
        "# Memory over many turns of the message log\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python bench/memory_creep_bench.py "
        f"--messages {args.messages} --turns {args.turns}"
        f"{' --baseline DIR' if args.baseline else ''}` ({platform.machine()}, "
        f"{os.cpu_count()} cores shared with other jobs, load average {load:.1f}, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}).\n\n" + "\n".join(lines)
    )
    print(report)
    if args.out is not None:
        args.out.write_text(report + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

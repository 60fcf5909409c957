"""What a call through ``AgenticStore`` costs on top of the store, and what importing costs.

The LangGraph server awaits ``AgenticStore``'s async methods; scripts call its sync ones. Each
call crosses layers (the store adapter, a memory kind, the storage engine), and each crossing
between an event loop and a worker thread costs. This measures, on an embedded store that
already holds memories (one user: 40 facts, 200 logged turns, 100 generic items), the latency
of: a fact put, get and search; a message search; a generic item put and search; each through
the async API (``aput``/``aget``/``asearch``, as the server calls them) and through the sync
API (``put``/``search``, from a plain thread). Embeddings are a fixed-cost hash, so the times
are the layers' and the store's. Also: the time to import ``agentic_memory.langgraph_store``
(what ``langgraph dev`` loads for the store) and ``agentic_memory.api`` in a fresh interpreter,
less an empty interpreter's start.

``--baseline DIR`` measures another checkout of the code (for example the commit before a
change) too, in subprocesses interleaved with this one's round by round, so that the load of
a shared machine hits both alike; the table gives both and their ratio.

Run: ``python bench/store_hops_bench.py [--rounds 5] [--calls 40] [--baseline DIR]
[--out bench/results/store_hops.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

_DIMS = 256
_USER = "bench-user"
_ROOT = Path(__file__).resolve().parents[1]
_IMPORTS = ("agentic_memory.langgraph_store", "agentic_memory.api")


class _HashEmbeddings(Embeddings):
    """A deterministic stand-in with a fixed, tiny cost per text."""

    dims = _DIMS

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            seed = hashlib.sha256(text.encode("utf-8")).digest()
            out.append([(seed[i % 32] - 127.5) / 127.5 for i in range(_DIMS)])
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def _fill(home: str) -> None:
    """Write the memories every round reads, through the sync API."""
    from agentic_memory.langgraph_store import AgenticStore  # the checkout under test
    from agentic_memory.store.embedded import EmbeddedStore

    with AgenticStore(EmbeddedStore(home, dims=_DIMS), _HashEmbeddings(), close_store=True) as s:
        for n in range(40):
            s.put(("facts", _USER), f"subject {n}", {"value": f"value number {n}"})
        for n in range(100):
            s.put(
                ("messages", _USER, f"thread-{n % 5}"),
                f"m{n}",
                {"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} of talk"},
            )
        for n in range(100):
            s.put(("notes", _USER), f"n{n}", {"text": f"note {n} about jazz and printers"})


def _ops() -> dict[str, Callable[[Any, int], Any]]:
    """Each measured call, given the store and the call's number."""
    return {
        "put fact": lambda s, i: ("put", ("facts", _USER), "diet", {"value": f"diet {i % 2}"}),
        "get fact": lambda s, i: ("get", ("facts", _USER), "subject 3"),
        "search facts": lambda s, i: ("search", ("facts", _USER), "value number"),
        "search messages": lambda s, i: ("search", ("messages", _USER), "talk"),
        "put item": lambda s, i: ("put", ("notes", _USER), "n1", {"text": f"jazz {i}"}),
        "search items": lambda s, i: ("search", ("notes", _USER), "printers"),
    }


def _call(store: Any, spec: tuple[Any, ...], *, asynchronous: bool) -> Any:
    verb, namespace, *rest = spec
    if verb == "put":
        return (store.aput if asynchronous else store.put)(namespace, rest[0], rest[1])
    if verb == "get":
        return (store.aget if asynchronous else store.get)(namespace, rest[0])
    return (store.asearch if asynchronous else store.search)(namespace, query=rest[0], limit=5)


class _Handoffs:
    """Counts what a call hands to another thread or loop, and the event loops it creates.

    A handoff is a task given to a thread pool (``asyncio.to_thread``, ``run_in_executor``)
    or a coroutine given to another thread's loop (``run_coroutine_threadsafe``): each costs a
    thread wake-up, which a loaded machine makes expensive. Counts do not depend on load.
    """

    def __init__(self) -> None:
        self.handoffs = 0
        self.loops = 0
        pools = concurrent.futures.ThreadPoolExecutor
        submit, threadsafe = pools.submit, asyncio.run_coroutine_threadsafe
        loop_init = asyncio.BaseEventLoop.__init__

        def counted_submit(pool: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            self.handoffs += 1
            return submit(pool, fn, *args, **kwargs)

        def counted_threadsafe(coro: Any, loop: Any) -> Any:
            self.handoffs += 1
            return threadsafe(coro, loop)

        def counted_loop(loop: Any, *args: Any, **kwargs: Any) -> None:
            self.loops += 1
            loop_init(loop, *args, **kwargs)

        pools.submit = counted_submit  # type: ignore[method-assign]
        asyncio.run_coroutine_threadsafe = counted_threadsafe
        asyncio.BaseEventLoop.__init__ = counted_loop  # type: ignore[method-assign,assignment]

    def reset(self) -> None:
        self.handoffs = self.loops = 0


def measure(home: str, calls: int) -> dict[str, float]:
    """Median milliseconds per call of every operation, async and sync, on a fresh open.

    Also, for each: the handoffs and event loops of one more call (``handoffs …``,
    ``loops …``), counted after the timed ones.
    """
    from agentic_memory.langgraph_store import AgenticStore
    from agentic_memory.store.embedded import EmbeddedStore

    results: dict[str, float] = {}
    counter = _Handoffs()
    store = AgenticStore(EmbeddedStore(home, dims=_DIMS), _HashEmbeddings(), close_store=True)
    try:

        async def run_async() -> None:
            for name, make in _ops().items():
                times = []
                for i in range(calls + 1):
                    counter.reset()
                    start = time.perf_counter()
                    pending: Awaitable[Any] = _call(store, make(store, i), asynchronous=True)
                    await pending
                    times.append(time.perf_counter() - start)
                results[f"async {name}"] = statistics.median(times[1:-1]) * 1000
                results[f"handoffs async {name}"] = counter.handoffs
                results[f"loops async {name}"] = counter.loops

        asyncio.run(run_async())
        for name, make in _ops().items():
            times = []
            for i in range(calls + 1):
                counter.reset()
                start = time.perf_counter()
                _call(store, make(store, i), asynchronous=False)
                times.append(time.perf_counter() - start)
            results[f"sync {name}"] = statistics.median(times[1:-1]) * 1000
            results[f"handoffs sync {name}"] = counter.handoffs
            results[f"loops sync {name}"] = counter.loops
    finally:
        store.close()
    return results


def import_time(module: str, tree: Path) -> float:
    """Milliseconds to import ``module`` in a fresh interpreter, less an empty one's start."""
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tree)
        return time.perf_counter() - start

    return (run(f"import {module}") - run("pass")) * 1000


def _worker(tree: Path, calls: int) -> dict[str, float]:
    """One round of one checkout, in a subprocess that imports that checkout."""
    out = subprocess.run(
        [sys.executable, __file__, "--worker", "--calls", str(calls)],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    for module in _IMPORTS:
        result[f"import {module}"] = import_time(module, tree)
    return result


def _commit(tree: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""  # not a git checkout (an exported tree): its label says what it is


def main() -> None:
    """Measure this checkout (and a baseline), interleaved, and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--label", default="after", help="the name of this checkout's column")
    parser.add_argument("--baseline-label", default="before")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as home:
            _fill(home)
            # A fresh store on existing data, as a restarted server opens it.
            print(json.dumps(measure(home, args.calls)))
        return

    trees = [(args.label, _ROOT)]
    if args.baseline is not None:
        trees.insert(0, (args.baseline_label, args.baseline.resolve()))
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    for n in range(args.rounds):
        for label, tree in trees if n % 2 == 0 else reversed(trees):
            rounds[label].append(_worker(tree, args.calls))
            print(f"round {n + 1}/{args.rounds}: {label} done", file=sys.stderr)
    names = [n for n in rounds[trees[0][0]][0] if not n.startswith(("handoffs ", "loops "))]
    medians = {
        label: {name: statistics.median(r[name] for r in runs) for name in rounds[label][0]}
        for label, runs in rounds.items()
    }
    labels = [f"{label} ({c})" if (c := _commit(tree)) else label for label, tree in trees]
    header = "| operation | " + " | ".join(f"{lab} ms" for lab in labels)
    header += " | after / before |" if len(trees) == 2 else " |"
    header += " " + " | ".join(f"{lab} handoffs, loops" for lab in labels) + " |"
    lines = [header, "|---|" + "---:|" * (2 * len(trees) + (1 if len(trees) == 2 else 0))]
    for name in names:
        row = [f"{medians[label][name]:.2f}" for label, _ in trees]
        if len(trees) == 2:
            before, after = medians[trees[0][0]][name], medians[trees[1][0]][name]
            row.append(f"x{after / before:.2f}" if before > 0 else "-")
        for label, _ in trees:
            counted = medians[label].get(f"handoffs {name}")
            loops = medians[label].get(f"loops {name}")
            row.append("-" if counted is None else f"{counted:.0f}, {loops:.0f}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    load = os.getloadavg()[0]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    report = "\n".join(
        [
            "# AgenticStore call latency (the hops between layers) and import time",
            "",
            f"Measured {stamp} by `python bench/store_hops_bench.py --rounds {args.rounds} "
            f"--calls {args.calls}{' --baseline DIR' if args.baseline else ''}` "
            f"({platform.machine()}, {os.cpu_count()} cores shared with other jobs, load "
            f"average {load:.1f}, Python {platform.python_version()}).",
            "",
            "Median over rounds of each round's median call, in milliseconds; rounds of the "
            "two checkouts interleaved. The store is an embedded store reopened on existing "
            "data (40 facts, 100 logged turns in 5 threads, 100 generic items of one user); "
            "embeddings are a fixed-cost hash. Async = `await store.aput/aget/asearch` on an "
            "event loop (the server's path); sync = `store.put/get/search` from a plain "
            "thread. Import = a fresh interpreter importing the module, less an empty "
            "interpreter's start. Handoffs = tasks given to a worker thread or to another "
            "thread's event loop during one call, and the event loops the call created "
            "(counts, independent of load).",
            "",
            *lines,
            "",
        ]
    )
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()

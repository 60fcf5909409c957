"""What a call through ``AgenticStore`` costs on top of the store, and what importing costs.

The LangGraph server awaits ``AgenticStore``'s async methods; scripts call its sync ones. Each
call crosses layers (the store adapter, a memory kind, the storage engine), and each handoff
between an event loop and a worker thread costs a thread wake-up. This measures, on an
embedded store reopened on existing memories (one user: 40 facts, 100 logged turns, 100
generic items), the latency of a fact put, get and search, a message search, and a generic
item put and search, each through the async API (``aput``/``aget``/``asearch`` on an event
loop, as the server calls them) and through the sync API (``put``/``get``/``search`` from a
plain thread). Embeddings are a fixed-cost hash, so the times are the layers' and the store's.
For each call it also counts the handoffs (tasks given to a worker thread or to another
thread's loop) and the event loops created: counts that no machine load changes. Last, the
time to import ``agentic_memory.langgraph_store`` (what ``langgraph dev`` loads for the
store) and ``agentic_memory.api`` in a fresh interpreter, less an empty interpreter's start.

``--baseline DIR`` measures another checkout of the code (for example the commit before a
change) too: one worker process per checkout, each on its own copy of the same store, and
the calls alternate between them one by one (imports too), so that the load of a shared
machine hits both alike; the ratio column is the median of the per-call ratios.

Run: ``python bench/store_hops_bench.py [--calls 200] [--imports 10] [--baseline DIR]
[--baseline-label NAME] [--out bench/results/store_hops.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

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
    """Write the memories every call reads, through the sync API."""
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


OPS: dict[str, Callable[[int], tuple[Any, ...]]] = {
    "put fact": lambda i: ("put", ("facts", _USER), "diet", {"value": f"diet {i % 2}"}),
    "get fact": lambda i: ("get", ("facts", _USER), "subject 3"),
    "search facts": lambda i: ("search", ("facts", _USER), "value number"),
    "search messages": lambda i: ("search", ("messages", _USER), "talk"),
    "put item": lambda i: ("put", ("notes", _USER), "n1", {"text": f"jazz {i}"}),
    "search items": lambda i: ("search", ("notes", _USER), "printers"),
}
"""Each measured operation, given the call's number."""


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
    or a coroutine given to another thread's loop (``run_coroutine_threadsafe``).
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


def serve(home: str, requests: IO[str], replies: IO[str]) -> None:
    """Answer measurement requests (``"<mode> <op> <i>"`` lines) on a reopened store."""
    from agentic_memory.langgraph_store import AgenticStore
    from agentic_memory.store.embedded import EmbeddedStore

    store = AgenticStore(EmbeddedStore(home, dims=_DIMS), _HashEmbeddings(), close_store=True)
    counter = _Handoffs()
    # One loop for the async calls, as a server has; the sync calls run outside it.
    with asyncio.Runner() as runner:
        print("ready", file=replies, flush=True)
        for line in requests:
            mode, i, name = line.rstrip("\n").split(" ", 2)
            spec = OPS[name](int(i))
            counter.reset()
            if mode == "async":

                async def timed(spec: tuple[Any, ...] = spec) -> float:
                    start = time.perf_counter()
                    await _call(store, spec, asynchronous=True)
                    return time.perf_counter() - start

                elapsed = runner.run(timed())
            else:
                start = time.perf_counter()
                _call(store, spec, asynchronous=False)
                elapsed = time.perf_counter() - start
            reply = {"ms": elapsed * 1000, "handoffs": counter.handoffs, "loops": counter.loops}
            print(json.dumps(reply), file=replies, flush=True)
    store.close()


class _Worker:
    """A process that imports one checkout and serves measurements on a copy of the store."""

    def __init__(self, tree: Path, home: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(home)],
            env=env,
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stdin is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        if self.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the worker for {tree} did not start")

    def call(self, mode: str, name: str, i: int) -> dict[str, float]:
        self.stdin.write(f"{mode} {i} {name}\n")
        self.stdin.flush()
        reply: dict[str, float] = json.loads(self.stdout.readline())
        return reply

    def close(self) -> None:
        self.stdin.close()
        self.process.wait(timeout=60)


def import_time(module: str, tree: Path) -> float:
    """Milliseconds to import ``module`` in a fresh interpreter, less an empty one's start."""
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tree)
        return time.perf_counter() - start

    return (run(f"import {module}") - run("pass")) * 1000


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


def _fill_in(tree: Path, home: Path) -> None:
    code = f"import sys; sys.path.insert(0, {str(_ROOT / 'bench')!r}); "
    code += f"import store_hops_bench as b; b._fill({str(home)!r})"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, check=True)


def main() -> None:
    """Measure this checkout (and a baseline), call by call interleaved; write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per operation and mode")
    parser.add_argument("--imports", type=int, default=10, help="imports per module")
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--label", default="after", help="the name of this checkout's column")
    parser.add_argument("--baseline-label", default="before")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, sys.stdin, sys.stdout)
        return

    trees = [(args.label, _ROOT)]
    if args.baseline is not None:
        trees.insert(0, (args.baseline_label, args.baseline.resolve()))
    times: dict[str, dict[str, list[float]]] = {label: {} for label, _ in trees}
    counts: dict[str, dict[str, tuple[float, float]]] = {label: {} for label, _ in trees}
    ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # The baseline writes the store: both read the same data, each from its own copy.
        seed = Path(tmp) / "seed"
        _fill_in(trees[0][1], seed)
        workers = []
        for n, (_, tree) in enumerate(trees):
            home = Path(tmp) / f"store-{n}"
            shutil.copytree(seed, home)
            workers.append(_Worker(tree, home))
        try:
            for mode in ("async", "sync"):
                for name in OPS:
                    key = f"{mode} {name}"
                    for i in range(args.calls + 1):
                        order = list(range(len(trees)))
                        if i % 2:
                            order.reverse()
                        got = {n: workers[n].call(mode, name, i) for n in order}
                        if i == 0:
                            continue  # the first call of each operation loads caches
                        for n, (label, _) in enumerate(trees):
                            times[label].setdefault(key, []).append(got[n]["ms"])
                            counts[label][key] = (got[n]["handoffs"], got[n]["loops"])
                        if len(trees) == 2 and got[0]["ms"] > 0:
                            ratios.setdefault(key, []).append(got[1]["ms"] / got[0]["ms"])
                    print(f"{key}: done", file=sys.stderr)
        finally:
            for worker in workers:
                worker.close()
    for module in _IMPORTS:
        key = f"import {module}"
        for i in range(args.imports):
            order = list(range(len(trees))) if i % 2 == 0 else list(reversed(range(len(trees))))
            got_ms = {n: import_time(module, trees[n][1]) for n in order}
            for n, (label, _) in enumerate(trees):
                times[label].setdefault(key, []).append(got_ms[n])
            if len(trees) == 2 and got_ms[0] > 0:
                ratios.setdefault(key, []).append(got_ms[1] / got_ms[0])
        print(f"{key}: done", file=sys.stderr)

    labels = [f"{label} ({c})" if (c := _commit(tree)) else label for label, tree in trees]
    header = "| operation | " + " | ".join(f"{lab} ms" for lab in labels)
    header += " | after / before" if len(trees) == 2 else ""
    header += " | " + " | ".join(f"{lab} handoffs, loops" for lab in labels) + " |"
    lines = [header, "|---|" + "---:|" * (2 * len(trees) + (1 if len(trees) == 2 else 0))]
    for key in times[trees[0][0]]:
        row = [f"{statistics.median(times[label][key]):.2f}" for label, _ in trees]
        if len(trees) == 2:
            row.append(f"x{statistics.median(ratios[key]):.2f}")
        for label, _ in trees:
            counted = counts[label].get(key)
            row.append("-" if counted is None else f"{counted[0]:.0f}, {counted[1]:.0f}")
        lines.append(f"| {key} | " + " | ".join(row) + " |")
    load = os.getloadavg()[0]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    report = "\n".join(
        [
            "# AgenticStore call latency (the hops between layers) and import time",
            "",
            f"Measured {stamp} by `python bench/store_hops_bench.py --calls {args.calls} "
            f"--imports {args.imports}{' --baseline DIR' if args.baseline else ''}` "
            f"({platform.machine()}, {os.cpu_count()} cores shared with other jobs, load "
            f"average {load:.1f} at the end, Python {platform.python_version()}).",
            "",
            "Medians in milliseconds. The store is an embedded store reopened on existing "
            "data (40 facts, 100 logged turns in 5 threads, 100 generic items of one user), "
            "one copy per checkout; embeddings are a fixed-cost hash. Async = `await "
            "store.aput/aget/asearch` on an event loop (the server's path); sync = "
            "`store.put/get/search` from a plain thread. The checkouts' calls alternate one "
            "by one; after / before is the median of the per-call ratios. Handoffs = tasks "
            "one call gives to a worker thread or to another thread's event loop, and loops "
            "= event loops it creates (counts: no load changes them). Import = a fresh "
            "interpreter importing the module, less an empty interpreter's start.",
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

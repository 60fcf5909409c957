"""Concurrent writers on one embedded store: threads, asyncio tasks and processes.

Each test starts writers together and then checks exact counts: every acknowledged write is
stored exactly once, a subject has exactly one current value and a linear history, rule
versions are distinct and consecutive, and a thread's turn numbers are unique and increasing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds.rules import RuleBook
from agentic_memory.store.embedded import EmbeddedStore
from tests.integration.concurrency import workers
from tests.integration.concurrency.checks import check_facts, check_messages, check_rules
from tests.integration.concurrency.workers import DIMS, HashEmbeddings, embedded_opener, run_threads

THREADS = 2
PROCESSES = 3


def _spawned(path: Path, kind: str, n: int, *args: Any) -> list[Any]:
    """Run PROCESSES spawned writer processes of THREADS threads each; return their reports."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(PROCESSES) as pool:
        # Processes start at different moments (imports); they begin writing together.
        start = manager.Barrier(PROCESSES, timeout=60)
        parts = pool.starmap(
            workers.process_main,
            [(start, str(path), kind, f"p{p}", THREADS, n, *args) for p in range(PROCESSES)],
        )
    return [x for part in parts for x in part]


def _writers(prefixes: list[str]) -> list[str]:
    return [f"{p}t{t}" for p in prefixes for t in range(THREADS)]


# -- threads in one process -------------------------------------------------------------------


THREAD_WRITERS = 4


@pytest.mark.parametrize("kind", ["facts", "rules", "messages"])
def test_threads_in_one_process(tmp_path: Path, kind: str) -> None:
    n = {"facts": 50, "rules": 25, "messages": 60}[kind]
    opener = embedded_opener(str(tmp_path / "store"))
    args = {"facts": ("alice", "city"), "rules": ("alice",), "messages": ("alice", "t")}[kind]
    reported = run_threads(opener, kind, "x", THREAD_WRITERS, n, *args)
    writers = [f"xt{t}" for t in range(THREAD_WRITERS)]
    with EmbeddedStore(tmp_path / "store", dims=DIMS) as store:
        {"facts": check_facts, "rules": check_rules, "messages": check_messages}[kind](
            store, reported, writers, n
        )


def test_asyncio_tasks_sharing_one_store(tmp_path: Path) -> None:
    tasks, n = 6, 15
    with EmbeddedStore(tmp_path / "store", dims=DIMS) as store:
        reported = asyncio.run(workers.async_writers(store, tasks, n))
        names = [f"a{t}" for t in range(tasks)]
        check_facts(store, reported["facts"], names, n)
        # The notes of the async writer are empty: check versions and parents only.
        versions = asyncio.run(RuleBook(store, HashEmbeddings()).aversions("alice"))
        assert sorted(reported["rules"]) == list(range(2, tasks * n + 2))
        assert [v.version for v in versions] == list(range(1, tasks * n + 2))
        check_messages(store, reported["messages"], names, n)


# -- processes --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["facts", "rules", "messages"])
def test_processes_with_threads(tmp_path: Path, kind: str) -> None:
    n = {"facts": 30, "rules": 15, "messages": 40}[kind]
    args = {"facts": ("alice", "city"), "rules": ("alice",), "messages": ("alice", "t")}[kind]
    path = tmp_path / "store"
    EmbeddedStore(path, dims=DIMS).close()
    reported = _spawned(path, kind, n, *args)
    writers = _writers([f"p{p}" for p in range(PROCESSES)])
    with EmbeddedStore(path, dims=DIMS) as store:
        {"facts": check_facts, "rules": check_rules, "messages": check_messages}[kind](
            store, reported, writers, n
        )

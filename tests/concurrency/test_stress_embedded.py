"""Concurrent writers on one embedded store: threads, asyncio tasks and processes.

Each test starts writers together and then checks exact counts: every acknowledged write is
stored exactly once, a subject has exactly one current value and a linear history, rule
versions are distinct and consecutive, and a thread's turn numbers are unique and increasing.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memory.collections import FACTS
from memory.facts import FactStore
from memory.messages import MessageLog
from memory.rules import RuleBook
from memstore import MemoryStore, Where
from memstore.embedded import EmbeddedStore
from tests.concurrency import workers
from tests.concurrency.workers import (
    DIMS,
    HashEmbeddings,
    embedded_opener,
    fact_value,
    message_text,
    run_threads,
)

THREADS = 2
PROCESSES = 3


def _spawned(path: Path, kind: str, n: int, *args: Any) -> list[Any]:
    """Run PROCESSES spawned writer processes of THREADS threads each; return their reports."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        parts = pool.starmap(
            workers.process_main,
            [(str(path), kind, f"p{p}", THREADS, n, *args) for p in range(PROCESSES)],
        )
    return [x for part in parts for x in part]


def _writers(prefixes: list[str]) -> list[str]:
    return [f"{p}t{t}" for p in prefixes for t in range(THREADS)]


# -- checks -----------------------------------------------------------------------------------


def check_facts(store: MemoryStore, reported: list[str], writers: list[str], n: int) -> None:
    facts = FactStore(store, HashEmbeddings())
    history = facts.history("alice", "city")
    expected = {fact_value(w, i) for w in writers for i in range(n)}
    assert len(history) == len(expected), "every update is in the history exactly once"
    assert {f.value for f in history} == expected
    assert sorted(f.id for f in history) == sorted(reported)
    current = [f for f in facts.current("alice") if f.subject == "city"]
    assert len(current) == 1 and current[0].id == history[-1].id
    flagged = store.count(
        FACTS.name,
        user="alice",
        where=[Where("subject", "eq", "city"), Where("current", "eq", True)],
    )
    assert flagged == 1, "exactly one stored row says it is current"
    for older, newer in zip(history, history[1:], strict=False):
        assert not older.current and older.superseded_by == newer.id
        assert older.valid_to == newer.valid_from
    for w in writers:
        # One writer's updates appear in the order it made them.
        mine = [f.value for f in history if f.value.startswith(f"value {w} ")]
        assert mine == [fact_value(w, i) for i in range(n)]


def check_rules(store: MemoryStore, reported: list[int], writers: list[str], n: int) -> None:
    versions = RuleBook(store, HashEmbeddings()).versions("alice")
    total = len(writers) * n
    assert sorted(reported) == list(range(2, total + 2)), "each caller got its own version"
    assert [v.version for v in versions] == list(range(1, total + 2))
    assert Counter(v.note for v in versions[1:]) == Counter(
        f"{w}/{i}" for w in writers for i in range(n)
    )
    for v in versions[1:]:
        assert v.parent_version == v.version - 1


def check_messages(store: MemoryStore, reported: list[str], writers: list[str], n: int) -> None:
    log = MessageLog(store, HashEmbeddings())
    logged = log.list("alice", thread_id="t", limit=10_000)
    total = len(writers) * n
    assert len(logged) == total, "no message is lost"
    assert [m.turn for m in logged] == list(range(total)), "turns unique and increasing"
    assert sorted(m.id for m in logged) == sorted(reported)
    assert Counter(m.content for m in logged) == Counter(
        message_text(w, i) for w in writers for i in range(n)
    )
    for w in writers:
        mine = [m.content for m in logged if m.content.startswith(f"message {w} ")]
        assert mine == [message_text(w, i) for i in range(n)]


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
        versions = RuleBook(store, HashEmbeddings()).versions("alice")
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

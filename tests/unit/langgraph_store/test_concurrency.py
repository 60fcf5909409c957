"""Concurrent writers through the LangGraph store lose nothing.

Store writes go through the kinds, whose writes are create-only where they read first
(facts, rules, messages), so racing puts on one subject, one rule scope or one thread are all
kept. Writers use two ``AgenticStore`` handles on one directory, as two processes would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore


@pytest.fixture
def handles(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[list[AgenticStore]]:
    opened = [
        AgenticStore(
            EmbeddedStore(tmp_path / "s", dims=embeddings.dims), embeddings, close_store=True
        )
        for _ in range(2)
    ]
    yield opened
    for store in opened:
        store.close()


def run(tasks: list[Callable[[], None]]) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        for future in [pool.submit(task) for task in tasks]:
            future.result()


def test_racing_fact_puts_all_enter_the_history(handles: list[AgenticStore]) -> None:
    def writer(n: int) -> Callable[[], None]:
        def write() -> None:
            for j in range(5):
                handles[n % 2].put(("facts", "alice"), "mood", {"value": f"mood {n}-{j}"})

        return write

    run([writer(n) for n in range(8)])
    history = asyncio.run(handles[0].facts.ahistory("alice", "mood"))
    assert sorted(f.value for f in history) == sorted(
        f"mood {n}-{j}" for n in range(8) for j in range(5)
    )
    assert [f.current for f in history].count(True) == 1
    assert history[-1].current
    item = handles[1].get(("facts", "alice"), "mood")
    assert item is not None and item.value["value"] == history[-1].value


def test_racing_rule_puts_each_get_a_version(handles: list[AgenticStore]) -> None:
    def writer(n: int) -> Callable[[], None]:
        def write() -> None:
            for j in range(3):
                rules = [{"instruction": f"Rule {n}-{j}", "rationale": "because"}]
                handles[n % 2].put(("rules", "alice"), "latest", {"rules": rules})

        return write

    run([writer(n) for n in range(6)])
    versions = asyncio.run(handles[0].rules.aversions("alice"))
    assert [v.version for v in versions] == list(range(1, 20))  # the starting set, then 18
    written = {v.rules[0].instruction for v in versions[1:]}
    assert written == {f"Rule {n}-{j}" for n in range(6) for j in range(3)}


def test_racing_message_puts_get_distinct_turns(handles: list[AgenticStore]) -> None:
    def writer(n: int) -> Callable[[], None]:
        def write() -> None:
            for j in range(4):
                value = {"role": "user", "content": f"message {n}-{j}"}
                handles[n % 2].put(("messages", "alice", "t1"), f"m{n}-{j}", value)

        return write

    run([writer(n) for n in range(6)])
    logged = asyncio.run(handles[0].messages.alist("alice", thread_id="t1"))
    assert [m.turn for m in logged] == list(range(24))
    assert {m.content for m in logged} == {f"message {n}-{j}" for n in range(6) for j in range(4)}


def test_racing_generic_puts(handles: list[AgenticStore]) -> None:
    def writer(n: int) -> Callable[[], None]:
        def write() -> None:
            for j in range(10):
                handles[n % 2].put(("notes", "alice"), f"k{n}-{j}", {"n": n, "j": j})
                handles[n % 2].put(("notes", "alice"), "shared", {"writer": n})

        return write

    run([writer(n) for n in range(8)])
    items = handles[1].search(("notes", "alice"), limit=1000)
    assert len(items) == 81
    shared = handles[0].get(("notes", "alice"), "shared")
    assert shared is not None and shared.value["writer"] in range(8)


async def test_concurrent_async_puts(handles: list[AgenticStore]) -> None:
    store = handles[0]
    await asyncio.gather(
        *(store.aput(("notes", "bob"), f"k{n}", {"text": f"note {n}"}) for n in range(20)),
        *(store.aput(("facts", "bob"), f"subject {n}", {"value": f"value {n}"}) for n in range(10)),
    )
    assert len(await store.asearch(("notes", "bob"), limit=100)) == 20
    assert len(await store.asearch(("facts", "bob"), limit=100)) == 10

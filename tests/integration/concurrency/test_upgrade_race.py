"""Processes that first use an old knowledge base or message log at once upgrade it once.

A collection is upgraded through a staging copy (``agentic_memory.kinds._restage``). Two
processes doing that at once would each copy it, and one could drop what the other rebuilt
or crash on the collection the other dropped: ``MemoryStore.exclusive`` makes them take
turns, as the threads of one process already did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import DeterministicFakeEmbedding

from agentic_memory.kinds._restage import STAGING_PREFIX
from agentic_memory.kinds.knowledge import (
    KNOWLEDGE_PROPERTIES_V1,
    knowledge_collection,
    upgrade_knowledge_base,
)
from agentic_memory.kinds.messages import MESSAGES, MESSAGES_V1, aupgrade_message_log
from agentic_memory.kinds.recall_text import chunk_search_text
from agentic_memory.store import MemoryObject, make_id
from agentic_memory.store.embedded import EmbeddedStore

DIMS = 8
CHUNKS = 2000
"""Enough that one copy takes long enough for the others to start theirs without the lock."""


def _old_base(path: Path) -> None:
    store = EmbeddedStore(path, dims=DIMS)
    spec = dataclasses.replace(knowledge_collection("docs"), properties=KNOWLEDGE_PROPERTIES_V1)
    store.ensure_collection(spec)
    rng = np.random.default_rng(7)
    objects = [
        MemoryObject(
            f"00000000-0000-4000-8000-{i:012d}",
            {
                "text": f"Chunk {i} of the comet survey.",
                "title": "Old Notes",
                "source": "/papers/survey.pdf",
                "sha256": "0" * 64,
                "page_start": 1,
                "page_end": 1,
                "chunk_index": i,
                "char_start": 0,
                "char_end": 10,
                "revision": "rev",
            },
            rng.standard_normal(DIMS).tolist(),
        )
        for i in range(CHUNKS)
    ]
    store.upsert(spec.name, objects).raise_for_failures()
    store.close()


def _upgrade(path: str, start: Any, results: Any) -> None:
    store = EmbeddedStore(Path(path), dims=DIMS)
    start.wait(60)
    try:
        results.put(("ok", upgrade_knowledge_base(store, "docs")))
    except Exception as exc:  # reported to the test, which shows it
        results.put(("error", repr(exc)))
    finally:
        store.close()


def _race(target: Any, path: Path) -> list[tuple[str, Any]]:
    """Run ``target`` in 3 processes started together; return what each reported (all ok)."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(3)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(str(path), start, results)) for _ in range(3)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    return outcomes


def test_processes_upgrading_one_old_base_at_once_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _old_base(path)
    outcomes = _race(_upgrade, path)
    # Exactly one did the work; the others found the collection current.
    assert sorted(done for _, done in outcomes) == [False, False, True]
    store = EmbeddedStore(path, dims=DIMS)
    try:
        assert not any(n.startswith(STAGING_PREFIX) for n in store.collections())
        chunks = list(store.iterate(knowledge_collection("docs").name))
        assert len(chunks) == CHUNKS
        assert all(
            c.properties["search_text"]
            == chunk_search_text(c.properties["text"], title="Old Notes")
            for c in chunks
        )
    finally:
        store.close()


def _hold(path: str, entered: Any, release: Any) -> None:
    store = EmbeddedStore(Path(path), dims=DIMS)
    with store.exclusive("upgrade", "Knowledge_Docs"):
        entered.set()
        release.wait(60)
    store.close()


def test_an_exclusive_block_waits_for_another_process_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "store"
    EmbeddedStore(path, dims=DIMS).close()
    ctx = multiprocessing.get_context("spawn")
    entered, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), entered, release))
    holder.start()
    assert entered.wait(60)
    store = EmbeddedStore(path, dims=DIMS)
    inside = threading.Event()

    def enter() -> None:
        with store.exclusive("upgrade", "Knowledge_Docs"):
            inside.set()

    waiter = threading.Thread(target=enter)
    waiter.start()
    try:
        # Without the lock the thread is inside at once; with it, not until the release.
        assert not inside.wait(1.0)
        release.set()
        assert inside.wait(60)
    finally:
        release.set()
        waiter.join(60)
        store.close()
        holder.join(60)
    assert holder.exitcode == 0


MESSAGES_PER_USER = 400


def _old_message_log(path: Path) -> None:
    store = EmbeddedStore(path, dims=DIMS)
    store.ensure_collection(MESSAGES_V1)
    rng = np.random.default_rng(11)
    for user in ("alice", "bob"):
        store.upsert(
            MESSAGES_V1.name,
            [
                MemoryObject(
                    make_id("msg", user, "t", f"#{turn}"),
                    {
                        "content": f"turn {turn} about comets",
                        "role": "human" if turn % 2 == 0 else "ai",
                        "thread_id": "t",
                        "turn": turn,
                        "created_at": "2026-01-01T00:00:00+00:00",
                    },
                    rng.standard_normal(DIMS).tolist(),
                )
                for turn in range(MESSAGES_PER_USER)
            ],
            user=user,
        ).raise_for_failures()
    store.close()


def _upgrade_log(path: str, start: Any, results: Any) -> None:
    store = EmbeddedStore(Path(path), dims=DIMS)
    start.wait(60)
    try:
        done = asyncio.run(aupgrade_message_log(store, DeterministicFakeEmbedding(size=DIMS)))
        results.put(("ok", done))
    except Exception as exc:  # reported to the test, which shows it
        results.put(("error", repr(exc)))
    finally:
        store.close()


def test_processes_upgrading_one_old_message_log_at_once_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _old_message_log(path)
    outcomes = _race(_upgrade_log, path)
    assert sorted(done for _, done in outcomes) == [False, False, True]
    store = EmbeddedStore(path, dims=DIMS)
    try:
        assert sorted(store.collections()) == [MESSAGES.name]
        for user in ("alice", "bob"):
            assert store.count(MESSAGES.name, user=user) == MESSAGES_PER_USER
    finally:
        store.close()

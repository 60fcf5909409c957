"""Writers for the concurrency stress tests: each runs in a thread or in a spawned process.

Every worker opens its own store handle (as a separate program would), performs its share of
writes and returns what each call reported, so the test can check every acknowledged write.
Workers are plain module-level functions so ``multiprocessing`` can start them by name.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.store import MemoryStore
from agentic_memory.store.embedded import EmbeddedStore

DIMS = 8


class HashEmbeddings(Embeddings):
    """Deterministic 8-d vectors from a hash: no model weights, identical in every process."""

    dims = DIMS

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            out.append([(b - 127.5) / 127.5 for b in digest[:DIMS]])
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


Opener = Callable[[], MemoryStore]


def embedded_opener(path: str) -> Opener:
    return lambda: EmbeddedStore(Path(path), dims=DIMS)


def fact_value(worker: str, i: int) -> str:
    return f"value {worker} {i}"


def rule_text(worker: str, i: int) -> list[dict[str, str]]:
    return [{"instruction": f"Rule of {worker} number {i}", "rationale": "stress"}]


def message_text(worker: str, i: int) -> str:
    return f"message {worker} {i}"


# -- one writer -------------------------------------------------------------------------------


def write_facts(store: MemoryStore, worker: str, n: int, user: str, subject: str) -> list[str]:
    """Give ``subject`` n new values; return the ids of the facts each call reported."""
    facts = FactStore(store, HashEmbeddings())
    ids: list[str] = []
    for i in range(n):
        changes = asyncio.run(
            facts.aremember(user, [{"subject": subject, "value": fact_value(worker, i)}])
        )
        ids += [c.fact.id for c in changes]
    return ids


def write_rules(store: MemoryStore, worker: str, n: int, scope: str) -> list[int]:
    """Propose n distinct rule sets; return the version each call said it created."""
    book = RuleBook(store, HashEmbeddings())
    created: list[int] = []
    for i in range(n):
        version = asyncio.run(book.apropose(scope, rule_text(worker, i), note=f"{worker}/{i}"))
        if version is not None:
            created.append(version.version)
    return created


def write_messages(store: MemoryStore, worker: str, n: int, user: str, thread: str) -> list[str]:
    """Log n messages without ids to one thread; return the ids each call reported."""
    log = MessageLog(store, HashEmbeddings())
    ids: list[str] = []
    for i in range(n):
        ids += asyncio.run(
            log.aremember(user, thread, [{"role": "user", "content": message_text(worker, i)}])
        )
    return ids


WRITERS: dict[str, Callable[..., list[Any]]] = {
    "facts": write_facts,
    "rules": write_rules,
    "messages": write_messages,
}


def run_threads(
    open_store: Opener,
    kind: str,
    prefix: str,
    threads: int,
    n: int,
    *args: Any,
    shared: MemoryStore | None = None,
) -> list[Any]:
    """Run ``threads`` writers of ``kind`` at once, each with its own store handle.

    With ``shared``, every thread uses that one handle instead. They start together (a
    barrier), so their first reads race too.
    """
    barrier = threading.Barrier(threads)
    writer = WRITERS[kind]

    def one(t: int) -> list[Any]:
        store = shared or open_store()
        try:
            barrier.wait()
            return writer(store, f"{prefix}t{t}", n, *args)
        finally:
            if shared is None:
                store.close()

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, range(threads)))
    return [x for r in results for x in r]


def process_main(
    start: Any, path: str, kind: str, prefix: str, threads: int, n: int, *args: Any
) -> list[Any]:
    """Entry point of a spawned writer process on the embedded store in ``path``.

    ``start`` is a barrier shared by the processes, so they begin writing together.
    """
    start.wait()
    return run_threads(embedded_opener(path), kind, prefix, threads, n, *args)


# -- asyncio ----------------------------------------------------------------------------------


async def async_writers(store: MemoryStore, tasks: int, n: int) -> dict[str, list[Any]]:
    """Facts, rules and messages from ``tasks`` asyncio tasks sharing one store handle."""
    emb = HashEmbeddings()
    facts, book, log = FactStore(store, emb), RuleBook(store, emb), MessageLog(store, emb)

    async def one(t: int) -> tuple[list[str], list[int], list[str]]:
        fids: list[str] = []
        versions: list[int] = []
        mids: list[str] = []
        for i in range(n):
            w = f"a{t}"
            changes = await facts.aremember(
                "alice", [{"subject": "city", "value": fact_value(w, i)}]
            )
            fids += [c.fact.id for c in changes]
            created = await book.apropose("alice", rule_text(w, i))
            if created is not None:
                versions.append(created.version)
            mids += await log.aremember(
                "alice", "t", [{"role": "user", "content": message_text(w, i)}]
            )
        return fids, versions, mids

    results = await asyncio.gather(*(one(t) for t in range(tasks)))
    return {
        "facts": [x for r in results for x in r[0]],
        "rules": [x for r in results for x in r[1]],
        "messages": [x for r in results for x in r[2]],
    }


# -- importance against re-logging ----------------------------------------------------------


def turn_key(i: int) -> str:
    return f"turn-{i}"


class SlowHashEmbeddings(HashEmbeddings):
    """``HashEmbeddings`` taking as long as a small real model: a write's read comes earlier."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        time.sleep(0.003)
        return super().embed_documents(texts)


def relog_turns(
    store: MemoryStore, user: str, thread: str, turns: list[int], step: Any = None
) -> int:
    """Log each turn again under its own message id with edited text; return how many.

    With ``step`` (a barrier shared with a marker), both start each turn together.
    """
    log = MessageLog(store, SlowHashEmbeddings())
    for i in turns:
        if step is not None:
            step.wait()
        asyncio.run(
            log.aremember(
                user, thread, [{"role": "user", "content": f"edited {i}", "id": turn_key(i)}]
            )
        )
    return len(turns)


def mark_turns(
    store: MemoryStore, user: str, thread: str, turns: list[int], step: Any = None
) -> int:
    """Mark each turn important, one call each; return how many marks were acknowledged."""
    log = MessageLog(store, HashEmbeddings())
    marked = 0
    for i in turns:
        if step is not None:
            step.wait()
        # Just after the re-log of the same turn has read it.
        time.sleep(0.001)
        marked += len(
            asyncio.run(
                log.amark_important(user, [MessageLog.message_id(user, thread, turn_key(i))])
            )
        )
    return marked


RACERS: dict[str, Callable[..., int]] = {"relog": relog_turns, "mark": mark_turns}


def race_main(step: Any, path: str, role: str, user: str, thread: str, turns: list[int]) -> int:
    """Entry point of a spawned racer process: re-log or mark ``turns`` in step with the other."""
    store = EmbeddedStore(Path(path), dims=DIMS)
    try:
        return RACERS[role](store, user, thread, turns, step)
    finally:
        store.close()

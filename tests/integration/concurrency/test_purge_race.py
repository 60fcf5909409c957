"""Processes that log turns and purge one user's log at once lose no acknowledged turn.

Two writer processes log turns into the threads of one user, and two purger processes
purge the log to a cap of 100 all the time, one of them slow (a delay between what a purge
read and its delete). Each writer cycles through short conversations (threads of 5 turns)
so that a thread comes back just after the purges took it whole: its new turns follow
purged ones, and a slow purge may still hold the old ones it chose. A
purge must delete only what it read, never a turn logged after; a number is never given
twice; the log never falls below its cap; and in the end the newest turns are all there.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.store.embedded import EmbeddedStore
from tests.integration.concurrency.workers import DIMS, HashEmbeddings

CAP = 100
WRITERS = 2
VISIT = 5
"""Turns a writer logs into a thread at a time, as a short conversation."""
THREADS = CAP // VISIT + 2
"""A thread comes back (its writer cycles through them) just after the purges took it."""
WRITES = THREADS * VISIT * 3
SLOW = 0.2
"""Seconds at most between a slow purge's read and its delete."""
WRITER_POLICY = RetentionPolicy(message_days=None, max_messages=CAP, purge_interval_minutes=None)
POLICY = RetentionPolicy(message_days=None, max_messages=CAP, purge_interval_minutes=0)


def _writer(path: str, worker: int, start: Any, results: Any) -> None:
    store = EmbeddedStore(Path(path), dims=DIMS)
    log = MessageLog(store, HashEmbeddings(), retention=WRITER_POLICY)
    acknowledged: list[tuple[str, str]] = []

    async def run() -> None:
        for i in range(WRITES):
            thread = f"w{worker}-t{(i // VISIT) % THREADS}"
            stamp = datetime.now(UTC)
            # No message id: a turn is named by its number ("#<turn>"), so a number given
            # twice shows as an id acknowledged twice.
            ids = await log.aremember(
                "alice", thread, [{"role": "user", "content": f"w{worker} {i}"}], now=stamp
            )
            acknowledged.append((ids[0], stamp.isoformat()))

    start.wait(60)
    try:
        asyncio.run(run())
        results.put(("ok", acknowledged))
    except Exception as exc:  # reported to the test, which shows it
        results.put(("error", repr(exc)))
    finally:
        store.close()


def _purger(path: str, slow: bool, start: Any, done: Any, results: Any) -> None:
    store = EmbeddedStore(Path(path), dims=DIMS)
    if slow:
        # A slow process (a loaded machine, a slow disk): time passes between what a
        # purge read and its delete, while the others purge and write.
        real = store.delete_where
        rng = random.Random(7)

        def delete_late(collection: str, where: Any, *, user: str | None = None) -> int:
            time.sleep(rng.uniform(0, SLOW))
            return real(collection, where, user=user)

        store.delete_where = delete_late  # type: ignore[method-assign]
    log = MessageLog(store, HashEmbeddings(), retention=POLICY)
    counts: list[int] = []

    async def run() -> None:
        while not done.is_set():
            await log.apurge("alice")
            counts.append(await store.acount(MESSAGES.name, user="alice"))

    start.wait(60)
    try:
        asyncio.run(run())
        results.put(("ok", counts))
    except Exception as exc:  # reported to the test, which shows it
        results.put(("error", repr(exc)))
    finally:
        store.close()


def _seed(path: Path) -> None:
    """The cap's worth of old turns, so the log is at its cap from the start."""
    with EmbeddedStore(path, dims=DIMS) as store:
        log = MessageLog(store, HashEmbeddings(), retention=POLICY)
        old = datetime.now(UTC) - timedelta(days=30)
        for i in range(CAP):
            asyncio.run(
                log.aremember(
                    "alice",
                    "seed",
                    [{"role": "user", "content": f"seed {i}"}],
                    now=old + timedelta(seconds=i),
                )
            )


@pytest.mark.timeout(900)
def test_processes_logging_and_purging_at_once_lose_no_acknowledged_turn(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _seed(path)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS + 2)
    done = ctx.Event()
    written, purged = ctx.Queue(), ctx.Queue()
    writers = [
        ctx.Process(target=_writer, args=(str(path), w, start, written)) for w in range(WRITERS)
    ]
    purgers = [
        ctx.Process(target=_purger, args=(str(path), slow, start, done, purged))
        for slow in (False, True)
    ]
    for p in writers + purgers:
        p.start()
    outcomes = [written.get(timeout=600) for _ in writers]
    done.set()
    sweeps = [purged.get(timeout=600) for _ in purgers]
    for p in writers + purgers:
        p.join(60)
        assert p.exitcode == 0
    assert [kind for kind, _ in outcomes + sweeps] == ["ok"] * (WRITERS + 2), outcomes + sweeps
    acknowledged = [a for _, acks in outcomes for a in acks]
    counts = [c for _, cs in sweeps for c in cs]

    assert len(acknowledged) == WRITERS * WRITES
    with EmbeddedStore(path, dims=DIMS) as store:
        log = MessageLog(store, HashEmbeddings(), retention=POLICY)
        report = asyncio.run(log.apurge("alice"))
        stored = {o.id for o in store.iterate(MESSAGES.name, user="alice")}
    # Every acknowledged turn newer than the cap's oldest survivor is there.
    newest = sorted(acknowledged, key=lambda a: a[1], reverse=True)
    boundary = newest[CAP - 1][1]
    missing = [oid for oid, stamp in newest if stamp > boundary and oid not in stored]
    reused = [oid for oid, n in Counter(oid for oid, _ in acknowledged).items() if n > 1]
    below = [c for c in counts if c < CAP]
    assert (len(missing), len(reused), len(below)) == (0, 0, 0), (
        f"{len(missing)} of the {CAP} newest acknowledged turns are gone; {len(reused)} turn "
        f"numbers were given twice; the log fell below its cap {len(below)} times "
        f"(lowest {min(counts)})"
    )
    assert report.remaining == len(stored) == CAP

"""A turn marked important while another writer logs it again with edited text keeps both.

Both writers read the turn, then write it whole: the re-log used to write back the mark it
had read (none), undoing an acknowledged mark about half the time, and the mark could write
back the old text. Each now decides its change from the turn as stored at the moment of the
write (``MemoryStore.update``), so every acknowledged mark and every edit survives. Exact
counts, with threads of one process and with processes.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentic_memory.kinds.messages import MessageLog
from agentic_memory.store.embedded import EmbeddedStore
from tests.integration.concurrency import workers
from tests.integration.concurrency.workers import (
    DIMS,
    HashEmbeddings,
    mark_turns,
    relog_turns,
    turn_key,
)

TURNS = 200
USER, THREAD = "alice", "t"


def _logged(path: Path) -> None:
    with EmbeddedStore(path, dims=DIMS) as store:
        log = MessageLog(store, HashEmbeddings())
        asyncio.run(
            log.aremember(
                USER,
                THREAD,
                [
                    {"role": "user", "content": f"original {i}", "id": turn_key(i)}
                    for i in range(TURNS)
                ],
            )
        )


def _check(path: Path, acknowledged: int) -> None:
    assert acknowledged == TURNS
    with EmbeddedStore(path, dims=DIMS) as store:
        logged = asyncio.run(
            MessageLog(store, HashEmbeddings()).alist(USER, thread_id=THREAD, limit=1000)
        )
    assert len(logged) == TURNS
    assert [m.turn for m in logged] == list(range(TURNS))
    lost = [m.turn for m in logged if not m.important]
    assert lost == [], f"{len(lost)} of {TURNS} acknowledged marks were undone"
    assert sum(m.important_by == "user" for m in logged) == TURNS
    stale = [m.turn for m in logged if m.content != f"edited {m.turn}"]
    assert stale == [], f"{len(stale)} of {TURNS} edits were undone"


def test_marks_and_edits_racing_in_threads_all_survive(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _logged(path)
    # Two pairs, each a re-logger and a marker taking the same turns in step.
    halves = [list(range(0, TURNS, 2)), list(range(1, TURNS, 2))]
    steps = [threading.Barrier(2, timeout=60) for _ in halves]

    def run(job: tuple[str, int]) -> int:
        role, pair = job
        racer = relog_turns if role == "relog" else mark_turns
        with EmbeddedStore(path, dims=DIMS) as store:
            return racer(store, USER, THREAD, halves[pair], steps[pair])

    jobs = [(role, pair) for pair in range(2) for role in ("relog", "mark")]
    with ThreadPoolExecutor(len(jobs)) as pool:
        done = list(pool.map(run, jobs))
    _check(path, sum(n for (role, _), n in zip(jobs, done, strict=True) if role == "mark"))


def test_marks_and_edits_racing_in_processes_all_survive(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _logged(path)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        step = manager.Barrier(2, timeout=60)
        done = pool.starmap(
            workers.race_main,
            [
                (step, str(path), role, USER, THREAD, list(range(TURNS)))
                for role in ("relog", "mark")
            ],
        )
    assert done == [TURNS, TURNS]
    _check(path, done[1])


def test_episode_marks_and_new_reflections_racing_all_survive(tmp_path: Path) -> None:
    """An episode reflected on again while the user marks it keeps the mark and the text."""
    from dataclasses import dataclass

    from agentic_memory.kinds.episodes import EpisodicMemory
    from tests.integration.concurrency.workers import SlowHashEmbeddings

    @dataclass
    class Reflected:
        context_tags: list[str]
        conversation_summary: str
        what_worked: str = "w"
        what_to_avoid: str = "a"
        importance: float = 0.5

    episodes_n = 60
    path = tmp_path / "store"
    with EmbeddedStore(path, dims=DIMS) as store:
        memory = EpisodicMemory(store, HashEmbeddings())
        ids = [
            asyncio.run(
                memory.astore(USER, f"t{i}", Reflected([], f"first {i}"), "c", conversation=1)
            )
            for i in range(episodes_n)
        ]
    step = threading.Barrier(2, timeout=60)

    def reflect_again() -> None:
        with EmbeddedStore(path, dims=DIMS) as store:
            memory = EpisodicMemory(store, SlowHashEmbeddings())
            for i in range(episodes_n):
                step.wait()
                asyncio.run(
                    memory.astore(USER, f"t{i}", Reflected([], f"again {i}"), "c", conversation=1)
                )

    def mark() -> None:
        with EmbeddedStore(path, dims=DIMS) as store:
            memory = EpisodicMemory(store, HashEmbeddings())
            for oid in ids:
                step.wait()
                time.sleep(0.001)
                assert asyncio.run(memory.amark_important(USER, [oid]))[0].important

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(reflect_again), pool.submit(mark)]:
            future.result()
    with EmbeddedStore(path, dims=DIMS) as store:
        listed = asyncio.run(EpisodicMemory(store, HashEmbeddings()).alist(USER))
        stored = {e.thread_id: e for e in listed}
    assert sum(e.important for e in stored.values()) == episodes_n
    assert [stored[f"t{i}"].conversation_summary for i in range(episodes_n)] == [
        f"again {i}" for i in range(episodes_n)
    ]

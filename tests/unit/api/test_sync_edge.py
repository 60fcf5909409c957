"""The sync edge: blocking calls for scripts, refused inside a running event loop.

``Memory``'s blocking methods and ``AgenticStore``'s sync ones each run their coroutine on an
event loop of their own. Called from a thread whose loop is running (an ``async def``, a
notebook cell, a graph node) they would stop that loop until done, so they raise
``SyncCallInEventLoopError`` naming what to await, and do nothing; from a plain thread (a
script, a sync LangGraph node run in a worker thread) they work.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.api import Memory, SyncCallInEventLoopError
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.sync_edge import blocking_function, run_sync
from agentic_memory.transfer import aimport_memories, import_memories
from tests.conftest import allow_blocking

TURN = [{"role": "user", "content": "I keep bees", "id": "b1"}]

MEMORY_CALLS: dict[str, Callable[[Memory], Any]] = {
    "remember": lambda m: m.remember("alice", "t", TURN),
    "recall": lambda m: m.recall("alice", "bees"),
    "list": lambda m: m.list("alice"),
    "threads": lambda m: m.threads("alice"),
    "forget": lambda m: m.forget("alice", thread_id="t"),
    "mark_important": lambda m: m.mark_important("alice", ["x"]),
    "purge": lambda m: m.purge("alice"),
    "users_with_history": lambda m: m.users_with_history(),
    "retention_status": lambda m: m.retention_status("alice"),
}

STORE_CALLS: dict[str, Callable[[AgenticStore], Any]] = {
    "put": lambda s: s.put(("notes", "alice"), "n", {"text": "bees"}),
    "get": lambda s: s.get(("facts", "alice"), "hobby"),
    "search": lambda s: s.search(("messages", "alice"), query="bees"),
    "delete": lambda s: s.delete(("notes", "alice"), "n"),
    "list_namespaces": lambda s: s.list_namespaces(),
    "batch": lambda s: s.batch([]),
    "forget_user": lambda s: s.forget_user("alice"),
    "forget_namespace": lambda s: s.forget_namespace(("notes",)),
    "sweep_ttl": lambda s: s.sweep_ttl(),
    "sweep_retention": lambda s: s.sweep_retention(),
}


@pytest.fixture
def agentic(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[AgenticStore]:
    store = AgenticStore(
        EmbeddedStore(tmp_path / "store", dims=embeddings.dims), embeddings, close_store=True
    )
    yield store
    store.close()


@pytest.mark.parametrize("name", sorted(MEMORY_CALLS))
async def test_a_blocking_memory_call_in_a_running_loop_is_refused(mem: Memory, name: str) -> None:
    awaited = "aretention" if name == "retention_status" else f"a{name}"
    with pytest.raises(SyncCallInEventLoopError, match=rf"use await mem\.{awaited}\(") as caught:
        MEMORY_CALLS[name](mem)
    assert "running event loop" in str(caught.value)
    assert MESSAGES.name not in await mem.store.acollections()  # nothing ran


@pytest.mark.parametrize("name", sorted(STORE_CALLS))
async def test_a_sync_store_call_in_a_running_loop_is_refused(
    agentic: AgenticStore, name: str
) -> None:
    with pytest.raises(SyncCallInEventLoopError, match=r"await store\.a"):
        STORE_CALLS[name](agentic)
    assert await agentic.memory_store.acollections() == []  # nothing ran


async def test_the_blocking_calls_work_from_a_worker_thread_of_a_running_loop(
    mem: Memory, agentic: AgenticStore
) -> None:
    # A sync LangGraph node runs in a worker thread: no loop of its own, so the sync edge runs.
    ids = await asyncio.to_thread(mem.remember, "alice", "t", TURN)
    assert [h.id for h in await asyncio.to_thread(mem.recall, "alice", "bees")] == ids
    await asyncio.to_thread(STORE_CALLS["put"], agentic)
    item = await agentic.aget(("notes", "alice"), "n")
    assert item is not None and item.value == {"text": "bees"}


def test_the_blocking_calls_work_in_a_script_one_loop_per_call(mem: Memory) -> None:
    for n in range(3):  # each call on a loop of its own, closed after it: nothing is left bound
        mem.remember("alice", f"t{n}", [{"role": "user", "content": f"bees {n}"}])
    assert mem.threads("alice") == ["t0", "t1", "t2"]
    assert len(mem.recall("alice", "bees", k=5)) == 3


def test_run_sync_closes_a_refused_coroutine() -> None:
    async def inner() -> int:
        return 1

    async def outer() -> None:
        coro = inner()
        with pytest.raises(SyncCallInEventLoopError):
            run_sync(coro, instead="await inner()")
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited"

    asyncio.run(outer())
    assert run_sync(inner(), instead="await inner()") == 1


@pytest.mark.parametrize("name", sorted(MEMORY_CALLS))
def test_each_blocking_method_has_the_signature_and_a_docstring_of_its_own(name: str) -> None:
    blocking = getattr(Memory, name)
    awaited = getattr(Memory, "aretention" if name == "retention_status" else f"a{name}")
    assert inspect.signature(blocking) == inspect.signature(awaited)
    doc = inspect.getdoc(blocking) or ""
    assert "blocking" in doc and "SyncCallInEventLoopError" in doc
    assert doc != inspect.getdoc(awaited)


def _forked_call(conn: Any) -> None:
    async def hop() -> str:
        return await asyncio.to_thread(lambda: "done in the child")

    conn.send(run_sync(hop(), instead="await hop()"))


def test_a_process_forked_after_blocking_calls_runs_blocking_calls() -> None:
    import multiprocessing

    async def hop() -> int:
        return await asyncio.to_thread(lambda: 1)

    assert run_sync(hop(), instead="await hop()") == 1  # before the fork, in the parent
    parent, child = multiprocessing.get_context("fork").Pipe()
    process = multiprocessing.get_context("fork").Process(target=_forked_call, args=(child,))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0, "the child could not run a blocking call"
    assert parent.recv() == "done in the child"


def test_a_blocking_call_runs_its_storage_work_in_the_calling_thread(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its loop serves that call only: handing each storage call to a worker thread would only
    # add a thread wake-up per call (what made the sync edge slower than sync code).
    import threading

    from agentic_memory.store.base import MemoryStore

    seen: list[int] = []
    for name in ("insert", "hybrid", "iterate"):
        real = getattr(MemoryStore, name)

        def spy(self: MemoryStore, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            seen.append(threading.get_ident())
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(MemoryStore, name, spy)
    mem.remember("alice", "t", TURN)
    assert mem.recall("alice", "bees")
    assert seen and set(seen) == {threading.get_ident()}


async def test_the_async_calls_still_run_their_storage_work_in_worker_threads(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from agentic_memory.store.base import MemoryStore

    seen: list[int] = []
    for name in ("insert", "hybrid", "iterate"):
        real = getattr(MemoryStore, name)

        def spy(self: MemoryStore, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            seen.append(threading.get_ident())
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(MemoryStore, name, spy)
    await mem.aremember("alice", "t", TURN)
    assert await mem.arecall("alice", "bees")
    assert seen and threading.get_ident() not in seen


def test_an_error_of_a_blocking_call_is_reported_as_itself(mem: Memory) -> None:
    from agentic_memory.store import InvalidInputError

    with pytest.raises(InvalidInputError, match="non-empty") as caught:
        mem.recall("alice", "")
    # Not "during handling of RuntimeError('no running event loop')": no chained context.
    assert caught.value.__context__ is None and caught.value.__cause__ is None


# -- storage jobs a notebook cell waits for: blocking_function(..., instead=None) -------------

_CHOSEN: contextvars.ContextVar[str] = contextvars.ContextVar("chosen", default="none")


async def astorage_job(n: int, *, fail: bool = False) -> tuple[int, str, int]:
    """A storage job: its result, the context it saw, and the thread it ran on."""
    if fail:
        raise ValueError(f"job {n} failed")
    return n, _CHOSEN.get(), await asyncio.to_thread(threading.get_ident)


storage_job = blocking_function(astorage_job)


def test_a_blocking_function_is_named_and_signed_like_its_coroutine() -> None:
    assert storage_job.__name__ == "storage_job"
    assert inspect.signature(storage_job) == inspect.signature(astorage_job)
    assert inspect.getdoc(import_memories) == inspect.getdoc(aimport_memories)
    assert (import_memories.__name__, import_memories.__module__) == (
        "import_memories",
        "agentic_memory.transfer.importing",
    )
    assert not inspect.iscoroutinefunction(import_memories)


def test_a_storage_job_in_a_script_runs_in_the_calling_thread() -> None:
    token = _CHOSEN.set("script")
    try:
        assert storage_job(1) == (1, "script", threading.get_ident())
    finally:
        _CHOSEN.reset(token)


@allow_blocking("a storage job called in a notebook cell blocks the cell until done, on purpose")
async def test_a_storage_job_in_a_running_loop_runs_beside_it_with_its_context() -> None:
    # A notebook cell: the job runs on a thread of its own while the cell waits, and sees
    # what the cell set (a context variable).
    token = _CHOSEN.set("cell")
    try:
        n, chosen, ident = storage_job(2)
    finally:
        _CHOSEN.reset(token)
    assert (n, chosen) == (2, "cell") and ident != threading.get_ident()
    with pytest.raises(ValueError, match="job 3 failed"):
        storage_job(3, fail=True)
    refused = blocking_function(astorage_job, instead="await astorage_job(...)")
    with pytest.raises(SyncCallInEventLoopError, match=r"await astorage_job\(\.\.\.\)"):
        refused(4)

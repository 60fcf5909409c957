"""The sync edge: where a blocking call enters the asynchronous core, and only there.

* **Storage engines are synchronous** where their drivers are (SQLite, Weaviate's sync
  client); :mod:`agentic_memory.store.threads` gives them their coroutine methods, which run
  the whole call in a worker thread.
* **Everything above is asynchronous**: the memory kinds, ``Memory``'s ``a…`` methods,
  ``AgenticStore.abatch``, forgetting, the graph's nodes. The outer edge (``Memory``'s sync
  methods, ``AgenticStore.batch``) runs one of those coroutines with :func:`run_sync`: on a
  new event loop in the calling thread, for the duration of the call, which runs the
  storage work in that thread too (the CLI uses ``asyncio.run``). There is no event loop of
  this package's own, and no sync code that waits on a loop.

A sync call from a thread whose event loop is running (a notebook cell, an ``async def``, a
LangGraph node) would block that loop for the whole call, so :func:`run_sync` refuses it with
:class:`SyncCallInEventLoopError`, naming the ``a…`` method to await instead.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["SyncCallInEventLoopError", "run_sync"]

R = TypeVar("R")


class SyncCallInEventLoopError(RuntimeError):
    """A blocking (sync) memory call was made from a thread whose event loop is running.

    It would stop that loop (every other task of a notebook or a server) until the call is
    done; await the ``a…`` method named in the message instead.
    """


def run_sync(coroutine: Coroutine[Any, Any, R], *, instead: str) -> R:
    """Run ``coroutine`` to completion on a new event loop in this thread; return its result.

    The sync edge of the async API. Each call gets its own loop, closed when the call
    returns, so no loop outlives it and nothing is bound to another thread; the storage
    work runs in the calling thread (see ``_CallerThread``).

    Args:
        coroutine: The call to run (it is closed unawaited when refused).
        instead: What to await in a running loop, for the message, e.g.
            ``"await mem.arecall(...)"``.

    Raises:
        SyncCallInEventLoopError: This thread is running an event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop here: the call may block this thread
    else:
        coroutine.close()
        raise SyncCallInEventLoopError(
            "a blocking memory call was made from a running event loop (a notebook cell, an "
            f"async function, a graph node), which it would stop until it is done: use "
            f"{instead} there"
        )
    # Leaner than asyncio.run (no SIGINT handler to install and restore per call).
    loop = asyncio.new_event_loop()
    caller = _CallerThread(on_work=loop.stop)
    loop.set_default_executor(caller)
    try:
        return _until_done(loop, caller, coroutine)
    finally:
        try:
            _until_done(loop, caller, loop.shutdown_asyncgens())
        finally:
            loop.close()


def _until_done(
    loop: asyncio.AbstractEventLoop, caller: _CallerThread, coroutine: Coroutine[Any, Any, R]
) -> R:
    """Run the loop until ``coroutine`` is done, and the work it hands over while stopped."""
    task = loop.create_task(coroutine)
    task.add_done_callback(lambda _: loop.stop())
    while True:
        loop.run_forever()
        caller.run_waiting()  # with the loop stopped: to this work, a plain thread
        if task.done():
            return task.result()


class _CallerThread(ThreadPoolExecutor):
    """The default executor of one sync call's loop: the work runs in the caller's thread.

    The loop serves that call and nothing else, so the storage work the call hands to a worker
    thread (``asyncio.to_thread``) runs right here, as the sync code before it did: a thread
    handoff per storage call made the sync edge 2.6 to 5 times slower on a generic item's put
    or search, and blocking keeps no one waiting but the caller, who chose to wait. A
    submission stops the loop and the work runs once it has stopped, so no running loop is
    set while it runs (to it, and to blockbuster, this is a plain thread).
    """

    def __init__(self, on_work: Callable[[], None]) -> None:
        super().__init__(max_workers=1)
        self._waiting: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._on_work = on_work

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        done: Future[R] = Future()
        self._waiting.append((done, lambda: fn(*args, **kwargs)))
        self._on_work()
        return done

    def run_waiting(self) -> None:
        """Run the submitted work in submission order, each result into its future."""
        while self._waiting:
            done, work = self._waiting.popleft()
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(work())
            except BaseException as exc:  # handed to the awaiting coroutine, as from a thread
                done.set_exception(exc)

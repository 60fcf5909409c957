"""The sync edge: where a blocking call enters the asynchronous core, and only there.

* **Storage engines are synchronous** where their drivers are (SQLite, Weaviate's sync
  client); :mod:`agentic_memory.store.threads` gives them their coroutine methods, which run
  the whole call in a worker thread.
* **Everything above is asynchronous**: the memory kinds, ``Memory``'s ``a…`` methods,
  ``AgenticStore.abatch``, forgetting, the graph's nodes. The outer edge (``Memory``'s sync
  methods, ``AgenticStore.batch``) runs one of those coroutines with :func:`run_sync`: on a
  new event loop in the calling thread, for the duration of the call, which runs the
  storage work in that thread too. There is no event loop of this package's own, and no
  sync code that waits on a loop. A whole interactive session (``amem chat``) is the one
  exception: :func:`run_session` gives it a loop of its own for its lifetime.

A sync call from a thread whose event loop is running (a notebook cell, an ``async def``, a
LangGraph node) would block that loop for the whole call, so :func:`run_sync` refuses it with
:class:`SyncCallInEventLoopError`, naming the ``a…`` method to await instead. Storage jobs
a notebook cell runs and waits for (importing an export file) say ``instead=None``: there they
run on a short-lived thread with a loop of its own while the caller waits, as a blocking call
does. :func:`blocking_function` makes such a blocking twin of a coroutine function, and
:class:`blocking` of a coroutine method (``remember = blocking(aremember)`` in a class body).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["SyncCallInEventLoopError", "blocking", "blocking_function", "run_session", "run_sync"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


class SyncCallInEventLoopError(RuntimeError):
    """A blocking (sync) memory call was made from a thread whose event loop is running.

    It would stop that loop (every other task of a notebook or a server) until the call is
    done; await the ``a…`` method named in the message instead.
    """


def run_sync(coroutine: Coroutine[Any, Any, R], *, instead: str | None) -> R:
    """Run ``coroutine`` to completion on a new event loop in this thread; return its result.

    The sync edge of the async API. Each call gets its own loop, closed when the call
    returns, so no loop outlives it and nothing is bound to another thread; the storage
    work runs in the calling thread (see ``_CallerThread``).

    Args:
        coroutine: The call to run (it is closed unawaited when refused).
        instead: What to await in a running loop, for the message, e.g.
            ``"await mem.arecall(...)"``; ``None`` for a storage job that runs from a
            running loop too: there it runs on a short-lived thread of its own (with this
            thread's context variables) while this thread waits, as a blocking call does.

    Raises:
        SyncCallInEventLoopError: This thread is running an event loop and ``instead`` is
            given.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop here: the call may block this thread
    else:
        return _beside_the_loop(coroutine, instead)
    # Outside the except block: an error of the call is not chained to "no running loop".
    return _run_here(coroutine)


def _beside_the_loop(coroutine: Coroutine[Any, Any, R], instead: str | None) -> R:
    """Run ``coroutine`` on a thread of its own while this thread's running loop waits.

    Only a storage job (``instead`` is ``None``) does; the others are refused.
    """
    if instead is None:
        context = contextvars.copy_context()  # the caller's context variables hold there too
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="amem-sync-edge") as beside:
            return beside.submit(context.run, _run_here, coroutine).result()
    coroutine.close()
    raise SyncCallInEventLoopError(
        "a blocking memory call was made from a running event loop (a notebook cell, an "
        f"async function, a graph node), which it would stop until it is done: use "
        f"{instead} there"
    )


def blocking_function(
    afunction: Callable[P, Coroutine[Any, Any, R]], *, instead: str | None = None
) -> Callable[P, R]:
    """Return the blocking twin of the coroutine function ``afunction``, run by :func:`run_sync`.

    The twin has ``afunction``'s signature and docstring and its name without the leading
    ``a`` (``aimport_memories`` -> ``import_memories``).

    Args:
        afunction: The coroutine function.
        instead: :func:`run_sync`'s ``instead``: what to await in a running loop, or
            ``None`` to run there on a thread of its own.
    """

    @functools.wraps(afunction)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> R:
        return run_sync(afunction(*args, **kwargs), instead=instead)

    name = afunction.__name__.removeprefix("a")
    blocking.__name__ = name
    blocking.__qualname__ = afunction.__qualname__.removesuffix(afunction.__name__) + name
    return blocking


class blocking(Generic[S, P, R]):
    """A method's blocking twin, run by :func:`run_sync`: ``remember = blocking(aremember)``.

    The twin has the coroutine method's signature; its docstring is the coroutine's, marked
    blocking. In a running event loop it raises :class:`SyncCallInEventLoopError` naming
    ``await <edge>.<amethod>(...)``, where ``<edge>`` is the owner's ``_edge_name`` (how the
    docs name an instance: ``mem``, ``store``).
    """

    def __init__(self, amethod: Callable[Concatenate[S, P], Coroutine[Any, Any, R]]) -> None:
        self.amethod = amethod
        self.__wrapped__ = amethod  # inspect.signature follows it
        self.awaited: str = amethod.__name__
        self.instead = ""

    def __set_name__(self, owner: type, name: str) -> None:
        edge = getattr(owner, "_edge_name", owner.__name__.lower())
        self.instead = f"await {edge}.{self.awaited}(...)"
        summary, _, rest = inspect.cleandoc(self.amethod.__doc__ or "").partition("\n")
        self.__doc__ = (
            f"{summary.rstrip('.')} (blocking :meth:`{self.awaited}`).{rest}\n\n"
            f"In a running event loop it raises ``SyncCallInEventLoopError``: use "
            f"``{self.instead}`` there."
        )

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> blocking[S, P, R]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(
        self, obj: S | None, owner: type | None = None
    ) -> blocking[S, P, R] | Callable[P, R]:
        if obj is None:
            return self
        amethod: Callable[P, Coroutine[Any, Any, R]] = getattr(obj, self.awaited)
        instead = self.instead

        @functools.wraps(amethod)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return run_sync(amethod(*args, **kwargs), instead=instead)

        call.__doc__ = self.__doc__
        return call

    def __call__(self, obj: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call it on the class: ``Memory.recall(mem, ...)``."""
        return run_sync(self.amethod(obj, *args, **kwargs), instead=self.instead)


def _run_here(coroutine: Coroutine[Any, Any, R]) -> R:
    """Run ``coroutine`` on a new event loop in this thread, which runs no loop."""
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


def run_session(coroutine: Coroutine[Any, Any, R]) -> R:
    """Run a whole interactive session (``amem chat``'s REPL) on a loop of its own.

    Not :func:`run_sync`: a session is the program, not one call of it. Its loop keeps a real
    worker pool (model streaming, the stdin reader) and asyncio's Ctrl-C handling, which the
    caller-thread executor of one call would change.
    """
    return asyncio.run(coroutine)


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

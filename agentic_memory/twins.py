"""The two crossings between sync and async code: one per direction, each at one layer.

* **Storage engines are synchronous** where their drivers are (SQLite, Weaviate's sync
  client). ``aname = in_thread(name)`` gives such a class the coroutine method that runs the
  *whole* call in a worker thread (argument checks and schema loading included), and
  ``in_thread_iterator`` does the same for a method returning an iterator (the call, then
  each chunk of items, in worker threads). A loop that serves anyone but one sync caller
  never runs storage code.
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
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Executor
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, TypeVarTuple, overload

__all__ = [
    "SyncCallInEventLoopError",
    "in_thread",
    "in_thread_function",
    "in_thread_iterator",
    "run_sync",
]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_CHUNK = 256


class SyncCallInEventLoopError(RuntimeError):
    """A blocking (sync) memory call was made from a thread whose event loop is running.

    It would stop that loop (every other task of a notebook or a server) until the call is
    done; await the ``a…`` method named in the message instead.
    """


def run_sync(coroutine: Coroutine[Any, Any, R], *, instead: str) -> R:
    """Run ``coroutine`` to completion on a new event loop in this thread; return its result.

    The sync edge of the async API. Each call gets its own loop, closed when the call
    returns, so no loop outlives it and nothing is bound to another thread; the storage
    work runs in the calling thread (see ``_EdgeLoop``).

    Args:
        coroutine: The call to run (it is closed unawaited when refused).
        instead: What to await in a running loop, for the message, e.g.
            ``"await mem.arecall(...)"``.

    Raises:
        SyncCallInEventLoopError: This thread is running an event loop.
    """
    if asyncio.events._get_running_loop() is None:
        # Leaner than asyncio.run (no SIGINT handler to install and restore per call).
        loop = _EdgeLoop()
        try:
            return loop.run_until_complete(coroutine)
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
    coroutine.close()
    raise SyncCallInEventLoopError(
        "a blocking memory call was made from a running event loop (a notebook cell, an "
        f"async function, a graph node), which it would stop until it is done: use {instead} "
        "there"
    )


class _EdgeLoop(asyncio.SelectorEventLoop):
    """The event loop of one sync call: it serves that call and nothing else.

    So the storage work the call hands to a worker thread (``asyncio.to_thread``) runs right
    here, in the caller's thread, as the sync code before it did: a thread handoff per
    storage call made the sync edge 2.6 to 5 times slower on a generic item's put or search,
    and blocking this loop keeps no one waiting but the caller, who chose to wait. The work
    runs with no running loop set, so to it (and to blockbuster) this is a plain thread.
    """

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        if executor is not None:
            return super().run_in_executor(executor, func, *args)
        self._check_closed()  # type: ignore[attr-defined]
        done: asyncio.Future[T] = self.create_future()
        asyncio.events._set_running_loop(None)
        try:
            done.set_result(func(*args))
        except Exception as exc:  # handed to the awaiting coroutine, as from a thread
            done.set_exception(exc)
        finally:
            asyncio.events._set_running_loop(self)
        return done


class in_thread(Generic[S, P, R]):
    """``aname = in_thread(name)``: the coroutine method of a synchronous storage method.

    The whole call runs in a worker thread; the coroutine shows the method's signature and
    docstring (``inspect.signature``, ``help``).
    """

    def __init__(self, method: Callable[Concatenate[S, P], R]) -> None:
        self._method = method
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> in_thread[S, P, R]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, obj: S | None, owner: type | None = None
    ) -> in_thread[S, P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if obj is None:
            return self
        method = self._method
        # Looked up on the object, so a subclass that overrides the method is honoured.
        bound: Callable[P, R] = getattr(obj, method.__name__)

        async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
            return await asyncio.to_thread(bound, *args, **kwargs)

        _describe(twin, bound, self._name or f"a{method.__name__}", "runs in a worker thread")
        return twin


class in_thread_iterator(Generic[S, P, T]):
    """``aname = in_thread_iterator(name)``: the async iterator of a method returning one.

    The method itself (its argument checks and schema loading, which may read the store)
    runs in a worker thread when iteration starts, and its items are pulled in worker
    threads a chunk at a time; so bad arguments raise at the first ``__anext__``.
    """

    def __init__(self, method: Callable[Concatenate[S, P], Iterator[T]]) -> None:
        self._method = method
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> in_thread_iterator[S, P, T]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Callable[P, AsyncIterator[T]]: ...

    def __get__(
        self, obj: S | None, owner: type | None = None
    ) -> in_thread_iterator[S, P, T] | Callable[P, AsyncIterator[T]]:
        if obj is None:
            return self
        bound: Callable[P, Iterator[T]] = getattr(obj, self._method.__name__)

        def twin(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            return _pull(lambda: bound(*args, **kwargs))

        name = self._name or f"a{self._method.__name__}"
        _describe(twin, bound, name, "the call and each page run in worker threads")
        return twin


async def _pull(start: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    items = await asyncio.to_thread(start)
    while chunk := await asyncio.to_thread(lambda: list(itertools.islice(items, _CHUNK))):
        for item in chunk:
            yield item


def in_thread_function(function: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Return the coroutine function of a synchronous storage function (run in a thread)."""

    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(function, *args, **kwargs)

    _describe(twin, function, f"a{function.__name__}", "runs in a worker thread")
    return twin


def _describe(twin: Callable[..., Any], wrapped: Callable[..., Any], name: str, how: str) -> None:
    """Give ``twin`` the name, signature and docstring of the call it runs."""
    twin.__name__ = twin.__qualname__ = name
    twin.__wrapped__ = wrapped  # type: ignore[attr-defined]  # inspect.signature follows it
    doc = wrapped.__doc__ or ""
    twin.__doc__ = f"Async :meth:`{wrapped.__name__}` ({how}).\n\n{doc}".rstrip()

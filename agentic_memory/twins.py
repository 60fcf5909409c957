"""One implementation, both calling styles: sync and async twins generated, never copied.

Two descriptors make the twin of a method from the method itself:

* ``aname = in_thread(name)`` on a class whose work is synchronous (the storage engines:
  SQLite, Weaviate's sync client) gives a coroutine method that runs it in a worker thread,
  so an event loop never blocks;
* ``name = blocking(aname)`` on a class whose work is asynchronous (the memory kinds)
  gives a plain method that runs the coroutine to completion on a private event loop,
  so scripts, notebooks and the CLI call it like any function.

Both keep the signature and the return type (``ParamSpec``), so a twin is one typed line
in the class body. A blocking twin called from inside that private loop (a coroutine
calling a sync twin) would wait on itself: that raises ``RuntimeError`` instead.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["blocking", "in_thread", "in_thread_function", "in_thread_iterator", "run_blocking"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")

_CHUNK = 256


class in_thread(Generic[S, P, R]):
    """``aname = in_thread(name)``: the coroutine twin of a synchronous method."""

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

        twin.__name__ = self._name or f"a{method.__name__}"
        twin.__doc__ = f"Async :meth:`{method.__name__}` (runs in a worker thread)."
        return twin


class in_thread_iterator(Generic[S, P, T]):
    """``aname = in_thread_iterator(name)``: the async-iterator twin of a method returning an iterator.

    The method is called at once (so its arguments are checked at once); its items are then
    pulled in worker threads, a chunk at a time, so a page read never blocks the event loop.
    """

    def __init__(self, method: Callable[Concatenate[S, P], Iterator[T]]) -> None:
        self._method = method

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
            return _pull(bound(*args, **kwargs))

        twin.__doc__ = f"Async :meth:`{self._method.__name__}` (pages read in worker threads)."
        return twin


async def _pull(items: Iterator[T]) -> AsyncIterator[T]:
    while chunk := await asyncio.to_thread(lambda: list(itertools.islice(items, _CHUNK))):
        for item in chunk:
            yield item


def in_thread_function(function: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Return the coroutine twin of a plain function, run in a worker thread."""

    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(function, *args, **kwargs)

    twin.__name__ = f"a{function.__name__}"
    twin.__doc__ = f"Async :func:`{function.__name__}` (runs in a worker thread)."
    return twin


class blocking(Generic[S, P, R]):
    """``name = blocking(aname)``: the synchronous twin of a coroutine method."""

    def __init__(self, method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]]) -> None:
        self._method = method
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> blocking[S, P, R]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Callable[P, R]: ...

    def __get__(
        self, obj: S | None, owner: type | None = None
    ) -> blocking[S, P, R] | Callable[P, R]:
        if obj is None:
            return self
        method = self._method
        bound: Callable[P, Coroutine[Any, Any, R]] = getattr(obj, method.__name__)

        def twin(*args: P.args, **kwargs: P.kwargs) -> R:
            return run_blocking(bound(*args, **kwargs))

        twin.__name__ = self._name or method.__name__.removeprefix("a")
        twin.__doc__ = f"Blocking :meth:`{method.__name__}` (for scripts, notebooks, the CLI)."
        return twin


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_THREAD: threading.Thread | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    """Return the private loop of blocking twins, started on first use (a daemon thread).

    One loop for every caller, rather than ``asyncio.run`` per call: it works where a loop
    is already running in the caller's thread (Jupyter), and worker threads are reused.
    """
    global _LOOP, _LOOP_THREAD
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agentic-memory-blocking", daemon=True
            )
            thread.start()
            _LOOP, _LOOP_THREAD = loop, thread
        return _LOOP


def run_blocking(coroutine: Coroutine[Any, Any, R]) -> R:
    """Run a coroutine to completion on the private loop and return its result.

    Raises:
        RuntimeError: called from a coroutine running on that same loop (it would wait on
            itself forever): await the async method there instead.
    """
    loop = _loop()
    if threading.current_thread() is _LOOP_THREAD:
        coroutine.close()
        raise RuntimeError(
            "a blocking memory call was made from inside the memory's own event loop: "
            "await the async method (the one whose name starts with 'a') instead"
        )
    future: Future[R] = asyncio.run_coroutine_threadsafe(coroutine, loop)
    return future.result()

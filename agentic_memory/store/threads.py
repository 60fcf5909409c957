"""The coroutine methods of synchronous storage code, each run whole in a worker thread.

Storage engines are synchronous where their drivers are (SQLite, Weaviate's sync client).
``aname = in_thread(name)`` gives such a class the coroutine method that runs the *whole* call
in a worker thread (argument checks and schema loading included), and ``in_thread_iterator``
does the same for a method returning an iterator (the call, then each chunk of items, in
worker threads). A loop that serves anyone but one sync caller never runs storage code; the
other crossing, a blocking call into the async core, is :mod:`agentic_memory.sync_edge`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["in_thread", "in_thread_iterator"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")

_CHUNK = 256


class _Twin(Generic[S, P, R]):
    """A descriptor that makes, per object, the async twin of a method (``make_twin``)."""

    how = ""
    """What runs in worker threads, for the twin's docstring."""

    def __init__(self, method: Callable[Concatenate[S, P], R]) -> None:
        self._method = method
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def _twin(self, obj: S) -> Callable[..., Any]:
        # Looked up on the object, so a subclass that overrides the method is honoured.
        bound: Callable[P, R] = getattr(obj, self._method.__name__)
        twin = self.make_twin(bound)
        _describe(twin, bound, self._name or f"a{self._method.__name__}", self.how)
        return twin

    def make_twin(self, bound: Callable[P, R]) -> Callable[..., Any]:
        """Return the async twin of ``bound``."""
        raise NotImplementedError


class in_thread(_Twin[S, P, R]):
    """``aname = in_thread(name)``: the coroutine method of a synchronous storage method.

    The whole call runs in a worker thread; the coroutine shows the method's signature and
    docstring (``inspect.signature``, ``help``).
    """

    how = "runs in a worker thread"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> in_thread[S, P, R]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, obj: S | None, owner: type | None = None
    ) -> in_thread[S, P, R] | Callable[P, Coroutine[Any, Any, R]]:
        return self if obj is None else self._twin(obj)

    def make_twin(self, bound: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
        """Return the coroutine function that runs ``bound`` in a worker thread."""

        async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
            return await asyncio.to_thread(bound, *args, **kwargs)

        return twin


class in_thread_iterator(_Twin[S, P, Iterator[T]]):
    """``aname = in_thread_iterator(name)``: the async iterator of a method returning one.

    The method itself (its argument checks and schema loading, which may read the store)
    runs in a worker thread when iteration starts, and its items are pulled in worker
    threads a chunk at a time; so bad arguments raise at the first ``__anext__``.
    """

    how = "the call and each page run in worker threads"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> in_thread_iterator[S, P, T]: ...

    @overload
    def __get__(self, obj: S, owner: type | None = None) -> Callable[P, AsyncIterator[T]]: ...

    def __get__(
        self, obj: S | None, owner: type | None = None
    ) -> in_thread_iterator[S, P, T] | Callable[P, AsyncIterator[T]]:
        return self if obj is None else self._twin(obj)

    def make_twin(self, bound: Callable[P, Iterator[T]]) -> Callable[P, AsyncIterator[T]]:
        """Return the function whose async iterator pulls ``bound``'s items in threads."""

        def twin(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
            return _pull(lambda: bound(*args, **kwargs))

        return twin


async def _pull(start: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    items = await asyncio.to_thread(start)
    while chunk := await asyncio.to_thread(lambda: list(itertools.islice(items, _CHUNK))):
        for item in chunk:
            yield item


def _describe(twin: Callable[..., Any], wrapped: Callable[..., Any], name: str, how: str) -> None:
    """Give ``twin`` the name, signature and docstring of the call it runs."""
    twin.__name__ = twin.__qualname__ = name
    twin.__wrapped__ = wrapped  # type: ignore[attr-defined]  # inspect.signature follows it
    doc = wrapped.__doc__ or ""
    twin.__doc__ = f"Async :meth:`{wrapped.__name__}` ({how}).\n\n{doc}".rstrip()

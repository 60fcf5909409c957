"""A small facade over the long-term memory for notebooks and scripts.

>>> from agentic_memory.api import Memory
>>> with Memory.open() as mem:                                   # doctest: +SKIP
...     mem.remember("alice", "t1", [{"role": "user", "content": "I love hiking"}])
...     hits = mem.recall("alice", "outdoor activities")

Each kind of memory is a sub-API built on first use from the store and the embeddings:
``messages`` (the message log), ``episodes``, ``facts`` and ``rules``. Adding one is one
line in the class body, ``name = SubAPI(Factory)``, for any factory taking
``(store, embeddings)``.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage

from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import LoggedMessage, MessageLog, RecalledMessage
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.models.embeddings import embedding_dims, get_embeddings
from agentic_memory.store import InvalidInputError, MemoryStore
from agentic_memory.store.open import open_store
from agentic_memory.twins import blocking

__all__ = ["Memory", "SubAPI"]

T = TypeVar("T")


class SubAPI(Generic[T]):
    """A ``Memory`` attribute that builds ``factory(store, embeddings)`` once per instance."""

    def __init__(self, factory: Callable[[MemoryStore, Embeddings], T]) -> None:
        self.factory = factory
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> SubAPI[T]: ...

    @overload
    def __get__(self, obj: Memory, owner: type | None = None) -> T: ...

    def __get__(self, obj: Memory | None, owner: type | None = None) -> SubAPI[T] | T:
        if obj is None:
            return self
        cache = obj._parts
        if self.name not in cache:
            obj._check_open()
            cache[self.name] = self.factory(obj.store, obj.embeddings)
        part: T = cache[self.name]
        return part


class Memory:
    """Long-term memory on one store with one embedding model; a context manager."""

    messages = SubAPI(MessageLog)
    episodes = SubAPI(EpisodicMemory)
    facts = SubAPI(FactStore)
    rules = SubAPI(RuleBook)

    def __init__(self, store: MemoryStore, embeddings: Embeddings) -> None:
        """Use an open store and embeddings (``Memory.open`` makes both from settings)."""
        if not isinstance(store, MemoryStore):
            raise InvalidInputError(f"store must be a MemoryStore, got {type(store).__name__}")
        if not isinstance(embeddings, Embeddings):
            raise InvalidInputError(
                f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}"
            )
        self._store = store
        self._embeddings = embeddings
        self._parts: dict[str, Any] = {}
        self._closed = False

    @classmethod
    def open(
        cls,
        *,
        home: str | Path | None = None,
        backend: str | None = None,
        embeddings: Embeddings | None = None,
    ) -> Memory:
        """Open the configured store with the configured embeddings.

        Args:
            home: Data directory; the embedded store lives in ``<home>/store``. Default
                ``$AMEM_HOME`` (``~/.agentic-memory``). Ignored by Weaviate.
            backend: ``"embedded"`` or ``"weaviate"``; default ``$AMEM_STORE`` (embedded).
            embeddings: An embeddings object with a ``dims`` attribute; default
                ``agentic_memory.models.embeddings.get_embeddings()`` (offline WordLlama unless
                ``AMEM_EMBEDDINGS`` says otherwise).
        """
        emb = embeddings if embeddings is not None else get_embeddings()
        dims = embedding_dims(emb)
        path: Path | None = None
        chosen = backend if backend is not None else os.environ.get("AMEM_STORE", "")
        if home is not None and str(chosen).strip().lower() in ("", "embedded"):
            path = Path(home).expanduser() / "store"
        store = open_store(dims, backend=backend, path=path)
        return cls(store, emb)

    @property
    def store(self) -> MemoryStore:
        """The underlying store."""
        return self._store

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model every sub-API uses."""
        return self._embeddings

    # -- message-log shortcuts ------------------------------------------------------------

    async def aremember(
        self,
        user: str,
        thread_id: str,
        messages: Sequence[BaseMessage | Mapping[str, Any]],
        metadata: Mapping[str, Any] | None = None,
    ) -> builtins.list[str]:
        """Log a conversation's turns (see ``MessageLog.aremember``); return their ids."""
        return await self.messages.aremember(user, thread_id, messages, metadata=metadata)

    remember = blocking(aremember)

    async def arecall(
        self,
        user: str,
        query: str,
        k: int = 5,
        *,
        alpha: float = 0.5,
        thread_id: str | None = None,
        exclude_thread: str | None = None,
    ) -> builtins.list[RecalledMessage]:
        """Find a user's logged turns for ``query`` (see ``MessageLog.arecall``)."""
        return await self.messages.arecall(
            user, query, k=k, alpha=alpha, thread_id=thread_id, exclude_thread=exclude_thread
        )

    recall = blocking(arecall)

    async def alist(
        self, user: str, *, thread_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> builtins.list[LoggedMessage]:
        """Page through a user's log by thread, then turn (see ``MessageLog.alist``)."""
        return await self.messages.alist(user, thread_id=thread_id, limit=limit, offset=offset)

    list = blocking(alist)

    async def athreads(self, user: str) -> builtins.list[str]:
        """Return the user's thread ids that have logged turns."""
        return await self.messages.athreads(user)

    threads = blocking(athreads)

    async def aforget(
        self,
        user: str,
        *,
        ids: Sequence[str] | None = None,
        thread_id: str | None = None,
    ) -> int:
        """Delete logged turns by id or by thread (see ``MessageLog.aforget``)."""
        return await self.messages.aforget(user, ids=ids, thread_id=thread_id)

    forget = blocking(aforget)

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError("this Memory is closed: open a new one")

    def close(self) -> None:
        """Close the store; calling it twice is harmless."""
        if not self._closed:
            self._closed = True
            self._parts.clear()
            self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<Memory {self._store.backend} store, {embedding_dims(self._embeddings)}-d, {state}>"
        )

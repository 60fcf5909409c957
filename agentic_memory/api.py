"""A small facade over the long-term memory for notebooks and scripts.

>>> from agentic_memory.api import Memory
>>> with Memory.open() as mem:                                   # doctest: +SKIP
...     mem.remember("alice", "t1", [{"role": "user", "content": "I love hiking"}])
...     hits = mem.recall("alice", "outdoor activities")

In a notebook or any ``async def`` (a running event loop), await the ``a…`` methods instead:
``await mem.aremember(...)``, ``await mem.arecall(...)``; the sync ones refuse to run there
(``SyncCallInEventLoopError``), since they would stop the loop until done.

Each kind of memory is a sub-API built on first use from the store and the embeddings:
``messages`` (the message log), ``episodes``, ``facts`` and ``rules``. Their methods are
async only (``await mem.facts.acurrent("alice")``; from a script, ``asyncio.run(...)``).
Adding one is one line in the class body, ``name = SubAPI(Factory)``, for any factory taking
``(store, embeddings)`` (and ``retention=`` with ``SubAPI(Factory, retained=True)``).

Retention (:mod:`agentic_memory.kinds.retention`): ``purge`` applies the policy,
``retention`` says what expires when, ``mark_important`` keeps logged turns for good.
"""

from __future__ import annotations

import builtins
import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypedDict, TypeVar, overload

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds.episodes import EPISODES, EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.knowledge import asearch_knowledge
from agentic_memory.kinds.messages import (
    MESSAGES,
    MessageLog,
    MessageRetention,
)
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry, check_registry
from agentic_memory.kinds.retention import NEVER_PURGED, PurgeReport, RetentionPolicy
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.kinds.rules.shared import SharedRules
from agentic_memory.models.embeddings import embedding_dims, get_embeddings
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError, MemoryStore, check_user_id
from agentic_memory.store.open import open_store
from agentic_memory.sync_edge import SyncCallInEventLoopError, blocking

__all__ = ["Memory", "OpenOptions", "RetentionStatus", "SubAPI", "SyncCallInEventLoopError"]

T = TypeVar("T")
K = TypeVar("K")
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class RetentionStatus:
    """What of one user's memories the retention policy lets go, and when."""

    user: str
    policy: RetentionPolicy
    messages: MessageRetention
    episodes: int
    important_episodes: int
    episodes_over_cap: int
    """Pruned by the next explicit purge (``amem memories purge``), never automatically."""
    facts: int
    """Never purged."""
    rule_versions: int
    """Never purged."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "user": self.user,
            "policy": self.policy.to_dict(),
            "messages": self.messages.to_dict(),
            "episodes": {
                "total": self.episodes,
                "important": self.important_episodes,
                "over_cap": self.episodes_over_cap,
            },
            "facts": self.facts,
            "rule_versions": self.rule_versions,
            "never_purged": list(NEVER_PURGED),
        }


class SubAPI(Generic[T]):
    """A ``Memory`` attribute that builds ``factory(store, embeddings)`` once per instance.

    ``retained=True``: the factory also takes ``retention=`` (the Memory's policy).
    """

    def __init__(self, factory: Callable[..., T], *, retained: bool = False) -> None:
        self.factory = factory
        self.retained = retained
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
            options = {"retention": obj.retention} if self.retained else {}
            # Threads building it at once all get the first one stored (setdefault is atomic).
            cache.setdefault(self.name, self.factory(obj.store, obj.embeddings, **options))
        part: T = cache[self.name]
        return part


class _Shortcut(ABC, Generic[P, R]):
    """A ``Memory`` attribute that is a coroutine function bound to the instance."""

    @abstractmethod
    def bind(self, obj: Memory) -> Callable[P, Coroutine[Any, Any, R]]:
        """Return the coroutine function ``mem.<name>`` is on ``obj``."""

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(
        self, obj: Memory, owner: type | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, obj: Memory | None, owner: type | None = None
    ) -> Self | Callable[P, Coroutine[Any, Any, R]]:
        return self if obj is None else self.bind(obj)

    def __call__(self, obj: Memory, /, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        """Call it on the class: ``await Memory.arecall(mem, ...)``."""
        return self.bind(obj)(*args, **kwargs)


class delegate(_Shortcut[P, R], Generic[K, P, R]):
    """A ``Memory`` shortcut to one kind's coroutine method, never restated.

    ``arecall = delegate(messages, MessageLog.arecall)``: ``mem.arecall`` is the kind's bound
    method itself, with the kind's signature and docstring.
    """

    def __init__(
        self, part: SubAPI[K], method: Callable[Concatenate[K, P], Coroutine[Any, Any, R]]
    ) -> None:
        self.part = part
        self.method = method
        self.__name__ = method.__name__
        self.__doc__ = method.__doc__
        self.__wrapped__ = method  # inspect.signature follows it

    def bind(self, obj: Memory) -> Callable[P, Coroutine[Any, Any, R]]:
        """Return the kind's bound method."""
        bound: Callable[P, Coroutine[Any, Any, R]] = getattr(self.part.__get__(obj), self.__name__)
        return bound


class on_store(_Shortcut[P, R]):
    """A ``Memory`` method that is ``function(mem.store, mem.embeddings, ...)``, never restated.

    ``asearch_knowledge = on_store(asearch_knowledge)``: ``mem.asearch_knowledge`` takes the
    function's other arguments, with its docstring.
    """

    def __init__(
        self, function: Callable[Concatenate[MemoryStore, Embeddings, P], Coroutine[Any, Any, R]]
    ) -> None:
        self.function = function
        self.__doc__ = function.__doc__

    def bind(self, obj: Memory) -> Callable[P, Coroutine[Any, Any, R]]:
        """Return the function given the store and the embeddings."""
        return functools.partial(self.function, obj.store, obj.embeddings)


class OpenOptions(TypedDict, total=False):
    """What :meth:`Memory.open` takes (``AgenticStore.from_env`` passes them on)."""

    home: str | Path | None
    backend: str | None
    embeddings: Embeddings | None
    retention: RetentionPolicy | None
    kinds: KindRegistry


class Memory:
    """Long-term memory on one store with one embedding model; a context manager."""

    messages = SubAPI(MessageLog, retained=True)
    episodes = SubAPI(EpisodicMemory)
    facts = SubAPI(FactStore)
    rules = SubAPI(RuleBook)
    shared_rules = SubAPI(SharedRules)

    def __init__(
        self,
        store: MemoryStore,
        embeddings: Embeddings,
        *,
        retention: RetentionPolicy | None = None,
        kinds: KindRegistry = BUILTIN_KINDS,
    ) -> None:
        """Use an open store and embeddings (``Memory.open`` makes both from settings).

        ``retention`` is what is kept (:class:`~agentic_memory.kinds.retention.
        RetentionPolicy`); default: the operator's environment (``AMEM_MESSAGE_RETENTION_DAYS``
        and the other variables its ``from_env`` reads). ``kinds``: the memory kinds served
        (default the built-in ones; the CLI's commands, forget and transfer use them).
        """
        self.kinds = check_registry(kinds)
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise InvalidInputError(
                f"retention must be a RetentionPolicy, got {type(retention).__name__}"
            )
        self.retention = retention if retention is not None else RetentionPolicy.from_env()
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
        retention: RetentionPolicy | None = None,
        kinds: KindRegistry = BUILTIN_KINDS,
    ) -> Memory:
        """Open the configured store with the configured embeddings.

        Args:
            home: Data directory; the embedded store lives in ``<home>/store``. Default
                ``$AMEM_HOME`` (``~/.agentic-memory``). Ignored by Weaviate.
            backend: ``"embedded"`` or ``"weaviate"``; default ``$AMEM_STORE`` (embedded).
            embeddings: An embeddings object with a ``dims`` attribute; default
                ``agentic_memory.models.embeddings.get_embeddings()`` (offline WordLlama unless
                ``AMEM_EMBEDDINGS`` says otherwise).
            retention: What is kept; default ``RetentionPolicy.from_env()``.
            kinds: The memory kinds served; default the built-in ones.
        """
        check_registry(kinds)
        emb = embeddings if embeddings is not None else get_embeddings()
        dims = embedding_dims(emb)
        path: Path | None = None
        chosen = backend if backend is not None else os.environ.get("AMEM_STORE", "")
        if home is not None and str(chosen).strip().lower() in ("", "embedded"):
            path = Path(home).expanduser() / "store"
        policy = retention if retention is not None else RetentionPolicy.from_env()
        store = open_store(dims, backend=backend, path=path)
        return cls(store, emb, retention=policy, kinds=kinds)

    @property
    def store(self) -> MemoryStore:
        """The underlying store."""
        return self._store

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model every sub-API uses."""
        return self._embeddings

    # -- message-log shortcuts: the log's own methods, signatures and docstrings ----------

    aremember = delegate(messages, MessageLog.aremember)
    arecall = delegate(messages, MessageLog.arecall)
    alist = delegate(messages, MessageLog.alist)
    athreads = delegate(messages, MessageLog.athreads)
    aforget = delegate(messages, MessageLog.aforget)
    amark_important = delegate(messages, MessageLog.amark_important)

    # -- knowledge -------------------------------------------------------------------------

    asearch_knowledge = on_store(asearch_knowledge)

    # -- importance and retention ----------------------------------------------------------

    async def apurge(
        self,
        user: str | None = None,
        *,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> builtins.list[PurgeReport]:
        """Apply the retention policy to one user, or to every user; return what went.

        Messages: the expired and the over-cap unimportant turns (``MessageLog.apurge``).
        Episodes: beyond ``max_episodes``, the least important, then the oldest, each named
        in the report (``EpisodicMemory.aprune``). Facts and rules are never read.
        ``dry_run`` deletes nothing and reports what would go.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        if user is not None:
            check_user_id(user)
            if user == GLOBAL_SCOPE:
                raise InvalidInputError(
                    f"{GLOBAL_SCOPE!r} holds shared rules only: nothing to purge"
                )
            users = [user]
        else:
            users = await self.ausers_with_history()
        reports = []
        for uid in users:
            messages = await self.messages.apurge(uid, now=now, dry_run=dry_run)
            episodes = await self.episodes.aprune(uid, self.retention.max_episodes, dry_run=dry_run)
            reports.append(PurgeReport(uid, dry_run, messages, episodes))
        return reports

    async def ausers_with_history(self) -> builtins.list[str]:
        """Return the users that have logged turns or episodes, sorted."""
        names = set(await self.store.acollections())
        found: set[str] = set()
        for spec in (MESSAGES, EPISODES):
            if spec.name in names:
                found.update(await self.store.ausers(spec.name))
        return sorted(found - {GLOBAL_SCOPE})

    async def aretention(
        self, user: str, *, now: datetime | None = None, upcoming: int = 5
    ) -> RetentionStatus:
        """Say what of a user's memories expires when, under the policy in force.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        messages = await self.messages.aretention(user, now=now, upcoming=upcoming)
        total = await self.episodes.acount(user)
        important = await self.episodes.acount(user, important=True) if total else 0
        cap = self.retention.max_episodes
        return RetentionStatus(
            user=user,
            policy=self.retention,
            messages=messages,
            episodes=total,
            important_episodes=important,
            episodes_over_cap=0 if cap is None else max(0, min(total - cap, total - important)),
            facts=await self.facts.asize(user),
            rule_versions=await self.rules.asize(user),
        )

    # -- the sync edge: the same calls for scripts and the CLI ---------------------------
    #
    # Each runs its coroutine on a new event loop in the calling thread (``run_sync``); in a
    # thread whose loop is running (a notebook, an async function) it raises
    # ``SyncCallInEventLoopError``: await the ``a…`` method there.

    _edge_name = "mem"
    remember = blocking(aremember)
    recall = blocking(arecall)
    list = blocking(alist)
    threads = blocking(athreads)
    forget = blocking(aforget)
    mark_important = blocking(amark_important)
    purge = blocking(apurge)
    users_with_history = blocking(ausers_with_history)
    retention_status = blocking(aretention)

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

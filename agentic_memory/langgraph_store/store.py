"""``AgenticStore``: LangGraph's ``BaseStore`` over the agent's memory store.

See ``docs/langgraph-store.md`` for the namespaces, what each operation does on them, the
``$alpha`` extension and TTLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Unpack

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from agentic_memory.api import Memory, OpenOptions
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry, check_registry
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.langgraph_store.generic import GenericPut, GenericSpace
from agentic_memory.namespaces.family import KindSpace, SpaceContext
from agentic_memory.namespaces.labels import (
    NamespaceError,
    check_key,
    check_labels,
    check_writable,
    fixed_prefix,
    matches,
)
from agentic_memory.namespaces.search import (
    ALPHA_KEY,
    Clock,
    Found,
    SpaceSearch,
    check_alpha,
    check_json_value,
    parse_filter,
)
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError, MemoryStore, check_text
from agentic_memory.sync_edge import run_sync

__all__ = ["DEFAULT_ALPHA", "MIN_SWEEP_MINUTES", "AgenticStore", "DefaultTTL"]

logger = logging.getLogger(__name__)

DEFAULT_ALPHA = 0.5
"""The hybrid weight of the vector side when neither the store nor the query sets one."""

MAX_QUERY_CHARS = 100_000
_TTL_KEYS = frozenset({"refresh_on_read", "default_ttl", "sweep_interval_minutes", "omit_expired"})
_DEFAULT_SWEEP_MINUTES = 5.0
MIN_SWEEP_MINUTES = 1 / 60
"""The shortest sweep interval accepted (one second): a shorter one would spin, sweeping
thousands of times a second."""


class DefaultTTL(float):
    """``TTLConfig.default_ttl`` as ``BaseStore.put`` passes it to a put that gave no ttl.

    A float (minutes, as LangGraph reads it) whose type tells this store that the caller
    did not choose it: memory-kind namespaces, which never expire, ignore it, where an
    explicit ttl is refused.
    """


Step = Callable[[dict[str, list[float]]], Awaitable[Result]]
"""A checked operation; runs with the vectors of the batch's generic puts, by text."""

_AWAIT_INSTEAD = "the store's async methods (await store.aget/aput/asearch/abatch(...))"


class AgenticStore(BaseStore):
    """A LangGraph store whose items are the agent's memories, searched with hybrid search.

    Namespaces ``("facts", user)``, ``("episodes", user)``, ``("rules", scope)``,
    ``("messages", user, thread)``, ``("knowledge", kb)`` (shared knowledge bases) and
    ``("user_knowledge", user, kb)`` (a user's own) are the memory kinds, read and
    written through their classes (:class:`~agentic_memory.kinds.facts.FactStore`, ...);
    every other namespace holds plain LangGraph items with TTL support. Usable wherever
    LangGraph takes a store: ``builder.compile(store=...)``, ``langgraph.json``'s ``store``
    entry (see ``graph/store.py``), ``create_react_agent(store=...)``.

    Args:
        store: The memory store (embedded or Weaviate).
        embeddings: The embeddings the store was built with.
        ttl: LangGraph's ``TTLConfig`` for generic items (``default_ttl`` minutes,
            ``refresh_on_read``, ``sweep_interval_minutes``); memory kinds never expire.
        alpha: Default hybrid weight of the vector side (0 keywords only, 1 vectors only).
        index_fields: Default paths of a generic item's text to index (``["$"]``: the
            whole value as JSON), as LangGraph's ``IndexConfig.fields``.
        clock: Returns the current time (aware); for tests. Kinds stamp with it too.
        close_store: Close ``store`` when this store is closed.
        retention: What the memory kinds keep (logged turns' expiry and cap, episodes'
            cap; facts and rules are never purged); default
            ``RetentionPolicy.from_env()``. A message item's value shows ``important``
            and its ``expires_at`` under this policy.
        operator: The name of the operator this store acts for (recorded with each
            decision), or ``None`` (the default): then the rules shared by every user are
            read-only here and their proposals hidden. Give it only to code that acts for
            an operator; on a server, only callers the authentication lets through should
            reach such a store's shared namespaces (``graph/auth.py``, ``AMEM_OPERATORS``).
        kinds: The memory kinds whose namespaces the store serves (default: the built-in
            kinds, ``agentic_memory.kinds.registry.BUILTIN_KINDS``).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: MemoryStore,
        embeddings: Embeddings,
        *,
        ttl: TTLConfig | None = None,
        alpha: float = DEFAULT_ALPHA,
        index_fields: Sequence[str] | None = None,
        clock: Clock | None = None,
        close_store: bool = False,
        retention: RetentionPolicy | None = None,
        operator: str | None = None,
        kinds: KindRegistry = BUILTIN_KINDS,
    ) -> None:
        # Memory checks the store, the embeddings and the retention policy.
        self.memory = Memory(store, embeddings, retention=retention)
        """The memory kinds behind this store: what the agent's graph nodes use."""
        if operator is not None and (not isinstance(operator, str) or not operator.strip()):
            raise InvalidInputError(
                f"operator names an operator (a non-empty string), got {operator!r}"
            )
        self.operator = operator
        """Who decides for the shared rules through this store (``None``: nobody)."""
        self.ttl_config = _check_ttl_config(ttl)
        self.alpha = check_alpha(alpha, "alpha")
        fields = ["$"] if index_fields is None else list(index_fields)
        if isinstance(index_fields, str) or not fields:
            raise InvalidInputError("index_fields is a non-empty list of field paths")
        self._store = store
        self._embeddings = embeddings
        self._clock: Clock = clock or _utc_now
        self._custom_clock = clock is not None
        self._close_store = close_store
        self._closed = False
        self._sweeper: asyncio.Task[None] | None = None
        self.facts: FactStore = self.memory.facts
        self.episodes: EpisodicMemory = self.memory.episodes
        self.rules: RuleBook = self.memory.rules
        self.messages: MessageLog = self.memory.messages
        ctx = SpaceContext(
            store=store,
            embeddings=embeddings,
            now=self._kind_now,
            operator=operator,
            kinds=(
                self.facts,
                self.episodes,
                self.rules,
                self.messages,
                self.memory.shared_rules,
            ),
        )
        self.kinds = check_registry(kinds)
        """The memory kinds whose namespaces this store serves (``agentic_memory.kinds``)."""
        self._kinds: dict[str, KindSpace] = {
            space.root: space for kind in self.kinds for space in kind.spaces(ctx)
        }
        if tuple(self._kinds) != self.kinds.roots:
            raise InvalidInputError(
                f"the kinds' namespace families {tuple(self._kinds)} are not the roots they "
                f"declare {self.kinds.roots}"
            )
        self._generic = GenericSpace(store, embeddings, index_fields=fields, clock=self._now)

    @classmethod
    def from_env(
        cls,
        *,
        ttl: TTLConfig | None = None,
        alpha: float = DEFAULT_ALPHA,
        index_fields: Sequence[str] | None = None,
        operator: str | None = None,
        **opening: Unpack[OpenOptions],
    ) -> AgenticStore:
        """Open the configured memory store and embeddings with ``Memory.open``.

        Args:
            ttl: See the class.
            alpha: See the class.
            index_fields: See the class.
            operator: See the class.
            opening: What ``Memory.open`` takes: ``home`` (the embedded store is
                ``<home>/store``; default ``$AMEM_HOME``), ``backend`` (default
                ``$AMEM_STORE``), ``embeddings`` (default ``get_embeddings()``),
                ``retention`` and ``kinds`` (see the class).

        The store is closed with this one (``close()``, or leaving a ``with`` block).
        """
        opened = Memory.open(**opening)
        try:
            return cls(
                opened.store,
                opened.embeddings,
                ttl=ttl,
                alpha=alpha,
                index_fields=index_fields,
                close_store=True,
                retention=opened.retention,
                operator=operator,
                kinds=opened.kinds,
            )
        except BaseException:
            opened.close()
            raise

    @property
    def memory_store(self) -> MemoryStore:
        """The memory store underneath."""
        return self._store

    @property
    def embeddings(self) -> Embeddings:
        """The embeddings every kind and generic item uses."""
        return self._embeddings

    # -- batches --------------------------------------------------------------------------

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations in order; every one is checked before the first runs.

        A get or search sees the puts made before it in the same batch. An operation
        refused by the checks that need no store (namespace, key, filter, a value's JSON,
        fields and types, a TTL on a memory kind) raises ``InvalidInputError`` (a
        ``ValueError``) and nothing of the batch runs. A kind's own rules and refusals that
        depend on what is stored (a rule version that is no longer the latest) are checked
        when the operation runs, before it writes: the batch stops there.

        Runs on the caller's event loop through the memory kinds' async methods; the
        storage work runs in worker threads, so the loop never blocks.
        """
        self._check_open()
        if isinstance(ops, GetOp | PutOp | SearchOp | ListNamespacesOp):
            raise InvalidInputError("batch takes an iterable of operations, not one")
        steps: list[Step] = []
        to_embed: dict[str, None] = {}
        for op in ops:
            steps.append(self._prepare(op, to_embed))
        texts = list(to_embed)
        vectors = (
            dict(zip(texts, await self._embeddings.aembed_documents(texts), strict=True))
            if texts
            else {}
        )
        return [await step(vectors) for step in steps]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run operations in order, blocking until done (see :meth:`abatch`).

        LangGraph's sync store methods (``get``, ``put``, ``search``, ...) come here. The
        batch runs on a new event loop in the calling thread; the sync methods of a
        LangGraph graph's nodes run in worker threads, where this is fine.

        Raises:
            SyncCallInEventLoopError: called from a thread whose event loop is running
                (an ``async def`` node, a notebook cell): await ``aget``/``aput``/``asearch``
                there.
        """
        return run_sync(self.abatch(ops), instead=_AWAIT_INSTEAD)

    def _prepare(self, op: object, to_embed: dict[str, None]) -> Step:
        if isinstance(op, GetOp):
            return self._prepare_get(op)
        if isinstance(op, PutOp):
            return self._prepare_put(op, to_embed)
        if isinstance(op, SearchOp):
            return self._prepare_search(op)
        if isinstance(op, ListNamespacesOp):
            return self._prepare_list(op)
        raise InvalidInputError(f"unknown store operation {type(op).__name__}")

    def _prepare_get(self, op: GetOp) -> Step:
        namespace = check_labels(op.namespace)
        key = _check_key(op.key)
        kind = self._kind_of(namespace)
        if kind is not None:
            kind.check_item_namespace(namespace)
            return lambda _: kind.get(namespace, key)
        refresh = bool(op.refresh_ttl)

        async def get(_: dict[str, list[float]]) -> Item | None:
            found = await self._generic.get(namespace, key)
            if found is None:
                return None
            item, touch = found
            if refresh and touch is not None:
                await self._generic.refresh([touch])
            return item

        return get

    def _prepare_put(self, op: PutOp, to_embed: dict[str, None]) -> Step:
        key = _check_key(op.key)
        if op.value is None:
            namespace = check_labels(op.namespace)
            if not namespace:
                raise NamespaceError("the namespace of an item cannot be empty")
        else:
            namespace = check_writable(op.namespace)
        kind = self._kind_of(namespace)
        if kind is not None:
            # The store's default TTL is for generic items: memory kinds never expire.
            if op.ttl is not None and not isinstance(op.ttl, DefaultTTL):
                raise InvalidInputError(_ttl_refusal(kind.root, namespace))
            if op.index is not None:
                raise InvalidInputError(
                    f"each memory kind indexes its own text: index must be None on "
                    f"{namespace}, got {op.index!r}"
                )
            if op.value is not None:
                # The same bounds as a generic item's value (size, depth, plain JSON).
                check_json_value(op.value)
            write = kind.prepare(namespace, key, op.value)

            async def run_kind(_: dict[str, list[float]]) -> None:
                await write()

            return run_kind
        put = self._generic.prepare(namespace, key, op.value, op.index, op.ttl)
        if put.text:
            to_embed[put.text] = None

        async def run(vectors: dict[str, list[float]]) -> None:
            await self._write_generic(put, vectors)

        return run

    async def _write_generic(self, put: GenericPut, vectors: dict[str, list[float]]) -> None:
        await self._generic.write(put, vectors[put.text] if put.text else None)

    def _prepare_search(self, op: SearchOp) -> Step:
        prefix = check_labels(op.namespace_prefix, "namespace prefix")
        flt = parse_filter(op.filter)
        limit, offset = _check_count("limit", op.limit), _check_count("offset", op.offset)
        query = op.query
        if query is not None:
            if not isinstance(query, str):
                raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
            check_text(query, "the query")
            if len(query) > MAX_QUERY_CHARS:
                raise InvalidInputError(
                    f"the query has {len(query):,} characters, more than {MAX_QUERY_CHARS:,}"
                )
            # A blank query asks for nothing to rank by: it lists, as no query does.
            query = query if query.strip() else None
        if flt.alpha is not None and query is None:
            raise InvalidInputError(f"{ALPHA_KEY} weighs a query's hybrid search: give a query")
        alpha = self.alpha if flt.alpha is None else flt.alpha
        need = offset + limit
        refresh = bool(op.refresh_ttl)
        kinds = self._kinds_under(prefix)
        if len(prefix) >= 2:
            for kind in kinds:
                kind.check_owner(prefix[1])  # a reserved namespace is refused before any work

        async def search(_: dict[str, list[float]]) -> list[SearchItem]:
            if limit == 0:
                return []
            # Read when the search runs: it sees owners created earlier in the batch.
            sources: list[tuple[KindSpace | GenericSpace, tuple[str, ...]]] = [
                (kind, part) for kind in kinds for part in await kind.partitions(prefix)
            ]
            if not prefix or prefix[0] not in self._kinds:
                sources.append((self._generic, prefix))
            collected: list[Found] = []
            for space, part in sources:
                collected += await space.search(SpaceSearch(part, query, flt, need, alpha))
                if query is None and len(collected) >= need:
                    break
            if query is not None and len(sources) > 1:
                # Stable: each source's own order is kept among equal scores.
                collected.sort(key=lambda f: -f.item.score if f.item.score is not None else 1.0)
            page = collected[offset:need]
            if refresh:
                await self._generic.refresh([f.touch for f in page if f.touch is not None])
            return [f.item for f in page]

        return search

    def _prepare_list(self, op: ListNamespacesOp) -> Step:
        conditions = tuple(op.match_conditions or ())
        for condition in conditions:
            if not isinstance(condition, MatchCondition):
                raise InvalidInputError(f"expected MatchCondition, got {type(condition).__name__}")
            if condition.match_type not in ("prefix", "suffix"):
                raise InvalidInputError(f"unknown match type {condition.match_type!r}")
            check_labels(condition.path, f"{condition.match_type} path")
        max_depth = op.max_depth
        if max_depth is not None and (
            isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1
        ):
            raise InvalidInputError(f"max_depth is a positive integer or None, got {max_depth!r}")
        limit, offset = _check_count("limit", op.limit), _check_count("offset", op.offset)
        fixed = fixed_prefix(conditions)
        # Thread-level message namespaces cost a read of each log; skip them when the
        # answer is cut at the user level anyway.
        deep = not (
            max_depth is not None
            and max_depth <= 2
            and all(c.match_type == "prefix" and len(c.path) <= 2 for c in conditions)
        )

        async def run(_: dict[str, list[float]]) -> list[tuple[str, ...]]:
            found: set[tuple[str, ...]] = set()
            for kind in self._kinds_under(fixed):
                found |= await kind.namespaces(fixed, deep)
            if not fixed or fixed[0] not in self._kinds:
                found |= await self._generic.namespaces(fixed)
            names = [ns for ns in found if matches(conditions, ns)]
            if max_depth is not None:
                names = list({ns[:max_depth] for ns in names})
            return sorted(names)[offset : offset + limit]

        return run

    def _kind_of(self, namespace: tuple[str, ...]) -> KindSpace | None:
        return self._kinds.get(namespace[0]) if namespace else None

    def _kinds_under(self, prefix: tuple[str, ...]) -> list[KindSpace]:
        if not prefix:
            return list(self._kinds.values())
        kind = self._kinds.get(prefix[0])
        return [] if kind is None else [kind]

    # -- forgetting -----------------------------------------------------------------------

    async def aforget_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every generic item under a namespace prefix; return how many.

        Raises:
            InvalidInputError: the prefix is empty or names a memory kind (those are
                forgotten through their kinds: ``agentic_memory.forget``).
        """
        self._check_open()
        labels = check_labels(prefix, "namespace prefix")
        if not labels or labels[0] in self._kinds:
            raise InvalidInputError(
                f"forget_namespace deletes generic items under a non-empty prefix that is not "
                f"a memory kind ({', '.join(self._kinds)}), got {labels}"
            )
        return await self._generic.forget_prefix(labels)

    def forget_namespace(self, prefix: tuple[str, ...]) -> int:
        """Delete every generic item under a namespace prefix (blocking :meth:`aforget_namespace`).

        Raises:
            InvalidInputError: the prefix is empty or names a memory kind.
            SyncCallInEventLoopError: called from a running event loop.
        """
        return run_sync(
            self.aforget_namespace(prefix), instead="await store.aforget_namespace(...)"
        )

    async def aforget_user(self, user: str) -> int:
        """Delete the generic items of a user: those whose namespace's second label is ``user``.

        That is the convention LangGraph code follows (``("memories", user)``) and the one
        ``graph/auth.py`` enforces; items stored under another layout are not found.
        Returns how many items were deleted.
        """
        self._check_open()
        check_labels((user,), "user")
        return await self._generic.forget_owner(user)

    def forget_user(self, user: str) -> int:
        """Delete the generic items of a user; return how many (blocking :meth:`aforget_user`).

        Raises:
            SyncCallInEventLoopError: called from a running event loop.
        """
        return run_sync(self.aforget_user(user), instead="await store.aforget_user(...)")

    # -- TTL ------------------------------------------------------------------------------

    async def asweep_ttl(self) -> int:
        """Delete the generic items whose TTL has run out; return how many were deleted."""
        self._check_open()
        return await self._generic.sweep()

    def sweep_ttl(self) -> int:
        """Delete the expired generic items; return how many (blocking :meth:`asweep_ttl`).

        Raises:
            SyncCallInEventLoopError: called from a running event loop.
        """
        return run_sync(self.asweep_ttl(), instead="await store.asweep_ttl()")

    async def asweep_retention(self) -> int:
        """Purge every user's message log whose purge is due; return how many turns went.

        The counterpart of the TTL sweep for the memory kinds: logged turns expire by the
        retention policy (``retention``), and a user who no longer writes gets no purge
        after a write, so the sweeper purges each user's log when ``purge_interval_minutes``
        have passed since its last purge (``MessageLog.apurge_if_due``; never when automatic
        purges are off). Important turns, episodes, facts and rules are never touched here:
        episodes are pruned only by an explicit purge (``amem memories purge``).
        """
        self._check_open()
        if MessageLog.spec.name not in await self._store.acollections():
            return 0
        deleted = 0
        for user in await self._store.ausers(MessageLog.spec.name):
            if user == GLOBAL_SCOPE:
                continue  # holds no message log; not a user id
            report = await self.messages.apurge_if_due(user)
            deleted += report.deleted if report is not None else 0
        return deleted

    def sweep_retention(self) -> int:
        """Purge the message logs whose purge is due (blocking :meth:`asweep_retention`).

        Raises:
            SyncCallInEventLoopError: called from a running event loop.
        """
        return run_sync(self.asweep_retention(), instead="await store.asweep_retention()")

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep expired items every ``sweep_interval_minutes`` in a background task.

        The interval defaults to the ``TTLConfig``'s ``sweep_interval_minutes``, else 5
        minutes; without a ``TTLConfig`` and without an interval nothing is swept and the
        returned task is already done (as LangGraph's Postgres store does). Starting it
        again returns the running task, on whichever event loop runs it (one store may serve
        several loops; the sweeper runs on the first that started it). ``stop_ttl_sweeper``
        (from any loop) or closing the store stops it.
        Each sweep also purges the message logs whose retention purge is due
        (:meth:`asweep_retention`).
        """
        self._check_open()
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        configured = (self.ttl_config or {}).get("sweep_interval_minutes")
        if sweep_interval_minutes is None and self.ttl_config is None:
            done: asyncio.Task[None] = asyncio.create_task(asyncio.sleep(0))
            return done
        minutes = sweep_interval_minutes or configured or _DEFAULT_SWEEP_MINUTES
        _check_sweep_minutes(minutes)
        self._sweeper = asyncio.create_task(self._sweep_every(float(minutes) * 60.0))
        return self._sweeper

    async def _sweep_every(self, seconds: float) -> None:
        sweeps = (
            ("TTL", self.asweep_ttl, "expired item(s)"),
            ("retention", self.asweep_retention, "logged turn(s)"),
        )
        while True:
            await asyncio.sleep(seconds)
            for name, sweep, what in sweeps:
                try:
                    deleted = await sweep()
                except Exception:
                    # One failed sweep (a store hiccup) must not end sweeping for good.
                    logger.exception("%s sweep failed; retrying at the next interval", name)
                else:
                    if deleted:
                        logger.info("%s sweep deleted %d %s", name, deleted, what)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper; return whether it stopped within ``timeout`` seconds.

        Works from any event loop: a sweeper started on another one (another thread) is
        cancelled on its own loop, and this one waits for it without blocking. A sweeper
        whose loop is not running (stopped, or closed) cannot sweep: it is stopped at once,
        and cancelled should that loop run again.
        """
        task, self._sweeper = self._sweeper, None
        if task is None or task.done():
            return True
        owner = task.get_loop()
        if owner is asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
            return task.done()
        # A task may only be touched from its own loop's thread.
        stopped = threading.Event()

        def cancel() -> None:
            task.add_done_callback(lambda _: stopped.set())
            task.cancel()

        try:
            owner.call_soon_threadsafe(cancel)
        except RuntimeError:
            return True  # its loop is closed: the sweeper will never run again
        deadline = None if timeout is None else time.monotonic() + timeout

        def wait() -> bool:
            # A loop stopped but not closed never runs ``cancel``: waiting for it alone
            # would never end (nor free this worker thread).
            while not stopped.wait(0.05):
                if not owner.is_running():
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    return False
            return True

        return await asyncio.to_thread(wait)

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the sweeper and close the memory store if this store opened it."""
        if self._closed:
            return
        self._closed = True
        task, self._sweeper = self._sweeper, None
        if task is not None and not task.done():
            with contextlib.suppress(RuntimeError):  # its loop is closed: it never runs again
                task.get_loop().call_soon_threadsafe(task.cancel)
        if self._close_store:
            self._store.close()

    async def aclose(self) -> None:
        """Async :meth:`close` (waits for the sweeper to stop)."""
        await self.stop_ttl_sweeper()
        await asyncio.to_thread(self.close)

    def __enter__(self) -> AgenticStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AgenticStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<AgenticStore on the {self._store.backend} store, {state}>"

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidInputError("this AgenticStore is closed")

    def _now(self) -> datetime:
        moment = self._clock()
        if not isinstance(moment, datetime) or moment.tzinfo is None:
            raise InvalidInputError("the clock must return a timezone-aware datetime")
        return moment

    def _kind_now(self) -> datetime | None:
        # The kinds stamp after their own reads; a custom clock (tests) is passed on.
        return self._now() if self._custom_clock else None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _check_key(key: object) -> str:
    return check_key(key)


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"{name} is a non-negative integer, got {value!r}")
    return value


def _check_minutes(value: object, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInputError(f"{name} is a positive number of minutes, got {value!r}")
    return float(value)


def _check_sweep_minutes(value: object) -> float:
    minutes = _check_minutes(value, "sweep_interval_minutes")
    if minutes < MIN_SWEEP_MINUTES:
        raise InvalidInputError(
            f"sweep_interval_minutes is at least {MIN_SWEEP_MINUTES:.4f} (one second), got "
            f"{value!r}: a shorter interval would sweep without pause"
        )
    return minutes


def _check_ttl_config(ttl: object) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise InvalidInputError(f"ttl is a TTLConfig mapping, got {type(ttl).__name__}")
    unknown = sorted(set(ttl) - _TTL_KEYS)
    if unknown:
        raise InvalidInputError(f"TTLConfig has no setting {', '.join(map(repr, unknown))}")
    if ttl.get("default_ttl") is not None:
        _check_minutes(ttl["default_ttl"], "default_ttl")
    if ttl.get("sweep_interval_minutes") is not None:
        _check_sweep_minutes(ttl["sweep_interval_minutes"])
    for name in ("refresh_on_read", "omit_expired"):
        if name in ttl and not isinstance(ttl[name], bool):
            raise InvalidInputError(f"{name} is a bool, got {ttl[name]!r}")
    if ttl.get("omit_expired") is False:
        raise InvalidInputError(
            "omit_expired=False is not supported: expired items are never returned"
        )
    config: TTLConfig = {}
    config.update(ttl)  # type: ignore[typeddict-item]
    if config.get("default_ttl") is not None:
        config["default_ttl"] = DefaultTTL(config["default_ttl"])  # type: ignore[arg-type]
    return config


def _ttl_refusal(root: str, namespace: tuple[str, ...]) -> str:
    if root == "messages":
        return (
            f"a ttl on {namespace} is refused: the message log is governed by retention "
            "policies, not item TTLs"
        )
    if root in ("knowledge", "user_knowledge"):
        return f"a ttl on {namespace} is refused: knowledge bases are read-only through the store"
    return (
        f"a ttl on {namespace} is refused: {root} never expire silently (delete them, or "
        "forget the user, to remove them)"
    )

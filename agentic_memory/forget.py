"""Forget memories: one episode, one fact, one subject, one thread, or everything about a user.

Each function returns a ``ForgetReport`` that says what was deleted, per store and collection,
and what was rewritten to stop naming the forgotten memories:

* rule versions (the user's and the global ones) list the episodes they were learned from in
  ``source_episodes`` and the users in ``source_users``; forgotten episodes and users are
  scrubbed from them. A rule whose text came only from what is forgotten goes too: a rule
  is traced to the versions that introduced it (it is in the version, not in the one
  before); when every such version was learned only from forgotten episodes (or, when a
  user is forgotten, only from that user), the rule is removed from every version that
  holds it, the version is re-embedded, and a version left without rules is deleted. The
  other rules (including those learned from other users too) and the version numbers stay;
* when forgotten facts had superseded older values of the same subject, the history is
  re-linked so that each subject keeps one current value;
* forgetting a thread or a user also deletes the thread's checkpoints (working memory) through
  the checkpointer port (:mod:`agentic_memory.checkpoints`, LangGraph's ``adelete_thread`` on
  every checkpointer); a user's threads are known from their message log,
  episodes and facts, from run metadata (``user_id``) and from the ``owner`` the graph records
  in every thread's state (which also finds a thread whose only turn failed before anything
  was logged);
* given a LangGraph SDK client (``server=``), the same threads are deleted on that server too
  (``langgraph dev``, LangGraph Platform), whose checkpoints live in the server's own storage;
  threads are found there by metadata and by the ``owner`` in their state values. An id the
  server refuses (``langgraph dev`` takes only UUIDs; ``amem chat`` names its threads ``t-…``)
  cannot be one of its threads and is skipped. A server that fails does not stop the rest:
  the local part always finishes, and ``ForgetReport.server_error`` says what the server
  left undone;
* forgetting a user also removes the store's bookkeeping rows that name them, and on SQLite
  files (the embedded store, the SQLite checkpointer) the deleted data is made unreadable:
  deletions overwrite with zeros (``secure_delete``), and the write-ahead logs, which keep
  older copies of changed pages, are checkpointed and truncated (see ``ForgetReport.notes``
  when another process prevents that).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from langchain_core.embeddings import Embeddings
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import (
    APIConnectionError,
    APIStatusError,
    BadRequestError,
    InternalServerError,
    LangGraphError,
    NotFoundError,
    UnprocessableEntityError,
)

from agentic_memory.checkpoints import (
    OWNER_KEY,
    adelete_threads,
    athread_owner,
    owner_of,
)
from agentic_memory.checkpoints import auser_threads as checkpoint_user_threads
from agentic_memory.kinds._bound import areclaim_space
from agentic_memory.kinds.episodes import EPISODES, EpisodicMemory
from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry, check_registry
from agentic_memory.kinds.rules import RULES, RuleBook
from agentic_memory.kinds.rules.shared import PROPOSALS, SharedRules
from agentic_memory.models.embeddings import LazyEmbeddings
from agentic_memory.store.base import GLOBAL_SCOPE, MemoryStore, check_user_id
from agentic_memory.store.types import CollectionSpec, InvalidInputError, check_text

CHECKPOINTER = "checkpointer"
SERVER = "server"
"""The store column of the report's row for threads deleted on a LangGraph server."""
_PAGE = 500
_REFUSED_ID = (BadRequestError, UnprocessableEntityError)
"""What a server answers for a thread id it cannot hold: ``langgraph dev`` answers 422
"Invalid thread ID: must be a UUID" for ``amem chat``'s ``t-…`` ids, which live only in the
local checkpointer."""
_UNREACHABLE = (httpx.TransportError, APIConnectionError)
"""The server could not be reached (or stopped answering)."""


@dataclass
class ForgetReport:
    """What a forget call removed (``deleted``) and rewrote (``scrubbed``)."""

    user: str
    store: str
    """The memory store's backend name, used as the store column of the report."""
    deleted: dict[tuple[str, str], int] = field(default_factory=dict)
    """``(store, collection)`` → objects deleted; the checkpointer counts checkpoints."""
    scrubbed: dict[tuple[str, str], int] = field(default_factory=dict)
    """``(store, collection)`` → objects rewritten to drop references to what was forgotten."""
    threads: list[str] = field(default_factory=list)
    """Threads whose checkpoints were deleted."""
    kept_threads: list[str] = field(default_factory=list)
    """Threads named in the user's memories whose checkpoints belong to another user (kept)."""
    server_threads: list[str] = field(default_factory=list)
    """Threads deleted on the LangGraph server."""
    notes: list[str] = field(default_factory=list)
    """Anything the caller should know, e.g. a write-ahead log that could not be emptied."""
    server_failed: list[str] = field(default_factory=list)
    """Threads of the user that the LangGraph server failed to delete (still there)."""
    server_error: str | None = None
    """The first failure of the LangGraph server, when its part is incomplete (else None)."""
    server_retry: bool = False
    """Whether that failure is the server's (5xx, connection): the same call may finish later.
    False for a refusal (403 and the like), which repeating does not change."""

    def add_deleted(self, collection: str, n: int, *, store: str | None = None) -> None:
        """Count ``n`` deleted objects of ``collection`` (zero counts are kept, for the table)."""
        key = (store or self.store, collection)
        self.deleted[key] = self.deleted.get(key, 0) + n

    def add_scrubbed(self, collection: str, n: int, *, store: str | None = None) -> None:
        """Count ``n`` rewritten objects of ``collection``."""
        if n:
            key = (store or self.store, collection)
            self.scrubbed[key] = self.scrubbed.get(key, 0) + n

    @property
    def total_deleted(self) -> int:
        """Objects deleted across all stores."""
        return sum(self.deleted.values())

    def rows(self) -> list[tuple[str, str, int, int]]:
        """Return ``(store, collection, deleted, scrubbed)`` rows in a stable order."""
        keys = sorted(
            set(self.deleted) | set(self.scrubbed),
            key=lambda k: (k[0] in (CHECKPOINTER, SERVER), k[0] == SERVER, k),
        )
        return [(s, c, self.deleted.get((s, c), 0), self.scrubbed.get((s, c), 0)) for s, c in keys]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-friendly view."""
        return {
            "user": self.user,
            "deleted": [
                {"store": s, "collection": c, "deleted": d, "scrubbed": r}
                for s, c, d, r in self.rows()
            ],
            "total_deleted": self.total_deleted,
            "threads": sorted(self.threads),
            "kept_threads": sorted(self.kept_threads),
            "server_threads": sorted(self.server_threads),
            "server_failed": sorted(self.server_failed),
            "server_error": self.server_error,
            "notes": list(self.notes),
        }

    def server_failure(self, exc: BaseException, threads: Iterable[str] = ()) -> None:
        """Record that the LangGraph server failed (``threads``: what it left undeleted)."""
        for thread_id in threads:
            if thread_id not in self.server_failed:
                self.server_failed.append(thread_id)
        if self.server_error is None:
            self.server_error = describe_server_error(exc)
            self.server_retry = not isinstance(exc, APIStatusError) or exc.status_code >= 500


def describe_server_error(exc: BaseException) -> str:
    """One line naming a LangGraph server failure (status and message, or the connection error)."""
    text = " ".join(str(exc).split())[:200]
    if isinstance(exc, APIStatusError) and str(exc.status_code) not in text:
        text = f"{exc.status_code} {text}".strip()
    return text or type(exc).__name__


@dataclass
class _Kinds:
    """The memory kinds on one store, for one forget call."""

    facts: FactStore
    episodes: EpisodicMemory
    rules: RuleBook
    messages: MessageLog


def _kinds(store: MemoryStore, embeddings: Embeddings | None) -> _Kinds:
    # Forgetting only embeds when it rewrites a rule text; the model loads on that first use.
    emb = embeddings or LazyEmbeddings()
    return _Kinds(
        FactStore(store, emb),
        EpisodicMemory(store, emb),
        RuleBook(store, emb),
        MessageLog(store, emb),
    )


async def _delete_checkpoints(
    checkpointer: BaseCheckpointSaver[Any],
    threads: Iterable[str],
    report: ForgetReport,
) -> None:
    # A server whose checkpointer is this file (langgraph.json names open_checkpointer) has
    # deleted its threads' rows itself; their old pages are in the same write-ahead log.
    done = await adelete_threads(
        checkpointer, report.user, threads, erase=bool(report.server_threads)
    )
    report.threads.extend(done.threads)
    report.kept_threads.extend(done.kept)
    report.add_deleted("checkpoints", done.checkpoints, store=CHECKPOINTER)
    if not done.erased:
        report.notes.append(
            "the checkpoint file's write-ahead log could not be emptied now (another process "
            "is reading it); it still holds old pages until its next checkpoint"
        )


async def _server_thread_owner(server: LangGraphClient, thread_id: str) -> str | None:
    """Return the server thread's owner: its state's, else its metadata's ("" if none).

    ``None`` when the server has no such thread.
    """
    try:
        thread = await server.threads.get(thread_id)
    except (NotFoundError, *_REFUSED_ID):
        return None
    return owner_of(thread.get("values"), thread.get("metadata"))


async def _delete_server_threads(
    server: LangGraphClient, threads: Iterable[str], report: ForgetReport
) -> None:
    """Delete the user's threads on the server; record, never raise, what the server fails.

    A connection that fails ends the attempt: every later call would wait for the same
    timeout, and which of the remaining ids the server holds is unknown.
    """
    deleted = 0
    for thread_id in sorted(set(threads)):
        try:
            owner = await _server_thread_owner(server, thread_id)
            if owner is None:
                continue
            if owner and owner != report.user:
                if thread_id not in report.kept_threads:
                    report.kept_threads.append(thread_id)
                continue
            await server.threads.delete(thread_id)
        except (NotFoundError, *_REFUSED_ID):
            continue  # deleted by someone else in the meantime
        except _UNREACHABLE as exc:
            report.server_failure(exc)
            break
        except (LangGraphError, httpx.HTTPError) as exc:
            report.server_failure(exc, [thread_id])
            continue
        deleted += 1
        report.server_threads.append(thread_id)
    report.add_deleted("threads", deleted, store=SERVER)


async def server_user_threads(server: LangGraphClient, user: str) -> list[str]:
    """Return the server's threads of ``user``: by metadata, and by the owner in their state.

    ``metadata={"user_id": …}`` is what clients set when they create a thread; the graph
    records ``owner`` in every thread's state values, which finds the threads created
    without metadata too.
    """
    found = dict.fromkeys(await _search_all(server, metadata={"user_id": user}))
    try:
        found.update(dict.fromkeys(await _search_all(server, values={OWNER_KEY: user})))
    except (InternalServerError, BadRequestError, UnprocessableEntityError):
        # langgraph dev's in-memory runtime (0.36) answers a values search with a 500 as
        # soon as one thread has no state yet (it compares None); read the values here.
        offset = 0
        while True:
            try:
                page = await server.threads.search(limit=_PAGE, offset=offset)
            except (httpx.ReadError, httpx.RemoteProtocolError):
                # The server closed the connection after its error; the next one is fresh.
                page = await server.threads.search(limit=_PAGE, offset=offset)
            found.update(
                (t["thread_id"], None) for t in page if owner_of(t.get("values"), None) == user
            )
            if len(page) < _PAGE:
                break
            offset += len(page)
    return list(found)


async def _search_all(server: LangGraphClient, **filters: dict[str, str]) -> list[str]:
    """Page through a thread search; return the ids found."""
    found: list[str] = []
    while True:
        page = await server.threads.search(
            metadata=filters.get("metadata"),
            values=filters.get("values"),
            limit=_PAGE,
            offset=len(found),
        )
        found.extend(t["thread_id"] for t in page)
        if len(page) < _PAGE:
            return found


# -- rule provenance ---------------------------------------------------------------------------


async def scrub_rule_provenance(
    store: MemoryStore,
    *,
    episode_ids: Iterable[str],
    user: str,
    drop_user: bool,
    scopes: Sequence[str],
    report: ForgetReport,
    embeddings: Embeddings | None = None,
) -> None:
    """Rewrite rule versions in ``scopes`` so they no longer name or hold what is forgotten.

    See :meth:`agentic_memory.kinds.rules.RuleBook.ascrub`; ``embeddings`` re-embed rule
    texts that lose a rule (default: the configured embeddings).
    """
    kinds = _kinds(store, embeddings)
    removed = list(episode_ids)
    remaining = set(await kinds.episodes.aids(user)) - set(removed)
    # A proposal of the shared rules learned from a forgotten episode holds what it taught.
    proposals = await SharedRules(
        store, kinds.rules.embeddings, rules=kinds.rules
    ).aforget_episodes(user, removed)
    if proposals:
        report.add_deleted(PROPOSALS.name, proposals)
    for scope in scopes:
        done = await kinds.rules.ascrub(
            scope,
            episode_ids=removed,
            user=user,
            drop_user=drop_user,
            remaining_episodes=remaining,
        )
        if done.deleted:
            report.add_deleted(RULES.name, done.deleted)
        report.add_scrubbed(RULES.name, done.rewritten)


# -- public API --------------------------------------------------------------------------------


def _report(store: MemoryStore, user: str) -> ForgetReport:
    return ForgetReport(user=user, store=getattr(store, "backend", "memory"))


async def forget_episode(
    store: MemoryStore, user: str, episode_id: str, *, embeddings: Embeddings | None = None
) -> ForgetReport:
    """Forget one episode of ``user``; scrub it from rule versions (see the module doc).

    ``embeddings`` re-embed rule texts that lose a rule (default: the configured model).

    Raises:
        InvalidInputError: The user has no such episode.
    """
    check_user_id(user)
    report = _report(store, user)
    kinds = _kinds(store, embeddings)
    if await kinds.episodes.aget(user, episode_id) is None:
        raise InvalidInputError(f"user {user!r} has no episode {episode_id!r}")
    report.add_deleted(EPISODES.name, await kinds.episodes.aforget(user, [episode_id]))
    await scrub_rule_provenance(
        store,
        episode_ids=[episode_id],
        user=user,
        drop_user=False,
        scopes=[user, GLOBAL_SCOPE],
        report=report,
        embeddings=embeddings,
    )
    return await _erase(store, report)


async def forget_fact(store: MemoryStore, user: str, fact_id: str) -> ForgetReport:
    """Forget one fact version of ``user``; the rest of its subject's history is re-linked.

    Raises:
        InvalidInputError: The user has no such fact.
    """
    check_user_id(user)
    report = _report(store, user)
    done = await _kinds(store, None).facts.aforget_fact(user, fact_id)
    report.add_deleted(FACTS.name, done.deleted)
    report.add_scrubbed(FACTS.name, done.rewritten)
    return await _erase(store, report)


async def forget_subject(store: MemoryStore, user: str, subject: str) -> ForgetReport:
    """Forget every value, current and past, that ``user`` has for ``subject``.

    Raises:
        InvalidInputError: The user has no fact about that subject.
    """
    check_user_id(user)
    report = _report(store, user)
    n = await _kinds(store, None).facts.aforget(user, subject)
    if n == 0:
        raise InvalidInputError(f"user {user!r} has no fact about {subject!r}")
    report.add_deleted(FACTS.name, n)
    return await _erase(store, report)


async def forget_thread(
    store: MemoryStore,
    user: str,
    thread_id: str,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    server: LangGraphClient | None = None,
    embeddings: Embeddings | None = None,
    kinds: KindRegistry = BUILTIN_KINDS,
) -> ForgetReport:
    """Forget one conversation: its messages, its episodes, facts learned in it and its checkpoints.

    Facts learned in the thread are deleted and the subject's history re-linked, so an older
    value becomes current again when the thread had replaced it. Rules learned only from its
    episodes are removed (see the module doc). With ``server``, the thread is deleted on that
    LangGraph server too, unless its state or metadata names another user. ``kinds``: the
    memory kinds that forget (default the built-in ones).

    Raises:
        InvalidInputError: Neither the store, the checkpointer nor the server knows the thread.
    """
    check_user_id(user)
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidInputError("thread id is empty")
    check_text(thread_id, "thread id")
    check_registry(kinds)
    report = _report(store, user)
    emb = embeddings or LazyEmbeddings()
    known = thread_id in await user_threads(store, user, kinds=kinds)
    has_checkpoints = False
    if checkpointer is not None:
        owner = await athread_owner(checkpointer, thread_id)
        has_checkpoints = owner is not None and owner in ("", user)
    if server is not None and not known and not has_checkpoints:
        owner = await _server_thread_owner(server, thread_id)
        has_checkpoints = owner is not None and owner in ("", user)
    if not known and not has_checkpoints:
        raise InvalidInputError(f"user {user!r} has no thread {thread_id!r}")

    if server is not None:
        # First, so that a server failure leaves the memories that name the thread.
        await _delete_server_threads(server, [thread_id], report)
    # Every memory kind forgets what it learned in the thread.
    episode_ids: list[str] = []
    for kind in kinds.open(store, emb):
        done = await kind.aforget_thread_parts(user, thread_id)
        for name, n in done.deleted.items():
            report.add_deleted(name, n)
        for name, n in done.rewritten.items():
            report.add_scrubbed(name, n)
        episode_ids += done.episodes
    await scrub_rule_provenance(
        store,
        episode_ids=episode_ids,
        user=user,
        drop_user=False,
        scopes=[user, GLOBAL_SCOPE],
        report=report,
        embeddings=embeddings,
    )
    await _erase(store, report)
    if checkpointer is not None:
        await _delete_checkpoints(checkpointer, [thread_id], report)
    return report


async def user_threads(
    store: MemoryStore, user: str, *, kinds: KindRegistry = BUILTIN_KINDS
) -> list[str]:
    """Return the threads ``user`` has talked in: every memory kind's (log, episodes, facts)."""
    check_user_id(user)
    check_registry(kinds)
    emb = LazyEmbeddings()  # reading threads embeds nothing: the model is never loaded
    threads: set[str] = set()
    for kind in kinds.open(store, emb):
        threads |= await kind.athreads(user)
    return sorted(t for t in threads if t)


async def forget_user(
    store: MemoryStore,
    user: str,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    server: LangGraphClient | None = None,
    extra_threads: Iterable[str] = (),
    embeddings: Embeddings | None = None,
    kinds: KindRegistry = BUILTIN_KINDS,
) -> ForgetReport:
    """Erase everything derived from ``user``.

    Deletes their objects in every per-user collection (episodes, facts with history,
    message log, rule versions in their scope), the LangGraph store items other code kept
    under a namespace naming them (``("memories", user)``, see ``AgenticStore.forget_user``)
    and the store's bookkeeping rows that name them; removes from the global rule versions the rules learned only from them (see the
    module doc) and scrubs their episodes and name from the provenance; deletes the
    checkpoints of their threads: those named in their memories, ``extra_threads``, and the
    threads whose runs carried their ``user_id`` or whose state records them as ``owner``.
    With ``server``, deletes those threads on that LangGraph server too, and the server's
    threads whose metadata or state names the user. Finally the embedded store and a SQLite
    checkpointer empty their write-ahead logs, so no copy of a deleted page stays behind.

    ``embeddings`` re-embed global rule texts that lose a rule (default: the configured
    embedding model). ``kinds``: the memory kinds that forget (default the built-in ones).
    """
    check_user_id(user)
    check_registry(kinds)
    if user == GLOBAL_SCOPE:
        raise InvalidInputError("the global rule scope is not a user; it cannot be forgotten")
    report = _report(store, user)
    parts = _kinds(store, embeddings)
    threads = set(await user_threads(store, user, kinds=kinds)) | set(extra_threads)
    if checkpointer is not None:
        # Finds threads that left no memory yet (a turn that failed before it was logged).
        threads.update(await checkpoint_user_threads(checkpointer, user))
    if server is not None:
        # First, while the memories still name the threads. A server that fails does not
        # stop the local part; the threads it kept are found again by their metadata and
        # owner when the call is repeated (see ForgetReport.server_error).
        server_threads = set(threads)
        try:
            server_threads.update(await server_user_threads(server, user))
        except _UNREACHABLE as exc:
            report.server_failure(exc)  # unreachable now: deleting would fail the same way
            server_threads.clear()
        except (LangGraphError, httpx.HTTPError) as exc:
            report.server_failure(exc)
        await _delete_server_threads(server, server_threads, report)
    # The global rules are rewritten before the user's episodes go: if this is interrupted,
    # running it again still finds which versions came from them.
    await scrub_rule_provenance(
        store,
        episode_ids=await parts.episodes.aids(user),
        user=user,
        drop_user=True,
        scopes=[GLOBAL_SCOPE],
        report=report,
        embeddings=embeddings,
    )
    # Every memory kind forgets its part (a user's own knowledge bases too).
    for kind in kinds.open(store, parts.rules.embeddings):
        for name, n in (await kind.aforget_user_parts(user)).items():
            report.add_deleted(name, n)
    for spec in await _other_per_user_collections(store, kinds):
        report.add_deleted(spec.name, await store.adelete_user(spec.name, user))
    await _erase(store, report)
    if checkpointer is not None:
        await _delete_checkpoints(checkpointer, threads, report)
    return report


async def _erase(store: MemoryStore, report: ForgetReport) -> ForgetReport:
    """Give the space back and empty the write-ahead log after a forget.

    See ``MemoryStore.reclaim_space`` and ``MemoryStore.erase_deleted``.
    """
    await areclaim_space(store)
    if not await store.aerase_deleted():
        report.notes.append(
            "the store's write-ahead log could not be emptied now (another process is "
            "reading it); it still holds old pages until its next checkpoint"
        )
    return report


async def _other_per_user_collections(
    store: MemoryStore, registry: KindRegistry
) -> list[CollectionSpec]:
    """Return the store's per-user collections that are not a memory kind's (kept by others)."""
    specs = []
    names = await store.acollections()
    foreign = [n for n in names if registry.of_collection(n) is None]
    for name in sorted(n for n in foreign if n not in registry.bookkeeping):
        spec = await asyncio.to_thread(store.spec, name)
        if spec.per_user:
            specs.append(spec)
    return specs

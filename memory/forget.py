"""Forget memories: one episode, one fact, one subject, one thread, or everything about a user.

Each function returns a ``ForgetReport`` that says what was deleted, per store and collection,
and what was rewritten to stop naming the forgotten memories:

* rule versions (the user's and the global ones) list the episodes they were learned from in
  ``source_episodes`` and the users in ``source_users``; forgotten episodes and users are
  scrubbed from them, the rules themselves stay;
* when forgotten facts had superseded older values of the same subject, the history is
  re-linked so that each subject keeps one current value;
* forgetting a thread or a user also deletes the thread's checkpoints (working memory) through
  the checkpointer's ``adelete_thread``; a user's threads are known from their message log and
  episodes;
* given a LangGraph SDK client (``server=``), the same threads are deleted on that server too
  (``langgraph dev``, LangGraph Platform), whose checkpoints live in the server's own storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from memory.collections import EPISODES, FACTS, MESSAGES, PER_USER_COLLECTIONS, RULES
from memory.facts import normalise_subject
from memstore.base import GLOBAL_SCOPE, MemoryStore, check_user_id
from memstore.types import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    StoredObject,
    UnknownCollectionError,
    Where,
)

CHECKPOINTER = "checkpointer"
SERVER = "server"
"""The store column of the report's row for threads deleted on a LangGraph server."""
_PAGE = 500


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
        }


def _has(store: MemoryStore, spec: CollectionSpec) -> bool:
    try:
        store.spec(spec.name)
    except UnknownCollectionError:
        return False
    return True


async def _all(
    store: MemoryStore, spec: CollectionSpec, user: str, where: Sequence[Where] = ()
) -> list[StoredObject]:
    # Keyset pages by id: no result-window cap (Weaviate's QUERY_MAXIMUM_RESULTS).
    return [o async for o in store.aiterate(spec.name, user=user, where=where, page_size=_PAGE)]


async def _rewrite(
    store: MemoryStore, spec: CollectionSpec, user: str, obj_id: str, props: dict[str, Any]
) -> None:
    """Replace an object's properties, keeping its vector."""
    full = await store.aget(spec.name, obj_id, user=user, include_vector=True)
    if full is None or full.vector is None:
        return
    result = await store.aupsert(
        spec.name, [MemoryObject(id=obj_id, properties=props, vector=full.vector)], user=user
    )
    result.raise_for_failures()


async def _thread_owner(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> str | None:
    """Return the user recorded in the thread's latest checkpoint ("" when there is none)."""
    latest = await checkpointer.aget_tuple({"configurable": {"thread_id": thread_id}})
    if latest is None:
        return None
    owner = (latest.metadata or {}).get("user_id")
    return owner if isinstance(owner, str) else ""


async def _delete_checkpoints(
    checkpointer: BaseCheckpointSaver[Any],
    threads: Iterable[str],
    report: ForgetReport,
) -> None:
    total = 0
    for thread_id in sorted(set(threads)):
        owner = await _thread_owner(checkpointer, thread_id)
        if owner and owner != report.user:
            # The same thread id used by someone else: their working memory is not ours to drop.
            report.kept_threads.append(thread_id)
            continue
        n = 0
        async for _ in checkpointer.alist({"configurable": {"thread_id": thread_id}}):
            n += 1
        await checkpointer.adelete_thread(thread_id)
        total += n
        if n:
            report.threads.append(thread_id)
    report.add_deleted("checkpoints", total, store=CHECKPOINTER)


async def _server_thread_owner(server: LangGraphClient, thread_id: str) -> str | None:
    """Return the user named in the server thread's metadata ("" if none; None: no thread)."""
    try:
        thread = await server.threads.get(thread_id)
    except NotFoundError:
        return None
    owner = (thread.get("metadata") or {}).get("user_id")
    return owner if isinstance(owner, str) else ""


async def _delete_server_threads(
    server: LangGraphClient, threads: Iterable[str], report: ForgetReport
) -> None:
    deleted = 0
    for thread_id in sorted(set(threads)):
        owner = await _server_thread_owner(server, thread_id)
        if owner is None:
            continue
        if owner and owner != report.user:
            if thread_id not in report.kept_threads:
                report.kept_threads.append(thread_id)
            continue
        try:
            await server.threads.delete(thread_id)
        except NotFoundError:
            continue  # deleted by someone else in the meantime
        deleted += 1
        report.server_threads.append(thread_id)
    report.add_deleted("threads", deleted, store=SERVER)


async def server_user_threads(server: LangGraphClient, user: str) -> list[str]:
    """Return the server's threads whose metadata names ``user`` (``metadata={"user_id": …}``)."""
    found: list[str] = []
    while True:
        page = await server.threads.search(
            metadata={"user_id": user}, limit=_PAGE, offset=len(found)
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
) -> None:
    """Rewrite rule versions in ``scopes`` so they no longer name the forgotten episodes.

    ``source_users`` loses ``user`` when ``drop_user`` is set, or when none of the version's
    remaining source episodes belongs to ``user`` any more.
    """
    if not _has(store, RULES):
        return
    removed = set(episode_ids)
    for scope in scopes:
        for version in await _all(store, RULES, scope):
            props = dict(version.properties)
            episodes = list(props.get("source_episodes") or [])
            users = list(props.get("source_users") or [])
            kept = [e for e in episodes if e not in removed]
            new_users = users
            if user in users:
                if drop_user:
                    new_users = [u for u in users if u != user]
                elif len(kept) != len(episodes):
                    still = False
                    if _has(store, EPISODES):
                        for e in kept:
                            if await store.aget(EPISODES.name, e, user=user) is not None:
                                still = True
                                break
                    if not still:
                        new_users = [u for u in users if u != user]
            if kept == episodes and new_users == users:
                continue
            props["source_episodes"] = kept
            props["source_users"] = new_users
            await _rewrite(store, RULES, scope, version.id, props)
            report.add_scrubbed(RULES.name, 1)


# -- facts history -----------------------------------------------------------------------------


def _sort_key(fact: StoredObject) -> tuple[str, str]:
    return (str(fact.properties.get("valid_from") or ""), fact.id)


async def _repair_fact_history(
    store: MemoryStore, user: str, subjects: Iterable[str], report: ForgetReport
) -> None:
    """Re-link the remaining facts of ``subjects`` after some of their versions were deleted.

    A fact whose successor was deleted points to the next remaining value instead; when no
    later value remains and no value is current, the latest remaining one becomes current.
    """
    for subject in sorted(set(subjects)):
        facts = sorted(
            await _all(store, FACTS, user, [Where("subject", "eq", subject)]), key=_sort_key
        )
        if not facts:
            continue
        ids = {f.id for f in facts}
        changed = 0
        for i, fact in enumerate(facts):
            succ = fact.properties.get("superseded_by")
            if not succ or succ in ids:
                continue
            props = dict(fact.properties)
            if i + 1 < len(facts):
                props["superseded_by"] = facts[i + 1].id
            else:
                props["superseded_by"] = None
                props["valid_to"] = None
                props["current"] = True
            await _rewrite(store, FACTS, user, fact.id, props)
            changed += 1
        if not any(f.properties.get("current") for f in facts) and changed == 0:
            latest = facts[-1]
            props = dict(latest.properties)
            props.update(current=True, valid_to=None, superseded_by=None)
            await _rewrite(store, FACTS, user, latest.id, props)
            changed += 1
        report.add_scrubbed(FACTS.name, changed)


# -- public API --------------------------------------------------------------------------------


def _report(store: MemoryStore, user: str) -> ForgetReport:
    return ForgetReport(user=user, store=getattr(store, "backend", "memory"))


async def forget_episode(store: MemoryStore, user: str, episode_id: str) -> ForgetReport:
    """Forget one episode of ``user`` and scrub it from rule provenance.

    Raises:
        InvalidInputError: The user has no such episode.
    """
    check_user_id(user)
    report = _report(store, user)
    if not _has(store, EPISODES) or await store.aget(EPISODES.name, episode_id, user=user) is None:
        raise InvalidInputError(f"user {user!r} has no episode {episode_id!r}")
    report.add_deleted(EPISODES.name, await store.adelete(EPISODES.name, [episode_id], user=user))
    await scrub_rule_provenance(
        store,
        episode_ids=[episode_id],
        user=user,
        drop_user=False,
        scopes=[user, GLOBAL_SCOPE],
        report=report,
    )
    return report


async def forget_fact(store: MemoryStore, user: str, fact_id: str) -> ForgetReport:
    """Forget one fact version of ``user``; the rest of its subject's history is re-linked.

    Raises:
        InvalidInputError: The user has no such fact.
    """
    check_user_id(user)
    report = _report(store, user)
    fact = await store.aget(FACTS.name, fact_id, user=user) if _has(store, FACTS) else None
    if fact is None:
        raise InvalidInputError(f"user {user!r} has no fact {fact_id!r}")
    report.add_deleted(FACTS.name, await store.adelete(FACTS.name, [fact_id], user=user))
    await _repair_fact_history(store, user, [str(fact.properties.get("subject", ""))], report)
    return report


async def forget_subject(store: MemoryStore, user: str, subject: str) -> ForgetReport:
    """Forget every value, current and past, that ``user`` has for ``subject``.

    Raises:
        InvalidInputError: The user has no fact about that subject.
    """
    check_user_id(user)
    report = _report(store, user)
    key = normalise_subject(subject)
    n = 0
    if _has(store, FACTS):
        n = await store.adelete_where(FACTS.name, [Where("subject", "eq", key)], user=user)
    if n == 0:
        raise InvalidInputError(f"user {user!r} has no fact about {subject!r}")
    report.add_deleted(FACTS.name, n)
    return report


async def forget_thread(
    store: MemoryStore,
    user: str,
    thread_id: str,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    server: LangGraphClient | None = None,
) -> ForgetReport:
    """Forget one conversation: its messages, its episodes, facts learned in it and its checkpoints.

    Facts learned in the thread are deleted and the subject's history re-linked, so an older
    value becomes current again when the thread had replaced it. With ``server``, the thread is
    deleted on that LangGraph server too, unless its metadata names another user.

    Raises:
        InvalidInputError: Neither the store, the checkpointer nor the server knows the thread.
    """
    check_user_id(user)
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidInputError("thread id is empty")
    report = _report(store, user)
    by_thread = [Where("thread_id", "eq", thread_id)]
    episode_ids: list[str] = []
    if _has(store, EPISODES):
        episode_ids = [e.id for e in await _all(store, EPISODES, user, by_thread)]
    known = bool(episode_ids)
    if _has(store, MESSAGES):
        n = await store.acount(MESSAGES.name, user=user, where=by_thread)
        known = known or n > 0
    facts: list[StoredObject] = []
    if _has(store, FACTS):
        facts = await _all(store, FACTS, user, [Where("source_thread", "eq", thread_id)])
        known = known or bool(facts)
    has_checkpoints = False
    if checkpointer is not None:
        owner = await _thread_owner(checkpointer, thread_id)
        has_checkpoints = owner is not None and owner in ("", user)
    if server is not None and not known and not has_checkpoints:
        owner = await _server_thread_owner(server, thread_id)
        has_checkpoints = owner is not None and owner in ("", user)
    if not known and not has_checkpoints:
        raise InvalidInputError(f"user {user!r} has no thread {thread_id!r}")

    if server is not None:
        # First, so that a server failure leaves the memories that name the thread.
        await _delete_server_threads(server, [thread_id], report)
    if _has(store, MESSAGES):
        report.add_deleted(
            MESSAGES.name, await store.adelete_where(MESSAGES.name, by_thread, user=user)
        )
    if _has(store, EPISODES):
        report.add_deleted(
            EPISODES.name,
            await store.adelete(EPISODES.name, episode_ids, user=user) if episode_ids else 0,
        )
    if _has(store, FACTS):
        ids = [f.id for f in facts]
        report.add_deleted(
            FACTS.name, await store.adelete(FACTS.name, ids, user=user) if ids else 0
        )
        await _repair_fact_history(
            store, user, [str(f.properties.get("subject", "")) for f in facts], report
        )
    await scrub_rule_provenance(
        store,
        episode_ids=episode_ids,
        user=user,
        drop_user=False,
        scopes=[user, GLOBAL_SCOPE],
        report=report,
    )
    if checkpointer is not None:
        await _delete_checkpoints(checkpointer, [thread_id], report)
    return report


async def user_threads(store: MemoryStore, user: str) -> list[str]:
    """Return the threads ``user`` has talked in, from the message log and the episodes."""
    check_user_id(user)
    threads: set[str] = set()
    for spec in (MESSAGES, EPISODES):
        if _has(store, spec):
            for obj in await _all(store, spec, user):
                t = obj.properties.get("thread_id")
                if isinstance(t, str) and t:
                    threads.add(t)
    if _has(store, FACTS):
        for fact in await _all(store, FACTS, user):
            t = fact.properties.get("source_thread")
            if isinstance(t, str) and t:
                threads.add(t)
    return sorted(threads)


async def forget_user(
    store: MemoryStore,
    user: str,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    server: LangGraphClient | None = None,
    extra_threads: Iterable[str] = (),
) -> ForgetReport:
    """Erase everything derived from ``user``.

    Deletes their episodes, facts (with history), message log and rule versions in their scope;
    scrubs their episodes and their name from the provenance of global rule versions; deletes
    the checkpoints of their threads (from the message log and episodes, plus
    ``extra_threads``). With ``server``, deletes those threads on that LangGraph server too, and
    the server's threads whose metadata names the user.
    """
    check_user_id(user)
    if user == GLOBAL_SCOPE:
        raise InvalidInputError("the global rule scope is not a user; it cannot be forgotten")
    report = _report(store, user)
    threads = set(await user_threads(store, user)) | set(extra_threads)
    if checkpointer is not None:
        # Runs carry the user in their metadata, which finds threads that left no memory yet.
        async for item in checkpointer.alist(None, filter={"user_id": user}):
            thread_id = item.config["configurable"].get("thread_id")
            if isinstance(thread_id, str):
                threads.add(thread_id)
    if server is not None:
        # First, while the memories still name the threads: if the server fails halfway,
        # running the same call again finds the rest.
        server_threads = threads | set(await server_user_threads(server, user))
        await _delete_server_threads(server, server_threads, report)
    episode_ids: list[str] = []
    if _has(store, EPISODES):
        episode_ids = [e.id for e in await _all(store, EPISODES, user)]
    for spec in PER_USER_COLLECTIONS:
        if _has(store, spec):
            report.add_deleted(spec.name, await _adelete_user(store, spec, user))
    await scrub_rule_provenance(
        store,
        episode_ids=episode_ids,
        user=user,
        drop_user=True,
        scopes=[GLOBAL_SCOPE],
        report=report,
    )
    if checkpointer is not None:
        await _delete_checkpoints(checkpointer, threads, report)
    return report


async def _adelete_user(store: MemoryStore, spec: CollectionSpec, user: str) -> int:
    return await asyncio.to_thread(store.delete_user, spec.name, user)

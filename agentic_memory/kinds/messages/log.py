"""``MessageLog``: the message log's facade, one async method per thing a caller does."""

from __future__ import annotations

import builtins
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import BaseMessage

from agentic_memory.kinds._bound import (
    CollectionBound,
    areclaim_space,
    check_user_id,
    checked_now,
    embedded_part,
)
from agentic_memory.kinds.messages.checks import (
    _check_flag,
    _check_forget,
    _check_ids,
    _check_page,
    _check_policy,
    _check_thread,
    _prepare,
    _recall_filters,
)
from agentic_memory.kinds.messages.purge import apurge_log, aretention_of, due
from agentic_memory.kinds.messages.recall import (
    ADAPTIVE_PROBE_ALPHA,
    FUSION_POOL,
    RERANK_POOL,
    _rerank,
    adaptive_fusion,
)
from agentic_memory.kinds.messages.schema import (
    MESSAGES,
    TURN_MARKS,
    LoggedMessage,
    M,
    MarkedBy,
    MessageRetention,
    RecalledMessage,
    message_id,
    turn_mark_id,
)
from agentic_memory.kinds.messages.upgrade import aupgrade_message_log
from agentic_memory.kinds.messages.writing import alog, amark
from agentic_memory.kinds.recall_text import keyword_query
from agentic_memory.kinds.retention import MessagePurge, RetentionPolicy
from agentic_memory.store import (
    InvalidInputError,
    MemoryStore,
    StoredObject,
    StoreError,
    Where,
)
from agentic_memory.store.base import check_alpha

logger = logging.getLogger("agentic_memory.kinds.messages")


class MessageLog(CollectionBound):
    """Per-user message log on a :class:`~agentic_memory.store.MemoryStore` (``MessageLog``)."""

    spec = MESSAGES

    def __init__(
        self,
        store: MemoryStore,
        embeddings: Embeddings,
        *,
        retention: RetentionPolicy | None = None,
    ) -> None:
        """Use ``store`` and ``embeddings``; ``retention`` defaults to the environment's."""
        super().__init__(store, embeddings)
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise InvalidInputError(
                f"retention must be a RetentionPolicy, got {type(retention).__name__}"
            )
        self.retention = retention if retention is not None else RetentionPolicy.from_env()

    message_id = staticmethod(message_id)

    # -- remember -------------------------------------------------------------------------

    async def aremember(
        self,
        user: str,
        thread_id: str,
        messages: Sequence[BaseMessage | Mapping[str, Any]],
        *,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        important: bool | None = None,
        marked_by: MarkedBy = "user",
        retention: RetentionPolicy | None = None,
    ) -> list[str]:
        """Log the human and AI turns of ``messages``; return their ids in order.

        Turn numbers continue from what the thread already holds. ``metadata`` (a JSON
        object) is stored with every message of this call; when it is omitted, a message
        that is already logged keeps its metadata.

        ``important`` marks every message of the call important (``True``) or not
        (``False``); a dict message's own ``"important"`` key wins for that message. When
        neither says, a new message is not important and a logged one keeps its mark.
        ``marked_by`` records who marked them (``"user"`` or ``"model"``).

        Afterwards the user's log is purged by the retention policy when
        ``purge_interval_minutes`` have passed since the last purge of this user in this
        process (see :meth:`apurge`); a failing purge is logged and never fails the write.
        ``retention`` replaces the log's policy for that purge (a graph run's own settings).

        Raises:
            InvalidInputError: an argument is malformed (including content that is not text
                and metadata that is not JSON-serialisable); nothing is written.
            ConflictError: other writers kept adding turns to the thread through every
                attempt; no new turn of this call was logged.
        """
        turns, meta_json = _prepare(user, thread_id, messages, metadata, now)
        _check_flag(important, "important")
        _check_policy(retention)
        if marked_by not in ("user", "model"):
            raise InvalidInputError(f"marked_by must be 'user' or 'model', got {marked_by!r}")
        if important is not None:
            turns = [
                t if t.important is not None else dataclasses.replace(t, important=important)
                for t in turns
            ]
        if not turns:
            return []
        await self._aensure()
        ids = await alog(
            self.store, self.embeddings, user, thread_id, turns, meta_json, now, marked_by
        )
        await self.apurge_if_due(user, retention=retention)
        return ids

    async def apurge_if_due(
        self, user: str, *, retention: RetentionPolicy | None = None
    ) -> MessagePurge | None:
        """Purge the user's log if ``purge_interval_minutes`` have passed since the last time.

        What a write does after it has logged its turns, and what ``AgenticStore``'s sweeper
        does for every user (so the turns of a user who no longer writes expire too). The
        interval is counted per store object and user, in this process. Returns the purge's
        report, or ``None`` when none was due (or automatic purges are off, or it failed: a
        failure is logged, never raised, and the next one after the interval tries again).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        _check_policy(retention)
        policy = retention or self.retention
        every = policy.purge_interval_minutes
        if every is None:
            return None
        if not due(self.store, user, every):
            return None
        try:
            report = await self.apurge(user, retention=policy)
        except StoreError as exc:
            logger.warning("retention purge of %r's message log failed: %s", user, exc)
            return None
        if report.deleted:
            logger.info(
                "retention: deleted %d expired and %d over-cap logged turns of %r",
                report.expired,
                report.over_cap,
                user,
            )
        return report

    # -- recall ---------------------------------------------------------------------------

    async def arecall(
        self,
        user: str,
        query: str,
        *,
        k: int = 5,
        alpha: float | None = None,
        thread_id: str | None = None,
        exclude_thread: str | None = None,
    ) -> list[RecalledMessage]:
        """Return the user's ``k`` logged turns best matching ``query``.

        The store's hybrid search runs the prepared keyword query
        (:func:`agentic_memory.kinds.recall_text.keyword_query`) against each turn's
        ``search_text`` and the query's vector against each turn's. ``alpha`` is the vector
        side's weight (0 = keywords only, 1 = vectors only); ``None`` (the default) chooses it
        per query: the share of the keyword side's best ``AGREEMENT_DEPTH`` hits that the
        vector side also ranks there (:func:`agentic_memory.store.ranking.side_agreement`).
        When the sides agree the vectors refine the order; when they disagree the keywords,
        which carry most of the recall, decide. The store's candidates are then fused again
        at that weight from the raw scores every hit carries, identically on both backends.
        The best ``RERANK_POOL`` hits are re-ranked with their context::

            score = (hybrid + THREAD_WEIGHT * best hit of the same thread
                     + NEIGHBOUR_WEIGHT * better of the adjacent turns' hits
                     + SPEAKER_WEIGHT * (the turn's speaker is named in the query)
                     + OWN_WORDS_WEIGHT * share of the query's keywords in the turn) / 2.75

        (a missing neighbour counts 0), so the score stays in [0, 1]; an important turn's
        score is then lifted by ``IMPORTANCE_WEIGHT`` of what it lacks to 1.

        ``thread_id`` restricts the search to one thread; ``exclude_thread`` leaves one out
        (typically the current conversation, whose turns are already in the context).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        where = _recall_filters(user, query, k, thread_id, exclude_thread)
        if alpha is not None:
            check_alpha(alpha)
        await self._aensure()
        vector = await self.embeddings.aembed_query(embedded_part(query))
        pool = max(k, RERANK_POOL)
        hits = await self.store.ahybrid(
            MESSAGES.name,
            query=keyword_query(query),
            vector=vector,
            alpha=ADAPTIVE_PROBE_ALPHA if alpha is None else alpha,
            limit=max(k, FUSION_POOL) if alpha is None else pool,
            user=user,
            where=where,
        )
        if alpha is None:
            hits = adaptive_fusion(hits, pool)
        return [self._with_expiry(m) for m in _rerank(hits, k, query)]

    def _with_expiry(self, message: M) -> M:
        expiry = self.retention.message_expiry(message.created_at, message.important)
        return dataclasses.replace(message, expires_at=expiry)

    def _logged(self, obj: StoredObject) -> LoggedMessage:
        return self._with_expiry(LoggedMessage._from_stored(obj))

    # -- schema ---------------------------------------------------------------------------

    async def _aensure(self) -> None:
        if not self._ready:
            # A log of an earlier schema is upgraded before first use.
            await aupgrade_message_log(self.store, self.embeddings)
            await self.store.aextend_collection(MESSAGES)
            # Read by every write, written by purges: created with the log, never missing.
            await self.store.aensure_collection(TURN_MARKS)
            self._ready = True

    async def _aforget_marks(self, user: str, thread_id: str | None) -> None:
        """Forget the turn numbers purges took: of one thread, or of all the user's."""
        if TURN_MARKS.name not in await self.store.acollections():
            return
        if thread_id is None:
            await self.store.adelete_user(TURN_MARKS.name, user)
        else:
            await self.store.adelete(TURN_MARKS.name, [turn_mark_id(user, thread_id)], user=user)

    # -- browse ---------------------------------------------------------------------------

    async def alist(
        self, user: str, *, thread_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> builtins.list[LoggedMessage]:
        """Page through a user's log, ordered by thread id, then turn.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        _check_page(user, thread_id, limit, offset)
        await self._aensure()
        if thread_id is not None:
            return await self._athread_page(user, thread_id, limit, offset)
        out: builtins.list[LoggedMessage] = []
        for thread in await self.athreads(user):
            if len(out) >= limit:
                break
            size = await self.store.acount(
                MESSAGES.name, user=user, where=[Where("thread_id", "eq", thread)]
            )
            if offset >= size:
                offset -= size
                continue
            out.extend(await self._athread_page(user, thread, limit - len(out), offset))
            offset = 0
        return out

    async def _athread_page(
        self, user: str, thread_id: str, limit: int, offset: int
    ) -> builtins.list[LoggedMessage]:
        objs = await self.store.alist_objects(
            MESSAGES.name,
            user=user,
            where=[Where("thread_id", "eq", thread_id)],
            limit=limit,
            offset=offset,
            sort_by="turn",
        )
        return [self._logged(o) for o in objs]

    async def athreads(self, user: str) -> builtins.list[str]:
        """Return the ids of the user's threads that have logged turns, sorted."""
        check_user_id(user)
        return sorted({str(o.properties.get("thread_id", "")) for o in await self._aall(user)})

    async def acount(self, user: str, thread_id: str) -> int:
        """Return how many turns of one thread are logged."""
        check_user_id(user)
        if not await self._aexists():
            return 0
        by_thread = [Where("thread_id", "eq", _check_thread(thread_id))]
        return await self.store.acount(MESSAGES.name, user=user, where=by_thread)

    async def afind(self, user: str, thread_id: str, turn: int) -> LoggedMessage | None:
        """Return turn number ``turn`` of a thread, or ``None`` when it is not logged.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        _check_thread(thread_id)
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
            raise InvalidInputError(f"turn must be a non-negative integer, got {turn!r}")
        if not await self._aexists():
            return None
        found = await self.store.alist_objects(
            MESSAGES.name,
            user=user,
            where=[Where("thread_id", "eq", thread_id), Where("turn", "eq", turn)],
            limit=1,
        )
        return self._logged(found[0]) if found else None

    # -- importance -----------------------------------------------------------------------

    async def amark_important(
        self,
        user: str,
        ids: Sequence[str],
        *,
        important: bool = True,
        by: MarkedBy = "user",
    ) -> builtins.list[LoggedMessage]:
        """Mark logged turns important (kept for good, recalled first), or unmark them.

        Every id must be one of ``user``'s logged turns; they are all checked before any is
        changed. Returns the turns as they are now stored. A turn that a purge deletes while
        it is being marked is stored again, marked.

        Raises:
            InvalidInputError: an argument is malformed, or an id is not a logged turn of
                this user (another user's turn is not found either); nothing was changed.
        """
        check_user_id(user)
        wanted = _check_ids(ids)
        _check_flag(important, "important")
        if by not in ("user", "model"):
            raise InvalidInputError(f"by must be 'user' or 'model', got {by!r}")
        if not wanted:
            return []
        if not await self._aexists():
            raise InvalidInputError(f"user {user!r} has no logged message {wanted[0]}")
        await self._aensure()
        found: dict[str, StoredObject] = {}
        for oid in wanted:
            obj = await self.store.aget(MESSAGES.name, oid, user=user, include_vector=True)
            if obj is None or obj.vector is None:
                raise InvalidInputError(
                    f"user {user!r} has no logged message {oid}; nothing was marked"
                )
            found[oid] = obj
        marked = await amark(self.store, user, wanted, found, important, by)
        return [self._logged(marked[oid]) for oid in wanted]

    # -- retention ------------------------------------------------------------------------

    async def apurge(
        self,
        user: str,
        *,
        now: datetime | None = None,
        dry_run: bool = False,
        retention: RetentionPolicy | None = None,
    ) -> MessagePurge:
        """Apply the retention policy to one user's log; return what was (or would be) deleted.

        Deletes the unimportant turns logged more than ``message_days`` ago, then, while the
        user has more than ``max_messages`` turns, the oldest unimportant ones. An important
        turn is never deleted: each delete carries the condition "not important", checked by
        the store when it deletes, so a turn marked important meanwhile stays. Every delete
        is atomic on its own; a purge that dies half-way leaves fewer turns and the next
        purge goes on from there. ``dry_run`` counts without deleting. ``retention``
        replaces the log's policy for this purge. A purge that deleted turns gives their
        space back to the file system (``MemoryStore.reclaim_space``: the embedded store's
        file shrinks once a tenth of it is free).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        moment = checked_now(now)
        _check_flag(dry_run, "dry_run")
        _check_policy(retention)
        if not await self._aexists():
            return MessagePurge(user)
        await self._aensure()
        report = await apurge_log(self.store, user, retention or self.retention, moment, dry_run)
        if report.deleted:
            await areclaim_space(self.store)
        return report

    async def aretention(
        self, user: str, *, now: datetime | None = None, upcoming: int = 5
    ) -> MessageRetention:
        """Say what of the user's log expires when: counts and the first turns to go.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        moment = checked_now(now)
        if isinstance(upcoming, bool) or not isinstance(upcoming, int) or upcoming < 0:
            raise InvalidInputError(f"upcoming must be a non-negative integer, got {upcoming!r}")
        if not await self._aexists():
            return MessageRetention(user, 0, 0, 0, 0, [])
        await self._aensure()
        total, important, expired, over, first = await aretention_of(
            self.store, user, self.retention, moment, upcoming
        )
        return MessageRetention(
            user, total, important, expired, over, [self._logged(o) for o in first]
        )

    # -- forget ---------------------------------------------------------------------------

    async def athread_owner(self, user: str, thread_id: str) -> str | None:
        """Return whose log holds ``thread_id``: ``user`` first, else another user, else None.

        Threads written before their owners were recorded name no owner; the user whose log
        holds the thread is its owner, and a thread nobody logged is nobody's yet.
        """
        if not await self._aexists():
            return None
        where = [Where("thread_id", "eq", _check_thread(thread_id))]
        if await self.store.acount(MESSAGES.name, user=user, where=where):
            return user
        for other in await self.store.ausers(MESSAGES.name):
            if other != user and await self.store.acount(MESSAGES.name, user=other, where=where):
                return other
        return None

    async def aforget_logged_since(
        self, user: str, thread_id: str, message_ids: Sequence[str], since: str
    ) -> int:
        """Take back the turns of ``message_ids`` that were logged at or after ``since``.

        A run that fails after logging its turns takes them back; a message id that names an
        older turn (a message re-sent with the id of a compacted turn) keeps that turn.
        Returns how many turns were deleted.
        """
        if not message_ids or not await self._aexists():
            return 0
        ids = []
        for key in message_ids:
            oid = self.message_id(user, thread_id, key)
            found = await self.store.aget(MESSAGES.name, oid, user=user)
            if found is not None and str(found.properties.get("created_at", "")) >= since:
                ids.append(oid)
        return await self.aforget(user, ids=ids) if ids else 0

    async def aforget(
        self, user: str, *, ids: Sequence[str] | None = None, thread_id: str | None = None
    ) -> int:
        """Delete logged turns by id, or a whole thread; return how many were deleted.

        Raises:
            InvalidInputError: neither or both of ``ids`` and ``thread_id`` are given, or one
                is malformed; nothing is deleted.
        """
        _check_forget(user, ids, thread_id)
        if not await self._aexists():
            return 0
        if ids is not None:
            return await self.store.adelete(MESSAGES.name, builtins.list(ids), user=user)
        assert thread_id is not None
        deleted = await self.store.adelete_where(
            MESSAGES.name, [Where("thread_id", "eq", thread_id)], user=user
        )
        # A forgotten thread leaves nothing, not even its numbers: it starts again at 0.
        await self._aforget_marks(user, thread_id)
        return deleted

    async def aforget_user(self, user: str) -> int:
        """Delete the user's whole log (and its turn marks); return how many turns."""
        deleted = await super().aforget_user(user)
        await self._aforget_marks(user, None)
        return deleted

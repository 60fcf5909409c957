"""The message log: every human and AI turn of every thread, recallable across conversations.

What is logged: LangChain ``HumanMessage``/``AIMessage`` objects (and their streamed
chunks), ``ChatMessage`` and dicts whose ``role`` is ``user``/``human`` or
``assistant``/``ai``. System, developer, tool and function messages are skipped, and so is
a turn whose text is empty (an AI message that only calls tools). Content given as a list of
blocks keeps its text blocks.

Ids are deterministic: ``make_id("msg", user, thread_id, message_id)``, where the message id
is the message's own ``id`` (LangGraph gives every message one) or, without it, ``#<turn>``.
Remembering a message with an id again changes nothing (same turn, same timestamp); a
message without an id is new every time it is given.

Turn numbers are unique and increasing per thread, also with concurrent writers: new turns
are numbered after the thread's last stored turn and created with the store's create-only
``insert``, guarded by "no message of this thread after that turn"; a writer that finds one
reads the thread's last turn again and renumbers. A write reads only the given messages'
ids and the thread's last turn, so its cost does not grow with the user's log.

A message's ``name`` (LangChain's field, or a dict's ``"name"``) is kept as its ``speaker``.
Recall searches a keyword text the log prepares for every message (``search_text``, see
:mod:`agentic_memory.kinds.recall_text`: stems without stop words, of the message, its speaker, its date
and the turn before it) and the vector of ``"<speaker>: <content>"``. The hybrid hits are
then re-ranked with their context (see :meth:`MessageLog.recall`).

Importance: a turn can be marked important by the user (:meth:`MessageLog.mark_important`,
``amem memories messages important``, ``/important`` in ``amem chat``) or flagged by the
memory model when it extracts facts (``ExtractedFacts.important``; ``log_turn`` stores it).
An important turn is recalled before an equally relevant one and is never purged.

Retention (:mod:`agentic_memory.kinds.retention`): a turn expires ``message_days`` after it
was logged (off by default), unless important, and a user keeps at most ``max_messages``
turns, the oldest unimportant ones pruned first. Writes purge their user's log at most every
``purge_interval_minutes``; :meth:`MessageLog.purge` does it on request. Listings show each
turn's expiry (``expires_at``).
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import functools
import json
import logging
import random
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage

from agentic_memory.kinds._bound import (
    MAX_MESSAGE_CHARS,
    CollectionBound,
    check_search,
    check_user_id,
)
from agentic_memory.kinds.recall_text import embedding_text, keyword_query, keywords, search_text
from agentic_memory.kinds.retention import MessagePurge, RetentionPolicy
from agentic_memory.store import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    Property,
    SearchHit,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    Where,
    check_text,
    make_id,
)
from agentic_memory.store.base import check_alpha
from agentic_memory.store.ranking import refuse, side_agreement
from agentic_memory.twins import blocking

__all__ = [
    "IMPORTANCE_WEIGHT",
    "MAX_MESSAGE_CHARS",
    "MESSAGES",
    "MESSAGES_V1",
    "MESSAGES_V2",
    "NEIGHBOUR_WEIGHT",
    "OWN_WORDS_WEIGHT",
    "RERANK_POOL",
    "SPEAKER_WEIGHT",
    "THREAD_WEIGHT",
    "LoggedMessage",
    "MarkedBy",
    "MessageLog",
    "MessageRetention",
    "RecalledMessage",
    "Role",
]

logger = logging.getLogger(__name__)


Role = Literal["human", "ai"]
MarkedBy = Literal["user", "model"]

_ROLES: dict[str, Role | None] = {
    "human": "human",
    "user": "human",
    "ai": "ai",
    "assistant": "ai",
    "system": None,
    "developer": None,
    "tool": None,
    "function": None,
}
_PAGE = 1000
_MAX_ATTEMPTS = 200
_UPGRADE_COLLECTION = "MessageLogUpgrade"

RERANK_POOL = 50
"""How many hybrid hits recall re-ranks (at least; more when ``k`` is larger)."""
FUSION_POOL = 200
"""How many hits the adaptive search (``alpha=None``) asks the store for: both sides'
candidates with their raw scores, fused again here at the query's own weight."""
AGREEMENT_DEPTH = 10
"""How deep the two sides are compared for the adaptive weight: the share of the keyword
side's best ten that the vector side also ranks in its best ten is the vector side's weight."""
ADAPTIVE_PROBE_ALPHA = 0.5
"""The weight of the adaptive search's store call: any weight strictly between 0 and 1 makes
the store search both sides and report each hit's raw scores; the hits are re-fused anyway."""
THREAD_WEIGHT = 0.25
"""Weight of the best hit of a turn's thread: a turn in a conversation that was about the
query outranks an equally good match in one that was not."""
NEIGHBOUR_WEIGHT = 0.25
"""Weight of the better of the turns just before and after it: the answer to a question
sits next to the turn that asked it."""
SPEAKER_WEIGHT = 0.25
"""Weight of a turn said by someone the query names ("What does Nate play?"): a question
about a person asks about what that person said. Equal to the other context weights."""
OWN_WORDS_WEIGHT = 1.0
"""Weight of the share of the query's keywords the turn itself says (its speaker and text,
not the turn before it that its keyword text also holds): a classic coordination factor,
counted like the hybrid relevance, so a turn that says the words outranks the reply that
only follows them."""
IMPORTANCE_WEIGHT = 0.2
"""An important turn closes this share of the gap between its score and a perfect one
(``score + IMPORTANCE_WEIGHT * (1 - score)``): it outranks an equally relevant turn, and
a turn somewhat more relevant, but not a clearly better match. When every candidate is
equally important the order does not change (the lift is monotonic)."""


MESSAGES = CollectionSpec(
    name="MessageLog",
    per_user=True,
    description="Every conversation turn, for recall across conversations.",
    properties=(
        Property("content", "text", filterable=False),
        Property("role", "text"),
        Property("speaker", "text", description="the message's name, if it had one"),
        Property("thread_id", "text"),
        Property("turn", "int"),
        Property("created_at", "date"),
        Property("metadata_json", "text", filterable=False, description="caller metadata"),
        Property(
            "search_text",
            "text",
            searchable=True,
            filterable=False,
            description="prepared keyword text (agentic_memory.kinds.recall_text): stems of the content, "
            "speaker, date and preceding turn, without stop words",
        ),
        # Added in the third schema (a store of the second gets them on first use, its
        # messages untouched): see MESSAGES_V2.
        Property(
            "important",
            "bool",
            description="kept for good and recalled first: marked by the user or flagged "
            "by the model",
        ),
        Property(
            "important_by",
            "text",
            filterable=False,
            description="who marked it important: user or model",
        ),
    ),
    # A write reads the thread's last turn; recall's neighbours are (thread, turn) too.
    indexes=(("thread_id", "turn"),),
)

_ADDED_IN_V3 = ("important", "important_by")

MESSAGES_V2 = dataclasses.replace(
    MESSAGES, properties=tuple(p for p in MESSAGES.properties if p.name not in _ADDED_IN_V3)
)
"""The schema before importance: a store holding it gets the two properties added (no
message is rewritten) on first use."""

MESSAGES_V1 = CollectionSpec(
    name="MessageLog",
    per_user=True,
    description="The message log as versions before the prepared keyword text stored it.",
    properties=(
        Property("content", "text", searchable=True, filterable=False),
        Property("role", "text"),
        Property("thread_id", "text"),
        Property("turn", "int"),
        Property("created_at", "date"),
        Property("metadata_json", "text", filterable=False, description="caller metadata"),
    ),
    # A write reads the thread's last turn: without this, SQLite walks the user's
    # (user, turn) index across every thread, so a write cost O(user) instead of O(thread).
    indexes=(("thread_id", "turn"),),
)
"""The earlier schema of ``MessageLog``; a store holding it is upgraded on first use."""


@dataclass(frozen=True)
class LoggedMessage:
    """One logged turn."""

    id: str
    role: Role
    content: str
    thread_id: str
    turn: int
    created_at: str
    metadata: dict[str, Any]
    speaker: str = field(default="", kw_only=True)
    """The message's ``name`` when it had one, else ""."""
    important: bool = field(default=False, kw_only=True)
    """Kept for good (never purged) and recalled first."""
    important_by: str = field(default="", kw_only=True)
    """Who marked it important: ``"user"`` or ``"model"`` ("" when it is not)."""
    expires_at: str | None = field(default=None, kw_only=True)
    """When the retention policy lets it expire (RFC 3339); ``None``: not by age."""

    def to_message(self) -> BaseMessage:
        """Return it as a LangChain message (``HumanMessage`` or ``AIMessage``)."""
        name = self.speaker or None
        if self.role == "human":
            return HumanMessage(content=self.content, id=self.id, name=name)
        return AIMessage(content=self.content, id=self.id, name=name)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return asdict(self)

    @staticmethod
    def _fields(obj: StoredObject) -> dict[str, Any]:
        p = obj.properties
        raw_meta = p.get("metadata_json")
        return {
            "id": obj.id,
            "role": p.get("role", "human"),
            "content": p.get("content", ""),
            "thread_id": p.get("thread_id", ""),
            "turn": int(p.get("turn", 0)),
            "created_at": p.get("created_at", ""),
            "metadata": json.loads(raw_meta) if raw_meta else {},
            "speaker": p.get("speaker") or "",
            "important": bool(p.get("important")),
            "important_by": str(p.get("important_by") or "") if p.get("important") else "",
        }

    @classmethod
    def _from_stored(cls, obj: StoredObject) -> LoggedMessage:
        return cls(**cls._fields(obj))


@dataclass(frozen=True)
class RecalledMessage(LoggedMessage):
    """A logged turn found by :meth:`MessageLog.recall`, with its recall score in [0, 1]."""

    score: float


M = TypeVar("M", bound=LoggedMessage)


@dataclass(frozen=True)
class MessageRetention:
    """Where one user's message log stands with the retention policy (what expires when)."""

    user: str
    total: int
    important: int
    expired: int
    """Turns already past their expiry, deleted by the next purge."""
    over_cap: int
    """Unimportant turns beyond ``max_messages``, pruned (oldest first) by the next purge."""
    next: list[LoggedMessage]
    """The oldest unimportant turns, each with ``expires_at``: the first to go."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {**asdict(self), "next": [m.to_dict() for m in self.next]}


@dataclass(frozen=True)
class _Turn:
    role: Role
    text: str
    message_id: str | None
    name: str = ""
    important: bool | None = None


_LAST_PURGE: weakref.WeakKeyDictionary[MemoryStore, dict[str, float]] = weakref.WeakKeyDictionary()
"""When each user's log was last purged after a write, per store (monotonic seconds)."""
_LAST_PURGE_LOCK = threading.Lock()


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

    @staticmethod
    def message_id(user: str, thread_id: str, key: str) -> str:
        """Return the stored id of the message keyed ``key`` (its own id, or ``#<turn>``)."""
        return make_id("msg", user, thread_id, key)

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
        process (see :meth:`purge`); a failing purge is logged and never fails the write.
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
        vectors: dict[str, list[float]] = {}
        for attempt in range(_MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(_backoff_delay(attempt))
            known: dict[str, StoredObject] = {}
            for oid in _keyed_ids(user, thread_id, turns):
                if (obj := await self.store.aget(MESSAGES.name, oid, user=user)) is not None:
                    known[oid] = obj
            last = await self._alast(user, thread_id)
            before = {
                turn: await self._aturn_text(user, thread_id, turn)
                for turn in _earlier_turns_needed(user, thread_id, turns, known, last)
            }
            plan = _plan(
                user, thread_id, turns, known, last, before, meta_json, _stamp(now), marked_by
            )
            missing = _unembedded(plan, vectors)
            if missing:
                embedded = await self.embeddings.aembed_documents(missing)
                vectors.update(zip(missing, embedded, strict=True))
            changed, new = _objects(plan, vectors)
            if changed:
                result = await self.store.aupsert(MESSAGES.name, changed, user=user)
                result.raise_for_failures()
            try:
                if new:
                    result = await self.store.ainsert(
                        MESSAGES.name, new, user=user, unless=_later(thread_id, _number(last))
                    )
                    result.raise_for_failures()
            except ConflictError:
                continue
            await self.apurge_if_due(user, retention=retention)
            return [item.id for item in plan]
        raise _gave_up(user, thread_id)

    remember = blocking(aremember)

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
        moment = time.monotonic()
        with _LAST_PURGE_LOCK:
            seen = _LAST_PURGE.setdefault(self.store, {})
            last = seen.get(user)
            if last is not None and moment - last < every * 60:
                return None
            # Claimed before the purge runs: concurrent writes of the user do not all purge.
            seen[user] = moment
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

    purge_if_due = blocking(apurge_if_due)

    async def _alast(self, user: str, thread_id: str) -> StoredObject | None:
        # One row through the (thread_id, turn) index: the cost does not grow with the
        # user's other threads, nor with this one.
        top = await self.store.alist_objects(
            MESSAGES.name,
            user=user,
            where=[Where("thread_id", "eq", thread_id)],
            limit=1,
            sort_by="turn",
            descending=True,
        )
        return top[0] if top else None

    async def _aturn_text(self, user: str, thread_id: str, turn: int) -> str:
        """Return the text of one turn of a thread ("" when there is none)."""
        found = await self.store.alist_objects(
            MESSAGES.name,
            user=user,
            where=[Where("thread_id", "eq", thread_id), Where("turn", "eq", turn)],
            limit=1,
        )
        return str(found[0].properties.get("content", "")) if found else ""

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
        per query: the share of the keyword side's best :data:`AGREEMENT_DEPTH` hits that the
        vector side also ranks there (:func:`agentic_memory.store.ranking.side_agreement`).
        When the sides agree the vectors refine the order; when they disagree the keywords,
        which carry most of the recall, decide. The store's candidates are then fused again
        at that weight from the raw scores every hit carries, identically on both backends.
        The best :data:`RERANK_POOL` hits are re-ranked with their context::

            score = (hybrid + THREAD_WEIGHT * best hit of the same thread
                     + NEIGHBOUR_WEIGHT * better of the adjacent turns' hits
                     + SPEAKER_WEIGHT * (the turn's speaker is named in the query)
                     + OWN_WORDS_WEIGHT * share of the query's keywords in the turn) / 2.75

        (a missing neighbour counts 0), so the score stays in [0, 1]; an important turn's
        score is then lifted by :data:`IMPORTANCE_WEIGHT` of what it lacks to 1.

        ``thread_id`` restricts the search to one thread; ``exclude_thread`` leaves one out
        (typically the current conversation, whose turns are already in the context).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        where = _recall_filters(user, query, k, thread_id, exclude_thread)
        if alpha is not None:
            check_alpha(alpha)
        await self._aensure()
        vector = await self.embeddings.aembed_query(query)
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

    recall = blocking(arecall)

    def _with_expiry(self, message: M) -> M:
        expiry = self.retention.message_expiry(message.created_at, message.important)
        return dataclasses.replace(message, expires_at=expiry)

    def _logged(self, obj: StoredObject) -> LoggedMessage:
        return self._with_expiry(LoggedMessage._from_stored(obj))

    # -- schema ---------------------------------------------------------------------------

    async def _aensure(self) -> None:
        if not self._ready:
            # A log of an earlier schema is upgraded (in worker threads) before first use.
            await asyncio.to_thread(upgrade_message_log, self.store, self.embeddings)
            await self.store.aextend_collection(MESSAGES)
            self._ready = True

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

    list = blocking(alist)

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

    threads = blocking(athreads)

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

    find = blocking(afind)

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
        found: builtins.list[StoredObject] = []
        for oid in wanted:
            obj = await self.store.aget(MESSAGES.name, oid, user=user, include_vector=True)
            if obj is None or obj.vector is None:
                raise InvalidInputError(
                    f"user {user!r} has no logged message {oid}; nothing was marked"
                )
            found.append(obj)
        changed: builtins.list[MemoryObject] = []
        result: builtins.list[LoggedMessage] = []
        for obj in found:
            props = dict(obj.properties)
            props.pop("important_by", None)
            # The user's word wins: a turn the model flagged and the user marks is theirs.
            props.update(_importance(important, obj, by))
            if props != obj.properties:
                assert obj.vector is not None
                changed.append(MemoryObject(obj.id, props, obj.vector))
            result.append(self._logged(StoredObject(obj.id, props)))
        if changed:
            written = await self.store.aupsert(MESSAGES.name, changed, user=user)
            written.raise_for_failures()
        return result

    mark_important = blocking(amark_important)

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
        replaces the log's policy for this purge.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        moment = _moment(now)
        _check_flag(dry_run, "dry_run")
        _check_policy(retention)
        if not await self._aexists():
            return MessagePurge(user)
        await self._aensure()
        policy = retention or self.retention
        cutoff = policy.message_cutoff(moment)
        expired = 0
        if cutoff is not None:
            old = [Where("created_at", "lt", cutoff), _UNIMPORTANT]
            if dry_run:
                expired = await self.store.acount(MESSAGES.name, user=user, where=old)
            else:
                expired = await self.store.adelete_where(MESSAGES.name, old, user=user)
        total = await self.store.acount(MESSAGES.name, user=user)
        if dry_run:
            total -= expired
        cap, over = policy.max_messages, 0
        if cap is not None and total > cap:
            if dry_run:
                prunable = (
                    await self.store.acount(MESSAGES.name, user=user, where=[_UNIMPORTANT])
                    - expired
                )
                over = min(total - cap, prunable)
            else:
                over = await self._aprune_oldest(user, cap)
        remaining = total - over if dry_run else await self.store.acount(MESSAGES.name, user=user)
        return MessagePurge(
            user,
            expired=expired,
            over_cap=over,
            cutoff=cutoff,
            remaining=remaining,
            important_over_cap=max(0, remaining - cap) if cap is not None else 0,
        )

    purge = blocking(apurge)

    async def _aprune_oldest(self, user: str, cap: int) -> int:
        """Delete the oldest unimportant turns until the user has ``cap``; return how many.

        Each round reads the oldest unimportant turns it needs, then checks, from the turns
        no other purge can take (those logged at or after the newest chosen one, and the
        important ones), that ``cap`` turns stay once the chosen ones are gone; a purge
        running at the same time may have pruned since this one counted, and then the round
        starts again. The chosen turns are deleted by name (thread and turn), each still on
        condition of being unimportant: a range of dates would also take a turn another
        writer stamped earlier but stored after the read.
        """
        name = MESSAGES.name
        deleted = stale = 0
        while (excess := await self.store.acount(name, user=user) - cap) > 0:
            chosen = await self.store.alist_objects(
                name,
                user=user,
                where=[_UNIMPORTANT],
                limit=min(excess, _PAGE),
                sort_by="created_at",
            )
            if not chosen:
                break  # the rest is important: kept
            stamp = str(chosen[-1].properties["created_at"])
            tied = sum(1 for o in chosen if str(o.properties["created_at"]) == stamp)
            stays = (
                await self.store.acount(name, user=user, where=[Where("created_at", "gte", stamp)])
                - tied
                + await self.store.acount(
                    name,
                    user=user,
                    where=[Where("created_at", "lt", stamp), Where("important", "eq", True)],
                )
            )
            if stays < cap:
                stale += 1
                if stale > _PRUNE_RETRIES:
                    break  # other purges keep pruning this log: they finish the job
                continue
            turns: dict[str, list[int]] = {}
            for obj in chosen:
                turns.setdefault(str(obj.properties["thread_id"]), []).append(
                    int(obj.properties["turn"])
                )
            n = 0
            for thread, numbers in turns.items():
                n += await self.store.adelete_where(
                    name,
                    [Where("thread_id", "eq", thread), Where("turn", "in", numbers), _UNIMPORTANT],
                    user=user,
                )
            if n == 0:
                break  # another purge took them, or they were marked important meanwhile
            deleted += n
        return deleted

    async def aretention(
        self, user: str, *, now: datetime | None = None, upcoming: int = 5
    ) -> MessageRetention:
        """Say what of the user's log expires when: counts and the first turns to go.

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        moment = _moment(now)
        if isinstance(upcoming, bool) or not isinstance(upcoming, int) or upcoming < 0:
            raise InvalidInputError(f"upcoming must be a non-negative integer, got {upcoming!r}")
        if not await self._aexists():
            return MessageRetention(user, 0, 0, 0, 0, [])
        await self._aensure()
        name, store = MESSAGES.name, self.store
        total = await store.acount(name, user=user)
        important = await store.acount(name, user=user, where=[Where("important", "eq", True)])
        cutoff = self.retention.message_cutoff(moment)
        expired = 0
        if cutoff is not None:
            old = [Where("created_at", "lt", cutoff), _UNIMPORTANT]
            expired = await store.acount(name, user=user, where=old)
        cap = self.retention.max_messages
        over = 0 if cap is None else max(0, min(total - expired - cap, total - important - expired))
        first: builtins.list[StoredObject] = []
        if upcoming:
            first = await store.alist_objects(
                name, user=user, where=[_UNIMPORTANT], limit=upcoming, sort_by="created_at"
            )
        return MessageRetention(
            user, total, important, expired, over, [self._logged(o) for o in first]
        )

    retention_status = blocking(aretention)

    # -- forget ---------------------------------------------------------------------------

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
        return await self.store.adelete_where(
            MESSAGES.name, [Where("thread_id", "eq", thread_id)], user=user
        )

    forget = blocking(aforget)


# -- validation and planning (pure) -------------------------------------------------------


@dataclass(frozen=True)
class _Planned:
    id: str
    props: dict[str, Any]
    write: bool
    new: bool
    """Not stored yet: created with a fresh turn number (create-only)."""


_PRUNE_RETRIES = 8
"""Rounds a purge starts again because another purge pruned the same log meanwhile."""

_UNIMPORTANT = Where("important", "ne", True)
"""Not marked important: a turn without the property (logged before it existed) too."""


def _check_flag(value: object, name: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")


def _check_policy(retention: object) -> None:
    if retention is not None and not isinstance(retention, RetentionPolicy):
        raise InvalidInputError(
            f"retention must be a RetentionPolicy, got {type(retention).__name__}"
        )


def _check_ids(ids: object) -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise InvalidInputError("ids must be a list of message ids, not one string")
    out: list[str] = []
    for oid in ids:
        if not isinstance(oid, str):
            raise InvalidInputError(f"a message id must be a string, got {type(oid).__name__}")
        try:
            canonical = str(uuid.UUID(oid))
        except ValueError:
            raise InvalidInputError(
                f"{oid!r:.80} is not a message id (ids are UUIDs, as `amem memories messages "
                "list --json` shows them)"
            ) from None
        if canonical not in out:
            out.append(canonical)
    return out


def _moment(now: datetime | None) -> datetime:
    moment = now or datetime.now(UTC)
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise InvalidInputError("now must be a datetime with a timezone")
    return moment


def _check_thread(thread_id: object, name: str = "thread_id") -> str:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {thread_id!r}")
    return check_text(thread_id, name)


def _text_of(content: object, where: str) -> str:
    """Return the text of a message content: a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    parts.append(block["text"])
            else:
                raise InvalidInputError(
                    f"{where}: content blocks must be strings or dicts, got {type(block).__name__}"
                )
        return "\n".join(parts)
    raise InvalidInputError(
        f"{where}: content must be a string or a list of content blocks, "
        f"got {type(content).__name__}"
    )


def check_message_text(text: str, where: str = "message") -> str:
    """Refuse a message longer than ``MAX_MESSAGE_CHARS`` or holding invalid Unicode.

    Cheap (a length and an encoding check), so it runs before anything is embedded.
    """
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidInputError(
            f"{where}: {len(text):,} characters is more than the {MAX_MESSAGE_CHARS:,} a "
            "message may have; split it or attach it as a document (amem ingest)"
        )
    return check_text(text, where)


def _turn_of(message: object, index: int) -> _Turn | None:
    where = f"message {index}"
    if isinstance(message, BaseMessage):
        # isinstance, not .type: streamed chunks (AIMessageChunk) are AI messages too.
        if isinstance(message, HumanMessage):
            kind = "human"
        elif isinstance(message, AIMessage):
            kind = "ai"
        elif isinstance(message, ChatMessage):
            kind = message.role
        else:
            kind = "system"  # system, tool, function and remove messages are not logged
        content: object = message.content
        message_id = message.id
        name: object = message.name
        flag: object = None
    elif isinstance(message, Mapping):
        if "role" not in message or "content" not in message:
            raise InvalidInputError(f"{where}: a dict message needs 'role' and 'content'")
        kind = message["role"]
        content = message["content"]
        message_id = message.get("id")
        name = message.get("name")
        flag = message.get("important")
        _check_flag(flag, f"{where}: important")
        if not isinstance(kind, str):
            raise InvalidInputError(f"{where}: role must be a string, got {kind!r}")
    else:
        raise InvalidInputError(
            f"{where}: expected a LangChain message or a dict, got {type(message).__name__}"
        )
    if kind not in _ROLES:
        raise InvalidInputError(
            f"{where}: unknown role {kind!r} (expected one of {', '.join(sorted(_ROLES))})"
        )
    text = _text_of(content, where)
    if _ROLES[kind] is not None:
        check_message_text(text, where)
    if message_id is not None and (not isinstance(message_id, str) or not message_id):
        raise InvalidInputError(f"{where}: id must be a non-empty string, got {message_id!r}")
    if name is not None and not isinstance(name, str):
        raise InvalidInputError(f"{where}: name must be a string, got {type(name).__name__}")
    if message_id is not None:
        check_text(message_id, f"{where}: id")
    role = _ROLES[kind]
    if role is None or not text.strip():
        return None
    return _Turn(
        role, text, message_id, " ".join((name or "").split()), flag if flag is None else bool(flag)
    )


def _prepare(
    user: object,
    thread_id: object,
    messages: object,
    metadata: object,
    now: datetime | None,
) -> tuple[list[_Turn], str | None]:
    check_user_id(user)
    _check_thread(thread_id)
    if isinstance(messages, str | bytes | BaseMessage | Mapping) or not isinstance(
        messages, Sequence
    ):
        raise InvalidInputError(
            f"messages must be a list of messages, got {type(messages).__name__}"
        )
    turns = [t for i, m in enumerate(messages) if (t := _turn_of(m, i)) is not None]
    seen: set[str] = set()
    for t in turns:
        if t.message_id is not None:
            if t.message_id in seen:
                raise InvalidInputError(f"message id {t.message_id!r} appears twice")
            seen.add(t.message_id)
    meta_json: str | None = None
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
        try:
            meta_json = json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"metadata must be JSON-serialisable: {exc}") from None
        check_text(meta_json, "metadata")
    _stamp(now)  # a naive ``now`` is refused before anything is read
    return turns, meta_json


def _stamp(now: datetime | None) -> str:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise InvalidInputError("now must carry a timezone")
    return moment.astimezone(UTC).isoformat()


def _keyed_ids(user: str, thread_id: str, turns: list[_Turn]) -> list[str]:
    """Ids of the turns that carry their own message id (those may be stored already)."""
    return [MessageLog.message_id(user, thread_id, t.message_id) for t in turns if t.message_id]


def _later(thread_id: str, last: int | None) -> list[Where]:
    """Return the guard of an insert: a message of the thread after the last turn read."""
    where = [Where("thread_id", "eq", thread_id)]
    return where if last is None else [*where, Where("turn", "gt", last)]


def _unembedded(plan: list[_Planned], vectors: dict[str, list[float]]) -> list[str]:
    texts = dict.fromkeys(_embedding_text(item.props) for item in plan if item.write)
    return [text for text in texts if text not in vectors]


def _objects(
    plan: list[_Planned], vectors: dict[str, list[float]]
) -> tuple[list[MemoryObject], list[MemoryObject]]:
    """Split the writes: changes to stored messages, and new messages."""
    changed: list[MemoryObject] = []
    new: list[MemoryObject] = []
    for item in plan:
        if item.write:
            obj = MemoryObject(item.id, item.props, vectors[_embedding_text(item.props)])
            (new if item.new else changed).append(obj)
    return changed, new


def _backoff_delay(attempt: int) -> float:
    # Writers that collided retry at slightly different moments instead of in lockstep.
    return random.uniform(0, 0.002 * min(attempt, 10))


def _gave_up(user: str, thread_id: str) -> ConflictError:
    return ConflictError(
        f"thread {thread_id!r} of {user!r} kept growing during {_MAX_ATTEMPTS} attempts to "
        "log these messages; nothing new was logged"
    )


def _plan(
    user: str,
    thread_id: str,
    turns: list[_Turn],
    existing: dict[str, StoredObject],
    last: StoredObject | None,
    before: dict[int, str],
    meta_json: str | None,
    created_at: str,
    marked_by: str = "user",
) -> list[_Planned]:
    """Give each turn its id, turn number and properties; skip writes that change nothing.

    ``existing`` holds the stored messages among the turns' own ids; new turns are numbered
    after ``last``, the thread's stored message with the largest turn (``None``: the thread
    is empty). ``before`` holds the text of stored turns just before rewritten ones (see
    :func:`_earlier_turns_needed`), for the "turn before" part of the keyword text.
    """
    last_turn = _number(last)
    next_turn = 0 if last_turn is None else last_turn + 1
    texts = dict(before)
    if last is not None and last_turn is not None:
        texts[last_turn] = str(last.properties.get("content", ""))
    plan: list[_Planned] = []
    for t in turns:
        key = t.message_id
        old = existing.get(MessageLog.message_id(user, thread_id, key)) if key else None
        meta = meta_json
        if old is not None:
            turn = int(old.properties.get("turn", 0))
            stamp = str(old.properties.get("created_at", created_at))
            if meta is None:
                # No metadata given: keep what the message already has.
                meta = old.properties.get("metadata_json")
        else:
            turn, stamp = next_turn, created_at
            next_turn += 1
        oid = MessageLog.message_id(user, thread_id, key or f"#{turn}")
        texts[turn] = t.text
        props = _message_properties(
            t.text, t.role, thread_id, turn, stamp, t.name, meta, texts.get(turn - 1, "")
        )
        props.update(_importance(t.important, old, marked_by))
        unchanged = old is not None and all(
            old.properties.get(name) == props.get(name)
            for name in (
                "content",
                "role",
                "speaker",
                "metadata_json",
                "search_text",
                "important",
                "important_by",
            )
        )
        plan.append(_Planned(oid, props, not unchanged, old is None))
    return plan


def _importance(flag: bool | None, old: StoredObject | None, marked_by: str) -> dict[str, Any]:
    """Return the importance properties of a message written again (``old``) or anew.

    No flag keeps what a logged message has (a turn logged again is not unmarked); a new
    one is not important.
    """
    if flag is None:
        if old is None:
            return {"important": False}
        kept: dict[str, Any] = {
            k: old.properties[k] for k in ("important", "important_by") if k in old.properties
        }
        return kept
    if not flag:
        return {"important": False}
    was = (
        old.properties.get("important_by")
        if old is not None and old.properties.get("important")
        else None
    )
    return {"important": True, "important_by": "user" if "user" in (marked_by, was) else "model"}


def _number(last: StoredObject | None) -> int | None:
    return None if last is None else int(last.properties.get("turn", 0))


def _earlier_turns_needed(
    user: str,
    thread_id: str,
    turns: list[_Turn],
    existing: dict[str, StoredObject],
    last: StoredObject | None,
) -> list[int]:
    """Turn numbers whose stored text a rewrite of an already logged message needs.

    A new turn follows ``last`` (or the turn before it in this call); a message logged
    again keeps its turn number, and its keyword text holds the turn before it.
    """
    given = {
        int(existing[oid].properties.get("turn", 0))
        for t in turns
        if t.message_id
        and (oid := MessageLog.message_id(user, thread_id, t.message_id)) in existing
    }
    known = {_number(last)} | given
    return sorted({turn - 1 for turn in given if turn > 0} - known)


def _message_properties(
    content: str,
    role: str,
    thread_id: str,
    turn: int,
    created_at: str,
    speaker: str,
    meta_json: str | None,
    previous: str,
) -> dict[str, Any]:
    props: dict[str, Any] = {
        "content": content,
        "role": role,
        "thread_id": thread_id,
        "turn": turn,
        "created_at": created_at,
        "search_text": search_text(
            content, speaker=speaker, created_at=created_at, previous=previous
        ),
    }
    if speaker:
        props["speaker"] = speaker
    if meta_json is not None:
        props["metadata_json"] = meta_json
    return props


def embedding_text_of(props: Mapping[str, Any]) -> str:
    """Return the text a logged message is embedded from: ``"<speaker>: <content>"``."""
    return _embedding_text(props)


def _embedding_text(props: Mapping[str, Any]) -> str:
    return embedding_text(str(props["content"]), speaker=str(props.get("speaker") or ""))


@functools.lru_cache(maxsize=1 << 14)
def _own_keywords(speaker: str, content: str) -> frozenset[str]:
    # The same turns come back query after query: their keywords are worth keeping.
    return frozenset(keywords(f"{speaker} {content}"))


def adaptive_fusion(hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
    """Fuse a hybrid search's hits again at the weight the two sides' agreement gives.

    The vector side's weight is :func:`~agentic_memory.store.ranking.side_agreement` of the
    hits' raw keyword and vector scores at :data:`AGREEMENT_DEPTH`; the hits are then fused
    with ``relativeScoreFusion`` at that weight and ordered with the server's tie rules
    (:func:`~agentic_memory.store.ranking.refuse`). When no turn matches the query's
    keywords the vectors alone rank (weight 1), and without vector hits the keywords do.
    Returns the best ``limit``, their ``score`` the new fused score.
    """
    by_id = {h.id: h for h in hits}
    keyword = {h.id: h.keyword_score for h in hits if h.keyword_score is not None}
    vector = {h.id: h.vector_score for h in hits if h.vector_score is not None}
    if not keyword:
        # Agreement 0 would weigh the vectors 0: every hit would score 0 and the order be lost.
        alpha = 1.0
    else:
        alpha = side_agreement(keyword, vector, AGREEMENT_DEPTH)
    order, fused = refuse(keyword, vector, alpha, {i: i for i in by_id}, limit)
    return [dataclasses.replace(by_id[i], score=fused[i]) for i in order]


@functools.lru_cache(maxsize=1 << 10)
def _speaker_keywords(speaker: str) -> frozenset[str]:
    return frozenset(keywords(speaker))


def _rerank(hits: Sequence[SearchHit], k: int, query: str) -> list[RecalledMessage]:
    """Re-rank hybrid hits with their context and the query keywords they say themselves."""
    wanted = set(keywords(query))
    best: dict[str, float] = {}
    at: dict[tuple[str, int], float] = {}
    for h in hits:
        thread = str(h.properties.get("thread_id", ""))
        turn = int(h.properties.get("turn", 0))
        best[thread] = max(best.get(thread, 0.0), h.score)
        at[(thread, turn)] = h.score
    scale = 1.0 + THREAD_WEIGHT + NEIGHBOUR_WEIGHT + SPEAKER_WEIGHT + OWN_WORDS_WEIGHT
    scored: list[tuple[float, SearchHit]] = []
    for h in hits:
        thread = str(h.properties.get("thread_id", ""))
        turn = int(h.properties.get("turn", 0))
        neighbour = max(at.get((thread, turn - 1), 0.0), at.get((thread, turn + 1), 0.0))
        speaker = str(h.properties.get("speaker") or "")
        # Named: every word of the speaker's name is among the query's keywords.
        name = _speaker_keywords(speaker)
        named = 1.0 if name and name <= wanted else 0.0
        own = 0.0
        if wanted:
            said = _own_keywords(speaker, str(h.properties.get("content", "")))
            own = len(wanted & said) / len(wanted)
        score = (
            h.score
            + THREAD_WEIGHT * best[thread]
            + NEIGHBOUR_WEIGHT * neighbour
            + SPEAKER_WEIGHT * named
            + OWN_WORDS_WEIGHT * own
        ) / scale
        score = min(1.0, max(0.0, score))
        if h.properties.get("important"):
            score += IMPORTANCE_WEIGHT * (1.0 - score)
        scored.append((score, h))
    scored.sort(key=lambda pair: (-pair[0], pair[1].id))
    return [
        RecalledMessage(**LoggedMessage._fields(StoredObject(h.id, h.properties)), score=score)
        for score, h in scored[:k]
    ]


# -- upgrading a log written before the prepared keyword text ------------------------------


def _shape(spec: CollectionSpec) -> tuple[Any, ...]:
    return (
        spec.per_user,
        tuple((p.name, p.type, p.searchable, p.filterable) for p in spec.properties),
    )


def upgrade_message_log(store: MemoryStore, embeddings: Embeddings) -> bool:
    """Bring a ``MessageLog`` of an earlier schema to the current one.

    A log of the second schema (:data:`MESSAGES_V2`) only lacks the importance properties:
    they are added (``MemoryStore.add_properties``) and no message is rewritten. A log of
    the first (:data:`MESSAGES_V1`) is copied as follows.

    Every message is copied, with its keyword text and vector computed as :meth:`MessageLog.
    remember` computes them, into a staging collection; only once the copy is complete is the
    old collection dropped, recreated with the new schema and filled from the staging copy,
    which is then dropped. Each step can be repeated, so a process killed at any point leaves
    the messages in the old log or in the staging copy, and the next first use finishes the
    job. Returns whether anything was upgraded.
    """
    staging = dataclasses.replace(MESSAGES, name=_UPGRADE_COLLECTION)
    names = set(store.collections())
    extended = False
    for spec in (MESSAGES, staging):
        # The staging copy too: an upgrade from the first schema that an earlier version
        # left half-done holds the second.
        if spec.name in names and _shape(store.spec(spec.name)) == _shape(MESSAGES_V2):
            extended = bool(store.extend_collection(spec)) or extended
    if MESSAGES.name in names:
        current = _shape(store.spec(MESSAGES.name))
        if current == _shape(MESSAGES_V1):
            store.ensure_collection(staging)
            for user in store.users(MESSAGES.name):
                _copy_upgraded(store, embeddings, user, staging.name)
            store.drop_collection(MESSAGES.name)
        elif current != _shape(MESSAGES) or _UPGRADE_COLLECTION not in names:
            return extended  # current now, or unknown (ensure_collection then says so)
    elif _UPGRADE_COLLECTION not in names:
        return extended
    store.ensure_collection(MESSAGES)
    for user in store.users(staging.name):
        batch: list[MemoryObject] = []
        for obj in store.iterate(staging.name, user=user, page_size=_PAGE, include_vector=True):
            if obj.vector is not None:
                batch.append(MemoryObject(obj.id, obj.properties, obj.vector))
            if len(batch) >= _PAGE:
                store.upsert(MESSAGES.name, batch, user=user).raise_for_failures()
                batch = []
        if batch:
            store.upsert(MESSAGES.name, batch, user=user).raise_for_failures()
    try:
        store.drop_collection(staging.name)
    except UnknownCollectionError:
        pass  # another process finished the same upgrade
    return True


def _copy_upgraded(store: MemoryStore, embeddings: Embeddings, user: str, target: str) -> None:
    old = list(store.iterate(MESSAGES.name, user=user, page_size=_PAGE))
    texts = {
        (str(o.properties.get("thread_id", "")), int(o.properties.get("turn", 0))): str(
            o.properties.get("content", "")
        )
        for o in old
    }
    for start in range(0, len(old), _PAGE):
        batch = old[start : start + _PAGE]
        props = []
        for o in batch:
            p = o.properties
            thread, turn = str(p.get("thread_id", "")), int(p.get("turn", 0))
            props.append(
                _message_properties(
                    str(p.get("content", "")),
                    str(p.get("role", "human")),
                    thread,
                    turn,
                    str(p.get("created_at", "")),
                    "",
                    p.get("metadata_json"),
                    texts.get((thread, turn - 1), ""),
                )
            )
        vectors = embeddings.embed_documents([_embedding_text(p) for p in props])
        objects = [MemoryObject(o.id, p, v) for o, p, v in zip(batch, props, vectors, strict=True)]
        store.upsert(target, objects, user=user).raise_for_failures()


def _recall_filters(
    user: object, query: object, k: object, thread_id: object, exclude_thread: object
) -> list[Where]:
    check_user_id(user)
    check_search(query, k)
    where: list[Where] = []
    if thread_id is not None:
        where.append(Where("thread_id", "eq", _check_thread(thread_id)))
    if exclude_thread is not None:
        where.append(Where("thread_id", "ne", _check_thread(exclude_thread, "exclude_thread")))
    return where


def _check_page(user: object, thread_id: object, limit: object, offset: object) -> None:
    check_user_id(user)
    if thread_id is not None:
        _check_thread(thread_id)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")


def _check_forget(user: object, ids: object, thread_id: object) -> None:
    check_user_id(user)
    if (ids is None) == (thread_id is None):
        raise InvalidInputError(
            "forget needs exactly one of ids= or thread_id= (forget_user deletes everything)"
        )
    if ids is not None:
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidInputError("ids must be a list of message ids, not one string")
    else:
        _check_thread(thread_id)

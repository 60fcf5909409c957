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
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import functools
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage

from agentic_memory.kinds._bound import CollectionBound, check_user_id
from agentic_memory.kinds.recall_text import embedding_text, keyword_query, keywords, search_text
from agentic_memory.store import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    Property,
    SearchHit,
    StoredObject,
    UnknownCollectionError,
    Where,
    check_text,
    make_id,
)
from agentic_memory.twins import blocking

__all__ = [
    "MAX_MESSAGE_CHARS",
    "MESSAGES",
    "MESSAGES_V1",
    "NEIGHBOUR_WEIGHT",
    "OWN_WORDS_WEIGHT",
    "RERANK_POOL",
    "THREAD_WEIGHT",
    "LoggedMessage",
    "MessageLog",
    "RecalledMessage",
    "Role",
]

MAX_MESSAGE_CHARS = 100_000
"""The longest message (and recall query) accepted, in characters.

About 25,000 tokens of English prose: more than a whole default context window (7,900
tokens), yet it is embedded and stored in well under a second, where a 10 MB message took
27 s. Longer input is refused before any work with ``InvalidInputError``; the graph's
admission uses the same limit.
"""

Role = Literal["human", "ai"]

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
THREAD_WEIGHT = 0.25
"""Weight of the best hit of a turn's thread: a turn in a conversation that was about the
query outranks an equally good match in one that was not."""
NEIGHBOUR_WEIGHT = 0.25
"""Weight of the better of the turns just before and after it: the answer to a question
sits next to the turn that asked it."""
OWN_WORDS_WEIGHT = 1.0
"""Weight of the share of the query's keywords the turn itself says (its speaker and text,
not the turn before it that its keyword text also holds): a classic coordination factor,
counted like the hybrid relevance, so a turn that says the words outranks the reply that
only follows them."""


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
    ),
    # A write reads the thread's last turn; recall's neighbours are (thread, turn) too.
    indexes=(("thread_id", "turn"),),
)

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
        }

    @classmethod
    def _from_stored(cls, obj: StoredObject) -> LoggedMessage:
        return cls(**cls._fields(obj))


@dataclass(frozen=True)
class RecalledMessage(LoggedMessage):
    """A logged turn found by :meth:`MessageLog.recall`, with its recall score in [0, 1]."""

    score: float


@dataclass(frozen=True)
class _Turn:
    role: Role
    text: str
    message_id: str | None
    name: str = ""


class MessageLog(CollectionBound):
    """Per-user message log on a :class:`~agentic_memory.store.MemoryStore` (``MessageLog``)."""

    spec = MESSAGES

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
    ) -> list[str]:
        """Log the human and AI turns of ``messages``; return their ids in order.

        Turn numbers continue from what the thread already holds. ``metadata`` (a JSON
        object) is stored with every message of this call; when it is omitted, a message
        that is already logged keeps its metadata.

        Raises:
            InvalidInputError: an argument is malformed (including content that is not text
                and metadata that is not JSON-serialisable); nothing is written.
            ConflictError: other writers kept adding turns to the thread through every
                attempt; no new turn of this call was logged.
        """
        turns, meta_json = _prepare(user, thread_id, messages, metadata, now)
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
            plan = _plan(user, thread_id, turns, known, last, before, meta_json, _stamp(now))
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
            return [item.id for item in plan]
        raise _gave_up(user, thread_id)

    remember = blocking(aremember)

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
        alpha: float = 0.5,
        thread_id: str | None = None,
        exclude_thread: str | None = None,
    ) -> list[RecalledMessage]:
        """Return the user's ``k`` logged turns best matching ``query``.

        The store's hybrid search (``alpha`` 0 = keywords only, 1 = vectors only) runs the
        prepared keyword query (:func:`agentic_memory.kinds.recall_text.keyword_query`)
        against each turn's ``search_text`` and the query's vector against each turn's; its
        best :data:`RERANK_POOL` hits are then re-ranked with their context::

            score = (hybrid + THREAD_WEIGHT * best hit of the same thread
                     + NEIGHBOUR_WEIGHT * better of the adjacent turns' hits
                     + OWN_WORDS_WEIGHT * share of the query's keywords in the turn) / 2.5

        (a missing neighbour counts 0), so the score stays in [0, 1].

        ``thread_id`` restricts the search to one thread; ``exclude_thread`` leaves one out
        (typically the current conversation, whose turns are already in the context).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        where = _recall_filters(user, query, k, thread_id, exclude_thread)
        await self._aensure()
        vector = await self.embeddings.aembed_query(query)
        hits = await self.store.ahybrid(
            MESSAGES.name,
            query=keyword_query(query),
            vector=vector,
            alpha=alpha,
            limit=max(k, RERANK_POOL),
            user=user,
            where=where,
        )
        return _rerank(hits, k, query)

    recall = blocking(arecall)

    # -- schema ---------------------------------------------------------------------------

    async def _aensure(self) -> None:
        if not self._ready:
            # A log of the earlier schema is upgraded (in worker threads) before first use.
            await asyncio.to_thread(upgrade_message_log, self.store, self.embeddings)
            await self.store.aensure_collection(MESSAGES)
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
        return [LoggedMessage._from_stored(o) for o in objs]

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
    elif isinstance(message, Mapping):
        if "role" not in message or "content" not in message:
            raise InvalidInputError(f"{where}: a dict message needs 'role' and 'content'")
        kind = message["role"]
        content = message["content"]
        message_id = message.get("id")
        name = message.get("name")
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
    return _Turn(role, text, message_id, " ".join((name or "").split()))


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
        unchanged = old is not None and all(
            old.properties.get(name) == props.get(name)
            for name in ("content", "role", "speaker", "metadata_json", "search_text")
        )
        plan.append(_Planned(oid, props, not unchanged, old is None))
    return plan


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
    scale = 1.0 + THREAD_WEIGHT + NEIGHBOUR_WEIGHT + OWN_WORDS_WEIGHT
    scored: list[tuple[float, SearchHit]] = []
    for h in hits:
        thread = str(h.properties.get("thread_id", ""))
        turn = int(h.properties.get("turn", 0))
        neighbour = max(at.get((thread, turn - 1), 0.0), at.get((thread, turn + 1), 0.0))
        own = 0.0
        if wanted:
            said = _own_keywords(
                str(h.properties.get("speaker") or ""), str(h.properties.get("content", ""))
            )
            own = len(wanted & said) / len(wanted)
        score = (
            h.score
            + THREAD_WEIGHT * best[thread]
            + NEIGHBOUR_WEIGHT * neighbour
            + OWN_WORDS_WEIGHT * own
        ) / scale
        scored.append((min(1.0, max(0.0, score)), h))
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
    """Bring a ``MessageLog`` of the earlier schema (:data:`MESSAGES_V1`) to the current one.

    Every message is copied, with its keyword text and vector computed as :meth:`MessageLog.
    remember` computes them, into a staging collection; only once the copy is complete is the
    old collection dropped, recreated with the new schema and filled from the staging copy,
    which is then dropped. Each step can be repeated, so a process killed at any point leaves
    the messages in the old log or in the staging copy, and the next first use finishes the
    job. Returns whether anything was upgraded.
    """
    staging = dataclasses.replace(MESSAGES, name=_UPGRADE_COLLECTION)
    names = set(store.collections())
    if MESSAGES.name in names:
        current = _shape(store.spec(MESSAGES.name))
        if current == _shape(MESSAGES_V1):
            store.ensure_collection(staging)
            for user in store.users(MESSAGES.name):
                _copy_upgraded(store, embeddings, user, staging.name)
            store.drop_collection(MESSAGES.name)
        elif current != _shape(MESSAGES) or _UPGRADE_COLLECTION not in names:
            return False  # current already, or unknown (ensure_collection then says so)
    elif _UPGRADE_COLLECTION not in names:
        return False
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
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must be a non-empty string")
    check_message_text(query, "query")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
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

"""What the message log stores: its collection, the earlier schemas, a logged turn's shape.

A turn is stored with its text, role, speaker, thread, turn number, date, the caller's
metadata, a prepared keyword text (:mod:`agentic_memory.kinds.recall_text`) and its importance;
it is embedded from ``"<speaker>: <content>"``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from agentic_memory.kinds.recall_text import embedding_text, search_text
from agentic_memory.store import (
    CollectionSpec,
    Property,
    StoredObject,
    make_id,
)

Role = Literal["human", "ai"]
MarkedBy = Literal["user", "model"]

PAGE = 1000
"""Rows a purge or an upgrade reads or writes per request."""

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
            "speaker, date and the turns before and after it, without stop words",
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

TURN_MARKS = CollectionSpec(
    name="MessageTurnMarks",
    per_user=True,
    description="Per thread, the highest turn number a purge deleted: never given again.",
    properties=(Property("thread_id", "text"), Property("turn", "int")),
)
"""Bookkeeping of the log (no memory of its own, not exported): a purge that deletes turns
first raises their thread's mark to the highest of them, and a writer numbers new turns
after both the thread's last stored turn and its mark. Without it, a thread whose newest
turns were purged would hand their numbers (and, for a message without an id, their ids)
out again, and a slower purge that chose the old turns could delete the new ones."""

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
    """A logged turn found by :meth:`MessageLog.arecall`, with its recall score in [0, 1]."""

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


def message_id(user: str, thread_id: str, key: str) -> str:
    """Return the stored id of the message keyed ``key`` (its own id, or ``#<turn>``)."""
    return make_id("msg", user, thread_id, key)


def turn_mark_id(user: str, thread_id: str) -> str:
    """Return the id of a thread's mark in :data:`TURN_MARKS`."""
    return make_id("turn-mark", user, thread_id)


def message_properties(
    content: str,
    role: str,
    thread_id: str,
    turn: int,
    created_at: str,
    speaker: str,
    meta_json: str | None,
    previous: str,
    following: str = "",
) -> dict[str, Any]:
    """Return the stored properties of a turn.

    ``previous`` and ``following`` are the texts of the turns before and after it in its
    thread ("" when there is none yet).
    """
    props: dict[str, Any] = {
        "content": content,
        "role": role,
        "thread_id": thread_id,
        "turn": turn,
        "created_at": created_at,
        "search_text": search_text(
            content,
            speaker=speaker,
            created_at=created_at,
            previous=previous,
            following=following,
        ),
    }
    if speaker:
        props["speaker"] = speaker
    if meta_json is not None:
        props["metadata_json"] = meta_json
    return props


def embedding_text_of(props: Mapping[str, Any]) -> str:
    """Return the text a logged message is embedded from: ``"<speaker>: <content>"``."""
    return embedding_text(str(props["content"]), speaker=str(props.get("speaker") or ""))

"""The episodes' schema and records: what the kind, its namespaces and its readers share.

A module of its own so that the namespaces (:mod:`~agentic_memory.kinds.episodes.space`)
read episodes without importing the kind that builds them (:class:`EpisodicMemory`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from agentic_memory.kinds.recall_text import search_text_property
from agentic_memory.store import CollectionSpec, Property, StoredObject, make_id

EPISODES = CollectionSpec(
    name="EpisodicMemory",
    per_user=True,
    description="One reflection per finished conversation, with the conversation itself.",
    properties=(
        Property("conversation", "text", filterable=False),
        Property("context_tags", "text[]"),
        Property("conversation_summary", "text", filterable=False),
        Property("what_worked", "text", filterable=False),
        Property("what_to_avoid", "text", filterable=False),
        Property("thread_id", "text"),
        Property("created_at", "date"),
        Property("importance", "number", description="0..1, set by the reflection"),
        Property("important", "bool", description="marked important by the user: never pruned"),
        search_text_property("the tags, reflection and conversation"),
    ),
)
"""The per-user collection of episodes: one reflection per finished conversation. Keyword
search reads ``search_text`` only."""

EPISODES_V2 = CollectionSpec(
    name=EPISODES.name,
    per_user=True,
    description=EPISODES.description,
    properties=(
        Property("conversation", "text", searchable=True, filterable=False),
        Property("context_tags", "text[]", searchable=True),
        Property("conversation_summary", "text", searchable=True, filterable=False),
        Property("what_worked", "text", searchable=True, filterable=False),
        Property("what_to_avoid", "text", searchable=True, filterable=False),
        *EPISODES.properties[5:9],
    ),
)
"""The schema before the prepared keyword text: the raw texts and tags were searched. A
store holding it is upgraded on first use (see :meth:`EpisodicMemory._aensure`)."""

EPISODES_V1 = CollectionSpec(
    name=EPISODES.name,
    per_user=True,
    description=EPISODES.description,
    properties=EPISODES_V2.properties[:-1],
)
"""The schema before ``important``; a store holding it is upgraded on first use too."""


class ReflectionLike(Protocol):
    """What :meth:`EpisodicMemory.astore` needs from a reflection (:class:`Reflection`)."""

    context_tags: list[str]
    conversation_summary: str
    what_worked: str
    what_to_avoid: str
    importance: float


@dataclass(frozen=True)
class Episode:
    """A stored reflection on one conversation."""

    id: str
    thread_id: str
    conversation: str
    context_tags: list[str]
    conversation_summary: str
    what_worked: str
    what_to_avoid: str
    importance: float
    created_at: str
    important: bool = False
    """Marked important by the user: recalled as if ``importance`` were 1, never pruned."""

    def to_dict(self, *, with_conversation: bool = False) -> dict[str, Any]:
        """Return a JSON-safe dict (the conversation text only when asked for)."""
        data = asdict(self)
        if not with_conversation:
            data.pop("conversation")
        return data

    @classmethod
    def _from_stored(cls, obj: StoredObject) -> Episode:
        p = obj.properties
        return cls(
            id=obj.id,
            thread_id=str(p.get("thread_id") or ""),
            conversation=str(p.get("conversation") or ""),
            context_tags=list(p.get("context_tags") or []),
            conversation_summary=str(p.get("conversation_summary") or ""),
            what_worked=str(p.get("what_worked") or ""),
            what_to_avoid=str(p.get("what_to_avoid") or ""),
            importance=float(p.get("importance") or 0.0),
            created_at=str(p.get("created_at") or ""),
            important=bool(p.get("important")),
        )

    @property
    def weight(self) -> float:
        """The importance recall and pruning use: 1 when marked important."""
        return 1.0 if self.important else self.importance


@dataclass(frozen=True)
class RecalledEpisode:
    """An episode with the parts of its recall score."""

    episode: Episode
    relevance: float
    recency: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict: the episode's fields plus the scores."""
        return {
            **self.episode.to_dict(),
            "relevance": round(self.relevance, 4),
            "recency": round(self.recency, 4),
            "score": round(self.score, 4),
        }


def episode_id(user: str, thread_id: str, conversation: int) -> str:
    """Return the id of conversation number ``conversation`` (1-based) on a thread."""
    return make_id("episode", user, thread_id, str(conversation))


def is_importance(value: object) -> bool:
    """Whether ``value`` is an episode's importance: a number (not a bool) in [0, 1]."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


class Episodes(Protocol):
    """What the namespaces use of the episodes kind (:class:`EpisodicMemory`)."""

    async def astore(
        self,
        user: str,
        thread: str,
        reflection: ReflectionLike,
        text: str,
        /,
        *,
        conversation: int | None,
        now: datetime | None,
    ) -> str:
        """Store a reflection; return the episode id."""
        ...

    async def arecall(
        self, user: str, query: str, /, *, k: int, alpha: float, now: datetime | None
    ) -> builtins.list[RecalledEpisode]:
        """Return the user's best episodes for a query."""
        ...

    async def alist(
        self, user: str, *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Episode]:
        """Return the user's episodes, newest first."""
        ...

    async def aget(self, user: str, episode_id: str) -> Episode | None:
        """One episode by id, or ``None``."""
        ...

    async def aforget(self, user: str, episode_ids: Sequence[str]) -> int:
        """Delete episodes by id; return how many existed."""
        ...

    async def amark_important(
        self, user: str, episode_ids: Sequence[str], *, important: bool = True
    ) -> builtins.list[Episode]:
        """Mark episodes important, or unmark them."""
        ...

"""Episodic memory: one reflection per finished conversation, recalled by hybrid search.

Recall ranks candidates from the store's hybrid search (BM25 + vector, fused by
relativeScoreFusion into a relevance in [0, 1]) by a weighted sum::

    score = 0.6 * relevance + 0.2 * recency + 0.2 * importance
    recency = 0.5 ** (age_in_days / half_life_days)

so a relevant episode wins, and among similar ones the recent and important come first.
``importance`` (0..1) is set by the reflection itself. The weights are
:data:`RELEVANCE_WEIGHT`, :data:`RECENCY_WEIGHT` and :data:`IMPORTANCE_WEIGHT`.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from agentic_memory.kinds._bound import CollectionBound, check_user_id
from agentic_memory.kinds.collections import EPISODES
from agentic_memory.store import (
    InvalidInputError,
    MemoryObject,
    StoredObject,
    Where,
    check_text,
    make_id,
)

__all__ = [
    "IMPORTANCE_WEIGHT",
    "RECENCY_WEIGHT",
    "RELEVANCE_WEIGHT",
    "Episode",
    "EpisodicMemory",
    "RecalledEpisode",
    "ReflectionLike",
]

RELEVANCE_WEIGHT = 0.6
RECENCY_WEIGHT = 0.2
IMPORTANCE_WEIGHT = 0.2
_PAGE = 100


class ReflectionLike(Protocol):
    """What :meth:`EpisodicMemory.store` needs from a reflection (``graph.schemas.Reflection``)."""

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
        )


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


class EpisodicMemory(CollectionBound):
    """Per-user episodes on a :class:`~memstore.MemoryStore` (collection ``EpisodicMemory``)."""

    spec = EPISODES

    @staticmethod
    def episode_id(user: str, thread_id: str, conversation: int) -> str:
        """Return the id of conversation number ``conversation`` (1-based) on a thread."""
        return make_id("episode", user, thread_id, str(conversation))

    def store_reflection(
        self,
        user: str,
        thread_id: str,
        reflection: ReflectionLike,
        conversation_text: str,
        *,
        conversation: int | None = None,
        now: datetime | None = None,
    ) -> str:
        """Store a reflection; return the episode id.

        The id is deterministic per (user, thread, conversation number), so storing the
        same conversation again replaces it instead of adding a copy. ``conversation``
        defaults to one more than the episodes already stored for the thread.

        Raises:
            InvalidInputError: an argument is malformed; nothing is written.
        """
        check_user_id(user)
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise InvalidInputError("thread_id must be a non-empty string")
        if not isinstance(conversation_text, str) or not conversation_text.strip():
            raise InvalidInputError("conversation_text must be a non-empty string")
        importance = float(reflection.importance)
        if not 0.0 <= importance <= 1.0:
            raise InvalidInputError(f"importance must be in [0, 1], got {importance}")
        if conversation is not None and (
            isinstance(conversation, bool) or not isinstance(conversation, int) or conversation < 1
        ):
            raise InvalidInputError(
                f"conversation must be a positive integer, got {conversation!r}"
            )
        tags = [str(t).strip().lower() for t in reflection.context_tags if str(t).strip()]
        check_text(thread_id, "thread_id")
        check_text(conversation_text, "conversation_text")
        for name in ("conversation_summary", "what_worked", "what_to_avoid"):
            value = getattr(reflection, name)
            if isinstance(value, str):
                check_text(value, name)
        for tag in tags:
            check_text(tag, "context tag")
        self._ensure()
        if conversation is None:
            conversation = (
                self.store.count(
                    EPISODES.name, user=user, where=[Where("thread_id", "eq", thread_id)]
                )
                + 1
            )
        props: dict[str, Any] = {
            "conversation": conversation_text,
            "context_tags": tags,
            "conversation_summary": reflection.conversation_summary,
            "what_worked": reflection.what_worked,
            "what_to_avoid": reflection.what_to_avoid,
            "thread_id": thread_id,
            "created_at": _rfc3339(now),
            "importance": importance,
        }
        vector = self.embeddings.embed_documents([_search_text(props)])[0]
        episode_id = self.episode_id(user, thread_id, conversation)
        self.store.upsert(
            EPISODES.name, [MemoryObject(episode_id, props, vector)], user=user
        ).raise_for_failures()
        return episode_id

    def recall(
        self,
        user: str,
        query: str,
        *,
        k: int = 3,
        alpha: float = 0.5,
        half_life_days: float = 30.0,
        now: datetime | None = None,
    ) -> builtins.list[RecalledEpisode]:
        """Return the user's ``k`` best episodes for ``query``, re-ranked (see module doc).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("query must be a non-empty string")
        check_text(query, "query")
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise InvalidInputError(f"k must be a positive integer, got {k!r}")
        if not half_life_days > 0:
            raise InvalidInputError(f"half_life_days must be positive, got {half_life_days!r}")
        moment = _moment(now)
        self._ensure()
        vector = self.embeddings.embed_query(query)
        hits = self.store.hybrid(
            EPISODES.name, query=query, vector=vector, alpha=alpha, limit=max(4 * k, 10), user=user
        )
        ranked: builtins.list[RecalledEpisode] = []
        for hit in hits:
            episode = Episode._from_stored(StoredObject(hit.id, hit.properties))
            recency = _recency(episode.created_at, moment, half_life_days)
            score = (
                RELEVANCE_WEIGHT * hit.score
                + RECENCY_WEIGHT * recency
                + IMPORTANCE_WEIGHT * episode.importance
            )
            ranked.append(RecalledEpisode(episode, hit.score, recency, score))
        ranked.sort(key=lambda r: (-r.score, r.episode.id))
        return ranked[:k]

    def list(self, user: str, *, limit: int = 100, offset: int = 0) -> builtins.list[Episode]:
        """Return the user's episodes, newest first."""
        check_user_id(user)
        self._ensure()
        objs = self.store.list_objects(
            EPISODES.name,
            user=user,
            limit=limit,
            offset=offset,
            sort_by="created_at",
            descending=True,
        )
        return [Episode._from_stored(o) for o in objs]

    def get(self, user: str, episode_id: str) -> Episode | None:
        """One episode by id, or ``None``."""
        check_user_id(user)
        self._ensure()
        obj = self.store.get(EPISODES.name, episode_id, user=user)
        return Episode._from_stored(obj) if obj else None

    def forget(self, user: str, episode_ids: Sequence[str]) -> int:
        """Delete episodes by id; return how many existed."""
        check_user_id(user)
        self._ensure()
        return self.store.delete(EPISODES.name, episode_ids, user=user)

    def forget_user(self, user: str) -> int:
        """Delete every episode of a user; return how many."""
        check_user_id(user)
        self._ensure()
        return self.store.delete_user(EPISODES.name, user)

    # -- async twins ----------------------------------------------------------------------

    async def astore(
        self,
        user: str,
        thread_id: str,
        reflection: ReflectionLike,
        conversation_text: str,
        *,
        conversation: int | None = None,
        now: datetime | None = None,
    ) -> str:
        """Async :meth:`store_reflection` (runs in a worker thread)."""
        return await asyncio.to_thread(
            self.store_reflection,
            user,
            thread_id,
            reflection,
            conversation_text,
            conversation=conversation,
            now=now,
        )

    async def arecall(
        self,
        user: str,
        query: str,
        *,
        k: int = 3,
        alpha: float = 0.5,
        half_life_days: float = 30.0,
        now: datetime | None = None,
    ) -> builtins.list[RecalledEpisode]:
        """Async :meth:`recall`."""
        return await asyncio.to_thread(
            lambda: self.recall(
                user, query, k=k, alpha=alpha, half_life_days=half_life_days, now=now
            )
        )

    async def alist(
        self, user: str, *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Episode]:
        """Async :meth:`list`."""
        return await asyncio.to_thread(lambda: self.list(user, limit=limit, offset=offset))

    async def aget(self, user: str, episode_id: str) -> Episode | None:
        """Async :meth:`get`."""
        return await asyncio.to_thread(self.get, user, episode_id)

    async def aforget(self, user: str, episode_ids: Sequence[str]) -> int:
        """Async :meth:`forget`."""
        return await asyncio.to_thread(self.forget, user, episode_ids)


def _search_text(props: dict[str, Any]) -> str:
    return "\n".join(
        [
            ", ".join(props["context_tags"]),
            props["conversation_summary"],
            props["what_worked"],
            props["what_to_avoid"],
        ]
    )


def _moment(now: datetime | None) -> datetime:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise InvalidInputError("now must carry a timezone")
    return moment


def _rfc3339(now: datetime | None) -> str:
    return _moment(now).astimezone(UTC).isoformat()


def _recency(created_at: str, now: datetime, half_life_days: float) -> float:
    try:
        created = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    age_days = max(0.0, (now - created).total_seconds() / 86400.0)
    return float(0.5 ** (age_days / half_life_days))

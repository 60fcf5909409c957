"""The LangGraph namespaces of the episodes kind: items read and written through its classes.

The mapping is in ``docs/langgraph-store.md``; the base is :mod:`agentic_memory.namespaces.family`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph.store.base import Item, SearchItem

from agentic_memory.kinds.episodes.schema import (
    EPISODES,
    Episode,
    Episodes,
    episode_id,
    is_importance,
)
from agentic_memory.namespaces import family
from agentic_memory.namespaces.search import Found, SpaceSearch, parse_time
from agentic_memory.store import (
    InvalidInputError,
    check_text,
)

_MAX_CONVERSATIONS = 100_000
"""How far an episode key is looked for among a thread's conversation numbers."""


_EPISODE_FIELDS = frozenset(
    {
        "thread_id",
        "conversation",
        "context_tags",
        "conversation_summary",
        "what_worked",
        "what_to_avoid",
        "importance",
        "important",
    }
)
_EPISODE_ECHO = frozenset({"created_at"})
_EPISODE_REQUIRED = tuple(sorted(_EPISODE_FIELDS - {"important"}))


@dataclass
class _Reflection:
    context_tags: list[str]
    conversation_summary: str
    what_worked: str
    what_to_avoid: str
    importance: float


class EpisodesSpace(family.KindSpace):
    """``("episodes", user)``: key = the episode id, value = the reflection and conversation."""

    root = "episodes"

    collection = EPISODES.name

    def __init__(self, ctx: family.SpaceContext, kind: type[Episodes]) -> None:
        super().__init__(ctx)
        self.episodes = ctx.kind(kind)

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One episode by id."""
        user = self.check_item_namespace(namespace)[1]
        if not family.is_uuid(key):
            return None
        episode = await self.episodes.aget(user, key)
        return None if episode is None else family.plain_item(self._item(user, episode, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> family.Write:
        """Store (or replace) an episode through ``EpisodicMemory.astore``."""
        user = self.check_item_namespace(namespace)[1]
        episodes, now = self.episodes, self.ctx.now
        if value is None:

            async def forget() -> None:
                if family.is_uuid(key):
                    await episodes.aforget(user, [key])

            return forget
        fields = family.check_fields(
            value, _EPISODE_FIELDS, _EPISODE_ECHO, "an episode", required=_EPISODE_REQUIRED
        )
        # The user's mark (kept for good, recalled first): absent keeps the stored one.
        important = fields.get("important")
        if important is not None and not isinstance(important, bool):
            raise InvalidInputError(
                f"an episode's important is true, false or absent, got {important!r}"
            )
        for name in ("thread_id", "conversation", "conversation_summary"):
            if not isinstance(fields[name], str) or not fields[name].strip():
                raise InvalidInputError(f"an episode's {name} must be a non-empty string")
        for name in ("what_worked", "what_to_avoid"):
            if not isinstance(fields[name], str):
                raise InvalidInputError(f"an episode's {name} must be a string")
        tags = fields["context_tags"]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidInputError("an episode's context_tags must be a list of strings")
        importance = fields["importance"]
        if not is_importance(importance):
            raise InvalidInputError(
                f"an episode's importance is a number in [0, 1], got {importance!r}"
            )
        thread = fields["thread_id"]
        check_text(thread, "thread_id")
        reflection = _Reflection(
            context_tags=list(tags),
            conversation_summary=fields["conversation_summary"],
            what_worked=fields["what_worked"],
            what_to_avoid=fields["what_to_avoid"],
            importance=float(importance),
        )

        async def write() -> None:
            existing = await episodes.aget(user, key) if family.is_uuid(key) else None
            if existing is not None:
                if existing.thread_id != thread:
                    raise InvalidInputError(
                        f"episode {key} belongs to thread {existing.thread_id!r}, not {thread!r}: "
                        "an episode's id derives from its thread, so it cannot move"
                    )
                if "created_at" in fields and fields["created_at"] != existing.created_at:
                    raise InvalidInputError("created_at is set by the store; leave it out")
                number = _conversation_number(user, thread, key, _MAX_CONVERSATIONS)
                stamp: datetime | None = parse_time(existing.created_at)
            else:
                if "created_at" in fields:
                    raise InvalidInputError("created_at is set by the store; leave it out")
                known = sum(
                    [1 async for e in _all_episodes(episodes, user) if e.thread_id == thread]
                )
                number = _conversation_number(user, thread, key, known + 1)
                if number is None:
                    expected = episode_id(user, thread, known + 1)
                    raise InvalidInputError(
                        f"no episode {key!r} of {user!r}: an episode's key is its id, derived "
                        f"from its thread and conversation number; the next episode of thread "
                        f"{thread!r} has the key {expected!r}"
                    )
                stamp = now()
            assert number is not None
            stored = await episodes.astore(
                user, thread, reflection, fields["conversation"], conversation=number, now=stamp
            )
            if important is not None:
                await episodes.amark_important(user, [stored], important=important)

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Episodes newest first, or by ``EpisodicMemory.arecall`` (relevance, recency, importance)."""
        user, query = request.owner, request.query
        episodes = self.episodes
        if query:
            moment = self.ctx.now()

            async def recall(k: int) -> list[SearchItem]:
                recalled = await episodes.arecall(user, query, k=k, alpha=request.alpha, now=moment)
                return [self._item(user, r.episode, r.score) for r in recalled]

            return await request.ranked(recall, family.RECALL_CAP)

        async def page(offset: int) -> list[SearchItem]:
            listed = await episodes.alist(user, limit=family.PAGE, offset=offset)
            return [self._item(user, episode, None) for episode in listed]

        return await request.paged(page, family.PAGE)

    def _item(self, user: str, episode: Episode, score: float | None) -> SearchItem:
        value = episode.to_dict(with_conversation=True)
        value.pop("id", None)
        stamp = parse_time(episode.created_at)
        return SearchItem(
            namespace=(self.root, user),
            key=episode.id,
            value=value,
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )


async def _all_episodes(episodes: Episodes, user: str) -> AsyncIterator[Episode]:
    offset = 0
    while True:
        page = await episodes.alist(user, limit=family.PAGE, offset=offset)
        for episode in page:
            yield episode
        if len(page) < family.PAGE:
            return
        offset += family.PAGE


def _conversation_number(user: str, thread: str, key: str, upto: int) -> int | None:
    # Ids are hashes of (user, thread, number): the number is found by trying them.
    wanted = key.lower()
    for number in range(1, upto + 1):
        if episode_id(user, thread, number) == wanted:
            return number
    return None

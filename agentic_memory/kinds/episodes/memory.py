"""Episodic memory: one reflection per finished conversation, recalled by hybrid search.

Recall ranks candidates from the store's hybrid search (BM25 + vector, fused by
relativeScoreFusion into a relevance in [0, 1]) by a weighted sum::

    score = 0.6 * relevance + 0.2 * recency + 0.2 * importance
    recency = 0.5 ** (age_in_days / half_life_days)

so a relevant episode wins, and among similar ones the recent and important come first.
The keyword side of the hybrid search reads an episode's prepared keyword text
(``search_text``: the stems of its tags, reflection and conversation without stop words,
see :mod:`agentic_memory.kinds.recall_text`) with the query prepared the same way;
episodes an earlier version stored are upgraded to it on first use.
``importance`` (0..1) is set by the reflection itself; an episode the user marked
``important`` counts 1. The weights are :data:`RELEVANCE_WEIGHT`, :data:`RECENCY_WEIGHT`
and :data:`IMPORTANCE_WEIGHT`.

Retention (:mod:`agentic_memory.kinds.retention`): a user keeps at most ``max_episodes``;
an explicit purge (:meth:`EpisodicMemory.aprune`) removes the least important, then the
oldest, and names each one. An episode marked important is never pruned.

Everything about episodes lives here: the collection schema (:data:`EPISODES`), what the
memory model writes when a conversation ends (:class:`Reflection`), the text an episode is
embedded from (:func:`embedding_text`), how a recalled episode is shown in the prompt
(:func:`render_episode`), and how episodes are stored, recalled and forgotten
(:class:`EpisodicMemory`).
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, Field

from agentic_memory.kinds._bound import (
    CollectionBound,
    Forgotten,
    areclaim_space,
    check_search,
    check_user_id,
    checked_now,
    embedded_part,
    rfc3339,
)
from agentic_memory.kinds._restage import needs_restage, restage
from agentic_memory.kinds.contract import (
    ImportLine,
    KindInfo,
    MemoryKind,
    ThreadForgotten,
    threads_of,
)
from agentic_memory.kinds.episodes.schema import (
    EPISODES,
    EPISODES_V1,
    EPISODES_V2,
    Episode,
    RecalledEpisode,
    ReflectionLike,
    episode_id,
    is_importance,
)
from agentic_memory.kinds.episodes.space import EpisodesSpace
from agentic_memory.kinds.importing import MAX_EPISODE_CHARS, same_shape, text_property
from agentic_memory.kinds.recall_text import (
    episode_search_text,
    keyword_query,
)
from agentic_memory.kinds.retention import EpisodePurge
from agentic_memory.namespaces.family import KindSpace, SpaceContext
from agentic_memory.store import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    Where,
    check_text,
)

__all__ = [
    "EPISODES",
    "EPISODES_V1",
    "EPISODES_V2",
    "IMPORTANCE_WEIGHT",
    "RECENCY_WEIGHT",
    "RELEVANCE_WEIGHT",
    "Episode",
    "EpisodicMemory",
    "RecalledEpisode",
    "Reflection",
    "ReflectionLike",
    "embedding_text",
    "render_episode",
    "search_text_of",
    "upgrade_episodes",
    "upgraded_properties",
]

RELEVANCE_WEIGHT = 0.6
RECENCY_WEIGHT = 0.2
IMPORTANCE_WEIGHT = 0.2

_NUMBER_ATTEMPTS = 1000
"""Conversation numbers a new episode tries after the thread's count (each taken one)."""


def search_text_of(properties: Mapping[str, Any]) -> str:
    """Return the prepared keyword text of an episode's properties."""
    return episode_search_text(
        context_tags=[str(t) for t in properties.get("context_tags") or []],
        conversation_summary=str(properties.get("conversation_summary") or ""),
        what_worked=str(properties.get("what_worked") or ""),
        what_to_avoid=str(properties.get("what_to_avoid") or ""),
        conversation=str(properties.get("conversation") or ""),
    )


def upgrade_episodes(store: MemoryStore) -> None:
    """Bring the episodes an earlier version stored to the current schema (see ``_restage``)."""
    if needs_restage(store, EPISODES, set(store.collections())):
        restage(store, EPISODES, [EPISODES_V1, EPISODES_V2], upgraded_properties)


def upgraded_properties(properties: dict[str, Any]) -> dict[str, Any]:
    """Return the properties of an episode stored before the keyword text, with it."""
    return {**properties, "search_text": search_text_of(properties)}


Tag = Annotated[str, Field(min_length=1, max_length=40)]


class Reflection(BaseModel):
    """A reflection on a finished conversation (what the memory model writes at its end).

    Every string and list is bounded so that even a small local model, whose output is
    constrained by this JSON schema, returns something that validates; the bounds also keep
    stored episodes small.
    """

    model_config = ConfigDict(extra="forbid")

    context_tags: list[Tag] = Field(
        default_factory=list,
        max_length=5,
        description="Up to 5 short lower-case topic tags.",
    )
    conversation_summary: str = Field(
        min_length=1, max_length=600, description="What the user wanted and what happened."
    )
    what_worked: str = Field(
        min_length=1, max_length=400, description="The approach that helped, to repeat."
    )
    what_to_avoid: str = Field(
        min_length=1, max_length=400, description="What should not be repeated."
    )
    importance: float = Field(
        ge=0.0, le=1.0, description="How useful this is for future conversations, 0 to 1."
    )


def embedding_text(properties: Mapping[str, Any]) -> str:
    """Return the text an episode is embedded from: its tags and the three reflection texts.

    At most ``MAX_EMBEDDED_CHARS`` of it (a summary written through the store can be long).
    """
    return embedded_part(
        "\n".join(
            [
                ", ".join(properties.get("context_tags") or []),
                str(properties.get("conversation_summary") or ""),
                str(properties.get("what_worked") or ""),
                str(properties.get("what_to_avoid") or ""),
            ]
        )
    )


def render_episode(episode: Mapping[str, Any]) -> str:
    """Render a recalled episode for the prompt: date, tags, summary, what worked and not."""
    tags = ", ".join(episode.get("context_tags") or [])
    return (
        f"- {str(episode.get('created_at', ''))[:10]} [{tags}] "
        f"{episode.get('conversation_summary', '')}\n"
        f"  What worked: {episode.get('what_worked', '')}\n"
        f"  What to avoid: {episode.get('what_to_avoid', '')}"
    )


class EpisodicMemory(CollectionBound, MemoryKind):
    """Per-user episodes on a :class:`~agentic_memory.store.MemoryStore` (``EpisodicMemory``).

    The episodes kind itself: its contract (namespaces, forgetting, import rules, listing)
    is this class's, the hooks on the store it is opened on.
    """

    spec = EPISODES
    info = KindInfo.one(
        "episodes", "episode", "Episodic memories: one reflection per finished conversation."
    )
    specs = (EPISODES,)
    cli_columns = (
        ("id", "id"),
        ("created", "created_at"),
        ("thread", "thread_id"),
        ("tags", "context_tags"),
        ("summary", "conversation_summary"),
        ("importance", "importance"),
    )

    def __init__(self, store: MemoryStore, embeddings: Embeddings) -> None:
        super().__init__(store, embeddings)
        self._current = False

    async def _aupgrade(self) -> None:
        """Bring episodes an earlier version stored to the current schema, once per instance.

        Their keyword text is computed from what they hold and their vectors kept, through a
        staging copy (:mod:`agentic_memory.kinds._restage`), before anything reads them.
        First uses at once take turns in ``restage`` (``MemoryStore.exclusive``: threads and
        processes), not on a lock of this object: one instance serves callers on many event
        loops (a thread pool, the sync edge), and a loop's lock fails or strands the others.
        """
        if self._current:
            return
        # In a worker thread: the first read of a reopened store's schema is file I/O.
        await asyncio.to_thread(upgrade_episodes, self.store)
        self._current = True

    async def _aensure(self) -> None:
        await self._aupgrade()
        await super()._aensure()

    async def _aexists(self) -> bool:
        await self._aupgrade()
        return await super()._aexists()

    episode_id = staticmethod(episode_id)

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
        """Store a reflection; return the episode id.

        The id is deterministic per (user, thread, conversation number), so storing the
        same conversation again replaces it instead of adding a copy. Without
        ``conversation`` the episode is new: it takes the first number from one more than
        the thread's episodes that no episode has (a prune leaves gaps; two ends may count
        at once), and never replaces another.

        Raises:
            InvalidInputError: an argument is malformed; nothing is written.
            ConflictError: without ``conversation``, a thousand numbers after the count
                were all taken; nothing is written.
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
        await self._aensure()
        numbered = conversation is None
        if conversation is None:
            by_thread = [Where("thread_id", "eq", thread_id)]
            conversation = await self.store.acount(EPISODES.name, user=user, where=by_thread) + 1
        props: dict[str, Any] = {
            "conversation": conversation_text,
            "context_tags": tags,
            "conversation_summary": reflection.conversation_summary,
            "what_worked": reflection.what_worked,
            "what_to_avoid": reflection.what_to_avoid,
            "thread_id": thread_id,
            "created_at": rfc3339(now),
            "importance": importance,
        }
        props["search_text"] = search_text_of(props)
        vector = (await self.embeddings.aembed_documents([embedding_text(props)]))[0]
        if numbered:
            return await self._ainsert_next(user, thread_id, conversation, props, vector)
        episode_id = self.episode_id(user, thread_id, conversation)

        def again(current: StoredObject) -> MemoryObject:
            # Reflecting on the same conversation again replaces it, not the user's mark
            # (decided from the episode as stored now: a mark set meanwhile stays).
            kept = {"important": True} if current.properties.get("important") else {}
            return MemoryObject(episode_id, {**props, **kept}, vector)

        replaced = await self.store.aupdate(EPISODES.name, [episode_id], again, user=user)
        if not replaced.ids:
            result = await self.store.aupsert(
                EPISODES.name, [MemoryObject(episode_id, props, vector)], user=user
            )
            result.raise_for_failures()
        return episode_id

    async def _ainsert_next(
        self,
        user: str,
        thread_id: str,
        first: int,
        props: dict[str, Any],
        vector: builtins.list[float],
    ) -> str:
        """Store a new episode under the first conversation number from ``first`` not taken.

        Create-only: the count of a thread's episodes falls when some are pruned, and two
        conversation ends may count at once, so a number may be another episode's already;
        that one stays and the next number is tried.
        """
        for conversation in range(first, first + _NUMBER_ATTEMPTS):
            episode_id = self.episode_id(user, thread_id, conversation)
            try:
                result = await self.store.ainsert(
                    EPISODES.name, [MemoryObject(episode_id, props, vector)], user=user
                )
            except ConflictError:
                continue
            result.raise_for_failures()
            return episode_id
        raise ConflictError(
            f"thread {thread_id!r} of {user!r} has episodes numbered {first} to "
            f"{first + _NUMBER_ATTEMPTS - 1} already: pass conversation= explicitly"
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
        """Return the user's ``k`` best episodes for ``query``, re-ranked (see module doc).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        check_search(query, k, alpha)
        if not half_life_days > 0:
            raise InvalidInputError(f"half_life_days must be positive, got {half_life_days!r}")
        moment = checked_now(now)
        if not await self._aexists():
            return []
        vector = await self.embeddings.aembed_query(embedded_part(query))
        hits = await self.store.ahybrid(
            EPISODES.name,
            query=keyword_query(query),
            vector=vector,
            alpha=alpha,
            limit=max(4 * k, 10),
            user=user,
        )
        ranked: builtins.list[RecalledEpisode] = []
        for hit in hits:
            episode = Episode._from_stored(StoredObject(hit.id, hit.properties))
            recency = _recency(episode.created_at, moment, half_life_days)
            score = (
                RELEVANCE_WEIGHT * hit.score
                + RECENCY_WEIGHT * recency
                + IMPORTANCE_WEIGHT * episode.weight
            )
            ranked.append(RecalledEpisode(episode, hit.score, recency, score))
        ranked.sort(key=lambda r: (-r.score, r.episode.id))
        return ranked[:k]

    async def alist(
        self, user: str, *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Episode]:
        """Return the user's episodes, newest first."""
        check_user_id(user)
        if not await self._aexists():
            return []
        objs = await self.store.alist_objects(
            EPISODES.name,
            user=user,
            limit=limit,
            offset=offset,
            sort_by="created_at",
            descending=True,
        )
        return [Episode._from_stored(o) for o in objs]

    async def aget(self, user: str, episode_id: str) -> Episode | None:
        """One episode by id, or ``None``."""
        check_user_id(user)
        if not await self._aexists():
            return None
        obj = await self.store.aget(EPISODES.name, episode_id, user=user)
        return Episode._from_stored(obj) if obj else None

    async def aforget(self, user: str, episode_ids: Sequence[str]) -> int:
        """Delete episodes by id; return how many existed."""
        check_user_id(user)
        if not await self._aexists() or not episode_ids:
            return 0
        return await self.store.adelete(EPISODES.name, episode_ids, user=user)

    async def aforget_thread(
        self, user: str, thread_id: str
    ) -> tuple[Forgotten, builtins.list[str]]:
        """Delete the episodes of one conversation; return the counts and their ids."""
        check_user_id(user)
        ids = [e.id for e in await self._aall(user, [Where("thread_id", "eq", thread_id)])]
        return Forgotten(await self.aforget(user, ids)), ids

    async def amark_important(
        self, user: str, episode_ids: Sequence[str], *, important: bool = True
    ) -> builtins.list[Episode]:
        """Mark episodes important (recalled first, never pruned), or unmark them.

        Every id must be one of the user's episodes; all are checked before any changes.

        Raises:
            InvalidInputError: an argument is malformed or an id is not an episode of this
                user (another user's is not found either); nothing was changed.
        """
        check_user_id(user)
        if isinstance(episode_ids, str) or not isinstance(episode_ids, Sequence):
            raise InvalidInputError("episode_ids must be a list of ids, not one string")
        if not isinstance(important, bool):
            raise InvalidInputError(f"important must be True or False, got {important!r}")
        wanted = list(dict.fromkeys(_episode_id(i) for i in episode_ids))
        if not wanted:
            return []
        if not await self._aexists():
            raise InvalidInputError(f"user {user!r} has no episode {wanted[0]}")
        await self._aensure()
        found = []
        for oid in wanted:
            obj = await self.store.aget(EPISODES.name, oid, user=user, include_vector=True)
            if obj is None or obj.vector is None:
                raise InvalidInputError(f"user {user!r} has no episode {oid}; nothing was marked")
            found.append(obj)
        marked: dict[str, StoredObject] = {o.id: o for o in found}

        def mark(current: StoredObject) -> MemoryObject | None:
            # Decided from the episode as stored when the mark is written: a reflection
            # stored again meanwhile keeps its new text.
            props = {**current.properties, "important": important}
            marked[current.id] = StoredObject(current.id, props)
            if props == current.properties or current.vector is None:
                return None
            return MemoryObject(current.id, props, current.vector)

        await self.store.aupdate(EPISODES.name, wanted, mark, user=user)
        return [Episode._from_stored(marked[oid]) for oid in wanted]

    async def aprune(
        self, user: str, max_episodes: int | None, *, dry_run: bool = False
    ) -> EpisodePurge:
        """Keep at most ``max_episodes``: delete the least important, then the oldest.

        An episode marked important is never deleted (each delete is conditional on it, so
        one marked meanwhile stays). ``None`` keeps everything. Returns the episodes deleted
        (or, with ``dry_run``, that would be).

        Raises:
            InvalidInputError: an argument is malformed.
        """
        check_user_id(user)
        if max_episodes is not None and (
            isinstance(max_episodes, bool) or not isinstance(max_episodes, int) or max_episodes < 1
        ):
            raise InvalidInputError(
                f"max_episodes must be a positive integer or None, got {max_episodes!r}"
            )
        if not await self._aexists():
            return EpisodePurge(user)
        await self._aensure()
        episodes = [Episode._from_stored(o) for o in await self._aall(user)]
        if max_episodes is None or len(episodes) <= max_episodes:
            return EpisodePurge(user, remaining=len(episodes))
        candidates = sorted(
            (e for e in episodes if not e.important),
            key=lambda e: (e.importance, _sortable(e.created_at), e.id),
        )
        chosen = candidates[: len(episodes) - max_episodes]
        pruned = []
        for episode in chosen:
            if not dry_run:
                gone = await self.store.adelete_where(
                    EPISODES.name,
                    [
                        Where("thread_id", "eq", episode.thread_id),
                        Where("created_at", "eq", episode.created_at),
                        Where("important", "ne", True),
                    ],
                    user=user,
                )
                if not gone:
                    continue  # marked important, or deleted by someone else, meanwhile
            pruned.append(
                {
                    "id": episode.id,
                    "thread_id": episode.thread_id,
                    "created_at": episode.created_at,
                    "importance": episode.importance,
                    "summary": episode.conversation_summary,
                }
            )
        remaining = len(episodes) - len(pruned)
        if pruned and not dry_run:
            await areclaim_space(self.store)
        return EpisodePurge(
            user,
            pruned=pruned,
            remaining=remaining,
            important_over_cap=max(0, remaining - max_episodes),
        )

    async def acount(self, user: str, *, important: bool | None = None) -> int:
        """Return how many episodes the user has (only the important ones, or the others)."""
        check_user_id(user)
        if not await self._aexists():
            return 0
        if important is None:
            return await self.store.acount(EPISODES.name, user=user)
        await self._aensure()
        flag = Where("important", "eq" if important else "ne", True)
        return await self.store.acount(EPISODES.name, user=user, where=[flag])

    async def aids(self, user: str) -> builtins.list[str]:
        """Return the ids of every episode of the user."""
        check_user_id(user)
        return [e.id for e in await self._aall(user)]

    async def athreads(self, user: str) -> set[str]:
        """Return the conversations the user's episodes came from."""
        check_user_id(user)
        return threads_of(await self._aall(user), "thread_id")

    # -- the kind's contract (see ``MemoryKind``) ------------------------------------------

    @classmethod
    def spaces(cls, ctx: SpaceContext) -> Sequence[KindSpace]:
        """``("episodes", user)``."""
        return (EpisodesSpace(ctx, cls),)

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete the user's episodes."""
        return {EPISODES.name: await self.aforget_user(user)}

    async def aforget_thread_parts(self, user: str, thread: str) -> ThreadForgotten:
        """Delete the thread's episodes (forget then scrubs them from the rules)."""
        done, ids = await self.aforget_thread(user, thread)
        return ThreadForgotten({EPISODES.name: done.deleted}, episodes=ids)

    @classmethod
    def accepts_earlier_schema(cls, spec: CollectionSpec) -> bool:
        """Accept an earlier version's episodes: they are upgraded on first use."""
        return spec.name == EPISODES.name and any(
            same_shape(spec, old.properties, old.per_user) for old in (EPISODES_V1, EPISODES_V2)
        )

    @classmethod
    def upgraded_properties(
        cls, collection: str, properties: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Return an earlier version's episode with its keyword text."""
        del collection
        return upgraded_properties(dict(properties))

    @classmethod
    def upgrade_collection(cls, store: MemoryStore, collection: str) -> None:
        """Upgrade the episodes an earlier version stored."""
        del collection
        upgrade_episodes(store)

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the reflection."""
        return embedding_text(properties)

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check an importance in [0, 1], a thread, bounded texts and tags."""
        props = line.properties
        importance = props.get("importance")
        if not is_importance(importance):
            raise InvalidInputError(
                f"importance must be a number in [0, 1], got {importance!r:.40}"
            )
        text_property(props, "thread_id")
        for name in ("conversation", "conversation_summary", "what_worked", "what_to_avoid"):
            if len(text_property(props, name, required=False)) > MAX_EPISODE_CHARS:
                raise InvalidInputError(f"{name} is longer than {MAX_EPISODE_CHARS:,} characters")
        if len(props.get("context_tags") or []) > 100:
            raise InvalidInputError("an episode has at most 100 context tags")

    async def alist_rows(self, user: str, limit: int) -> list[dict[str, Any]]:
        """Return the user's episodes, newest first."""
        return [e.to_dict() for e in await self.alist(user, limit=limit)]

    async def ashow(self, user: str, oid: str) -> dict[str, Any] | None:
        """Return one episode with its whole conversation."""
        episode = await self.aget(user, oid)
        return None if episode is None else episode.to_dict(with_conversation=True)


def _episode_id(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"an episode id must be a string, got {type(value).__name__}")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidInputError(f"{value!r:.80} is not an episode id (a UUID)") from None


def _sortable(created_at: str) -> datetime:
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def _recency(created_at: str, now: datetime, half_life_days: float) -> float:
    try:
        created = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    age_days = max(0.0, (now - created).total_seconds() / 86400.0)
    return float(0.5 ** (age_days / half_life_days))

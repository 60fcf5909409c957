"""The common base of the memory kinds that live in one collection of a store.

Every kind is asynchronous only (the graph and the LangGraph server await it; scripts use
``Memory``'s sync methods or ``asyncio.run``), and reaches its store through the store's
``a…`` methods, which run the storage work in worker threads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from langchain_core.embeddings import Embeddings

from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    SearchHit,
    StoredObject,
    StoreError,
    Where,
    check_text,
)
from agentic_memory.store.base import check_alpha
from agentic_memory.store.base import check_user_id as check_scope_id

_PAGE = 1000

logger = logging.getLogger("agentic_memory.kinds")

MAX_MESSAGE_CHARS = 100_000
"""The longest message (and search query) accepted, in characters.

About 25,000 tokens of English prose: more than a whole default context window (7,900
tokens), yet it is embedded and stored in well under a second, where a 10 MB message took
27 s. Longer input is refused before any work with ``InvalidInputError``; the graph's
admission uses the same limit.
"""


MAX_EMBEDDED_CHARS = 8_192
"""The most characters of one text that are embedded (its beginning).

A vector stands for what a text is about, which its beginning says; the whole text is
still stored and searched by keywords. Embedding models read far less anyway (MiniLM 256
tokens, OpenAI's about 32,000 characters), and WordLlama's memory grows with the text:
a 900,000-character summary embedded whole took 293 MB.
"""


def embedded_part(text: str) -> str:
    """Return the part of ``text`` that is embedded: its first ``MAX_EMBEDDED_CHARS``."""
    return text[:MAX_EMBEDDED_CHARS]


def check_search(query: object, k: object, alpha: object = 0.5, *, k_name: str = "k") -> str:
    """Validate a search's arguments before anything is embedded; return the query.

    Raises:
        InvalidInputError: the query is empty, too long or not valid Unicode text, ``k`` is
            not a positive integer, or ``alpha`` is not in [0, 1].
    """
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must be a non-empty string")
    if len(query) > MAX_MESSAGE_CHARS:
        raise InvalidInputError(
            f"query: {len(query):,} characters is more than the {MAX_MESSAGE_CHARS:,} a "
            "search may have"
        )
    check_text(query, "query")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidInputError(f"{k_name} must be a positive integer, got {k!r}")
    check_alpha(alpha)
    return query


def checked_now(now: datetime | None) -> datetime:
    """Return ``now``, or the current time when ``None``; refuse a time without a timezone."""
    moment = datetime.now(UTC) if now is None else now  # 0 or "" is not "now"
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise InvalidInputError("now must be a datetime with a timezone")
    return moment


def rfc3339(now: datetime | None) -> str:
    """Return :func:`checked_now` in UTC, the form the kinds store their times in."""
    return checked_now(now).astimezone(UTC).isoformat()


@dataclass(frozen=True)
class Forgotten:
    """What a forget did to one kind: objects deleted, and others rewritten to stay coherent."""

    deleted: int = 0
    rewritten: int = 0


def check_user_id(user: object) -> str:
    """Validate the id of a person: the store's rules, and not the global rules scope.

    Messages, episodes and facts always belong to a person; only rule versions may live
    under :data:`agentic_memory.store.GLOBAL_SCOPE`.
    """
    checked = check_scope_id(user)
    if checked == GLOBAL_SCOPE:
        raise InvalidInputError(
            f"user id {GLOBAL_SCOPE!r} is reserved for the rules shared by everyone"
        )
    return checked


async def areclaim_space(store: MemoryStore) -> int:
    """Give deleted rows' space back after a purge (``MemoryStore.reclaim_space``).

    The rows are deleted already: a store that cannot give the space back now (another
    process writing) is logged, never raised, and the next purge or forget tries again.
    """
    try:
        return await store.areclaim_space()
    except StoreError as exc:
        logger.warning("the store kept the space of deleted rows for now: %s", exc)
        return 0


class CollectionBound:
    """A memory kind bound to one collection of a store, created on first use."""

    spec: ClassVar[CollectionSpec]

    def __init__(self, store: MemoryStore, embeddings: Embeddings) -> None:
        self.store = store
        self.embeddings = embeddings
        self._ready = False

    # Ensuring twice is harmless (same schema), so a racing first use needs no lock. A
    # collection an earlier version wrote gets the properties added to the spec since.
    async def _aensure(self) -> None:
        if not self._ready:
            await self.store.aextend_collection(self.spec)
            self._ready = True

    async def _aexists(self) -> bool:
        """Whether the collection exists; reads and forgetting never create it."""
        if self._ready:
            return True
        return self.spec.name in await self.store.acollections()

    async def _aall(
        self, user: str | None, where: Sequence[Where] = (), *, vectors: bool = False
    ) -> list[StoredObject]:
        """Every object of ``user`` matching ``where``, in keyset pages (no result-window cap)."""
        if not await self._aexists():
            return []
        pages = self.store.aiterate(
            self.spec.name, user=user, where=where, page_size=_PAGE, include_vector=vectors
        )
        return [obj async for obj in pages]

    async def _ahybrid(
        self, user: str, query: str, *, alpha: float, limit: int, where: Sequence[Where] = ()
    ) -> list[SearchHit]:
        """Hybrid search over this kind's objects of ``user`` ([] before the first write)."""
        check_search(query, limit, alpha, k_name="limit")
        if not await self._aexists():
            return []
        return await self.store.ahybrid(
            self.spec.name,
            query=query,
            vector=await self.embeddings.aembed_query(embedded_part(query)),
            alpha=alpha,
            limit=limit,
            user=user,
            where=list(where),
        )

    async def _arewrite(self, user: str, obj_id: str, properties: dict[str, Any]) -> bool:
        """Replace an object's properties and keep its vector; False when it is gone."""
        full = await self.store.aget(self.spec.name, obj_id, user=user, include_vector=True)
        if full is None or full.vector is None:
            return False
        result = await self.store.aupsert(
            self.spec.name, [MemoryObject(obj_id, properties, full.vector)], user=user
        )
        result.raise_for_failures()
        return True

    async def asize(self, user: str) -> int:
        """Return how many objects this kind holds for ``user`` (or scope)."""
        check_scope_id(user)
        if not await self._aexists():
            return 0
        return await self.store.acount(self.spec.name, user=user)

    async def aforget_user(self, user: str) -> int:
        """Delete everything this kind holds for ``user``; return how many objects."""
        check_scope_id(user)
        if not await self._aexists():
            return 0
        return await self.store.adelete_user(self.spec.name, user)

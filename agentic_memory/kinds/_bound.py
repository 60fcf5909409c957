"""The common base of the memory kinds that live in one collection of a store."""

from __future__ import annotations

from typing import ClassVar

from langchain_core.embeddings import Embeddings

from agentic_memory.store import GLOBAL_SCOPE, CollectionSpec, InvalidInputError, MemoryStore
from agentic_memory.store.base import check_user_id as check_scope_id


def check_user_id(user: object) -> str:
    """Validate the id of a person: the store's rules, and not the global rules scope.

    Messages, episodes and facts always belong to a person; only rule versions may live
    under :data:`memstore.GLOBAL_SCOPE`.
    """
    checked = check_scope_id(user)
    if checked == GLOBAL_SCOPE:
        raise InvalidInputError(
            f"user id {GLOBAL_SCOPE!r} is reserved for the rules shared by everyone"
        )
    return checked


class CollectionBound:
    """A memory kind bound to one collection of a store, created on first use."""

    spec: ClassVar[CollectionSpec]

    def __init__(self, store: MemoryStore, embeddings: Embeddings) -> None:
        self.store = store
        self.embeddings = embeddings
        self._ready = False

    # Ensuring twice is harmless (same schema), so a racing first use needs no lock.
    def _ensure(self) -> None:
        if not self._ready:
            self.store.ensure_collection(self.spec)
            self._ready = True

    async def _aensure(self) -> None:
        if not self._ready:
            await self.store.aensure_collection(self.spec)
            self._ready = True

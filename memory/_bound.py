"""The common base of the memory kinds that live in one collection of a store."""

from __future__ import annotations

from typing import ClassVar

from langchain_core.embeddings import Embeddings

from memstore import CollectionSpec, MemoryStore


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

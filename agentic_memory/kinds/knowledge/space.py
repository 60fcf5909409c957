"""The LangGraph namespaces of the knowledge kind: items read and written through its classes.

The mapping is in ``docs/langgraph-store.md``; the base is :mod:`agentic_memory.namespaces.family`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import Item, SearchItem

from agentic_memory.kinds.knowledge.base import Knowledge
from agentic_memory.kinds.knowledge.schema import (
    USER_MANIFEST_PREFIX,
    KnowledgeHit,
    knowledge_collection,
)
from agentic_memory.namespaces.family import (
    RECALL_CAP,
    KindSpace,
    Write,
    addressable,
    is_uuid,
    plain_item,
)
from agentic_memory.namespaces.search import Found, SpaceSearch, parse_time
from agentic_memory.store import InvalidInputError


class KnowledgeSpace(KindSpace):
    """``("knowledge", kb)``: key = a chunk id; read-only (ingestion writes knowledge)."""

    root = "knowledge"

    @property
    def shape(self) -> str:
        """The namespace form."""
        return "('knowledge', knowledge_base)"

    def check_owner(self, owner: str) -> str:
        """Check a knowledge base name."""
        knowledge_collection(owner)
        return owner

    async def owners(self) -> list[str]:
        """Return the knowledge bases."""
        return sorted(kb for kb in await Knowledge(self.ctx.store).alist_bases() if addressable(kb))

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Every knowledge base, or the one named (in any case), if it exists."""
        if len(prefix) == 2:
            self.check_owner(prefix[1])
            kept = await Knowledge(self.ctx.store).afind(prefix[1])
            return [] if kept is None else [(self.root, kept)]
        return await super().partitions(prefix)

    def base_of(self, namespace: tuple[str, ...]) -> tuple[str, str | None]:
        """Return the knowledge base name and its owner (``None``: shared) of a namespace."""
        return namespace[1], None

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One visible chunk by id."""
        self.check_item_namespace(namespace)
        name, owner = self.base_of(namespace)
        knowledge = Knowledge(self.ctx.store)
        kb = await knowledge.afind(name, owner)
        if kb is None or not is_uuid(key):
            return None
        obj = await self.ctx.store.aget(knowledge_collection(kb, owner).name, key, user=owner)
        if obj is None:
            return None
        info = await knowledge.aget_source(kb, str(obj.properties.get("source") or ""), owner)
        if info is None or info.revision != obj.properties.get("revision"):
            return None  # a chunk of a replaced or unfinished ingestion: not visible
        located = self._located(namespace, kb)
        return plain_item(self._chunk(located, obj.id, obj.properties, info.ingested_at, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Refused: knowledge bases are written by ingestion only."""
        self.check_item_namespace(namespace)
        raise InvalidInputError(
            "knowledge bases are read-only through the store: ingest files with "
            "`amem ingest ... --collection <kb>` or the `ingest` graph"
        )

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Chunks by source and position, or by ``search_knowledge`` (hybrid, cited)."""
        partition, query = request.partition, request.query
        kb, owner = self.base_of(partition)
        knowledge = Knowledge(self.ctx.store)
        dates = {info.source: info.ingested_at for info in await knowledge.alist_sources(kb, owner)}
        if query:

            async def recall(k: int) -> list[SearchItem]:
                hits = await knowledge.asearch(
                    self.ctx.embeddings, kb, query, k=k, alpha=request.alpha, owner=owner
                )
                return [
                    self._chunk(
                        partition,
                        h.chunk_id,
                        {
                            "text": h.text,
                            "title": h.title,
                            "section": h.section,
                            "source": h.source,
                            "page_start": h.page_start,
                            "page_end": h.page_end,
                            "chunk_index": h.chunk_index,
                        },
                        dates.get(h.source, ""),
                        h.score,
                    )
                    for h in hits
                ]

            return await request.ranked(recall, RECALL_CAP)
        out: list[Found] = []
        for source, ingested in sorted(dates.items()):
            for obj in await knowledge.alist_chunks(kb, source, owner):
                found = Found(self._chunk(partition, obj.id, obj.properties, ingested, None))
                if request.keeps(found):
                    out.append(found)
                    if len(out) >= request.need:
                        return out
        return out

    def _located(self, namespace: tuple[str, ...], kb: str) -> tuple[str, ...]:
        """Return the namespace of an item, with the knowledge base's kept spelling."""
        return (*namespace[:-1], kb)

    def _chunk(
        self,
        namespace: tuple[str, ...],
        oid: str,
        props: Mapping[str, Any],
        ingested: str,
        score: float | None,
    ) -> SearchItem:
        start = int(props.get("page_start") or 1)
        hit = KnowledgeHit(
            chunk_id=oid,
            text=str(props.get("text") or ""),
            source=str(props.get("source") or ""),
            title=str(props.get("title") or ""),
            section=str(props.get("section") or ""),
            page_start=start,
            page_end=int(props.get("page_end") or start),
            score=0.0 if score is None else score,
            chunk_index=int(props.get("chunk_index") or 0),
        )
        stamp = parse_time(ingested)
        return SearchItem(
            namespace=namespace,
            key=oid,
            value={
                "text": hit.text,
                "title": hit.title,
                "section": hit.section,
                "source": hit.source,
                "page_start": hit.page_start,
                "page_end": hit.page_end,
                "chunk_index": hit.chunk_index,
                "citation": hit.citation,
            },
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )


class UserKnowledgeSpace(KnowledgeSpace):
    """``("user_knowledge", user, kb)``: a user's own knowledge base (their uploads); read-only.

    Only that user's calls name it (``graph/auth.py`` checks the second label), and only
    their partition of the knowledge base's collections is read.
    """

    root = "user_knowledge"
    depth = 3

    @property
    def shape(self) -> str:
        """The namespace form."""
        return "('user_knowledge', user, knowledge_base)"

    def check_item_namespace(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """Check ``(root, user, kb)``."""
        if len(namespace) != self.depth:
            raise InvalidInputError(
                f"namespaces under {self.root!r} are a user's own knowledge bases, of the form "
                f"{self.shape}; got {namespace}"
            )
        KindSpace.check_owner(self, namespace[1])
        knowledge_collection(namespace[2], namespace[1])
        return namespace

    def check_owner(self, owner: str) -> str:
        """Check the second label: a person's user id."""
        return KindSpace.check_owner(self, owner)

    def base_of(self, namespace: tuple[str, ...]) -> tuple[str, str | None]:
        """Return the knowledge base name and its owner."""
        return namespace[2], namespace[1]

    async def owners(self) -> list[str]:
        """Return the users who have a knowledge base of their own."""
        store = self.ctx.store
        users: set[str] = set()
        for name in await store.acollections():
            if name.startswith(USER_MANIFEST_PREFIX):
                users.update(await store.ausers(name))
        return sorted(u for u in users if addressable(u))

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Return the own knowledge bases of every user, of one user, or the one named."""
        if len(prefix) >= 3:
            self.check_item_namespace(prefix[:3])
            kept = await Knowledge(self.ctx.store).afind(prefix[2], prefix[1])
            return [] if kept is None or len(prefix) > 3 else [(self.root, prefix[1], kept)]
        users = [self.check_owner(prefix[1])] if len(prefix) == 2 else await self.owners()
        return [
            (self.root, user, kb)
            for user in users
            for kb in await Knowledge(self.ctx.store).alist_bases(user)
            if addressable(kb)
        ]

    async def namespaces(self, fixed: tuple[str, ...], deep: bool) -> set[tuple[str, ...]]:
        """Return every own knowledge base under the labels ``fixed``."""
        del deep
        try:
            named = await self.partitions(fixed[:3])
        except InvalidInputError:
            return set()
        return {ns for ns in named if ns[: len(fixed)] == fixed}

"""The knowledge kind's contract: its namespaces, forgetting, import rules and listing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from agentic_memory.kinds._bound import embedded_part
from agentic_memory.kinds._restage import STAGING_PREFIX
from agentic_memory.kinds.contract import (
    ImportLine,
    ImportTarget,
    KindInfo,
    MemoryKind,
    whose,
)
from agentic_memory.kinds.importing import MAX_EPISODE_CHARS, same_shape
from agentic_memory.kinds.knowledge.base import Knowledge
from agentic_memory.kinds.knowledge.schema import (
    CHUNKS_PREFIX,
    KNOWLEDGE_PROPERTIES,
    KNOWLEDGE_PROPERTIES_V1,
    MANIFEST_PREFIX,
    MANIFEST_PROPERTIES,
    USER_CHUNKS_PREFIX,
    USER_MANIFEST_PREFIX,
    upgrade_chunk_collection,
    upgraded_chunk,
)
from agentic_memory.kinds.knowledge.space import KnowledgeSpace, UserKnowledgeSpace
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    Property,
)


class KnowledgeKind(MemoryKind):
    """Knowledge bases of document chunks: shared ones, and each user's own (their uploads).

    A knowledge base is two collections per name: its chunks (line kind ``chunk``) and the
    manifest of its sources (``source``), which says which revision of each source is
    visible. They are written by ingestion only (``ingest``, ``amem ingest``).
    """

    info = KindInfo(
        name="knowledge",
        title="Knowledge bases (ingested documents), shared and each user's own.",
        roots=("knowledge", "user_knowledge"),
        line_kinds=("chunk", "source"),
    )
    space_types = (KnowledgeSpace, UserKnowledgeSpace)
    cli_columns = (("knowledge base", "knowledge_base"), ("sources", "sources"))

    @classmethod
    def line_kind(cls, collection: str) -> str | None:
        """``source`` for a manifest, ``chunk`` for a knowledge base's chunks."""
        if collection.startswith((MANIFEST_PREFIX, USER_MANIFEST_PREFIX)):
            return "source"
        if collection.startswith((CHUNKS_PREFIX, USER_CHUNKS_PREFIX)):
            return "chunk"
        return None

    @classmethod
    def expected_schema(cls, collection: str) -> tuple[tuple[Property, ...], bool] | None:
        """Return a knowledge base's schema: a user's own is partitioned by user."""
        kind = cls.line_kind(collection)
        if kind is None:
            return None
        own = collection.startswith((USER_CHUNKS_PREFIX, USER_MANIFEST_PREFIX))
        return (KNOWLEDGE_PROPERTIES if kind == "chunk" else MANIFEST_PROPERTIES), own

    @classmethod
    def accepts_earlier_schema(cls, spec: CollectionSpec) -> bool:
        """Accept chunks of an earlier version: the knowledge base upgrades them on first use."""
        expected = cls.expected_schema(spec.name)
        return (
            cls.line_kind(spec.name) == "chunk"
            and expected is not None
            and same_shape(spec, KNOWLEDGE_PROPERTIES_V1, expected[1])
        )

    @classmethod
    def upgraded_properties(
        cls, collection: str, properties: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Return an earlier version's chunk with its keyword text (its section unknown)."""
        if cls.line_kind(collection) != "chunk":
            return None
        return upgraded_chunk(dict(properties))

    @classmethod
    def upgrade_collection(cls, store: MemoryStore, collection: str) -> None:
        """Upgrade a knowledge base's chunks an earlier version wrote."""
        if cls.line_kind(collection) == "chunk":
            upgrade_chunk_collection(store, collection)

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete the user's own knowledge bases, after finishing any half-done upgrade.

        A staging copy a killed upgrade left behind belongs to no kind: forgetting around
        it would leave the user's chunks there, and the next use would copy them back.
        """

        def finish_upgrades() -> None:
            for name in self.store.collections():
                target = name.removeprefix(STAGING_PREFIX)
                if target != name and self.line_kind(target) == "chunk":
                    upgrade_chunk_collection(self.store, target)

        await asyncio.to_thread(finish_upgrades)
        return await super().aforget_user_parts(user)

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return a chunk's text; a manifest entry's title (it keeps a marker vector)."""
        if line_kind == "source":
            return str(properties.get("title") or properties.get("source") or "")
        return embedded_part(str(properties.get("text") or ""))

    @classmethod
    def embeds(cls, line_kind: str) -> bool:
        """Manifest entries are never searched by vector: they keep a unit marker vector."""
        return line_kind != "source"

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check a bounded text."""
        if len(str(line.properties.get("text") or "")) > MAX_EPISODE_CHARS:
            raise InvalidInputError(f"text is longer than {MAX_EPISODE_CHARS:,} characters")

    @classmethod
    def shared_what(cls, line: ImportLine, spec: CollectionSpec) -> str | None:
        """Say a shared knowledge base is shared (a user's own one is their data)."""
        return None if spec.per_user else "a shared knowledge base"

    @classmethod
    def import_group(
        cls, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Merge by the generic rule, into a knowledge base the store does not hold yet.

        A knowledge base changes by ingestion (its replace protocol), never by merging.
        """
        populated = target.store.count(spec.name, user=user or None) > 0

        def empty(line: ImportLine) -> bool:
            if populated:
                raise target.fail(
                    line.lineno,
                    f"knowledge base collection {spec.name!r} {whose(user)} already holds "
                    "other content: ingest into it, or forget it first, to change it",
                )
            return True

        target.merge_plain(line_kind, spec, user, empty)

    async def alist_rows(self, user: str, limit: int) -> list[dict[str, Any]]:
        """Return the user's own knowledge bases, with their number of sources."""
        rows: list[dict[str, Any]] = []
        knowledge = Knowledge(self.store)
        for kb in (await knowledge.alist_bases(user))[:limit]:
            sources = await knowledge.alist_sources(kb, user)
            rows.append({"knowledge_base": kb, "sources": len(sources)})
        return rows

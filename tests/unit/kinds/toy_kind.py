"""A memory kind made for the tests: a user's bookmarks, in one module.

It proves that adding a kind is its module plus one registry line: registered in a test
registry (``BUILTIN_KINDS.with_kind(BookmarksKind)``), it is served by ``AgenticStore``,
forgotten by ``forget_user``, exported and imported by ``transfer`` (by its own merge rule:
a page saved already is not saved twice) and listed by
``amem memories`` without any other edit (``tests/unit/kinds/test_registry.py``).
``docs/architecture.md`` ("Adding a memory kind") walks through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentic_memory.kinds.contract import (
    ImportLine,
    ImportTarget,
    KindInfo,
    MemoryKind,
    ThreadForgotten,
    whose,
)
from agentic_memory.namespaces.family import RecordSpace
from agentic_memory.store import CollectionSpec, InvalidInputError, Property, Where

BOOKMARKS = CollectionSpec(
    name="Bookmark",
    description="Pages a user saved, one object per bookmark.",
    per_user=True,
    properties=(
        Property("key", "text", description="The bookmark's key in its namespace."),
        Property("url", "text", searchable=True),
        Property("title", "text", searchable=True),
        Property("source_thread", "text", description="The conversation it was saved in."),
        Property("created_at", "date"),
        Property("updated_at", "date"),
    ),
)


class BookmarksSpace(RecordSpace):
    """``("bookmarks", user)``: key = a name the user chose, value = ``{url, title}``."""

    root = "bookmarks"
    spec = BOOKMARKS
    fields = {"url": str, "title": str, "source_thread": str}
    required = ("url",)

    @classmethod
    def text_of(cls, value: Mapping[str, Any]) -> str:
        """Return the title and the address."""
        return f"{value.get('title') or ''} {value.get('url') or ''}".strip()


class BookmarksKind(MemoryKind):
    """A user's bookmarks: the whole contract of a simple kind."""

    info = KindInfo.one("bookmarks", "bookmark", "Pages a user saved.")
    specs = (BOOKMARKS,)
    cli_columns = (("key", "key"), ("url", "url"), ("title", "title"))
    space_types = (BookmarksSpace,)

    async def athreads(self, user: str) -> set[str]:
        """Return the conversations the user saved bookmarks in."""
        if BOOKMARKS.name not in await self.store.acollections():
            return set()
        return {
            str(o.properties["source_thread"])
            async for o in self.store.aiterate(BOOKMARKS.name, user=user)
            if o.properties.get("source_thread")
        }

    async def aforget_thread_parts(self, user: str, thread: str) -> ThreadForgotten:
        """Delete the bookmarks saved in the conversation."""
        if BOOKMARKS.name not in await self.store.acollections():
            return ThreadForgotten()
        where = [Where("source_thread", "eq", thread)]
        ids = [o.id async for o in self.store.aiterate(BOOKMARKS.name, user=user, where=where)]
        deleted = await self.store.adelete(BOOKMARKS.name, ids, user=user) if ids else 0
        return ThreadForgotten({BOOKMARKS.name: deleted})

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the title and the address."""
        return BookmarksSpace.text_of(properties)

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check that an imported bookmark has an address."""
        if not str(line.properties.get("url") or "").strip():
            raise InvalidInputError("a bookmark needs a url")

    @classmethod
    def import_group(
        cls, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Merge by the generic rule; a page the user saved already is not saved twice.

        A bookmark of the file whose address the user keeps under another key is left out,
        with a note naming that key.
        """
        saved = {
            str(o.properties.get("url")): str(o.properties.get("key"))
            for o in target.store.iterate(spec.name, user=user)
        }

        def new_page(line: ImportLine) -> bool:
            url = str(line.properties.get("url"))
            if url not in saved:
                return True
            target.note(
                f"bookmark {line.properties.get('key')!r} {whose(user)}: {url} is saved "
                f"already as {saved[url]!r}"
            )
            return False

        target.merge_plain(line_kind, spec, user, new_page)

"""A memory kind made for the tests: a user's bookmarks, in one module.

It proves that adding a kind is its module plus one registry line: registered in a test
registry (``BUILTIN_KINDS.with_kind(BookmarksKind())``), it is served by ``AgenticStore``,
forgotten by ``forget_user``, exported and imported by ``transfer`` and listed by
``amem memories`` without any other edit (``tests/unit/kinds/test_registry.py``).
``docs/architecture.md`` ("Adding a memory kind") walks through it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentic_memory.kinds.contract import ImportLine, KindInfo, MemoryKind
from agentic_memory.langgraph_store.kinds import KindContext, KindSpace, RecordSpace
from agentic_memory.store import CollectionSpec, InvalidInputError, Property

BOOKMARKS = CollectionSpec(
    name="Bookmark",
    description="Pages a user saved, one object per bookmark.",
    per_user=True,
    properties=(
        Property("key", "text", description="The bookmark's key in its namespace."),
        Property("url", "text", searchable=True),
        Property("title", "text", searchable=True),
        Property("created_at", "date"),
        Property("updated_at", "date"),
    ),
)


class BookmarksSpace(RecordSpace):
    """``("bookmarks", user)``: key = a name the user chose, value = ``{url, title}``."""

    root = "bookmarks"
    spec = BOOKMARKS
    fields = {"url": str, "title": str}
    required = ("url",)

    @classmethod
    def text_of(cls, value: Mapping[str, Any]) -> str:
        """Return the title and the address."""
        return f"{value.get('title') or ''} {value.get('url') or ''}".strip()


class BookmarksKind(MemoryKind):
    """A user's bookmarks: the whole contract of a simple kind."""

    info = KindInfo(
        name="bookmarks",
        title="Pages a user saved.",
        roots=("bookmarks",),
        line_kinds=("bookmark",),
        users_column="bookmarks",
    )
    specs = (BOOKMARKS,)
    cli_columns = (("key", "key"), ("url", "url"), ("title", "title"))

    def spaces(self, ctx: KindContext) -> Sequence[KindSpace]:
        """``("bookmarks", user)``."""
        return (BookmarksSpace(ctx),)

    def embedding_text(self, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the title and the address."""
        return BookmarksSpace.text_of(properties)

    def check_line(self, line: ImportLine) -> None:
        """Check that an imported bookmark has an address."""
        if not str(line.properties.get("url") or "").strip():
            raise InvalidInputError("a bookmark needs a url")

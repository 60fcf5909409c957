"""Plain LangGraph items: what other LangGraph code keeps in namespaces no memory kind claims.

``AgenticStore`` keeps an item of any other namespace (``("notes", user)``, LangMem's
``("memories", user)``) in ``LangGraphItems`` (:data:`ITEMS`; see
:mod:`agentic_memory.langgraph_store.generic` for how items are written, searched and
expire). An item belongs to the user its namespace's second label names, the convention
LangGraph code follows and ``graph/auth.py`` enforces; an item of a one-label namespace
(``("notes",)``) belongs to no one.

As a memory kind (:class:`ItemsKind`, ``items``) they are counted in ``amem memories
users``, listed by ``amem memories list items --user``, exported with their user
(``amem memories export --user``) and imported, and forgotten with the user. The TTL
refreshes (:data:`TOUCHES`) are bookkeeping: never exported, forgotten with their items.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentic_memory.kinds.contract import ImportLine, KindInfo, MemoryKind
from agentic_memory.store import (
    CollectionSpec,
    InvalidInputError,
    MemoryStore,
    Property,
    StoredObject,
    Where,
    make_id,
)

__all__ = ["ITEMS", "TOUCHES", "ItemsKind", "aforget_owner", "item_id", "owner_of"]

ITEMS = CollectionSpec(
    name="LangGraphItems",
    per_user=False,
    description="Items of LangGraph store namespaces that are not memory kinds.",
    properties=(
        Property("namespace", "text", description="the labels joined by '.'"),
        Property("prefixes", "text[]", description="every leading part of the namespace"),
        Property("key", "text"),
        Property("value_json", "text", filterable=False),
        Property(
            "search_text",
            "text",
            searchable=True,
            filterable=False,
            description="the text at the item's index paths, one line each",
        ),
        Property("indexed", "bool", description="false: index=False or no text to index"),
        Property("created_at", "date"),
        Property("updated_at", "date"),
        Property("ttl_minutes", "number"),
        Property("expires_at", "number", description="Unix seconds; 2^53 when it never expires"),
        Property("put_token", "text", description="new on every put"),
    ),
)

TOUCHES = CollectionSpec(
    name="LangGraphItemTouches",
    per_user=False,
    description="TTL refreshes of LangGraph items, per item and put.",
    properties=(
        Property("item_id", "text"),
        Property("put_token", "text"),
        Property("expires_at", "number", description="Unix seconds"),
    ),
)

_SEPARATOR = "."
"""How a namespace's labels are joined (``namespaces.labels.SEPARATOR``)."""
_PAGE = 1000
_BATCH = 100
_SHOWN_VALUE = 120
"""Characters of an item's value a table row shows."""


def item_id(namespace: Sequence[str], key: str) -> str:
    """Return the stored id of an item."""
    return make_id("langgraph-item", _SEPARATOR.join(namespace), key)


def owner_of(properties: Mapping[str, Any]) -> str | None:
    """Return the user an item belongs to: its namespace's second label (``None``: no one)."""
    labels = str(properties.get("namespace") or "").split(_SEPARATOR)
    return labels[1] if len(labels) > 1 and labels[1] else None


async def _aowned(store: MemoryStore, owner: str) -> list[StoredObject]:
    if ITEMS.name not in await store.acollections():
        return []
    found = []
    async for obj in store.aiterate(ITEMS.name, page_size=_PAGE):
        if owner_of(obj.properties) == owner:
            found.append(obj)
    return found


async def aforget_owner(store: MemoryStore, owner: str) -> int:
    """Delete every item of ``owner`` and its TTL refreshes; return how many items."""
    ids = [obj.id for obj in await _aowned(store, owner)]
    removed = 0
    for start in range(0, len(ids), _BATCH):
        removed += await store.adelete(ITEMS.name, ids[start : start + _BATCH])
    if ids and TOUCHES.name in await store.acollections():
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            await store.adelete_where(TOUCHES.name, [Where("item_id", "in", chunk)])
    return removed


def _row(obj: StoredObject) -> dict[str, Any]:
    p = obj.properties
    value = str(p.get("value_json") or "")
    return {
        "id": obj.id,
        "namespace": str(p.get("namespace") or "").split(_SEPARATOR),
        "key": p.get("key"),
        "value": value if len(value) <= _SHOWN_VALUE else value[: _SHOWN_VALUE - 1] + "…",
        "updated_at": p.get("updated_at"),
        "ttl_minutes": p.get("ttl_minutes"),
    }


class ItemsKind(MemoryKind):
    """Plain LangGraph items of the namespaces no other kind claims."""

    info = KindInfo(
        name="items",
        title="Plain LangGraph items of other namespaces (a user's: the second label).",
        roots=(),
        line_kinds=("item",),
        users_column="items",
    )
    specs = (ITEMS,)
    bookkeeping = (TOUCHES.name,)
    owned_objects = True
    cli_columns = (
        ("namespace", "namespace"),
        ("key", "key"),
        ("value", "value"),
        ("updated", "updated_at"),
    )

    @classmethod
    def owner_of(cls, collection: str, properties: Mapping[str, Any]) -> str | None:
        """Return an item's user: its namespace's second label."""
        del collection
        return owner_of(properties)

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete the user's items (and their TTL refreshes)."""
        if ITEMS.name not in await self.store.acollections():
            return {}
        return {ITEMS.name: await aforget_owner(self.store, user)}

    async def ausers(self) -> set[str]:
        """Return the users some item belongs to."""
        if ITEMS.name not in await self.store.acollections():
            return set()
        users = set()
        async for obj in self.store.aiterate(ITEMS.name, page_size=_PAGE):
            owner = owner_of(obj.properties)
            if owner is not None:
                users.add(owner)
        return users

    async def acount(self, user: str) -> int:
        """Return how many items belong to ``user``."""
        return len(await _aowned(self.store, user))

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the text the item indexes."""
        return str(properties.get("search_text") or "")

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check a namespace, a key, a JSON object value, and the id they make."""
        props = line.properties
        namespace, key = props.get("namespace"), props.get("key")
        if not isinstance(namespace, str) or not namespace or not isinstance(key, str):
            raise InvalidInputError("an item needs a namespace and a key")
        try:
            value = json.loads(str(props.get("value_json")))
        except (ValueError, RecursionError):
            raise InvalidInputError("value_json is not JSON") from None
        if not isinstance(value, dict):
            raise InvalidInputError("an item's value is a JSON object")
        if line.id != item_id(namespace.split(_SEPARATOR), key):
            raise InvalidInputError(f"the id of item {key!r:.40} is not its namespace's and key's")

    @classmethod
    def shared_what(cls, line: ImportLine, spec: CollectionSpec) -> str | None:
        """Say a one-label namespace's item is shared; ``None`` for a user's (theirs)."""
        del spec
        if owner_of(line.properties) is not None:
            return None
        return "plain LangGraph items that belong to no user"

    async def alist_rows(self, user: str, limit: int) -> list[dict[str, Any]]:
        """Return the user's items by namespace and key (values shortened)."""
        owned = sorted(
            await _aowned(self.store, user),
            key=lambda o: (str(o.properties.get("namespace")), str(o.properties.get("key"))),
        )
        return [_row(obj) for obj in owned[:limit]]

    async def ashow(self, user: str, oid: str) -> dict[str, Any] | None:
        """Return one of the user's items, value whole."""
        if ITEMS.name not in await self.store.acollections():
            return None
        found = await self.store.aget(ITEMS.name, oid)
        if found is None or owner_of(found.properties) != user:
            return None
        return {"id": found.id, **found.properties}

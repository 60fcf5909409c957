"""Namespaces that are not memory kinds: plain LangGraph items in a collection of their own.

Items live in ``LangGraphItems`` (a shared collection of the memory store, so both
backends hold them). One object per (namespace, key): its JSON value, the text indexed for
search (``search_text``, BM25) and that text's vector, and bookkeeping: the namespace and
each of its leading parts (``prefixes``, for prefix searches), ``created_at`` (kept across
puts), ``updated_at``, and for items with a TTL ``ttl_minutes``, ``expires_at`` (Unix
seconds, set by the put) and a ``put_token`` that is new on every put.

Refreshing a TTL on read must not rewrite the item: a put landing between the read and the
rewrite would be lost. A refresh therefore writes a *touch* (``LangGraphItemTouches``, one
object per item and put token) holding the later expiry; an item is alive while its own
``expires_at`` or its touch's lies ahead. A new put has a new token, so older touches no
longer count, and the sweeper deletes an item only together with the token it found
expired (``put_token in [...]``), so a put made meanwhile survives.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.store.base import Item, SearchItem, get_text_at_path, tokenize_path

from agentic_memory.kinds._bound import embedded_part
from agentic_memory.kinds.items import ITEMS, TOUCHES, aforget_owner, item_id
from agentic_memory.langgraph_store.common import (
    Clock,
    Found,
    SpaceSearch,
    Touch,
    check_json_value,
    item_value,
    parse_time,
    pooled,
)
from agentic_memory.langgraph_store.filters import ItemFilter
from agentic_memory.langgraph_store.namespaces import join, prefixes, split
from agentic_memory.store import (
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    Where,
    check_text,
    make_id,
)
from agentic_memory.store.base import PAGE_LIMIT

__all__ = ["ITEMS", "NO_EXPIRY", "TOUCHES", "GenericPut", "GenericSpace"]

NO_EXPIRY = float(2**53)
"""``expires_at`` of an item without a TTL: later than any clock, and exact in a float."""

MAX_INDEXED_CHARS = 100_000
"""The longest text an item may index (what is embedded): larger ones should name fields."""

_PAGE = 1000
_SWEEP_BATCH = 100


def touch_id(item: str, put_token: str) -> str:
    """Return the id of the TTL refresh of one put of an item."""
    return make_id("langgraph-touch", item, put_token)


@dataclass(frozen=True)
class GenericPut:
    """A checked put (or delete, ``value_json is None``) of a generic item."""

    namespace: tuple[str, ...]
    key: str
    value_json: str | None
    text: str
    """What is embedded: the beginning of the indexed text (``MAX_EMBEDDED_CHARS``)."""
    ttl: float | None
    search_text: str = ""
    """The whole indexed text, searched by keywords."""


class GenericSpace:
    """Every namespace whose first label is not a memory kind."""

    def __init__(
        self,
        store: MemoryStore,
        embeddings: Any,
        *,
        index_fields: Sequence[str],
        clock: Clock,
    ) -> None:
        self._store = store
        self._embeddings = embeddings
        self._fields = [_path(p) for p in index_fields]
        self._clock = clock
        self._ready = False
        self._marker = [1.0] + [0.0] * (store.dims - 1)

    async def ensure(self) -> None:
        """Create the two collections on first use (harmless when they exist)."""
        if not self._ready:
            await self._store.aensure_collection(ITEMS)
            await self._store.aensure_collection(TOUCHES)
            self._ready = True

    # -- writes ---------------------------------------------------------------------------

    def prepare(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any] | None,
        index: Literal[False] | list[str] | None,
        ttl: float | None,
    ) -> GenericPut:
        """Check a put before anything is written; return what to write."""
        if value is None:
            return GenericPut(namespace, key, None, "", None)
        value_json = check_json_value(value)
        if ttl is not None and (
            isinstance(ttl, bool)
            or not isinstance(ttl, int | float)
            or not math.isfinite(ttl)
            or ttl <= 0
        ):
            raise InvalidInputError(f"ttl is a positive number of minutes or None, got {ttl!r}")
        text = "\n".join(self._texts(dict(value), index))
        if len(text) > MAX_INDEXED_CHARS:
            raise InvalidInputError(
                f"the item indexes {len(text):,} characters, more than {MAX_INDEXED_CHARS:,}: "
                "pass index=[...] with the fields to search, or index=False"
            )
        return GenericPut(
            namespace,
            key,
            value_json,
            embedded_part(text),
            None if ttl is None else float(ttl),
            search_text=text,
        )

    def _texts(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> list[str]:
        if index is False:
            return []
        if index is None:
            paths = self._fields
        elif isinstance(index, list) and all(isinstance(p, str) and p for p in index):
            paths = [_path(p) for p in index]
        else:
            raise InvalidInputError(
                f"index is False, None or a list of field paths, got {index!r:.80}"
            )
        texts: list[str] = []
        for path in paths:
            texts.extend(t for t in get_text_at_path(value, path) if t.strip())
        return texts

    async def write(self, put: GenericPut, vector: Sequence[float] | None) -> None:
        """Write a prepared put; ``vector`` is the embedding of its text (None: not indexed)."""
        await self.ensure()
        oid = item_id(put.namespace, put.key)
        if put.value_json is None:
            await self._store.adelete(ITEMS.name, [oid])
            return
        now = self._clock()
        stamp = now.timestamp()
        created = now
        existing = await self._store.aget(ITEMS.name, oid)
        if existing is not None and oid not in await self._dead([existing], stamp):
            created = parse_time(existing.properties["created_at"])
        props: dict[str, Any] = {
            "namespace": join(put.namespace),
            "prefixes": prefixes(put.namespace),
            "key": put.key,
            "value_json": put.value_json,
            "search_text": put.search_text,
            "indexed": vector is not None,
            "created_at": created.isoformat(),
            "updated_at": now.isoformat(),
            "ttl_minutes": put.ttl,
            "expires_at": NO_EXPIRY if put.ttl is None else stamp + put.ttl * 60.0,
            "put_token": uuid.uuid4().hex,
        }
        obj = MemoryObject(oid, props, self._marker if vector is None else vector)
        (await self._store.aupsert(ITEMS.name, [obj])).raise_for_failures()

    async def refresh(self, touches: Sequence[Touch]) -> None:
        """Push back the expiry of items just read (see the module docstring)."""
        if not touches:
            return
        await self.ensure()
        stamp = self._clock().timestamp()
        objects = {
            touch_id(t.item_id, t.put_token): MemoryObject(
                touch_id(t.item_id, t.put_token),
                {
                    "item_id": t.item_id,
                    "put_token": t.put_token,
                    "expires_at": stamp + t.ttl_minutes * 60.0,
                },
                self._marker,
            )
            for t in touches
        }
        (await self._store.aupsert(TOUCHES.name, list(objects.values()))).raise_for_failures()

    # -- reads ----------------------------------------------------------------------------

    async def get(self, namespace: tuple[str, ...], key: str) -> tuple[Item, Touch | None] | None:
        """Return a live item and what refreshing it writes, or ``None``."""
        await self.ensure()
        obj = await self._store.aget(ITEMS.name, item_id(namespace, key))
        if obj is None or obj.id in await self._dead([obj], self._clock().timestamp()):
            return None
        found = _found(obj.id, obj.properties, None)
        item = found.item
        plain = Item(
            value=item.value,
            key=item.key,
            namespace=item.namespace,
            created_at=item.created_at,
            updated_at=item.updated_at,
        )
        return plain, found.touch

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Return the first ``need`` live items under the prefix that pass the filter.

        With a query: the hybrid search over indexed items, best first, then items that
        are not indexed (no score), newest first. Without: newest ``updated_at`` first.
        """
        prefix, query, flt, need = request.partition, request.query, request.flt, request.need
        await self.ensure()
        where = [Where("prefixes", "contains", join(prefix))] if prefix else []
        stamp = self._clock().timestamp()
        if not query:
            return await self._listing(where, flt, need, stamp)
        vector = await self._embeddings.aembed_query(embedded_part(query))
        scored_where = [*where, Where("indexed", "eq", True)]

        async def fetch(k: int) -> list[Found | None]:
            hits = await self._store.ahybrid(
                ITEMS.name,
                query=query,
                vector=vector,
                alpha=request.alpha,
                limit=k,
                where=scored_where,
            )
            dead = await self._dead(hits, stamp)
            return [None if h.id in dead else _found(h.id, h.properties, h.score) for h in hits]

        found = await pooled(fetch, lambda f: flt.matches(f.item.value), need, PAGE_LIMIT)
        if len(found) < need:
            unindexed = [*where, Where("indexed", "eq", False)]
            found += await self._listing(unindexed, flt, need - len(found), stamp)
        return found

    async def _listing(
        self, where: list[Where], flt: ItemFilter, need: int, stamp: float
    ) -> list[Found]:
        out: list[Found] = []
        page = min(PAGE_LIMIT, max(need, 100))
        offset = 0
        while len(out) < need:
            objs = await self._store.alist_objects(
                ITEMS.name,
                where=where,
                limit=page,
                offset=offset,
                sort_by="updated_at",
                descending=True,
            )
            dead = await self._dead(objs, stamp)
            for obj in objs:
                if obj.id in dead:
                    continue
                found = _found(obj.id, obj.properties, None)
                if flt.matches(found.item.value):
                    out.append(found)
            if len(objs) < page:
                break
            offset += page
        return out[:need]

    async def namespaces(self, fixed: tuple[str, ...]) -> set[tuple[str, ...]]:
        """Namespaces under ``fixed`` that hold at least one live item."""
        await self.ensure()
        where = [Where("prefixes", "contains", join(fixed))] if fixed else []
        stamp = self._clock().timestamp()
        alive: set[str] = set()
        async for obj in self._store.aiterate(ITEMS.name, where=where, page_size=_PAGE):
            name = str(obj.properties["namespace"])
            if name not in alive and not await self._dead([obj], stamp):
                alive.add(name)
        return {split(name) for name in alive}

    # -- TTL ------------------------------------------------------------------------------

    async def _dead(self, objs: Sequence[StoredObject | Any], stamp: float) -> set[str]:
        """Ids among ``objs`` (stored objects or hits) whose TTL has run out at ``stamp``."""
        dead: set[str] = set()
        for obj in objs:
            expires = obj.properties.get("expires_at")
            if expires is None or float(expires) > stamp:
                continue
            token = str(obj.properties.get("put_token") or "")
            touch = await self._store.aget(TOUCHES.name, touch_id(obj.id, token))
            if touch is None or float(touch.properties.get("expires_at") or 0.0) <= stamp:
                dead.add(obj.id)
        return dead

    async def sweep(self) -> int:
        """Delete the items whose TTL has run out (and spent touches); return how many items."""
        await self.ensure()
        stamp = self._clock().timestamp()
        expired = [
            obj
            async for obj in self._store.aiterate(
                ITEMS.name, where=[Where("expires_at", "lte", stamp)], page_size=_PAGE
            )
        ]
        dead = await self._dead(expired, stamp)
        tokens = [str(o.properties.get("put_token") or "") for o in expired if o.id in dead]
        removed = 0
        for start in range(0, len(tokens), _SWEEP_BATCH):
            batch = tokens[start : start + _SWEEP_BATCH]
            # The token condition spares an item put again since it was read.
            removed += await self._store.adelete_where(
                ITEMS.name,
                [Where("put_token", "in", batch), Where("expires_at", "lte", stamp)],
            )
        await self._store.adelete_where(TOUCHES.name, [Where("expires_at", "lte", stamp)])
        return removed

    async def forget_prefix(self, prefix: tuple[str, ...]) -> int:
        """Delete every item under a namespace prefix; return how many."""
        await self.ensure()
        return await self._store.adelete_where(
            ITEMS.name, [Where("prefixes", "contains", join(prefix))]
        )

    async def forget_owner(self, owner: str) -> int:
        """Delete every item whose namespace's second label is ``owner``; return how many."""
        await self.ensure()
        return await aforget_owner(self._store, owner)


def _path(path: str) -> str | list[str]:
    if not isinstance(path, str) or not path:
        raise InvalidInputError(f"an index path is a non-empty string, got {path!r}")
    check_text(path, "an index path")
    if path == "$":
        return path
    try:
        return tokenize_path(path)
    except (ValueError, IndexError) as exc:
        raise InvalidInputError(f"index path {path!r} is malformed: {exc}") from None


def _found(oid: str, props: Mapping[str, Any], score: float | None) -> Found:
    item = SearchItem(
        namespace=split(str(props["namespace"])),
        key=str(props["key"]),
        value=item_value(props["value_json"]),
        created_at=parse_time(props["created_at"]),
        updated_at=parse_time(props["updated_at"]),
        score=score,
    )
    ttl = props.get("ttl_minutes")
    touch = None if ttl is None else Touch(oid, str(props.get("put_token") or ""), float(ttl))
    return Found(item, touch)

"""The namespace families' base: what every memory kind's LangGraph namespaces share.

A memory kind serves its namespaces through one :class:`KindSpace` subclass per root (its
*family*, in the kind's package: ``kinds/facts/space.py``, ...), built by its contract's
``spaces(ctx)`` over one :class:`SpaceContext`. A family maps LangGraph items onto its kind
and goes through that kind's public methods, so its rules hold for store writes as for the
agent's. The mapping, namespace by namespace, is in ``docs/langgraph-store.md``.

A put is checked in two steps: :meth:`KindSpace.prepare` checks what it can without reading
the store (shape, types, unknown fields) and returns the write, which checks what needs the
stored state before it changes anything. Everything that reads or writes is a coroutine
(``AgenticStore.abatch`` awaits it on the caller's loop). :class:`RecordSpace` is the whole
family of a simple kind whose items are plain records (``docs/architecture.md``, "Adding a
memory kind").
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

from langchain_core.embeddings import Embeddings
from langgraph.store.base import Item, SearchItem

from agentic_memory.namespaces.labels import SEPARATOR
from agentic_memory.namespaces.search import Found, SpaceSearch, parse_time
from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    check_text,
    check_user_id,
    make_id,
)
from agentic_memory.store.base import PAGE_LIMIT

__all__ = [
    "PAGE",
    "RECALL_CAP",
    "KindSpace",
    "RecordSpace",
    "SpaceContext",
    "Write",
    "addressable",
    "check_fields",
    "is_uuid",
    "optional_field",
    "plain_item",
]

Write = Callable[[], Awaitable[None]]
PAGE = 100
"""The page a family lists a kind's objects by."""
RECALL_CAP = 1000
"""The largest recall a search asks a kind for while a filter drops candidates."""

_Kind = TypeVar("_Kind")


@dataclass(frozen=True)
class SpaceContext:
    """What every family needs: the store, the embeddings, the clock, the operator.

    ``kinds`` holds the kind objects the agent's store shares with its families (its facts
    store, its rule book, ...), so that items and the agent's nodes go through the same
    ones; a family takes its own with :meth:`kind`, so this module names no kind.
    """

    store: MemoryStore
    embeddings: Embeddings
    now: Callable[[], datetime | None]
    """The time a kind should stamp, or ``None`` for the kind's own clock."""
    operator: str | None = None
    """Who decides for the shared rules through this store; ``None``: nobody (not an
    operator's store)."""
    kinds: tuple[object, ...] = ()

    def kind(self, cls: type[_Kind]) -> _Kind:
        """Return the shared kind object of class ``cls``; raise ``InvalidInputError``."""
        for found in self.kinds:
            if isinstance(found, cls):
                return found
        raise InvalidInputError(f"no {cls.__name__} was given to the namespace families")


class KindSpace(ABC):
    """The namespaces of one memory kind, ``(root, owner, ...)``."""

    root: ClassVar[str]
    collection: ClassVar[str] = ""
    """The kind's collection in the memory store."""
    depth: ClassVar[int] = 2
    """Labels of an item's namespace."""

    def __init__(self, ctx: SpaceContext) -> None:
        self.ctx = ctx

    # -- namespaces -----------------------------------------------------------------------

    def check_item_namespace(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """Check the namespace of a get, put or delete; raise ``InvalidInputError``."""
        if len(namespace) != self.depth:
            raise InvalidInputError(
                f"namespaces under {self.root!r} are reserved for that memory kind and have "
                f"the form {self.shape}; got {namespace}"
            )
        self.check_owner(namespace[1])
        return namespace

    @property
    def shape(self) -> str:
        """The namespace form, for messages."""
        return f"({self.root!r}, user)"

    def check_owner(self, owner: str) -> str:
        """Check the second label: a person's user id (rules and knowledge differ)."""
        check_user_id(owner)
        if owner == GLOBAL_SCOPE:
            raise InvalidInputError(
                f"{GLOBAL_SCOPE!r} holds only the shared rules, not {self.root}: use a user id"
            )
        return owner

    async def owners(self) -> list[str]:
        """Owners with something stored, addressable as a namespace label, sorted."""
        name = self.collection
        if name not in await self.ctx.store.acollections():
            return []
        return sorted(u for u in await self.ctx.store.ausers(name) if addressable(u))

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Return the namespaces a search under ``prefix`` reads, one query each, in order."""
        if len(prefix) <= 1:
            return [(self.root, owner) for owner in await self.owners()]
        if len(prefix) == 2:
            return [(self.root, self.check_owner(prefix[1]))]
        return []

    async def namespaces(self, fixed: tuple[str, ...], deep: bool) -> set[tuple[str, ...]]:
        """Return the kind's namespaces that hold something, under the labels ``fixed``."""
        del deep
        return {ns for ns in await self._listed(fixed) if ns[: len(fixed)] == fixed}

    async def _listed(self, fixed: tuple[str, ...]) -> list[tuple[str, ...]]:
        try:
            named = await self.partitions(fixed[:2])
        except InvalidInputError:
            return []  # a listing under a label that cannot be an owner lists nothing
        if len(fixed) < 2:
            return named  # every owner with something stored
        existing = set(await self.owners())
        return [ns for ns in named if ns[1] in existing]

    # -- items ----------------------------------------------------------------------------

    @abstractmethod
    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Return one item, or ``None``."""

    @abstractmethod
    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Check a put (``value`` None: a delete) and return the write."""

    @abstractmethod
    async def search(self, request: SpaceSearch) -> list[Found]:
        """Return the first ``need`` matching items of one partition (ranked with a query)."""


# -- a record kind: one object per item -----------------------------------------------------


class RecordSpace(KindSpace):
    """``(root, user)``: key = the item's key, value = one object of a per-user collection.

    The namespace family of a simple memory kind whose items are plain records: a subclass
    sets ``root``, ``spec`` (a per-user collection with the filterable text property
    ``key``, the date properties ``created_at`` and ``updated_at``, and one property per
    field of the value), ``fields`` (the value's fields and their types), ``required`` and
    :meth:`text_of` (what an item is embedded and keyword-searched from). Puts replace the
    item (its ``created_at`` kept); a delete deletes it; a search ranks by hybrid search
    (the vector side from the store's embeddings), a listing goes by key.
    """

    spec: ClassVar[CollectionSpec]
    fields: ClassVar[Mapping[str, type]]
    """The value's fields: name → the Python type a value must have (``None`` allowed
    unless required)."""
    required: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:
            cls.collection = spec.name

    @classmethod
    @abstractmethod
    def text_of(cls, value: Mapping[str, Any]) -> str:
        """Return the text an item is embedded from."""

    def _id(self, user: str, key: str) -> str:
        return make_id(self.root, user, key)

    async def _exists(self) -> bool:
        return self.spec.name in await self.ctx.store.acollections()

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Return the item stored under ``key``."""
        user = self.check_item_namespace(namespace)[1]
        if not await self._exists():
            return None
        obj = await self.ctx.store.aget(self.spec.name, self._id(user, key), user=user)
        return None if obj is None else plain_item(self._item(user, obj, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Check the value against ``fields`` and return the write (``None``: the delete)."""
        user = self.check_item_namespace(namespace)[1]
        check_text(key, "a key")
        store, name, oid = self.ctx.store, self.spec.name, self._id(user, key)
        if value is None:

            async def forget() -> None:
                if await self._exists():
                    await store.adelete(name, [oid], user=user)

            return forget
        what = f"a {self.root} item"
        data = check_fields(value, frozenset(self.fields), frozenset(), what, required=())
        missing = [f for f in self.required if data.get(f) is None]
        if missing:
            raise InvalidInputError(f"{what} needs {', '.join(map(repr, missing))}")
        for field, kind in self.fields.items():
            given = data.get(field)
            if given is None:
                continue
            if not isinstance(given, kind) or (isinstance(given, bool) and kind is not bool):
                raise InvalidInputError(
                    f"{what}'s {field} must be a {kind.__name__}, got {given!r:.60}"
                )
            if isinstance(given, str):
                check_text(given, f"{what}'s {field}")
        text = self.text_of(data) or " "

        async def write() -> None:
            await store.aensure_collection(self.spec)
            stamp = (self.ctx.now() or datetime.now(UTC)).isoformat()
            before = await store.aget(name, oid, user=user)
            created = before.properties.get("created_at") if before is not None else None
            vector = (await self.ctx.embeddings.aembed_documents([text]))[0]
            props = {
                **{k: v for k, v in data.items() if v is not None},
                "key": key,
                "created_at": created or stamp,
                "updated_at": stamp,
            }
            done = await store.aupsert(name, [MemoryObject(oid, props, vector)], user=user)
            done.raise_for_failures()

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Rank items by hybrid search, or list them by key."""
        user, query = request.owner, request.query
        store, name = self.ctx.store, self.spec.name
        if not await self._exists() or user not in await store.ausers(name):
            return []
        if query:
            vector = await self.ctx.embeddings.aembed_query(query)

            async def recall(k: int) -> list[SearchItem]:
                hits = await store.ahybrid(
                    name, query=query, vector=vector, alpha=request.alpha, limit=k, user=user
                )
                return [self._item(user, StoredObject(h.id, h.properties), h.score) for h in hits]

            return await request.ranked(recall, PAGE_LIMIT)

        async def page(offset: int) -> list[SearchItem]:
            listed = await store.alist_objects(
                name, user=user, limit=PAGE, offset=offset, sort_by="key"
            )
            return [self._item(user, obj, None) for obj in listed]

        return await request.paged(page, PAGE)

    def _item(self, user: str, obj: StoredObject, score: float | None) -> SearchItem:
        props = obj.properties
        return SearchItem(
            namespace=(self.root, user),
            key=str(props.get("key", "")),
            value={f: props.get(f) for f in self.fields},
            created_at=parse_time(props.get("created_at")),
            updated_at=parse_time(props.get("updated_at")),
            score=score,
        )


# -- helpers ----------------------------------------------------------------------------------


def optional_field(fields: Mapping[str, Any], name: str, kind: type, rule: str) -> Any:
    """Return an optional field's value (``None`` when absent); refuse another type."""
    value = fields.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidInputError(f"{rule}, got {value!r:.60}")
    return value


def check_fields(
    value: Mapping[str, Any],
    fields: frozenset[str],
    echo: frozenset[str],
    what: str,
    *,
    required: tuple[str, ...],
) -> dict[str, Any]:
    """Return ``value`` as a dict: a mapping of known fields (or echoed ones) with ``required``."""
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a mapping, got {type(value).__name__}")
    data = dict(value)
    unknown = sorted(set(data) - fields - echo)
    if unknown:
        raise InvalidInputError(
            f"{what} has no field {', '.join(map(repr, unknown))} (fields: "
            f"{', '.join(sorted(fields))}; set by the store: {', '.join(sorted(echo))})"
        )
    missing = [name for name in required if data.get(name) is None]
    if missing:
        raise InvalidInputError(f"{what} needs {', '.join(map(repr, missing))}")
    return data


def plain_item(item: SearchItem) -> Item:
    """Return a search result as the item a get returns (no score)."""
    return Item(
        value=item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def is_uuid(key: str) -> bool:
    """Whether ``key`` is a UUID (an object id), as a get by id needs."""
    try:
        uuid.UUID(key)
    except ValueError:
        return False
    return True


def addressable(label: str) -> bool:
    """Whether a stored name can be a LangGraph namespace label."""
    return bool(label) and SEPARATOR not in label and "\x00" not in label

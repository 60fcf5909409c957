"""Value types shared by every storage backend: schemas, objects, filters, hits and errors.

``Writes``, ``Update``, ``Listing``, ``Page`` and ``HybridQuery`` are the checked calls ``MemoryStore``
hands its backends' hooks.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

PropertyType = Literal["text", "text[]", "int", "number", "bool", "date"]
"""Property types both backends support; ``date`` is an RFC 3339 string with a timezone."""

FilterOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "contains"]
"""``in``: the property equals one of the values; ``contains``: a ``text[]`` property holds the value."""

ID_NAMESPACE = uuid.UUID("6f1c0b1e-5a8e-4a9b-9a55-3c7f0e6d2a10")
COLLECTION_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9_]{0,62}$")
PROPERTY_NAME_RE = re.compile(r"^[a-z_][A-Za-z0-9_]{0,62}$")
MAX_USER_ID_LENGTH = 256


ESCAPED_ID_NAMESPACE = uuid.UUID("2b7e5c1a-93d4-4f0e-8c61-5a0d7f3e9b42")
"""Namespace of the ids of keys whose parts hold the separator (see ``make_id``)."""
KEY_SEPARATOR = "\x1f"


def make_id(*parts: str) -> str:
    r"""Return a deterministic UUID (v5) for the given key parts.

    The same parts always give the same id, so upserting the same logical object twice
    leaves one copy on every backend; different parts give different ids.

    Parts are joined with ``KEY_SEPARATOR`` (U+001F), as they always were, so stored ids
    stay valid. A key with the separator inside a part would collide that way
    (``("a\x1fb", "c")`` and ``("a", "b\x1fc")``); such keys are named by their JSON list
    in a namespace of their own instead, which cannot meet a joined key.

    Raises:
        InvalidInputError: No part is given, or a part is not valid text.
    """
    if not parts:
        raise InvalidInputError("make_id needs at least one key part")
    for part in parts:
        if not isinstance(part, str):
            raise InvalidInputError(f"id key parts must be strings, got {type(part).__name__}")
        check_text(part, "an id key part")
    if any(KEY_SEPARATOR in part for part in parts):
        name = json.dumps(list(parts), ensure_ascii=False)
        return str(uuid.uuid5(ESCAPED_ID_NAMESPACE, name))
    return str(uuid.uuid5(ID_NAMESPACE, KEY_SEPARATOR.join(parts)))


def check_text(value: str, what: str) -> str:
    """Return ``value`` if it is valid Unicode text, else raise ``InvalidInputError``.

    Python strings may hold lone surrogates (U+D800 to U+DFFF, for example from a file name
    or a command-line argument that is not UTF-8); no store, tokenizer or JSON encoder takes
    them, so they are refused where the text comes in, with the position of the first one.
    """
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(
                f"{what} is not valid Unicode text: it holds a lone surrogate "
                f"{value[exc.start]!r} at position {exc.start}"
            ) from None
    return value


@dataclass(frozen=True)
class Property:
    """One property of a collection schema."""

    name: str
    type: PropertyType
    searchable: bool = False
    """Indexed for BM25 keyword search (text and text[] only)."""
    filterable: bool = True
    description: str = ""


@dataclass(frozen=True)
class CollectionSpec:
    """An explicit collection schema; backends never infer a schema from data."""

    name: str
    properties: tuple[Property, ...]
    per_user: bool
    """Per-user collections keep one partition (a Weaviate tenant) per user; every call needs a user."""
    description: str = ""
    indexes: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    """Compound indexes, each a tuple of filterable scalar properties: a hint for queries that
    filter on the leading properties with ``eq`` and sort by (or range over) the next one.
    The embedded store keeps each as one SQLite index (creating missing ones when the
    collection is ensured); Weaviate has no use for it. Not part of a schema's identity (nor
    of ``==``): two specs that differ only here share a collection."""

    def prop(self, name: str) -> Property:
        """Return the property called ``name`` or raise ``InvalidInputError``."""
        for prop in self.properties:
            if prop.name == name:
                return prop
        raise InvalidInputError(f"collection {self.name!r} has no property {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Return the schema as plain JSON-ready data (the inverse of ``from_dict``)."""
        data: dict[str, Any] = {
            "name": self.name,
            "per_user": self.per_user,
            "description": self.description,
            "properties": [
                {
                    "name": p.name,
                    "type": p.type,
                    "searchable": p.searchable,
                    "filterable": p.filterable,
                    "description": p.description,
                }
                for p in self.properties
            ],
        }
        if self.indexes:
            data["indexes"] = [list(index) for index in self.indexes]
        return data

    @classmethod
    def from_dict(cls, data: object) -> CollectionSpec:
        """Rebuild a schema from ``to_dict`` data; raise ``InvalidInputError`` if malformed."""
        if not isinstance(data, dict):
            raise InvalidInputError(f"a collection schema must be an object, got {data!r:.80}")
        try:
            props = tuple(
                Property(
                    name=str(p["name"]),
                    type=p["type"],
                    searchable=bool(p.get("searchable", False)),
                    filterable=bool(p.get("filterable", True)),
                    description=str(p.get("description", "")),
                )
                for p in data["properties"]
            )
            indexes = tuple(tuple(str(n) for n in index) for index in data.get("indexes", ()))
            return cls(
                name=str(data["name"]),
                properties=props,
                per_user=bool(data["per_user"]),
                description=str(data.get("description", "")),
                indexes=indexes,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidInputError(f"malformed collection schema: {exc!r}") from None

    @property
    def searchable(self) -> tuple[str, ...]:
        """Names of the properties indexed for keyword search."""
        return tuple(p.name for p in self.properties if p.searchable)


@dataclass(frozen=True)
class MemoryObject:
    """An object to write: a caller-chosen id (use ``make_id``), properties and its vector."""

    id: str
    properties: Mapping[str, Any]
    vector: Sequence[float]


@dataclass(frozen=True)
class StoredObject:
    """An object read back from a collection."""

    id: str
    properties: dict[str, Any]
    vector: list[float] | None = None
    """Only filled when the read asked for vectors."""


@dataclass(frozen=True)
class SearchHit:
    """One hybrid-search result.

    ``score`` is the relativeScoreFusion score in [0, 1]; ``keyword_score`` is the raw BM25
    score and ``vector_score`` the cosine similarity, each ``None`` when the object was not
    among that side's candidates.
    """

    id: str
    properties: dict[str, Any]
    score: float
    keyword_score: float | None = None
    vector_score: float | None = None


@dataclass(frozen=True)
class Where:
    """One property condition; a sequence of them is combined with AND."""

    prop: str
    op: FilterOp
    value: Any


@dataclass(frozen=True)
class Writes:
    """A checked batch, as ``MemoryStore`` hands it to a backend's ``_upsert`` or ``_insert``."""

    objects: list[MemoryObject]
    vectors: npt.NDArray[np.float64]
    """``vectors[i]`` is ``objects[i].vector``, checked, as float64."""
    unless: list[Where] = field(default_factory=list)
    """An insert's guard: refused when an object of the partition matches every condition."""


@dataclass(frozen=True)
class Update:
    """A checked ``update``: ``change`` rewrites the stored objects of canonical ``ids``."""

    ids: list[str]
    change: Callable[[StoredObject], MemoryObject | None]
    """Checked as ``update`` documents: it returns an object of the same id, or ``None``."""


@dataclass(frozen=True)
class Listing:
    """A checked ``list_objects`` page: matches of ``where`` sorted by ``sort_by``, then id."""

    where: list[Where]
    limit: int
    offset: int = 0
    sort_by: str | None = None
    descending: bool = False


@dataclass(frozen=True)
class Page:
    """A checked keyset page of ``iterate``: up to ``limit`` matches with ids after ``after``."""

    where: list[Where]
    after: str | None
    limit: int
    include_vector: bool = False


@dataclass(frozen=True)
class HybridQuery:
    """A checked ``hybrid`` search: ``alpha`` weighs the vector side, ``1 - alpha`` keywords."""

    query: str
    vector: list[float]
    alpha: float
    limit: int
    where: list[Where]


@dataclass(frozen=True)
class UpsertResult:
    """What a batch upsert wrote; ``failed`` maps object id to the server's error message."""

    ids: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every object was written."""
        return not self.failed

    def raise_for_failures(self) -> None:
        """Raise ``PartialWriteError`` when any object failed."""
        if self.failed:
            raise PartialWriteError(self.failed)


class StoreError(Exception):
    """Base class of every storage error."""


class InvalidInputError(StoreError, ValueError):
    """The call's arguments are invalid; nothing was changed."""


class MissingUserError(InvalidInputError):
    """A per-user collection was used without a user."""


class VectorSizeError(InvalidInputError):
    """A vector does not have the collection's dimension."""


class UnknownCollectionError(StoreError, KeyError):
    """The collection does not exist in this store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown collection"


class SchemaConflictError(StoreError):
    """A collection exists with a different schema or vector size."""


class ConflictError(StoreError):
    """A create-only write (``MemoryStore.insert``) found what it must not; nothing was written.

    ``existing`` holds the ids that already exist; ``guarded`` is true when an object matched
    the write's ``unless`` conditions. Callers re-read and retry, or report the conflict.
    """

    def __init__(self, message: str, *, existing: Sequence[str] = (), guarded: bool = False):
        super().__init__(message)
        self.existing = tuple(existing)
        self.guarded = guarded


class PartialWriteError(StoreError):
    """A backend without transactions (Weaviate) rejected some objects of a batch."""

    def __init__(self, failed: Mapping[str, str]) -> None:
        self.failed = dict(failed)
        sample = "; ".join(f"{k}: {v}" for k, v in list(self.failed.items())[:3])
        super().__init__(f"{len(self.failed)} object(s) were not written: {sample}")


Filters = Sequence[Where]


_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def canonical_id(value: object) -> str:
    """Return an object id in its canonical form (lower-case, hyphenated), or raise.

    Raises:
        InvalidInputError: ``value`` is not a UUID string.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"object id must be a UUID string, got {type(value).__name__}")
    if _CANONICAL_ID.fullmatch(value):
        return value  # what make_id gives: parsing it again would give it back
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidInputError(
            f"object id {value!r} is not a UUID (use agentic_memory.store.make_id)"
        ) from None


def check_finite(vectors: Sequence[Sequence[float]]) -> npt.NDArray[np.float64]:
    """Return the vectors as one float64 array, refusing NaN and infinity.

    One conversion for a whole batch, which the backends reuse: per-vector conversions were a
    visible part of ingestion time.
    """
    values = np.asarray(vectors, dtype=np.float64)
    if not np.isfinite(values).all():
        raise InvalidInputError("vector values must be finite floats (found NaN or infinity)")
    return values

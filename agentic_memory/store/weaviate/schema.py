"""Translation between the store's schemas and values and Weaviate's.

A ``CollectionSpec`` becomes a collection with exactly its properties; a searchable and
filterable text property gets a field-tokenized ``__exact`` copy for filters; per-user
collections store the raw user id in ``amem_user`` because a tenant name may be a hash of it.
The collection description carries a marker with the vector size, so a spec can be rebuilt
from the server's config.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from weaviate.classes.config import DataType, Tokenization
from weaviate.classes.config import Property as WeaviateProperty

from agentic_memory.store.checks import GLOBAL_SCOPE
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    Property,
    PropertyType,
)

VECTOR_NAME = "default"
"""The one named vector every collection has; vectors are always supplied by the caller."""

USER_PROPERTY = "amem_user"
"""Internal property holding the raw user id in per-user collections."""

EXACT_SUFFIX = "__exact"
"""Suffix of the field-tokenized copy of a searchable *and* filterable text property."""

ID_PROPERTY = "_id"
"""The server's name for the object id in filters and sorting."""

_MARKER_RE = re.compile(r"\n*\[amem schema=1 dims=(\d+)\]\s*$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9-][A-Za-z0-9_-]{0,63}$")
_HASHED_TENANT_PREFIX = "_u"

_TO_WEAVIATE: dict[str, DataType] = {
    "text": DataType.TEXT,
    "text[]": DataType.TEXT_ARRAY,
    "int": DataType.INT,
    "number": DataType.NUMBER,
    "bool": DataType.BOOL,
    "date": DataType.DATE,
}
_FROM_WEAVIATE: dict[str, PropertyType] = {
    "text": "text",
    "text[]": "text[]",
    "int": "int",
    "number": "number",
    "boolean": "bool",
    "date": "date",
}


# -- tenants -------------------------------------------------------------------------------


def tenant_name(user: str) -> str:
    """Map a user id to a valid, stable Weaviate tenant name.

    Ids that already match ``[A-Za-z0-9-][A-Za-z0-9_-]{0,63}`` are used as they are; the
    global scope keeps its own name (``_global``); anything else becomes ``_u`` plus 48 hex
    digits of its SHA-256. User ids never start with ``_`` (the store reserves it), so a
    hashed name can collide neither with a real user's id nor with the global scope.
    """
    if user == GLOBAL_SCOPE:
        return GLOBAL_SCOPE
    if _TENANT_RE.match(user):
        return user
    return _HASHED_TENANT_PREFIX + hashlib.sha256(user.encode("utf-8")).hexdigest()[:48]


def is_hashed_tenant(name: str) -> bool:
    """Return whether a tenant name is a hash of a user id (``tenant_name`` had to hash it)."""
    return name.startswith(_HASHED_TENANT_PREFIX) and name != GLOBAL_SCOPE


# -- schema translation --------------------------------------------------------------------


def has_exact_copy(prop: Property) -> bool:
    """Return whether a text property also has a field-tokenized ``__exact`` copy for filters."""
    return prop.type in ("text", "text[]") and prop.searchable and prop.filterable


def weaviate_properties(spec: CollectionSpec) -> list[WeaviateProperty]:
    """Translate a spec's properties into Weaviate property configs (plus internal ones)."""
    out: list[WeaviateProperty] = []
    for prop in spec.properties:
        if prop.name == USER_PROPERTY or prop.name.endswith(EXACT_SUFFIX):
            raise InvalidInputError(
                f"property name {prop.name!r} is reserved by the Weaviate backend"
            )
        is_text = prop.type in ("text", "text[]")
        exact = has_exact_copy(prop)
        out.append(
            WeaviateProperty(
                name=prop.name,
                data_type=_TO_WEAVIATE[prop.type],
                description=prop.description or None,
                index_searchable=prop.searchable if is_text else None,
                index_filterable=prop.filterable and not exact,
                tokenization=(
                    (Tokenization.WORD if prop.searchable else Tokenization.FIELD)
                    if is_text
                    else None
                ),
            )
        )
        if exact:
            out.append(
                WeaviateProperty(
                    name=prop.name + EXACT_SUFFIX,
                    data_type=_TO_WEAVIATE[prop.type],
                    description=f"exact-match copy of {prop.name} for filters",
                    index_searchable=False,
                    index_filterable=True,
                    tokenization=Tokenization.FIELD,
                )
            )
    if spec.per_user:
        out.append(
            WeaviateProperty(
                name=USER_PROPERTY,
                data_type=DataType.TEXT,
                description="raw user id (the tenant name may be a hash of it)",
                index_searchable=False,
                index_filterable=False,
                tokenization=Tokenization.FIELD,
            )
        )
    return out


def collection_description(spec: CollectionSpec, dims: int) -> str:
    """Return the collection description: the spec's text plus the schema marker and dims."""
    text = spec.description.rstrip()
    marker = f"[amem schema=1 dims={dims}]"
    return f"{text}\n\n{marker}" if text else marker


def parse_description(description: str | None) -> tuple[str, int] | None:
    """Split a collection description into (spec description, dims); ``None`` if not ours."""
    if not description:
        return None
    match = _MARKER_RE.search(description)
    if match is None:
        return None
    return description[: match.start()].rstrip(), int(match.group(1))


def spec_from_config(
    name: str, description: str | None, multi_tenant: bool, properties: Sequence[Any]
) -> tuple[CollectionSpec, int] | None:
    """Rebuild (spec, dims) from a collection's config; ``None`` if it is not one of ours.

    ``properties`` are Weaviate property configs (``name``, ``data_type``,
    ``index_searchable``, ``index_filterable``, ``description``).
    """
    parsed = parse_description(description)
    if parsed is None:
        return None
    text, dims = parsed
    by_name = {p.name: p for p in properties}
    props: list[Property] = []
    for p in properties:
        if p.name == USER_PROPERTY or p.name.endswith(EXACT_SUFFIX):
            continue
        dtype = p.data_type.value if hasattr(p.data_type, "value") else str(p.data_type)
        if dtype not in _FROM_WEAVIATE:
            return None
        ptype = _FROM_WEAVIATE[dtype]
        searchable = bool(p.index_searchable) and ptype in ("text", "text[]")
        filterable = bool(p.index_filterable) or (p.name + EXACT_SUFFIX) in by_name
        props.append(
            Property(
                name=p.name,
                type=ptype,
                searchable=searchable,
                filterable=filterable,
                description=p.description or "",
            )
        )
    spec = CollectionSpec(
        name=name, properties=tuple(props), per_user=multi_tenant, description=text
    )
    return spec, dims


def schema_signature(spec: CollectionSpec) -> tuple[bool, frozenset[tuple[str, str, bool, bool]]]:
    """Return what must match for two specs to share one collection (not descriptions)."""
    return spec.per_user, frozenset(
        (p.name, p.type, p.searchable, p.filterable) for p in spec.properties
    )


# -- values ---------------------------------------------------------------------------------


def parse_date(value: str) -> datetime:
    """Parse ISO 8601 text, ``Z`` included, as the server writes and the store stores it."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def rfc3339(value: str | datetime) -> str:
    """Normalise a date (ISO 8601 text with a timezone, or a datetime) to UTC RFC 3339.

    The text is ``datetime.isoformat()`` in UTC, exactly what the embedded store returns.
    """
    parsed = value if isinstance(value, datetime) else parse_date(value)
    return parsed.astimezone(UTC).isoformat()


def to_weaviate_properties(
    spec: CollectionSpec, properties: Mapping[str, Any], user: str | None
) -> dict[str, Any]:
    """Translate validated properties into what is written to Weaviate."""
    out = _converted(spec, properties, _VALUES_TO_WEAVIATE)
    for prop in spec.properties:
        if prop.name in out and has_exact_copy(prop):
            out[prop.name + EXACT_SUFFIX] = out[prop.name]
    if spec.per_user and user is not None:
        out[USER_PROPERTY] = user
    return out


def from_weaviate_properties(spec: CollectionSpec, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Translate properties read from Weaviate back to the store's types (no internal ones)."""
    return _converted(spec, raw, _VALUES_FROM_WEAVIATE)


def _converted(
    spec: CollectionSpec, values: Mapping[str, Any], by_type: Mapping[str, Callable[[Any], Any]]
) -> dict[str, Any]:
    """Return the set values of ``spec``'s properties, each converted as its type says."""
    out: dict[str, Any] = {}
    for prop in spec.properties:
        value = values.get(prop.name)
        if value is not None:
            convert = by_type.get(prop.type)
            out[prop.name] = value if convert is None else convert(value)
    return out


_VALUES_TO_WEAVIATE: Mapping[str, Callable[[Any], Any]] = {
    "date": rfc3339,
    "number": float,
    "text[]": list,
}
_VALUES_FROM_WEAVIATE: Mapping[str, Callable[[Any], Any]] = {
    "date": lambda value: rfc3339(value if isinstance(value, datetime) else str(value)),
    "number": float,
    "int": int,
    "text[]": lambda value: [str(v) for v in value],
}


def describe_spec(spec: CollectionSpec) -> str:
    """Return a one-line summary of a spec's shape for schema-conflict errors."""
    props = ", ".join(
        f"{p.name}:{p.type}{'/s' if p.searchable else ''}{'/f' if p.filterable else ''}"
        for p in sorted(spec.properties, key=lambda p: p.name)
    )
    return f"{'per-user' if spec.per_user else 'shared'}({props})"

"""The checks every ``MemoryStore`` write and read makes of its arguments, before the backend.

One home for them, so that both backends refuse bad input with the same error before
anything is written: collection specs and added properties, user ids, objects and their
properties, vectors, filters and the numbers a call takes. Each raises ``InvalidInputError``
(or the narrower error it names) and changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from agentic_memory.store.types import (
    COLLECTION_NAME_RE,
    MAX_USER_ID_LENGTH,
    PROPERTY_NAME_RE,
    CollectionSpec,
    Filters,
    InvalidInputError,
    MemoryObject,
    MissingUserError,
    Property,
    SchemaConflictError,
    VectorSizeError,
    Where,
    canonical_id,
    check_finite,
    check_text,
)

_NUMBER_TYPES: frozenset[type] = frozenset({int, float})

MAX_SAFE_INT = 2**53
"""Integers are refused beyond ±2^53: weaviate-client sends scalar properties in a protobuf
``Struct``, whose numbers are 64-bit floats, so larger ones would be rounded silently (and the
server sorts ints as float64)."""

PAGE_LIMIT = 10_000
"""The largest page ``iterate`` asks for: Weaviate's default ``QUERY_MAXIMUM_RESULTS``."""

RESERVED_PROPERTY_NAMES = frozenset(
    {"id", "vector", "_id", "_additional", "_creationTimeUnix", "_lastUpdateTimeUnix"}
)
"""Names Weaviate refuses (``entities/schema/validation.go`` reservedPropertyNames) or reads as
its own internal properties in filters and sorting, plus the store's own ``id`` and
``vector``."""

_SCALAR_CHECKS: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "date": (str,),
}


def check_user(spec: CollectionSpec, user: str | None) -> str | None:
    """Return the user a call on ``spec`` runs for: required per user, refused when shared."""
    if not spec.per_user:
        if user is not None:
            raise InvalidInputError(
                f"collection {spec.name!r} is shared, not per-user: do not pass a user"
            )
        return None
    if user is None or user == "":
        raise MissingUserError(f"collection {spec.name!r} is per-user: a user id is required")
    check_user_id(user)
    return user


def check_batch(
    spec: CollectionSpec, objects: Sequence[MemoryObject], verb: str, dims: int
) -> None:
    """Check a batch to write: objects of distinct ids, vectors of ``dims``, valid properties."""
    if isinstance(objects, MemoryObject):
        raise InvalidInputError(f"{verb} takes a sequence of MemoryObject, not one object")
    seen: set[str] = set()
    known = {p.name: p.type for p in spec.properties}
    for obj in objects:
        if not isinstance(obj, MemoryObject):
            raise InvalidInputError(f"expected MemoryObject, got {type(obj).__name__}")
        # Canonical form: "ABC…" and "abc…" are one object on both backends.
        key = canonical_id(obj.id)
        if key in seen:
            raise InvalidInputError(f"id {obj.id} appears twice in one batch")
        seen.add(key)
        check_vector_form(obj.vector, dims)
        check_properties(spec, obj.properties, known)


def check_vector(vector: Sequence[float], dims: int) -> None:
    """Check a query vector: ``dims`` finite numbers."""
    check_vector_form(vector, dims)
    check_finite([vector])


def check_vector_form(vector: Sequence[float], dims: int) -> None:
    """Check that ``vector`` is ``dims`` numbers (finiteness is checked for the whole batch)."""
    if isinstance(vector, str | bytes) or not hasattr(vector, "__len__"):
        raise InvalidInputError(f"vector must be a sequence of floats, got {type(vector).__name__}")
    if len(vector) != dims:
        raise VectorSizeError(f"vector has {len(vector)} dimensions, this store uses {dims}")
    if isinstance(vector, np.ndarray):
        if vector.dtype.kind not in "fiu":
            raise InvalidInputError(f"vector values must be floats, got dtype {vector.dtype}")
        if vector.ndim != 1:
            raise InvalidInputError(f"a vector must be one-dimensional, got {vector.shape}")
        return
    kinds = set(map(type, vector))
    if not kinds <= _NUMBER_TYPES and not all(
        issubclass(k, np.floating | np.integer) for k in kinds - _NUMBER_TYPES
    ):
        bad = next(x for x in vector if type(x) not in _NUMBER_TYPES)
        raise InvalidInputError(f"vector values must be finite floats, got {bad!r}")


def check_user_id(user: object) -> str:
    """Validate a user id: a non-empty string of at most 256 characters, not starting with ``_``.

    A leading underscore is reserved for store-internal scopes (for example the global
    procedural rules).
    """
    if not isinstance(user, str):
        raise InvalidInputError(f"user id must be a string, got {type(user).__name__}")
    if not user.strip():
        raise MissingUserError("user id is empty")
    if len(user) > MAX_USER_ID_LENGTH:
        raise InvalidInputError(f"user id is longer than {MAX_USER_ID_LENGTH} characters")
    if user.startswith("_") and user != GLOBAL_SCOPE:
        raise InvalidInputError("user ids starting with '_' are reserved")
    if any(ord(c) < 32 for c in user):
        raise InvalidInputError("user id contains control characters")
    return check_text(user, "the user id")


GLOBAL_SCOPE = "_global"
"""The reserved 'user' under which shared (non-personal) rows of a per-user collection live."""


def validate_spec(spec: CollectionSpec) -> None:
    """Check a collection spec: its name, its properties' names and types, its indexes."""
    if not isinstance(spec, CollectionSpec):
        raise InvalidInputError(f"expected CollectionSpec, got {type(spec).__name__}")
    if not COLLECTION_NAME_RE.match(spec.name):
        raise InvalidInputError(
            f"collection name {spec.name!r} must start with an upper-case letter and contain "
            "only letters, digits and underscores (at most 63 characters)"
        )
    names: set[str] = set()
    for prop in spec.properties:
        if not PROPERTY_NAME_RE.match(prop.name):
            raise InvalidInputError(f"invalid property name {prop.name!r} in {spec.name!r}")
        if prop.name in RESERVED_PROPERTY_NAMES:
            raise InvalidInputError(
                f"property name {prop.name!r} in {spec.name!r} is reserved "
                f"({', '.join(sorted(RESERVED_PROPERTY_NAMES))})"
            )
        # Weaviate refuses two names that differ only in case (class.go validateProperty).
        if prop.name.lower() in names:
            raise InvalidInputError(f"property {prop.name!r} appears twice in {spec.name!r}")
        names.add(prop.name.lower())
        if prop.searchable and prop.type not in ("text", "text[]"):
            raise InvalidInputError(f"only text properties can be searchable ({prop.name!r})")
    _validate_indexes(spec)


def property_shape(prop: Property) -> tuple[str, str, bool, bool]:
    """Return what must match for two properties to be one: name, type and indexing."""
    return (prop.name, prop.type, prop.searchable, prop.filterable)


def missing_suffix(stored: CollectionSpec, spec: CollectionSpec) -> list[Property]:
    """Return the properties ``spec`` adds to ``stored`` at its end ([] when none).

    Raises:
        SchemaConflictError: ``stored`` is not ``spec`` without some of its last properties
            (compared by name, type and indexing; the order of the shared ones is not
            compared, as Weaviate keeps its own).
    """
    names = {p.name for p in stored.properties}
    missing = [p for p in spec.properties if p.name not in names]
    common = [p for p in spec.properties if p.name in names]
    if (
        stored.per_user != spec.per_user
        or {property_shape(p) for p in stored.properties} != {property_shape(p) for p in common}
        or (missing and list(spec.properties[-len(missing) :]) != missing)
    ):
        raise SchemaConflictError(
            f"collection {spec.name!r} exists with a schema that {spec.name!r} cannot be "
            "reached from by adding properties at its end: stored "
            f"{', '.join(p.name for p in stored.properties)}; "
            f"requested {', '.join(p.name for p in spec.properties)}"
        )
    return missing


_PROPERTY_TYPES = frozenset({"text", "text[]", "int", "number", "bool", "date"})


def absent_properties(stored: CollectionSpec, properties: Sequence[Property]) -> list[Property]:
    """Return the properties ``stored`` lacks; one it has (in any case) must be the same.

    Raises:
        SchemaConflictError: ``stored`` has a property of that name with another type or
            indexing.
    """
    known = {p.name.lower(): p for p in stored.properties}
    absent = []
    for prop in properties:
        old = known.get(prop.name.lower())
        if old is None:
            absent.append(prop)
        elif property_shape(old) != property_shape(prop):
            raise SchemaConflictError(
                f"collection {stored.name!r} already has a property {old.name!r} "
                f"({old.type}, searchable={old.searchable}, filterable={old.filterable})"
            )
    return absent


def check_new_properties(spec: CollectionSpec, properties: object) -> list[Property]:
    """Validate properties to add to ``spec``; return those it does not have yet."""
    if isinstance(properties, Property) or not isinstance(properties, Sequence):
        raise InvalidInputError("add_properties takes a sequence of Property")
    seen: set[str] = set()
    for prop in properties:
        if not isinstance(prop, Property):
            raise InvalidInputError(f"expected Property, got {type(prop).__name__}")
        if not isinstance(prop.name, str) or not PROPERTY_NAME_RE.match(prop.name):
            raise InvalidInputError(f"invalid property name {prop.name!r}")
        if prop.type not in _PROPERTY_TYPES:
            raise InvalidInputError(f"unknown property type {prop.type!r} for {prop.name!r}")
        if prop.searchable:
            raise InvalidInputError(
                f"cannot add the searchable property {prop.name!r} to {spec.name!r}: the "
                "objects already stored would be missing from its keyword index"
            )
        if prop.name.lower() in seen:
            raise InvalidInputError(f"property {prop.name!r} is given twice")
        seen.add(prop.name.lower())
    wanted = absent_properties(spec, list(properties))
    # Reserved words and the other rules of a new collection's names.
    validate_spec(replace(spec, properties=(*spec.properties, *wanted)))
    return wanted


def _validate_indexes(spec: CollectionSpec) -> None:
    if not isinstance(spec.indexes, tuple):
        raise InvalidInputError(f"indexes of {spec.name!r} must be a tuple of tuples")
    known = {p.name: p for p in spec.properties}
    seen: set[tuple[str, ...]] = set()
    for index in spec.indexes:
        if not isinstance(index, tuple) or not index:
            raise InvalidInputError(f"an index of {spec.name!r} must be a non-empty tuple")
        if index in seen or len(set(index)) != len(index):
            raise InvalidInputError(f"index {index!r} of {spec.name!r} repeats itself")
        seen.add(index)
        for name in index:
            prop = known.get(name) if isinstance(name, str) else None
            if prop is None or not prop.filterable or prop.type == "text[]":
                raise InvalidInputError(
                    f"index {index!r} of {spec.name!r}: {name!r} is not a filterable "
                    "scalar property"
                )


def check_id(value: object) -> None:
    """Check an object id: a UUID in any spelling ``uuid.UUID`` takes."""
    canonical_id(value)


def check_page_size(value: object) -> None:
    """Check an ``iterate`` page size: an integer in 1..``PAGE_LIMIT``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= PAGE_LIMIT:
        raise InvalidInputError(f"page_size must be an integer in 1..{PAGE_LIMIT}, got {value!r}")


def check_alpha(alpha: object) -> float:
    """Return a hybrid-search ``alpha`` as a float, or raise ``InvalidInputError``."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
        raise InvalidInputError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def check_positive(name: str, value: object) -> None:
    """Check that the argument ``name`` is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")


def _check_value(spec: CollectionSpec, prop_name: str, ptype: str, value: object) -> None:
    # The common cases first: plain text and integers in range (bool is an int subclass,
    # so ``type(...) is`` keeps it out).
    if type(value) is str and ptype == "text":
        if not value.isascii():
            check_text(value, f"{spec.name}.{prop_name}")
        return
    if type(value) is int and ptype in ("int", "number") and -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        return

    if ptype == "text[]":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InvalidInputError(
                f"{spec.name}.{prop_name} must be a list of strings, got {value!r:.80}"
            )
        for item in value:
            check_text(item, f"{spec.name}.{prop_name}")
        return
    allowed = _SCALAR_CHECKS[ptype]
    if isinstance(value, bool) and ptype != "bool":
        raise InvalidInputError(f"{spec.name}.{prop_name} must be {ptype}, got a bool")
    if not isinstance(value, allowed):
        raise InvalidInputError(
            f"{spec.name}.{prop_name} must be {ptype}, got {type(value).__name__}"
        )
    if ptype == "text":
        check_text(value, f"{spec.name}.{prop_name}")  # type: ignore[arg-type]
    if ptype == "date":
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"{spec.name}.{prop_name} must be an RFC 3339 date, got {value!r}"
            ) from None
        if parsed.tzinfo is None:
            raise InvalidInputError(f"{spec.name}.{prop_name} must carry a timezone: {value!r}")
        try:
            # Both backends store the moment in UTC: year 1 at +14:00 has none.
            parsed.astimezone(UTC)
        except OverflowError:
            raise InvalidInputError(
                f"{spec.name}.{prop_name} is out of range in UTC (years 1 to 9999): {value!r}"
            ) from None
    if ptype == "int" and not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:  # type: ignore[operator]
        raise InvalidInputError(
            f"{spec.name}.{prop_name} must be within ±2^53 (Weaviate's client sends integers "
            f"as 64-bit floats), got {value!r}"
        )
    if ptype == "number":
        try:
            finite = math.isfinite(float(value))  # type: ignore[arg-type]
        except OverflowError:
            finite = False
        if not finite:
            raise InvalidInputError(f"{spec.name}.{prop_name} must be a finite number")


def check_properties(
    spec: CollectionSpec, properties: object, known: Mapping[str, str] | None = None
) -> None:
    """Check an object's properties as every write does (names, types, ranges, text).

    ``known`` maps the spec's property names to their types, when the caller has it already.
    """
    if not isinstance(properties, dict):
        raise InvalidInputError(f"properties must be a dict, got {type(properties).__name__}")
    if known is None:
        known = {p.name: p.type for p in spec.properties}
    for key, value in properties.items():
        ptype = known.get(key)
        if ptype is None:
            raise InvalidInputError(f"collection {spec.name!r} has no property {key!r}")
        if value is None:
            continue
        _check_value(spec, key, ptype, value)


def check_filters(spec: CollectionSpec, where: Filters) -> None:
    """Check filter conditions: filterable properties, known operators, values of their type."""
    if isinstance(where, Where):
        raise InvalidInputError("filters are a sequence of Where, not one Where")
    for cond in where:
        if not isinstance(cond, Where):
            raise InvalidInputError(f"expected Where, got {type(cond).__name__}")
        prop = spec.prop(cond.prop)
        if not prop.filterable:
            raise InvalidInputError(f"{spec.name}.{cond.prop} is not filterable")
        if cond.op == "in":
            if not isinstance(cond.value, list | tuple) or not cond.value:
                raise InvalidInputError(f"'in' on {cond.prop!r} needs a non-empty list")
            for v in cond.value:
                _check_value(spec, cond.prop, prop.type.removesuffix("[]"), v)
        elif cond.op == "contains":
            if prop.type != "text[]":
                raise InvalidInputError(
                    f"'contains' needs a text[] property, {cond.prop!r} is {prop.type}"
                )
            _check_value(spec, cond.prop, "text", cond.value)
        elif cond.op in ("eq", "ne", "gt", "gte", "lt", "lte"):
            if prop.type == "text[]":
                raise InvalidInputError(f"use 'contains' on the text[] property {cond.prop!r}")
            if cond.op not in ("eq", "ne") and prop.type in ("text", "bool"):
                raise InvalidInputError(
                    f"{cond.op!r} is not defined on {prop.type} ({cond.prop!r})"
                )
            _check_value(spec, cond.prop, prop.type, cond.value)
        else:
            raise InvalidInputError(f"unknown filter operator {cond.op!r}")

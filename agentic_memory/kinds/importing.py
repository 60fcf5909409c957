"""What the kinds' import rules share: bounds and checks of an imported object's properties."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agentic_memory.store.base import property_shape
from agentic_memory.store.types import CollectionSpec, InvalidInputError, Property

__all__ = ["MAX_EPISODE_CHARS", "same_shape", "text_property", "utc_time"]


MAX_EPISODE_CHARS = 1_000_000
"""The longest text of one episode property accepted (``AgenticStore``'s value limit)."""


def text_property(props: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    """Return the string property ``name`` (non-empty when ``required``); refuse another type."""
    value = props.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidInputError(f"{name} must be a non-empty string")
    return value


def utc_time(value: str) -> datetime:
    """Return an RFC 3339 time (``Z`` or an offset) in UTC."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def same_shape(spec: CollectionSpec, properties: Sequence[Property], per_user: bool) -> bool:
    """Whether ``spec`` has exactly ``properties`` (names, types, indexing) and ``per_user``."""
    return spec.per_user == per_user and [property_shape(p) for p in spec.properties] == [
        property_shape(p) for p in properties
    ]

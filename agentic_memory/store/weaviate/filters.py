"""Conditions and orderings in Weaviate's terms, and the server's sort order reproduced.

``build_filter`` turns validated ``Where`` conditions into one client filter;
``sort_like_weaviate`` orders objects as the server's sorter does, for the listings the store
serves from its own reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weaviate.classes.query import Filter
from weaviate.collections.classes.filters import _Filters

from agentic_memory.store.ranking import text_sort_key
from agentic_memory.store.types import CollectionSpec, Property, StoredObject, Where
from agentic_memory.store.weaviate.schema import EXACT_SUFFIX, has_exact_copy, parse_date


def _filter_value(prop: Property, value: Any) -> Any:
    if prop.type == "date":
        return parse_date(value)
    if prop.type == "number":
        return float(value)
    return value


def build_filter(spec: CollectionSpec, where: Sequence[Where]) -> _Filters | None:
    """Translate validated conditions into one Weaviate filter (AND), or ``None`` if empty.

    ``in`` becomes ``contains_any`` on a scalar property; ``contains`` becomes
    ``contains_any([value])`` on a ``text[]`` property. Text conditions use the
    field-tokenized copy when the property is also searchable, so they match whole values.
    """
    parts: list[_Filters] = []
    for cond in where:
        prop = spec.prop(cond.prop)
        target = prop.name + EXACT_SUFFIX if has_exact_copy(prop) else prop.name
        field = Filter.by_property(target)
        if cond.op == "in":
            parts.append(field.contains_any([_filter_value(prop, v) for v in cond.value]))
        elif cond.op == "contains":
            parts.append(field.contains_any([cond.value]))
        else:
            value = _filter_value(prop, cond.value)
            ops = {
                "eq": field.equal,
                "ne": field.not_equal,
                "gt": field.greater_than,
                "gte": field.greater_or_equal,
                "lt": field.less_than,
                "lte": field.less_or_equal,
            }
            parts.append(ops[cond.op](value))
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return Filter.all_of(parts)


def sort_like_weaviate(
    spec: CollectionSpec, objects: list[StoredObject], sort_by: str | None, descending: bool
) -> list[StoredObject]:
    """Sort objects as the server's objects-bucket sorter does (``sorter/basic_comparators.go``).

    The id (ascending) breaks ties. Missing values come first ascending and last descending;
    text compares case-insensitively, numbers and ints as float64, dates as instants.
    """
    ordered = sorted(objects, key=lambda o: o.id)
    if sort_by is None:
        return ordered
    ptype = spec.prop(sort_by).type

    def key(obj: StoredObject) -> tuple[Any, ...]:
        value = obj.properties.get(sort_by)
        if value is None:
            return (0,)
        if ptype == "text":
            return (1, text_sort_key(str(value)))
        if ptype == "date":
            return (1, parse_date(str(value)))
        if ptype in ("int", "number"):
            return (1, float(value))
        return (1, value)

    return sorted(ordered, key=key, reverse=descending)

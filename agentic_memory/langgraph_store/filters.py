"""Search filters of the LangGraph store, evaluated on item values, and the hybrid ``alpha``.

The grammar is ``BaseStore``'s (``SearchOp.filter``): a mapping from a top-level field of
the item's value to either a JSON value (equality; a mapping without ``$`` keys compares
the nested fields it names, a list compares element by element) or a mapping of operators
``$eq $ne $gt $gte $lt $lte``. All conditions must hold. Two additions:

* ``"$and": [filter, ...]`` — every filter of the list must hold. LangGraph's server writes
  this when an authorization handler adds its own filter to a caller's.
* ``"$alpha": number`` — the weight of the vector side of the hybrid search, in [0, 1]
  (0 keywords only, 1 vectors only), for this query; see ``docs/langgraph-store.md``.

Comparisons follow JSON types: ``true`` never equals ``1``, ``$gt``-style operators compare
numbers with numbers and strings with strings (a field of another type, or a missing one,
does not match), ``$ne`` matches a missing field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentic_memory.langgraph_store.common import check_plain
from agentic_memory.store import InvalidInputError

__all__ = [
    "ALPHA_KEY",
    "AND_KEY",
    "COMPARISONS",
    "MAX_FILTER_DEPTH",
    "ItemFilter",
    "check_alpha",
    "json_equal",
    "parse_filter",
]

ALPHA_KEY = "$alpha"
AND_KEY = "$and"
COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
MAX_FILTER_DEPTH = 32
"""The deepest nesting of ``$and`` accepted (the filter itself is the first level)."""

_MISSING = object()


@dataclass(frozen=True)
class ItemFilter:
    """A checked filter: conditions on item values, and the query's ``alpha`` if it set one."""

    conditions: tuple[tuple[str, Any], ...] = ()
    alpha: float | None = None

    def matches(self, value: Mapping[str, Any]) -> bool:
        """Whether an item's value meets every condition."""
        return all(_meets(value.get(field, _MISSING), spec) for field, spec in self.conditions)

    @property
    def empty(self) -> bool:
        """Whether there is no condition (``alpha`` aside)."""
        return not self.conditions


def parse_filter(raw: object) -> ItemFilter:
    """Check a ``SearchOp.filter`` and return it as an :class:`ItemFilter`.

    Raises:
        InvalidInputError: the filter is not a mapping of field names, uses an unknown
            ``$`` operator, gives a comparison a value that is neither a number nor a
            string, holds a value that is not JSON, or sets ``$alpha`` badly or twice.
    """
    if raw is None:
        return ItemFilter()
    conditions: list[tuple[str, Any]] = []
    alphas: list[float] = []
    _collect(raw, conditions, alphas, "filter", 1)
    if len(alphas) > 1:
        raise InvalidInputError(f"{ALPHA_KEY} appears {len(alphas)} times in one filter")
    return ItemFilter(tuple(conditions), alphas[0] if alphas else None)


def check_alpha(alpha: object, where: str = ALPHA_KEY) -> float:
    """Return ``alpha`` as a float in [0, 1], or raise ``InvalidInputError``."""
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, int | float)
        or not math.isfinite(alpha)
        or not 0 <= alpha <= 1
    ):
        raise InvalidInputError(f"{where} must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


def _collect(
    raw: object, conditions: list[tuple[str, Any]], alphas: list[float], where: str, depth: int
) -> None:
    if not isinstance(raw, Mapping):
        raise InvalidInputError(f"a {where} must be a mapping, got {type(raw).__name__}")
    if depth > MAX_FILTER_DEPTH:
        raise InvalidInputError(
            f"the filter nests {AND_KEY} more than {MAX_FILTER_DEPTH} levels deep"
        )
    for field, spec in raw.items():
        if not isinstance(field, str):
            raise InvalidInputError(f"filter field names must be strings, got {field!r}")
        if field == AND_KEY:
            if not isinstance(spec, list | tuple) or not spec:
                raise InvalidInputError(f"{AND_KEY} takes a non-empty list of filters")
            for part in spec:
                _collect(part, conditions, alphas, f"{AND_KEY} element", depth + 1)
        elif field == ALPHA_KEY:
            alphas.append(check_alpha(spec))
        elif field.startswith("$"):
            raise InvalidInputError(
                f"unsupported filter operator {field!r} at the top level (supported: "
                f"{AND_KEY}, {ALPHA_KEY}, and field names)"
            )
        else:
            _check_spec(field, spec)
            conditions.append((field, spec))


def _check_spec(field: str, spec: object) -> None:
    check_plain(spec, f"the filter on {field!r}")
    if not isinstance(spec, dict):
        return
    dollar = [k for k in spec if k.startswith("$")]
    if not dollar:
        for sub, inner in spec.items():
            _check_spec(f"{field}.{sub}", inner)
        return
    if len(dollar) != len(spec):
        raise InvalidInputError(
            f"the filter on {field!r} mixes operators and field names: {sorted(spec)}"
        )
    for op, operand in spec.items():
        if op not in COMPARISONS:
            raise InvalidInputError(
                f"unsupported filter operator {op!r} on {field!r} (supported: "
                f"{', '.join(COMPARISONS)})"
            )
        if op not in ("$eq", "$ne") and (
            isinstance(operand, bool) or not isinstance(operand, int | float | str)
        ):
            raise InvalidInputError(
                f"{op} on {field!r} compares with a number or a string, got {operand!r:.60}"
            )


def _meets(actual: object, spec: object) -> bool:
    if isinstance(spec, dict):
        if spec and all(k.startswith("$") for k in spec):
            return all(_apply(actual, op, operand) for op, operand in spec.items())
        if not isinstance(actual, dict):
            return False
        return all(_meets(actual.get(k, _MISSING), v) for k, v in spec.items())
    return json_equal(actual, spec)


def _apply(actual: object, op: str, operand: object) -> bool:
    if op == "$eq":
        return json_equal(actual, operand)
    if op == "$ne":
        return not json_equal(actual, operand)
    if _number(actual) and _number(operand):
        a, b = float(actual), float(operand)  # type: ignore[arg-type]
    elif isinstance(actual, str) and isinstance(operand, str):
        a, b = actual, operand  # type: ignore[assignment]
    else:
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a: object, b: object) -> bool:
    """Equality of JSON values: ``true`` is not ``1``, ``1`` is ``1.0``, lists in order."""
    if a is _MISSING or b is _MISSING:
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b

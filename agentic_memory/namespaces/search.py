"""How the LangGraph store's namespace families search: results, clocks, JSON checks, filters.

Search filters are evaluated on item values, with the hybrid ``alpha``. The grammar is ``BaseStore``'s (``SearchOp.filter``): a mapping from a top-level field of
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

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import SearchItem

from agentic_memory.store import InvalidInputError, check_text

__all__ = [
    "ALPHA_KEY",
    "AND_KEY",
    "COMPARISONS",
    "MAX_FILTER_DEPTH",
    "MAX_VALUE_CHARS",
    "MAX_VALUE_DEPTH",
    "Clock",
    "Found",
    "ItemFilter",
    "SpaceSearch",
    "Touch",
    "check_alpha",
    "check_json_value",
    "check_plain",
    "item_value",
    "json_equal",
    "parse_filter",
    "parse_time",
    "pooled",
]

Clock = Callable[[], datetime]
"""Returns the current time, timezone-aware (a test passes a controllable one)."""

MAX_VALUE_CHARS = 1_000_000
"""The largest item value accepted, in characters of its JSON text."""

MAX_VALUE_DEPTH = 100
"""The deepest nesting of objects and lists accepted in a value (or a filter), the value
itself counting as the first level. Deeper input would exhaust Python's recursion in the
JSON encoder, in LangGraph's index paths and in the filters; it is refused instead."""


@dataclass(frozen=True)
class Touch:
    """What refreshing the TTL of a generic item writes: the item, its put, its TTL."""

    item_id: str
    put_token: str
    ttl_minutes: float


@dataclass(frozen=True)
class Found:
    """One search result, with what a TTL refresh of it needs (``None``: it has no TTL)."""

    item: SearchItem
    touch: Touch | None = None


def parse_time(value: object) -> datetime:
    """Read a stored RFC 3339 date as an aware ``datetime`` (UTC when it carries no zone)."""
    if isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def check_json_value(value: object, what: str = "an item value") -> str:
    """Return the JSON text of a value that is a JSON object, or raise ``InvalidInputError``.

    The value must come back from JSON as it went in: string keys at every depth, lists (not
    tuples), finite numbers, valid Unicode; nothing is converted silently.
    """
    if not isinstance(value, dict):
        raise InvalidInputError(
            f"{what} must be a dict (a JSON object), got {type(value).__name__}"
        )
    check_plain(value, what)
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if len(text) > MAX_VALUE_CHARS:
        raise InvalidInputError(
            f"{what} is {len(text):,} characters of JSON, more than the {MAX_VALUE_CHARS:,} "
            "an item may have"
        )
    return check_text(text, what)


def check_plain(value: object, what: str) -> None:
    """Raise ``InvalidInputError`` unless ``value`` is plain JSON (see ``check_json_value``).

    Walked without recursion, so a value nested deeper than ``MAX_VALUE_DEPTH`` is refused
    with a clear error, never a ``RecursionError``.
    """
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if item is None or isinstance(item, bool | str | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidInputError(f"{what} holds {item!r}, which JSON cannot carry")
            continue
        if not isinstance(item, list | dict):
            raise InvalidInputError(
                f"{what} holds a {type(item).__name__}, which is not JSON (use dicts, lists, "
                "strings, numbers, booleans and None)"
            )
        if depth > MAX_VALUE_DEPTH - 1 and item:
            raise InvalidInputError(
                f"{what} is nested more than {MAX_VALUE_DEPTH} levels deep: flatten it"
            )
        if isinstance(item, list):
            pending.extend((child, depth + 1) for child in item)
            continue
        for key, child in item.items():
            if not isinstance(key, str):
                raise InvalidInputError(
                    f"{what} holds the key {key!r}: JSON object keys are strings"
                )
            pending.append((child, depth + 1))


async def pooled(
    fetch: Callable[[int], Awaitable[list[Found | None]]],
    keep: Callable[[Found], bool],
    need: int,
    cap: int,
) -> list[Found]:
    """Fetch ranked candidates until ``need`` of them pass ``keep`` or none are left.

    ``fetch(k)`` returns up to ``k`` candidates, best first (``None`` for one that is gone,
    an expired item); the pool grows fourfold while too many are dropped and the source may
    hold more, up to ``cap``.
    """
    k = max(1, min(need, cap))
    while True:
        got = await fetch(k)
        kept = [f for f in got if f is not None and keep(f)]
        if len(kept) >= need or len(got) < k or k >= cap:
            return kept[:need]
        k = min(cap, k * 4)


@dataclass(frozen=True)
class SpaceSearch:
    """One partition's part of a search: what ``AgenticStore`` asks a namespace family."""

    partition: tuple[str, ...]
    query: str | None
    """The query (``None``: a listing)."""
    flt: ItemFilter
    need: int
    """How many matching items to return at most."""
    alpha: float

    @property
    def owner(self) -> str:
        """The partition's second label: the user (or scope) it belongs to."""
        return self.partition[1]

    def keeps(self, found: Found) -> bool:
        """Whether a result passes the search's filter."""
        return self.flt.matches(found.item.value)

    async def ranked(
        self, fetch: Callable[[int], Awaitable[list[SearchItem]]], cap: int
    ) -> list[Found]:
        """Pool ranked items (``fetch(k)``: up to ``k``, best first) until enough pass."""

        async def candidates(k: int) -> list[Found | None]:
            found: list[Found | None] = [Found(item) for item in await fetch(k)]
            return found

        return await pooled(candidates, self.keeps, self.need, cap)

    async def paged(
        self, page: Callable[[int], Awaitable[list[SearchItem]]], size: int
    ) -> list[Found]:
        """List items ``size`` at a time (``page(offset)``) until enough pass the filter."""
        out: list[Found] = []
        offset = 0
        while len(out) < self.need:
            items = await page(offset)
            out += [Found(item) for item in items if self.flt.matches(item.value)]
            if len(items) < size:
                break
            offset += size
        return out[: self.need]


def item_value(raw: Any) -> dict[str, Any]:
    """Decode a stored JSON object."""
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise InvalidInputError("a stored item value is not a JSON object")
    return value


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

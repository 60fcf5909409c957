"""What the namespace families of the LangGraph store share: results, clocks, JSON checks."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langgraph.store.base import SearchItem

from agentic_memory.store import InvalidInputError, check_text

if TYPE_CHECKING:
    from agentic_memory.langgraph_store.filters import ItemFilter

__all__ = [
    "MAX_VALUE_CHARS",
    "MAX_VALUE_DEPTH",
    "Clock",
    "Found",
    "Touch",
    "check_json_value",
    "check_plain",
    "item_value",
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

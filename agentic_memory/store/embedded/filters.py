"""Filters of a hybrid search, evaluated in numpy over a cached partition's columns.

A filtered search used to ask SQLite for the rids of every matching row (a JSON array of
half the partition, for a filter that passes half) and map them onto the cached rows. Now
the partition keeps the filterable scalar columns a search has filtered on, one array per
property aligned with its slots, and a condition is a vectorised comparison. The semantics
are SQL's, as ``sql._filter_sql`` writes them: a row without the value (NULL) matches
``ne`` and nothing else; text and dates compare as their UTF-8 bytes (dates are stored
normalised, so that is time order); numbers compare as numbers. Conditions this module does
not evaluate (``text[]`` properties, integers beyond float64's exact range) fall back to SQL.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import Growing, IntArray
from agentic_memory.store.embedded.sql import normalise_date
from agentic_memory.store.types import CollectionSpec, Where

BoolArray = npt.NDArray[np.bool_]

_EXACT_INT = 2**53


class Column:
    """One filterable scalar property of a partition's slots.

    Text and dates are dictionary coded: ``values`` sorted (code point order, which is the
    order of their UTF-8 bytes and so SQLite's), ``codes[slot]`` an index into it, -1 for
    NULL. Numbers, integers and booleans are float64 with NaN for NULL (no stored number is
    NaN: the store refuses them).
    """

    def __init__(self, kind: str, raw: Sequence[Any]) -> None:
        """Hold the values ``raw`` (one per slot, None for NULL) of a ``kind`` property."""
        self.text = kind in ("text", "date")
        self.values: list[str] = []
        if self.text:
            self.values = sorted({v for v in raw if v is not None})
            self.data = Growing(self._codes(raw))
        else:
            self.data = Growing(_numbers(raw))

    def _codes(self, raw: Sequence[Any]) -> IntArray:
        index = {v: i for i, v in enumerate(self.values)}
        return np.fromiter((-1 if v is None else index[v] for v in raw), np.int64, len(raw))

    def _learn(self, raw: Sequence[Any]) -> None:
        """Add unseen text values to the dictionary, recoding the slots already held."""
        new = {v for v in raw if v is not None} - set(self.values)
        if not new:
            return
        old = self.values
        self.values = sorted(new.union(old))
        if old:
            remap = np.fromiter(
                (bisect.bisect_left(self.values, v) for v in old), np.int64, len(old)
            )
            codes = self.data.view
            held = codes >= 0
            codes[held] = remap[codes[held]]

    def append(self, raw: Sequence[Any]) -> None:
        """Add the values of slots added at the end."""
        if self.text:
            self._learn(raw)
            self.data.append(self._codes(raw))
        else:
            self.data.append(_numbers(raw))

    def update(self, slots: IntArray, raw: Sequence[Any]) -> None:
        """Set the values of existing slots (rows replaced; None for deleted ones)."""
        if self.text:
            self._learn(raw)
            self.data.view[slots] = self._codes(raw)
        else:
            self.data.view[slots] = _numbers(raw)

    def match(self, op: str, value: Any) -> BoolArray:
        """Return which slots satisfy ``<column> <op> <value>`` as SQL evaluates it."""
        data: npt.NDArray[np.float64] = self.data.view
        if self.text:
            return self._match_codes(self.data.view, op, value)
        if op == "in":
            out = np.zeros(data.shape[0], dtype=bool)
            for v in value:
                out |= data == float(v)
            return out
        target = float(value)
        out = np.empty(data.shape[0], dtype=bool)
        if op == "eq":
            np.equal(data, target, out=out)
        elif op == "ne":
            # IS NOT: NULL (NaN) matches too; NaN != x is True in numpy.
            np.not_equal(data, target, out=out)
        elif op == "gt":
            np.greater(data, target, out=out)
        elif op == "gte":
            np.greater_equal(data, target, out=out)
        elif op == "lt":
            np.less(data, target, out=out)
        else:
            np.less_equal(data, target, out=out)
        return out

    def _match_codes(self, codes: IntArray, op: str, value: Any) -> BoolArray:
        values = self.values
        if op in ("eq", "ne", "in"):
            wanted = [value] if op != "in" else list(value)
            found = [bisect.bisect_left(values, v) for v in wanted if _has(values, v)]
            hit = np.isin(codes, found) if found else np.zeros(codes.shape[0], dtype=bool)
            return ~hit if op == "ne" else hit
        # Range on dates: the codes of values above (or below) the bound form a run.
        if op == "gt":
            return codes >= bisect.bisect_right(values, value)
        if op == "gte":
            return codes >= bisect.bisect_left(values, value)
        if op == "lt":
            return (codes >= 0) & (codes < bisect.bisect_left(values, value))
        return (codes >= 0) & (codes < bisect.bisect_right(values, value))


def _has(values: list[str], value: str) -> bool:
    at = bisect.bisect_left(values, value)
    return at < len(values) and values[at] == value


def _numbers(raw: Sequence[Any]) -> npt.NDArray[np.float64]:
    # numpy turns None into NaN for a float64 array, and numbers as float() does.
    return np.array(raw, dtype=np.float64).reshape(len(raw))


def column_kind(spec: CollectionSpec, prop: str) -> str | None:
    """Return how a property is held as a column here, or None when SQL must filter on it."""
    p = spec.prop(prop)
    if not p.filterable or p.type == "text[]":
        return None
    return p.type


def evaluable(spec: CollectionSpec, where: list[Where]) -> bool:
    """Return whether every condition can be evaluated on columns (else SQL filters)."""
    for cond in where:
        if column_kind(spec, cond.prop) is None:
            return False
        values = cond.value if cond.op == "in" else [cond.value]
        # Larger integers are not exact as float64; SQLite compares them exactly.
        if any(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) > _EXACT_INT for v in values
        ):
            return False
    return True


def sql_value(kind: str, value: Any) -> Any:
    """Return a condition's value as the column holds it (dates normalised, bools 0/1)."""
    if kind == "date":
        return normalise_date(value)
    if isinstance(value, bool):
        return int(value)
    return value


def mask(columns: dict[str, Column], spec: CollectionSpec, where: list[Where]) -> BoolArray:
    """Return which slots match every condition (the columns must be loaded)."""
    out: BoolArray | None = None
    for cond in where:
        kind = column_kind(spec, cond.prop)
        assert kind is not None
        value = (
            [sql_value(kind, v) for v in cond.value]
            if cond.op == "in"
            else sql_value(kind, cond.value)
        )
        hit = columns[cond.prop].match(cond.op, value)
        out = hit if out is None else out & hit
    assert out is not None
    return out

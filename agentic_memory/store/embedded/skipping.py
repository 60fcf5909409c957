"""Keyword top-k that skips: frequent terms as columns, bounds per window, exact results.

Scoring every posting of a query's terms costs what the terms match: on a million chunks a
query of three common stems reads two million postings (16 ms p50, 46 ms p95 of CPU). The
server skips the blocks whose best score cannot enter the top k (BlockMax WAND); scoring a
posting at a time that way is no job for numpy, so the embedded store bounds whole arrays:

- A property's most frequent terms (in at least ``1 / DENSE_SHARE`` of the slots, the
  ``DENSE_MAX`` most frequent at most) are also kept as *columns*: one term frequency per
  slot (``uint8``, wider when a frequency needs it), which gives any row's frequency with one
  gather. Per *window* of ``2 ** WINDOW_BITS`` slots each column keeps its largest
  frequency and the property its smallest non-zero token count: the window's bound
  ``idf * tf_max / (tf_max + k1 (1 - b + b len_min / avg))`` holds for every posting in it (a
  posting weighs more with a higher frequency and a shorter text) at any average length, so
  writes that move the average recompute nothing. Each column also lists its rows of
  frequency 2 or more, highest first.
- Rarer terms keep their postings only (at most a sixteenth of the slots each): those are
  read and weighed exactly.
- A query first scores seed rows exactly (the best sums of its rare terms' weights, the rows
  of its frequent terms' highest frequencies, the rows of the windows with the best
  bounds) for a lower bound ``theta`` of its k-th best score. A row is then scored only if a
  bound of it reaches ``theta``: a row holding a rare term is bounded by its exact rare
  weights plus the frequent terms' window bounds, tightened term by term as their exact
  weights are gathered (MaxScore); rows holding frequent terms only are bounded per window
  or, when the windows rule little out, by their frequencies: if every row whose
  frequencies all stay below ``L`` is bounded below ``theta``, only the rows listed at ``L``
  or more are scored.
- The survivors are scored exactly, term by term in query order as the exhaustive scorer
  adds them, so scores and order are bit for bit the exhaustive ones: a row left out is
  bounded strictly below ``theta`` (in float32, with a relative margin for float64
  rounding), so at least k rows beat it.

Partitions below ``PRUNE_ROWS`` slots keep the exhaustive scorer (a few milliseconds there);
a query whose seeds find fewer than k matches, or whose bounds rule out almost nothing,
falls back to it too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, IntArray
from agentic_memory.store.ranking import BM25_B, BM25_K1, top_positions

DENSE_SHARE = 16
"""A term in at least 1 / 16 of a property's slots gets a column: at one byte per slot a
column takes less memory than its postings (8 bytes each) above 1 / 8."""
DENSE_MAX = 256
PRUNE_ROWS = 150_000
"""Partitions from this many slots score their keyword side with the bounds below (below,
scoring every posting takes a few milliseconds, and the columns would only add memory)."""
WINDOW_BITS = 6
SEED_WINDOWS = 8
"""Windows with the best bounds whose rows are scored exactly to seed ``theta``."""
_MARGIN = 1e-9
"""Relative margin on float64 bounds: far above the rounding of a sum of a few weights."""
_LEVELS = 8
"""Frequencies above this are listed with it (a bound at 8 is near the one at any more)."""
_WIDTHS = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))

BoolArray = npt.NDArray[np.bool_]
UIntArray = npt.NDArray[np.unsignedinteger[Any]]


_UNLISTED = np.zeros(0, dtype=np.int64)
"""A column's list before it is made."""


def _headroom(size: int) -> int:
    return size + max(256, size // 8)


def _windows(size: int) -> int:
    return (size + (1 << WINDOW_BITS) - 1) >> WINDOW_BITS


class DenseTerms:
    """A property's frequent terms as columns of term frequencies, one value per slot.

    ``df`` counts each column's live rows (a slot cleared or never set holds 0): the term's
    document frequency in the property. ``maxtf`` (per column and window), ``minlen`` (per
    window) and the lists of rows of frequency 2 or more only loosen as rows change (a
    cleared row keeps its window's maximum and its place in a list, which a query checks
    against the column): every bound stays a bound; a reload makes them tight again.
    """

    def __init__(self, hashes: IntArray, slots: int, *, exclusive: bool = False) -> None:
        """Start with columns for ``hashes`` (sorted), all zero over ``slots`` slots.

        ``exclusive``: the index keeps these terms' postings here only (chosen when it was
        loaded), not in its postings as well (chosen later, as a partition grew).
        """
        self.hashes = hashes
        self.exclusive = exclusive
        self.built = slots
        """Slots when the columns were chosen: the choice is renewed once they double."""
        self.size = 0
        self.df = np.zeros(hashes.size, dtype=np.int64)
        self._cols: UIntArray = np.zeros((hashes.size, 0), np.uint8)
        self._maxtf: UIntArray = np.zeros((hashes.size, 0), np.uint8)
        self._minlen: FloatArray = np.zeros(0, dtype=np.float32)
        self._high: list[IntArray] = [_UNLISTED] * hashes.size
        """Per column: its rows of frequency 2 or more when last listed, highest first."""
        self._levels: list[IntArray] = [np.zeros(_LEVELS + 1, dtype=np.int64)] * hashes.size
        """Per column: how many listed rows have frequency ``L`` or more, for every ``L``."""
        self._added: list[list[IntArray]] = [[] for _ in range(hashes.size)]
        """Per column: rows given frequency 2 or more since, not listed yet."""
        self.grow(slots)

    @property
    def cols(self) -> UIntArray:
        """Return (terms, slots): each column's term frequency per slot."""
        return self._cols[:, : self.size]

    @property
    def windows(self) -> int:
        """Return the number of windows the slots span."""
        return _windows(self.size)

    @property
    def maxtf(self) -> UIntArray:
        """Return (terms, windows): an upper bound of each column's frequencies per window."""
        return self._maxtf[:, : self.windows]

    @property
    def minlen(self) -> FloatArray:
        """Return per window a lower bound of its rows' non-zero token counts (inf: none)."""
        return self._minlen[: self.windows]

    def find(self, hashes: IntArray) -> IntArray:
        """Return each hash's column, -1 for a term without one."""
        if self.hashes.size == 0:
            return np.full(hashes.size, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.hashes, hashes), self.hashes.size - 1)
        return np.where(self.hashes[at] == hashes, at, -1).astype(np.int64)

    def grow(self, count: int) -> None:
        """Add ``count`` slots at the end, with no term in them."""
        size = self.size + count
        if size > self._cols.shape[1]:
            cols = np.zeros((self.hashes.size, _headroom(size)), dtype=self._cols.dtype)
            cols[:, : self.size] = self.cols
            self._cols = cols
        windows = _windows(size)
        if windows > self._minlen.size:
            held = self.windows
            maxtf = np.zeros((self.hashes.size, _headroom(windows)), dtype=self._maxtf.dtype)
            maxtf[:, :held] = self.maxtf
            self._maxtf = maxtf
            minlen = np.full(maxtf.shape[1], np.inf, dtype=np.float32)
            minlen[:held] = self.minlen
            self._minlen = minlen
        self.size = size

    def clear(self, slots: IntArray) -> None:
        """Forget the content of ``slots`` (rows replaced or deleted)."""
        if slots.size == 0 or self.hashes.size == 0:
            return
        self.df -= np.count_nonzero(self._cols[:, slots], axis=1)
        self._cols[:, slots] = 0

    def set(
        self, columns: IntArray, slots: IntArray, tf: npt.NDArray[Any], *, bounds: bool = True
    ) -> None:
        """Give ``slots`` their frequencies in ``columns`` (new content, cleared before).

        ``bounds=False`` leaves the windows' maxima and the lists to ``tighten`` (a build
        sets millions).
        """
        if slots.size == 0:
            return
        largest = int(tf.max())
        if largest > np.iinfo(self._cols.dtype).max:
            wide = next(d for d in _WIDTHS if largest <= np.iinfo(d).max)
            self._cols = self._cols.astype(wide)
            self._maxtf = self._maxtf.astype(wide)
        values = tf.astype(self._cols.dtype)
        self._cols[columns, slots] = values
        self.df += np.bincount(columns, minlength=self.hashes.size)
        if not bounds:
            return
        np.maximum.at(self._maxtf, (columns, slots >> WINDOW_BITS), values)
        high = values >= 2
        for column in np.unique(columns[high]).tolist():
            self._added[column].append(slots[high & (columns == column)])

    def lengths(self, slots: IntArray, lengths: FloatArray) -> None:
        """Lower the windows' smallest token counts by the non-zero ``lengths`` of ``slots``."""
        some = lengths > 0
        if some.any():
            np.minimum.at(self._minlen, slots[some] >> WINDOW_BITS, lengths[some])

    def tighten(self, lengths: FloatArray) -> None:
        """Make every bound exact: windows' maxima, shortest texts and the lists.

        ``lengths``: each slot's token count in the property (0: no text).
        """
        full = self.size >> WINDOW_BITS
        width = 1 << WINDOW_BITS
        shortest = np.where(lengths[: self.size] > 0, lengths[: self.size], np.inf)
        if full:
            whole = self._cols[:, : full * width].reshape(self.hashes.size, full, width)
            self._maxtf[:, :full] = whole.max(axis=2)
            self._minlen[:full] = shortest[: full * width].reshape(full, width).min(axis=1)
        if self.windows > full:
            self._maxtf[:, full] = self._cols[:, full * width : self.size].max(axis=1)
            self._minlen[full] = shortest[full * width :].min()
        # Listed again by the first query that asks (most columns are never asked).
        self._high = [_UNLISTED] * self.hashes.size
        self._added = [[] for _ in range(self.hashes.size)]

    def _list(self, column: int) -> None:
        values = self.cols[column]
        rows = np.flatnonzero(values >= 2)
        capped = np.minimum(values[rows], _LEVELS).astype(np.int64)
        order = np.argsort(-capped, kind="stable")
        self._high[column] = rows[order]
        self._levels[column] = np.cumsum(np.bincount(capped, minlength=_LEVELS + 1)[::-1])[::-1]
        self._added[column] = []

    def layer_size(self, column: int, frequency: int) -> int:
        """Return about how many rows have ``frequency`` in ``column`` (``_LEVELS``: or more)."""
        if self._high[column] is _UNLISTED:
            self._list(column)
        levels = self._levels[column]
        if frequency >= _LEVELS:
            return int(levels[_LEVELS])
        if frequency >= 2:
            return int(levels[frequency] - levels[frequency + 1])
        return max(int(self.df[column] - levels[2]), 0)

    def listed(self, column: int, level: int, below: int | None = None) -> IntArray:
        """Return rows whose frequency in ``column`` is ``level`` (2 or more) or more.

        ``below``: and less than that. A row may come twice; every row that qualifies comes.
        """
        added = self._added[column]
        if self._high[column] is _UNLISTED or sum(a.size for a in added) * 4 > max(
            self._high[column].size, 4096
        ):
            self._list(column)
            added = []
        levels = self._levels[column]
        first = 0 if below is None or below > _LEVELS else int(levels[below])
        rows = self._high[column][first : int(levels[min(level, _LEVELS)])]
        if added:
            rows = np.concatenate([rows, *added])
        values = self.cols[column, rows]
        keep = values >= level
        if below is not None:
            keep &= values < below
        qualified: IntArray = rows[keep]
        return qualified


@dataclass
class Term:
    """One query term in one property, as the pruned scorer reads it."""

    idf: float
    column: int
    """Its dense column, or -1."""
    rows: IntArray
    """A sparse term's live rows (any order, each once); empty for a dense one."""
    weights: FloatArray64
    """A sparse term's exact weights ``idf * tf / (tf + norm)`` of those rows."""


class Scratch:
    """Per-slot work arrays of one partition's keyword index, all zero between uses."""

    def __init__(self) -> None:
        """Start with none: they are made at the size of the first query's partition."""
        self.values = np.zeros(0, dtype=np.float64)
        self.marks = np.zeros(0, dtype=bool)
        self.places = np.zeros(0, dtype=np.int64)
        self.seen = np.zeros(0, dtype=bool)

    def ready(self, slots: int) -> None:
        """Make sure the arrays cover ``slots`` slots."""
        if self.values.size < slots:
            self.values = np.zeros(_headroom(slots), dtype=np.float64)
            self.marks = np.zeros(_headroom(slots), dtype=bool)
            self.places = np.zeros(_headroom(slots), dtype=np.int64)
            self.seen = np.zeros(_headroom(slots), dtype=bool)

    def union(self, parts: Sequence[IntArray], *, distinct: bool = False) -> IntArray:
        """Return the distinct rows of ``parts``, in no set order.

        ``distinct``: each part holds a row once already (spares a pass).
        """
        fresh: list[IntArray] = []
        marks = self.marks
        for rows in parts:
            new = rows[~marks[rows]]
            if new.size > 1 and not distinct:
                # Where a row comes more than once, the last place written is its own.
                places = np.arange(new.size)
                self.places[new] = places
                new = new[self.places[new] == places]
            if new.size:
                marks[new] = True
                fresh.append(new)
        out = np.concatenate(fresh) if fresh else np.zeros(0, dtype=np.int64)
        marks[out] = False
        return out

    def without(self, rows: IntArray, gone: IntArray) -> IntArray:
        """Return ``rows`` less those in ``gone``."""
        if gone.size == 0 or rows.size == 0:
            return rows
        self.marks[gone] = True
        kept = rows[~self.marks[rows]]
        self.marks[gone] = False
        return kept


class _Query:
    """One property's query terms and what the pruned scorer reads of them."""

    def __init__(
        self,
        terms: Sequence[Term],
        dense: DenseTerms,
        norm_of: Callable[[IntArray], FloatArray64],
        average: float,
        scratch: Scratch,
    ) -> None:
        self.terms = terms
        self.dense = dense
        self.norm_of = norm_of
        self.scratch = scratch
        self.frequent = [t for t in range(len(terms)) if terms[t].column >= 0]
        self.rare = [t for t in range(len(terms)) if terms[t].column < 0]
        norm = BM25_K1 * ((1 - BM25_B) + BM25_B * (dense.minlen.astype(np.float64) / average))
        self.window_norm = norm
        """Per window: ``k1 (1 - b + b len / avg)`` of its shortest text (inf: none)."""
        self.shortest_norm = BM25_K1 * (
            (1 - BM25_B) + BM25_B * (float(dense.minlen.min(initial=np.inf)) / average)
        )
        self.tops = {t: int(dense.maxtf[terms[t].column].max(initial=0)) for t in self.frequent}
        """Per frequent term: its highest frequency (a bound of it)."""
        self.windows = np.zeros(dense.windows, dtype=np.float64)
        """Per window: a bound of the frequent terms' summed weights in any of its rows."""
        self.each: dict[int, FloatArray64] = {}
        with np.errstate(invalid="ignore"):
            for t in self.frequent:
                top = dense.maxtf[terms[t].column].astype(np.float64)
                bound = np.where(top > 0, terms[t].idf * (top / (top + norm)), 0.0)
                bound *= 1 + _MARGIN
                self.each[t] = bound
                self.windows += bound

    def contribution(
        self, t: int, rows: IntArray, norm: FloatArray64 | None = None
    ) -> FloatArray64:
        """Return term ``t``'s exact weight in ``rows`` (0 where absent).

        ``norm``: ``norm_of(rows)``, if the caller has it.
        """
        term = self.terms[t]
        if term.column >= 0:
            tf = self.dense.cols[term.column, rows]
            present = np.flatnonzero(tf)
            out = np.zeros(rows.size, dtype=np.float64)
            if present.size:
                freq = tf[present].astype(np.float64)
                part = self.norm_of(rows[present]) if norm is None else norm[present]
                out[present] = term.idf * (freq / (freq + part))
            return out
        values = self.scratch.values
        values[term.rows] = term.weights
        found: FloatArray64 = values[rows]
        values[term.rows] = 0.0
        return found

    def exact(self, rows: IntArray, terms: Sequence[int] | None = None) -> FloatArray64:
        """Return the exact scores of ``rows``: float64 sums in query-term order.

        ``terms``: only those (in query order).
        """
        total = np.zeros(rows.size, dtype=np.float64)
        norm = self.norm_of(rows)
        for t in range(len(self.terms)) if terms is None else terms:
            total += self.contribution(t, rows, norm)
        return total

    def window_bound(self, t: int, frequency: int) -> FloatArray64:
        """Return per window a bound of term ``t``'s weight in rows of at most ``frequency``.

        ``each`` holds the bound at any frequency.
        """
        top = np.minimum(self.dense.maxtf[self.terms[t].column], frequency).astype(np.float64)
        with np.errstate(invalid="ignore"):
            bound = np.where(top > 0, self.terms[t].idf * (top / (top + self.window_norm)), 0.0)
        bound *= 1 + _MARGIN
        return bound

    def bound(self, t: int, frequency: int) -> float:
        """Return a bound of frequent term ``t``'s weight in rows of at most ``frequency``."""
        top = min(frequency, self.tops[t])
        if top <= 0:
            return 0.0
        return self.terms[t].idf * (top / (top + self.shortest_norm)) * (1 + _MARGIN)


def _by_frequency(
    query: _Query,
    pool: _Pool,
    permitted: Callable[[IntArray], IntArray],
    done: IntArray,
    found: list[IntArray],
) -> bool:
    """Score the rows of frequent terms only that can reach the pool's floor; False: too many.

    Each frequent term's rows are taken a frequency at a time, from its highest down (all
    frequencies of ``_LEVELS`` or more at once). A row none of whose frequencies has been
    taken is bounded, per window, by the sum of each term's bound at the highest frequency
    not taken (and the window's own highest frequency and shortest text); the next layer is
    the one that lowers that bound the most per row it holds, and only its rows in windows
    whose bound still reaches the floor are taken. Every taken row is scored exactly
    (raising the floor), until no window's bound reaches the floor; once the open windows
    hold fewer rows than the next layer, their rows are scored whole instead. ``done``:
    rows scored already (the pool holds each row once).
    """
    dense, scratch, terms = query.dense, query.scratch, query.terms
    seen = scratch.seen
    seen[done] = True
    marked = [done]
    width = 1 << WINDOW_BITS
    untaken = {t: min(_LEVELS, query.tops[t]) for t in query.frequent}
    """Per term: the highest frequency whose rows are not taken yet."""
    unlisted = {t: query.bound(t, 1 << 30) for t in query.frequent}
    """Per term: the bound of its weight in the rows not taken yet."""
    each = {t: query.each[t] for t in query.frequent}
    """Per term and window: the same bound, with the window's frequencies and texts."""
    bounds = query.windows.copy()

    def take(rows: IntArray) -> None:
        rows = permitted(scratch.union([rows[~seen[rows]]]))
        if rows.size:
            seen[rows] = True
            marked.append(rows)
            pool.add(rows, query.exact(rows, query.frequent))
            found.append(rows)

    try:
        while True:
            open_windows = np.flatnonzero(bounds.astype(np.float32) >= pool.floor)
            if open_windows.size == 0:
                return True
            best, gain = -1, -1.0
            for t, top in untaken.items():
                if top >= 1:
                    size = max(dense.layer_size(terms[t].column, top), 1)
                    ratio = (unlisted[t] - query.bound(t, top - 1)) / size
                    if ratio > gain:
                        best, gain = t, ratio
            if best < 0:
                return False
            top = untaken[best]
            column = terms[best].column
            if open_windows.size * width <= dense.layer_size(column, top):
                take(_window_rows(open_windows, dense.size))
                return True
            if top == 1:
                rows = _window_rows(open_windows, dense.size)
                rows = rows[dense.cols[column, rows] == 1]
            else:
                rows = dense.listed(column, top, None if top == _LEVELS else top + 1)
                rows = rows[bounds[rows >> WINDOW_BITS].astype(np.float32) >= pool.floor]
            take(rows)
            untaken[best] = top - 1
            unlisted[best] = query.bound(best, top - 1)
            lower = query.window_bound(best, top - 1)
            bounds -= each[best] - lower
            each[best] = lower
    finally:
        for rows in marked:
            seen[rows] = False


def _best(values: FloatArray64, count: int) -> IntArray:
    """Return the positions of about the ``count`` largest values (at least those)."""
    if values.size <= count:
        return np.arange(values.size)
    step = values.size // (16 * count)
    if step > 1:
        sample = values[::step]
        cut = np.partition(sample, sample.size - 4)[sample.size - 4]
        pool = np.flatnonzero(values >= cut)
        if pool.size > count:
            return pool[np.argpartition(-values[pool], count - 1)[:count]]
    return np.argpartition(-values, count - 1)[:count]


class _Pool:
    """Exact scores seen so far, and ``floor``: the k-th best of them (0 before k matched)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.best = np.zeros(0, dtype=np.float32)
        self.floor = np.float32(0)

    def add(self, rows: IntArray, scores: FloatArray64) -> None:
        """Take the exact scores of rows not added before."""
        narrow = scores[scores > 0].astype(np.float32)
        if narrow.size == 0:
            return
        held = np.concatenate((self.best, narrow))
        if held.size >= self.k:
            held = np.partition(held, held.size - self.k)[held.size - self.k :]
            self.floor = held.min()
        self.best = held

    def reach(self, scores: FloatArray64) -> BoolArray:
        """Return which exact scores reach the floor."""
        reached: BoolArray = scores.astype(np.float32) >= self.floor
        return reached


def _window_rows(windows: IntArray, size: int) -> IntArray:
    rows = (windows[:, None] * (1 << WINDOW_BITS) + np.arange(1 << WINDOW_BITS)).ravel()
    return rows[rows < size]


def pruned_top(
    terms: Sequence[Term],
    dense: DenseTerms,
    norm_of: Callable[[IntArray], FloatArray64],
    average: float,
    allowed: BoolArray | None,
    k: int,
    scratch: Scratch,
) -> tuple[IntArray, FloatArray] | None:
    """Return one property's best ``k`` allowed rows and float32 scores, as the exhaustive scorer.

    ``terms`` in query order; ``norm_of(rows)`` gives ``k1 (1 - b + b len / avg)`` of rows in
    this property, as the exhaustive scorer computes it. Returns None when no bound can be
    set (fewer than ``k`` matches among the seeds) or the frequent terms' bounds rule out
    almost nothing: the caller scores every posting then.
    """
    n = dense.size
    scratch.ready(n)
    query = _Query(terms, dense, norm_of, average, scratch)

    def permitted(rows: IntArray) -> IntArray:
        return rows if allowed is None else rows[allowed[rows]]

    # Rows holding a rare term, and the sum of their rare-term weights.
    rare_rows = permitted(scratch.union([terms[t].rows for t in query.rare], distinct=True))
    values = scratch.values
    for t in query.rare:
        values[terms[t].rows] += terms[t].weights
    rare_sums = values[rare_rows]
    for t in query.rare:
        values[terms[t].rows] = 0.0

    # Seeds: the best rare sums, the frequent terms' highest frequencies, the best windows.
    seeds: list[IntArray] = []
    if rare_rows.size:
        seeds.append(rare_rows[_best(rare_sums, 2 * k)])

    if query.frequent and query.windows.size:
        seeds.append(permitted(_window_rows(_best(query.windows, SEED_WINDOWS), n)))
    pool = _Pool(k)
    seed_rows = scratch.union(seeds)
    pool.add(seed_rows, query.exact(seed_rows))
    found: list[IntArray] = [seed_rows]

    # Rows with frequent terms only: those of the windows whose bound reaches theta or, when
    # those are many, the rows listed at a frequency ``level`` or more, from the highest
    # level down until the rows whose frequencies all stay below it cannot reach theta.
    if query.frequent:
        live = np.flatnonzero(query.windows.astype(np.float32) >= pool.floor)
        if live.size * 8 <= query.windows.size:
            rows = permitted(scratch.without(_window_rows(live, n), rare_rows))
            if rows.size:
                found.append(rows[pool.reach(query.exact(rows, query.frequent))])
        else:
            done = np.concatenate((rare_rows, seed_rows))
            if not _by_frequency(query, pool, permitted, done, found):
                return None
    if pool.floor <= 0:
        return None

    # Rows with a rare term: their rare weights are exact, the frequent ones bounded per
    # window, then gathered a term at a time, the largest bounds first, each pruning the rest.
    if rare_rows.size:
        floor = pool.floor
        rest = (
            query.windows[rare_rows >> WINDOW_BITS]
            if query.frequent
            else np.zeros(rare_rows.size, dtype=np.float64)
        )
        keep = ((rare_sums + rest) * (1 + _MARGIN)).astype(np.float32) >= floor
        rows, sums, rest = rare_rows[keep], rare_sums[keep], rest[keep]
        for t in sorted(query.frequent, key=lambda t: -float(query.each[t].max(initial=0.0))):
            sums = sums + query.contribution(t, rows)
            rest = np.maximum(rest - query.each[t][rows >> WINDOW_BITS], 0.0)
            keep = ((sums + rest) * (1 + _MARGIN)).astype(np.float32) >= floor
            rows, sums, rest = rows[keep], sums[keep], rest[keep]
        found.append(rows)
    rows = np.sort(scratch.union(found))
    narrow = query.exact(rows).astype(np.float32)
    matched = narrow > 0
    rows, narrow = rows[matched], narrow[matched]
    best = top_positions(narrow, k)
    return rows[best], narrow[best]

"""Postings in memory: (term, row) pairs, their runs per term, and a property's index.

A searchable property's postings are kept as flat row and frequency arrays, appended chunk
by chunk, with a directory of where each term's run of each chunk is (``_PropertyIndex``);
``keyword._KeywordIndex`` holds one per property and ranks on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import FloatArray, Growing, IntArray


@dataclass
class _Pairs:
    """One property's (term, row) pairs sorted by term hash, then row."""

    pair_hash: IntArray
    docs: IntArray
    tf: FloatArray


@dataclass
class _Terms:
    """One property's postings grouped by term.

    The sorted term hashes, how many postings each has, then every posting's row (local to
    its block) and term frequency.
    """

    hashes: IntArray
    counts: IntArray
    docs: npt.NDArray[np.unsignedinteger[Any]] | IntArray
    tf: npt.NDArray[np.unsignedinteger[Any]] | FloatArray

    @staticmethod
    def of(pairs: _Pairs) -> _Terms:
        """Return the pairs grouped by term."""
        starts = _term_starts(pairs.pair_hash)
        counts = np.diff(np.append(starts, pairs.pair_hash.size))
        return _Terms(pairs.pair_hash[starts], counts, pairs.docs, pairs.tf)

    def pairs(self) -> _Pairs:
        """Return one pair per posting."""
        return _Pairs(
            np.repeat(self.hashes, self.counts),
            self.docs.astype(np.int64),
            self.tf.astype(np.float32),
        )


class _Level:
    """Directory entries sorted by term hash (ties: the older chunk first)."""

    def __init__(self) -> None:
        """Start empty."""
        self.hashes: IntArray = np.zeros(0, dtype=np.int64)
        self.starts: IntArray = np.zeros(0, dtype=np.int64)
        self.lens: IntArray = np.zeros(0, dtype=np.int64)
        self.chunks: IntArray = np.zeros(0, dtype=np.int64)

    def insert(self, hashes: IntArray, starts: IntArray, lens: IntArray, chunks: IntArray) -> None:
        """Insert entries (sorted, and newer than every entry held)."""
        if self.hashes.size == 0:
            self.hashes, self.starts, self.lens, self.chunks = hashes, starts, lens, chunks
            return
        at = np.searchsorted(self.hashes, hashes, "right")
        self.hashes = np.insert(self.hashes, at, hashes)
        self.starts = np.insert(self.starts, at, starts)
        self.lens = np.insert(self.lens, at, lens)
        self.chunks = np.insert(self.chunks, at, chunks)


_TAIL_FLOOR = 1 << 14


class _Directory:
    """Where each term's postings are in a property's flat arrays: one entry per chunk.

    Entry i of a level covers ``starts[i]:starts[i] + lens[i]`` of the flat arrays, written by
    chunk ``chunks[i]``. Entries of chunks added since the last lookup wait in ``_pending``;
    the next lookup sorts them into the small ``tail`` level, which joins the large ``main``
    one only once it holds an eighth as many entries: a write then costs what it added, not
    a copy of every entry (every tail entry is newer than every main one).
    """

    def __init__(self) -> None:
        """Start empty."""
        self.main = _Level()
        self.tail = _Level()
        self._pending: list[tuple[IntArray, IntArray, IntArray, IntArray]] = []

    @property
    def entries(self) -> int:
        """Return the number of entries, pending ones included."""
        held = self.main.hashes.size + self.tail.hashes.size
        return int(held + sum(p[0].size for p in self._pending))

    def add(self, hashes: IntArray, starts: IntArray, lens: IntArray, chunk: int) -> None:
        """Add a chunk's entries (``hashes`` sorted)."""
        if hashes.size:
            self._pending.append((hashes, starts, lens, np.full(hashes.size, chunk)))

    def settle(self, *, whole: bool = False) -> None:
        """Sort the pending entries in (``whole``: and the tail into the main level)."""
        if self._pending:
            hashes, starts, lens, chunks = (
                np.concatenate(part) for part in zip(*self._pending, strict=True)
            )
            self._pending = []
            # Pending chunks are newer than every settled one, and in order among
            # themselves: a stable sort keeps older chunks first within a term.
            order = np.argsort(hashes, kind="stable")
            self.tail.insert(hashes[order], starts[order], lens[order], chunks[order])
        tail = self.tail
        if tail.hashes.size and (
            whole or tail.hashes.size > max(_TAIL_FLOOR, self.main.hashes.size // 8)
        ):
            self.main.insert(tail.hashes, tail.starts, tail.lens, tail.chunks)
            self.tail = _Level()

    def levels(self) -> list[_Level]:
        """Return the levels holding entries, older first (after ``settle``)."""
        return [level for level in (self.main, self.tail) if level.hashes.size]


class _PropertyIndex:
    """One searchable property's postings: flat row and frequency arrays and a directory."""

    def __init__(self) -> None:
        """Start empty."""
        self.docs = Growing(np.zeros(0, dtype=np.int32))
        self.tf = Growing(np.zeros(0, dtype=np.float32))
        self.directory = _Directory()

    def add(self, terms: _Terms, slots: IntArray, chunk: int) -> None:
        """Append a chunk's postings (``terms.docs`` index ``slots``)."""
        if terms.hashes.size == 0:
            return
        offset = self.docs.view.shape[0]
        ends = np.cumsum(terms.counts)
        self.docs.append(slots[terms.docs])
        self.tf.append(terms.tf)
        self.directory.add(terms.hashes, ends - terms.counts + offset, terms.counts, chunk)

    def lookup(self, hashes: IntArray) -> list[tuple[IntArray, FloatArray, IntArray]]:
        """Return, per term, its postings' slots, frequencies and writing chunks."""
        self.directory.settle()
        docs, tf = self.docs.view, self.tf.view
        found: list[list[tuple[IntArray, FloatArray, IntArray]]] = [[] for _ in range(hashes.size)]
        for level in self.directory.levels():
            lo = np.searchsorted(level.hashes, hashes, "left").tolist()
            hi = np.searchsorted(level.hashes, hashes, "right").tolist()
            for t, (a, b) in enumerate(zip(lo, hi, strict=True)):
                if a == b:
                    continue
                if b == a + 1:
                    s = int(level.starts[a])
                    e = s + int(level.lens[a])
                    found[t].append((docs[s:e], tf[s:e], np.full(e - s, level.chunks[a])))
                else:
                    lens = level.lens[a:b]
                    at = _ranges(level.starts[a:b], lens)
                    found[t].append((docs[at], tf[at], np.repeat(level.chunks[a:b], lens)))
        out: list[tuple[IntArray, FloatArray, IntArray]] = []
        for parts in found:
            if not parts:
                out.append((_NO_ROWS, _NO_TF, _NO_ROWS))
            elif len(parts) == 1:
                out.append(parts[0])
            else:
                out.append(
                    (
                        np.concatenate([p[0] for p in parts]),
                        np.concatenate([p[1] for p in parts]),
                        np.concatenate([p[2] for p in parts]),
                    )
                )
        return out


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_TF = np.zeros(0, dtype=np.float32)


def _ranges(starts: IntArray, lens: IntArray) -> IntArray:
    """Return the indexes ``starts[i] .. starts[i] + lens[i] - 1`` for every i, in order."""
    ends = np.cumsum(lens)
    return np.repeat(starts - (ends - lens), lens) + np.arange(int(ends[-1]))


def _term_starts(pair_hash: IntArray) -> IntArray:
    """Return where each term's run of pairs starts."""
    if pair_hash.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], pair_hash[1:] != pair_hash[:-1])))

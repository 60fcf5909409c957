"""Keyword search: tokenising, and per-property BM25 postings in numpy.

A write tokenises its rows' searchable properties (``text_postings``) and keeps their
postings in the file (``blocks.py``); a partition's in-memory index (``_KeywordIndex``) is
loaded from those (one ``postings._PropertyIndex`` per property), updated by chunks as rows
are added, replaced or deleted, and ranked like Weaviate's BlockMax-WAND BM25 (``_bm25_top``;
the rules in ``agentic_memory.store.ranking``).
On large partitions a property's frequent terms are also kept as columns, which let a query
skip the rows that cannot enter its top k (``skipping.py``).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import NO_HITS as _NO_HITS
from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, Growing, IntArray
from agentic_memory.store.embedded.postings import (
    _NO_ROWS,
    _NO_TF,
    _Pairs,
    _PropertyIndex,
    _ranges,
    _term_starts,
    _Terms,
)
from agentic_memory.store.embedded.skipping import (
    DENSE_MAX,
    DENSE_SHARE,
    PRUNE_ROWS,
    DenseTerms,
    Scratch,
    Term,
    pruned_top,
)
from agentic_memory.store.ranking import (
    BM25_B,
    BM25_K1,
    bm25_idf,
    per_property_limit,
    sorted_unique,
    tokenize,
    top_positions,
)
from agentic_memory.store.types import CollectionSpec

_TERM_ENTRY = np.dtype([("hash", "<i8"), ("tf", "<u4"), ("prop", "<u2")])


@functools.lru_cache(maxsize=1 << 15)
def term_hash(term: str) -> int:
    """Return the signed 64-bit id a term is stored under (BLAKE2b; collisions ~2^-64)."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def encode_terms(
    spec: CollectionSpec, objects: list[dict[str, Any]]
) -> tuple[list[bytes], list[bytes]]:
    """Return the term counts store layouts 1 to 3 kept per row (layout 4 keeps none).

    Returns, per object, the token count of each searchable property (uint32 each) and one
    (term hash, term frequency, property index) entry per distinct term and property. Kept
    to write files of those layouts in migration tests.
    """
    searchable = spec.searchable
    lengths: list[int] = []
    hashes: list[int] = []
    frequencies: list[int] = []
    props: list[int] = []
    ends: list[int] = []
    # Whole batch in plain lists, then three array fills: numpy calls per object (and
    # concatenating structured arrays) cost more than the tokenising itself.
    for properties in objects:
        for p, name in enumerate(searchable):
            value = properties.get(name) or ""
            tokens = tokenize(" ".join(value) if isinstance(value, list) else value)
            lengths.append(len(tokens))
            counts = collections.Counter(tokens)
            hashes.extend(map(term_hash, counts))
            frequencies.extend(counts.values())
            props.extend(itertools.repeat(p, len(counts)))
        ends.append(len(hashes))
    entries = np.empty(len(hashes), dtype=_TERM_ENTRY)
    entries["hash"] = hashes
    entries["tf"] = frequencies
    entries["prop"] = props
    entry_bytes = entries.tobytes()
    length_bytes = np.asarray(lengths, dtype="<u4").tobytes()
    width, size = 4 * len(searchable), _TERM_ENTRY.itemsize
    starts = [0, *ends][:-1]
    return (
        [length_bytes[i * width : (i + 1) * width] for i in range(len(objects))],
        [entry_bytes[a * size : b * size] for a, b in zip(starts, ends, strict=True)],
    )


class _KeywordIndex:
    """BM25 postings of one partition's slots, per searchable property.

    Postings come in *chunks*: a chunk is the postings of some rows (all of a persisted block
    when the index is loaded, the rows a later write added or replaced afterwards), appended
    to each property's flat arrays. ``owner[slot]`` is the chunk that holds the slot's
    current postings (-1: none, a deleted row); postings of an older chunk for that slot are
    *stale* and skipped by lookups, so a replaced or deleted row costs what it changed, not
    what the partition holds (``cache.py`` reloads once stale postings are a quarter of all).
    A term's live postings are the same set as a fresh load has; their order differs, which
    no score depends on (each row gets one posting per term and property).

    Term weights depend on the average property length, which every write moves; they are
    computed at query time, for the postings the query reads, from the token counts and the
    averages (``norm_of``). Averages are float64 sums of integer token counts, so adding and
    subtracting rows gives the bits a fresh sum gives.
    """

    def __init__(self, width: int) -> None:
        """Start with no slots, for ``width`` searchable properties."""
        self.width = width
        self.props = [_PropertyIndex() for _ in range(width)]
        self._lengths = Growing(np.zeros((0, width), dtype=np.float32))
        self._owner = Growing(np.zeros(0, dtype=np.int64))
        self._counts = Growing(np.zeros(0, dtype=np.int64))
        self.total = np.zeros(width, dtype=np.float64)
        self.present = np.zeros(width, dtype=np.int64)
        self.chunks = 0
        self.postings = 0
        """Postings held, stale ones included."""
        self.stale = 0
        self.dense: list[DenseTerms | None] = [None] * width
        """Per property: its frequent terms' columns, made by the first query that prunes."""
        self.scratch = Scratch()

    @property
    def slots(self) -> int:
        """Return the number of slots (rows, deleted ones included)."""
        return int(self._owner.view.shape[0])

    @property
    def lengths(self) -> FloatArray:
        """Return (slots, properties): each slot's token count per property (0 when deleted)."""
        return self._lengths.view

    @property
    def owner(self) -> IntArray:
        """Return each slot's chunk (-1 when it has no postings)."""
        return self._owner.view

    @property
    def average(self) -> FloatArray64:
        """Per property: the mean token count of the rows that have at least one token in it.

        As the server's ``GetAveragePropertyLength``, which counts only documents with
        postings.
        """
        average: FloatArray64 = np.divide(
            self.total, self.present, out=np.zeros(self.width), where=self.present > 0
        )
        return average

    def grow(self, count: int) -> None:
        """Add ``count`` slots at the end, without postings yet."""
        self._lengths.append(np.zeros((count, self.width), dtype=np.float32))
        self._owner.append(np.full(count, -1, dtype=np.int64))
        self._counts.append(np.zeros(count, dtype=np.int64))
        for dense in self.dense:
            if dense is not None:
                dense.grow(count)

    def _release(self, slots: IntArray) -> None:
        owned = self._owner.view[slots] >= 0
        self.stale += int(self._counts.view[slots][owned].sum())
        old = self._lengths.view[slots]
        self.total = self.total - old.sum(axis=0, dtype=np.float64)
        self.present = self.present - (old > 0).sum(axis=0)
        for dense in self.dense:
            if dense is not None:
                dense.clear(slots)

    def assign(
        self, slots: IntArray, lengths: FloatArray, props: list[_Terms], *, loading: bool = False
    ) -> None:
        """Give ``slots`` new content: token counts and postings (``docs`` index ``slots``).

        Whatever the slots held before becomes stale. ``loading``: part of a load, whose end
        makes the dense columns' bounds (``DenseTerms.tighten``), of slots never assigned.
        """
        if not loading:
            self._release(slots)
        chunk = self.chunks
        self.chunks += 1
        self._lengths.view[slots] = lengths
        self.total = self.total + lengths.sum(axis=0, dtype=np.float64)
        self.present = self.present + (lengths > 0).sum(axis=0)
        self._owner.view[slots] = chunk
        counts = np.zeros(slots.size, dtype=np.int64)
        for p, (prop, terms) in enumerate(zip(self.props, props, strict=True)):
            dense = self.dense[p]
            if dense is not None:
                dense.lengths(slots, lengths[:, p])
                found = dense.find(terms.hashes)
                column = np.repeat(found, terms.counts)
                mine = column >= 0
                if mine.any():
                    dense.set(
                        column[mine], slots[terms.docs[mine]], terms.tf[mine], bounds=not loading
                    )
                    if dense.exclusive:
                        # Its frequent terms' postings are in its columns only.
                        terms = _without_terms(terms, found >= 0)
            prop.add(terms, slots, chunk)
            counts += np.bincount(terms.docs, minlength=slots.size)
            self.postings += int(terms.docs.size)
        self._counts.view[slots] = counts

    def remove(self, slots: IntArray) -> None:
        """Forget the content of ``slots`` (deleted rows): their postings become stale."""
        self._release(slots)
        self._lengths.view[slots] = 0
        self._owner.view[slots] = -1
        self._counts.view[slots] = 0

    def norm(self) -> FloatArray64:
        """Return (properties, slots): ``k1 (1 - b + b len / avg_len)`` of each slot.

        A posting's weight is ``tf / (tf + norm)``, Weaviate's BlockMax term weight without a
        (k1 + 1) factor; a query multiplies it by each term's idf.
        """
        every = np.arange(self.slots)
        return np.stack([self.norm_of(p, every) for p in range(self.width)]).reshape(
            self.width, self.slots
        )

    def norm_of(self, p: int, rows: IntArray) -> FloatArray64:
        """Return ``norm()[p, rows]``, computed for those rows alone.

        Every write moves the average length, so a norm kept for every slot was rebuilt
        after each: O(rows) per write. A query computes it for the postings it reads.
        """
        average = self.average
        if average[p] > 0:
            norm: FloatArray64 = BM25_K1 * (
                (1 - BM25_B) + BM25_B * (self.lengths[rows, p] / average[p])
            )
            return norm
        return np.ones(rows.size)  # no row has a token in p, so none has a posting to weigh

    def lookup(self, hashes: IntArray) -> list[list[tuple[IntArray, FloatArray]]]:
        """Return, per property and term, the live postings: slots and term frequencies."""
        return [self.lookup_property(p, hashes) for p in range(self.width)]

    def lookup_property(self, p: int, hashes: IntArray) -> list[tuple[IntArray, FloatArray]]:
        """Return, per term, the live postings in property ``p``: slots and term frequencies."""
        found = []
        owner = self.owner
        for rows, tf, chunks in self.props[p].lookup(hashes):
            if self.stale and rows.size:
                live = owner[rows] == chunks
                rows, tf = rows[live], tf[live]
            found.append((rows.astype(np.int64), tf))
        dense = self.dense[p]
        if dense is not None and dense.exclusive:
            for t, column in enumerate(dense.find(hashes).tolist()):
                if column >= 0:
                    values = dense.cols[column]
                    rows = np.flatnonzero(values)
                    found[t] = (rows.astype(np.int64), values[rows].astype(np.float32))
        return found

    def choose_dense(self, sample: list[list[_Terms]], rows: int) -> None:
        """Give every property columns for its frequent terms before a load assigns postings.

        ``sample``: some blocks' postings (``rows`` rows in all), from which each term's share
        of the rows is estimated. The columns are exclusive: those terms' postings go to them
        alone (half the postings of a large partition, in a sixteenth of the memory).
        """
        for p in range(self.width):
            hashes = np.concatenate([terms[p].hashes for terms in sample]) if sample else _NO_ROWS
            counts = np.concatenate([terms[p].counts for terms in sample]) if sample else _NO_ROWS
            self.dense[p] = DenseTerms(_frequent(hashes, counts, rows), self.slots, exclusive=True)

    def tighten_dense(self) -> None:
        """Make the dense columns' bounds exact (the end of a load)."""
        for p, dense in enumerate(self.dense):
            if dense is not None:
                dense.tighten(self.lengths[:, p])

    def dense_terms(self, p: int) -> DenseTerms:
        """Return property ``p``'s frequent terms as columns, choosing them if due.

        Chosen on first use and again once the slots have doubled since: the terms in at least
        ``1 / DENSE_SHARE`` of the slots, the ``DENSE_MAX`` most frequent if more. Which terms
        have columns changes no answer, only which rows a query can skip.
        """
        held = self.dense[p]
        if held is not None and (held.exclusive or held.built * 2 > self.slots):
            return held
        prop = self.props[p]
        prop.directory.settle()
        levels = prop.directory.levels()
        chosen = np.zeros(0, dtype=np.int64)
        if levels:
            chosen = _frequent(
                np.concatenate([level.hashes for level in levels]),
                np.concatenate([level.lens for level in levels]),
                self.slots,
            )
        dense = DenseTerms(chosen, self.slots)
        # A few terms at a time: their postings are the partition's most numerous.
        for start in range(0, chosen.size, 16):
            group = chosen[start : start + 16]
            for column, (rows, tf) in enumerate(self.lookup_property(p, group), start):
                dense.set(np.full(rows.size, column), rows, tf, bounds=False)
        dense.tighten(self.lengths[:, p])
        self.dense[p] = dense
        return dense

    def canonical(self) -> list[_Pairs]:
        """Return each property's live postings as pairs sorted by (term hash, slot).

        What a freshly loaded index holds, whatever chunks this one went through (tests
        compare the two).
        """
        out = []
        for p, prop in enumerate(self.props):
            prop.directory.settle(whole=True)
            d = prop.directory.main
            at = _ranges(d.starts, d.lens) if d.hashes.size else _NO_ROWS
            hashes = np.repeat(d.hashes, d.lens)
            rows = prop.docs.view[at].astype(np.int64)
            tf = prop.tf.view[at]
            live = self.owner[rows] == np.repeat(d.chunks, d.lens)
            hashes, rows, tf = hashes[live], rows[live], tf[live]
            dense = self.dense[p]
            if dense is not None and dense.exclusive:
                for term, (more, freq) in zip(
                    dense.hashes.tolist(), self.lookup_property(p, dense.hashes), strict=True
                ):
                    hashes = np.concatenate((hashes, np.full(more.size, term, dtype=np.int64)))
                    rows = np.concatenate((rows, more))
                    tf = np.concatenate((tf, freq))
            order = np.lexsort((rows, hashes))
            out.append(_Pairs(hashes[order], rows[order], tf[order]))
        return out


@dataclass
class _Postings:
    """Every searchable property's pairs and the rows' lengths: a keyword index's raw material."""

    props: list[_Pairs]
    lengths: FloatArray


def _postings(
    length_blobs: list[bytes], term_blobs: list[bytes], width: int, first_row: int
) -> _Postings:
    """Decode stored term counts of consecutive rows numbered from ``first_row``."""
    n = len(term_blobs)
    lengths = np.frombuffer(b"".join(length_blobs), dtype="<u4").reshape(n, width)
    entries = np.frombuffer(b"".join(term_blobs), dtype=_TERM_ENTRY)
    per_row = np.fromiter(map(len, term_blobs), dtype=np.int64, count=n)
    doc = np.repeat(
        np.arange(first_row, first_row + n, dtype=np.int64), per_row // _TERM_ENTRY.itemsize
    )
    prop = entries["prop"]
    props: list[_Pairs] = []
    for p in range(width):
        mine = prop == p
        hashes = np.ascontiguousarray(entries["hash"][mine])
        # A row stores one entry per distinct term and property; a stable sort by term keeps
        # each term's rows in row order.
        order = np.argsort(hashes, kind="stable")
        props.append(
            _Pairs(
                pair_hash=hashes[order].astype(np.int64),
                docs=doc[mine][order],
                tf=entries["tf"][mine][order].astype(np.float32),
            )
        )
    return _Postings(props=props, lengths=lengths.astype(np.float32))


def text_postings(spec: CollectionSpec, objects: list[dict[str, Any]], first_row: int) -> _Postings:
    """Tokenise the searchable properties of consecutive rows numbered from ``first_row``.

    The same postings as the term counts layouts 1 to 3 stored (``encode_terms`` decoded by
    ``_postings``): per property, (term hash, row, count) sorted by term hash, then row; and
    each row's token count. All rows at once, with no Python work per (term, row) pair: the
    tokens go into one list, a dict numbers the distinct terms (each hashed once) in term
    hash order, and one numpy sort of term number * rows + row groups and orders the pairs.
    """
    n = len(objects)
    lengths = np.zeros((n, len(spec.searchable)), dtype=np.float32)
    props: list[_Pairs] = []
    for p, name in enumerate(spec.searchable):
        per_row = list(map(tokenize, map(_text_of, (o.get(name) for o in objects))))
        counts = np.fromiter(map(len, per_row), dtype=np.int64, count=n)
        lengths[:, p] = counts
        tokens = list(itertools.chain.from_iterable(per_row))
        if not tokens:
            props.append(_empty_pairs())
            continue
        number: dict[str, int] = dict.fromkeys(tokens, 0)
        terms = list(number)
        hashes = np.fromiter(map(term_hash, terms), dtype=np.int64, count=len(terms))
        by_hash = np.argsort(hashes, kind="stable")
        for rank, i in enumerate(by_hash.tolist()):
            number[terms[i]] = rank
        keys = np.fromiter(map(number.__getitem__, tokens), dtype=np.int64, count=len(tokens))
        keys *= n
        keys += np.repeat(np.arange(n, dtype=np.int64), counts)
        keys.sort()
        # One pair per run of equal keys; its count is the run's length.
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        pairs = keys[starts]
        tf = np.diff(np.append(starts, keys.size))
        props.append(
            _Pairs(
                pair_hash=hashes[by_hash][pairs // n],
                docs=pairs % n + first_row,
                tf=tf.astype(np.float32),
            )
        )
    return _Postings(props=props, lengths=lengths)


def _text_of(value: str | list[str] | None) -> str:
    """Return the text a searchable value is tokenised as (``text[]``: its items joined)."""
    if not value:
        return ""
    return " ".join(value) if isinstance(value, list) else value


def _empty_pairs() -> _Pairs:
    return _Pairs(_NO_ROWS, _NO_ROWS, _NO_TF)


def _bm25_top(
    live: int,
    index: _KeywordIndex,
    counts: dict[str, int],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
) -> tuple[IntArray, FloatArray]:
    """Rank a partition of ``live`` rows like Weaviate's BlockMax-WAND BM25; return slots, scores.

    Each property is scored on its own (idf shared, ``agentic_memory.store.ranking.bm25_idf``;
    summed over the query terms in float64, kept as float32) and keeps its best
    ``per_property_limit`` rows; a row's score is the float32 sum of the properties that kept
    it, and the best ``candidates`` rows are returned. Ties at every cut keep the lowest
    slots, which are in rid order and stand in for the server's docIDs (write order). See
    ``docs/storage.md``. On a partition of ``PRUNE_ROWS`` slots or more a property's best rows
    come from ``skipping.pruned_top``, which skips rows that cannot enter them and returns
    what scoring every posting returns.
    """
    n = index.slots
    hashes = np.fromiter(map(term_hash, counts), dtype=np.int64, count=len(counts))
    skipping = n >= PRUNE_ROWS
    # Per property: each term's dense column (-1: none) and, for the others, their postings.
    columns: list[IntArray] = []
    found: list[list[tuple[IntArray, FloatArray]]] = []
    doc_freq = np.zeros((hashes.size, index.width), dtype=np.int64)
    for p in range(index.width):
        dense = index.dense_terms(p) if skipping else None
        column = np.full(hashes.size, -1) if dense is None else dense.find(hashes)
        postings: list[tuple[IntArray, FloatArray]] = [(_NO_ROWS, _NO_TF)] * hashes.size
        rare = np.flatnonzero(column < 0)
        for t, got in zip(rare.tolist(), index.lookup_property(p, hashes[rare]), strict=True):
            postings[t] = got
            doc_freq[t, p] = got[0].size
        if dense is not None:
            dense_held = column >= 0
            doc_freq[dense_held, p] = dense.df[column[dense_held]]
        columns.append(column)
        found.append(postings)
    idfs = [
        bm25_idf(live, freqs.tolist(), r)
        for freqs, r in zip(doc_freq, counts.values(), strict=True)
    ]
    if not any(idfs):
        return _NO_HITS
    keep_each = per_property_limit(candidates)
    kept_rows: list[IntArray] = []
    kept_scores: list[FloatArray] = []
    for p in range(index.width):
        weights = [
            _weights(index, p, idf, rows, tf)
            for (rows, tf), idf in zip(found[p], idfs, strict=True)
        ]
        kept: tuple[IntArray, FloatArray] | None = None
        dense = index.dense[p] if skipping else None
        if dense is not None and (columns[p] >= 0).any():
            terms = [
                Term(idf, int(c), rows, w)
                for idf, c, (rows, _), w in zip(
                    idfs, columns[p].tolist(), found[p], weights, strict=True
                )
            ]
            average = float(index.average[p])
            kept = pruned_top(
                terms,
                dense,
                functools.partial(index.norm_of, p),
                average,
                allowed,
                keep_each,
                index.scratch,
            )
            if kept is None:
                # Too few matches among the seeds: every posting, the frequent terms' too.
                held = np.flatnonzero(columns[p] >= 0)
                for t, (rows, tf) in zip(
                    held.tolist(), index.lookup_property(p, hashes[held]), strict=True
                ):
                    weights[t] = _weights(index, p, idfs[t], rows, tf)
                    found[p][t] = (rows, tf)
        if kept is None:
            # Term by term: a row's contributions are added in query-term order.
            present = [t for t in range(hashes.size) if found[p][t][0].size]
            if not present:
                continue
            kept = _property_top(
                np.concatenate([found[p][t][0] for t in present]),
                np.concatenate([weights[t] for t in present]),
                n,
                allowed,
                keep_each,
            )
        if kept[0].size:
            kept_rows.append(kept[0])
            kept_scores.append(kept[1])
    if not kept_rows:
        return _NO_HITS
    rows_kept = sorted_unique(np.concatenate(kept_rows))
    # float32 sums in property order, as combineResults adds the kept scores: add.at adds
    # in input order, which is property order.
    total = np.zeros(rows_kept.size, dtype=np.float32)
    np.add.at(
        total, np.searchsorted(rows_kept, np.concatenate(kept_rows)), np.concatenate(kept_scores)
    )
    best = top_positions(total, candidates)
    return rows_kept[best], total[best]


def _frequent(hashes: IntArray, counts: IntArray, rows: int) -> IntArray:
    """Return the terms (sorted) in at least ``1 / DENSE_SHARE`` of ``rows`` (``DENSE_MAX`` most).

    ``hashes`` and ``counts``: postings per term, in parts (a term may come more than once).
    """
    if hashes.size == 0 or rows == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(hashes, kind="stable")
    hashes, counts = hashes[order], counts[order]
    starts = _term_starts(hashes)
    totals = np.add.reduceat(counts, starts)
    often = np.flatnonzero(totals * DENSE_SHARE >= rows)
    if often.size > DENSE_MAX:
        often = often[np.argsort(-totals[often], kind="stable")[:DENSE_MAX]]
    chosen: IntArray = np.sort(hashes[starts[often]])
    return chosen


def _without_terms(terms: _Terms, drop: npt.NDArray[np.bool_]) -> _Terms:
    """Return a block's postings without those of the terms ``drop`` marks."""
    keep = ~drop
    at = (
        _ranges(np.cumsum(terms.counts) - terms.counts, terms.counts * keep)
        if keep.any()
        else _NO_ROWS
    )
    return _Terms(terms.hashes[keep], terms.counts[keep], terms.docs[at], terms.tf[at])


def _weights(
    index: _KeywordIndex, p: int, idf: float, rows: IntArray, tf32: FloatArray
) -> FloatArray64:
    """Return postings' weights in property ``p``: ``idf * tf / (tf + norm)`` in float64."""
    tf = tf32.astype(np.float64)
    weights: FloatArray64 = idf * (tf / (tf + index.norm_of(p, rows)))
    return weights


SPARSE_SHARE = 8
"""A property's scores are kept per matching row, not per slot, while the query's postings
in it are fewer than an ``SPARSE_SHARE``-th of the slots."""


def _property_top(
    docs: IntArray,
    weights: FloatArray64,
    slots: int,
    allowed: npt.NDArray[np.bool_] | None,
    k: int,
) -> tuple[IntArray, FloatArray]:
    """Return one property's best ``k`` allowed rows and float32 scores from its postings.

    ``docs`` and ``weights``: every posting the query read, in query-term order. A row's
    score is the float64 sum of its postings' weights in that order (the server's loop over
    the terms), whichever way it is computed: by ``bincount`` over every slot, or, when the
    postings are few next to the slots, over the distinct matching rows only, so that a
    query on a large partition costs what it matched instead of what the partition holds.
    """
    if docs.size * SPARSE_SHARE >= slots:
        # bincount adds each row's contributions in input order, in float64.
        scores: FloatArray64 = np.asarray(
            np.bincount(docs, weights=weights, minlength=slots), dtype=np.float64
        )
        return _best_rows(scores, allowed, k)
    rows = sorted_unique(docs)
    compact: FloatArray64 = np.asarray(
        np.bincount(np.searchsorted(rows, docs), weights=weights, minlength=rows.size),
        dtype=np.float64,
    )
    # Rows ascending: positions order as the slots do, so ties still keep the lowest slots.
    best, narrow = _best_rows(compact, None if allowed is None else allowed[rows], k)
    return rows[best], narrow


def _best_rows(
    scores: FloatArray64, allowed: npt.NDArray[np.bool_] | None, k: int
) -> tuple[IntArray, FloatArray]:
    """Return the ``k`` allowed rows with the best float32 scores (ties: lowest rows).

    Every posting scores above zero (idf and term weights are positive), so the matches are
    the rows with a score. On a large partition a strided sample first gives a lower bound:
    its k-th best value cannot exceed the whole partition's, so every row of the exact top k
    scores above the float32 just below it, and only those rows are narrowed and ranked.
    """
    bound = 0.0
    step = scores.size // (32 * k)
    if step > 1:
        sample = scores[::step]
        if allowed is not None:
            sample = sample[allowed[::step]]
        sample = sample[sample > 0].astype(np.float32)
        if sample.size >= k:
            kth = np.partition(sample, sample.size - k)[sample.size - k]
            bound = float(np.nextafter(kth, np.float32(-np.inf)))
    mask = scores > bound
    if allowed is not None:
        mask &= allowed
    pool = np.flatnonzero(mask)
    narrow = scores[pool].astype(np.float32)
    kept = top_positions(narrow, k)
    return pool[kept], narrow[kept]

"""Keyword search: per-property BM25 postings in numpy, built from the stored text.

A partition's postings are built by tokenising its rows' searchable properties
(``text_postings``), merged in place when rows are added or deleted, and ranked like
Weaviate's BlockMax-WAND BM25 (``_bm25_top``; the rules in ``agentic_memory.store.ranking``).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.arrays import NO_HITS as _NO_HITS
from agentic_memory.store.embedded.arrays import FloatArray, FloatArray64, IntArray
from agentic_memory.store.ranking import (
    BM25_B,
    BM25_K1,
    bm25_idf,
    per_property_limit,
    tokenize,
    top_positions,
)
from agentic_memory.store.types import CollectionSpec

if TYPE_CHECKING:
    from agentic_memory.store.embedded.cache import _Partition

_TERM_ENTRY = np.dtype([("hash", "<i8"), ("tf", "<u4"), ("prop", "<u2")])


@functools.lru_cache(maxsize=1 << 17)
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


@dataclass
class _PropertyPostings:
    """One searchable property's postings: (term, row) pairs sorted by term hash, then row."""

    hashes: IntArray
    """Sorted hashes of the terms the property holds (see ``term_hash``); term i's postings
    are ``indptr[i]:indptr[i+1]``, so a term's document frequency is their number."""
    indptr: IntArray
    docs: IntArray
    """Row index of each posting; within a term, in row order."""
    tf: FloatArray
    """The term's count in the property of the row."""


@dataclass
class _Pairs:
    """One property's (term, row) pairs sorted by term hash, then row."""

    pair_hash: IntArray
    docs: IntArray
    tf: FloatArray


@dataclass
class _Segment:
    """The postings of a run of consecutive rows, per searchable property."""

    props: list[_PropertyPostings]

    @property
    def size(self) -> int:
        """Return the number of postings, over all properties."""
        return sum(pp.docs.size for pp in self.props)


MERGE_RATIO = 4
"""A segment is merged into the one before it once it holds a quarter of its postings, so
each segment is more than four times the next: a partition of n postings has at most
log4(n) segments, and a posting is copied O(log n) times in all."""


class _KeywordIndex:
    """BM25 postings of one partition, per searchable property (as Weaviate keeps them).

    The postings are split into segments of consecutive rows, oldest first: rows written
    since the index was built get segments of their own, merged lazily (``MERGE_RATIO``),
    so a write costs what it adds, not what the partition holds. A query reads every
    segment: a term's postings are its spans in each segment, in segment (that is, row)
    order, exactly the postings of one merged index. Term weights depend on the average
    property length, which every write moves; they are computed at query time from the
    per-row length normalisation (``norm``), which is rebuilt lazily after a write.
    """

    def __init__(self, segments: list[_Segment], lengths: FloatArray) -> None:
        """Index ``lengths`` (rows, searchable properties) and the segments of those rows."""
        self.segments = [s for s in segments if s.size]
        self.lengths = lengths
        # Token counts are integers, so float64 sums are exact in any order: adding and
        # subtracting rows gives the bits a fresh sum gives.
        self.total = lengths.sum(axis=0, dtype=np.float64)
        self.present = (lengths > 0).sum(axis=0)
        self._norm: FloatArray64 | None = None

    @property
    def rows(self) -> int:
        """Return the number of rows indexed."""
        return int(self.lengths.shape[0])

    @property
    def average(self) -> FloatArray64:
        """Per property: the mean token count of the rows that have at least one token in it.

        As the server's ``GetAveragePropertyLength``, which counts only documents with
        postings.
        """
        average: FloatArray64 = np.divide(
            self.total, self.present, out=np.zeros(self.lengths.shape[1]), where=self.present > 0
        )
        return average

    def norm(self) -> FloatArray64:
        """Return (properties, rows): ``k1 (1 - b + b len / avg_len)`` of each row.

        A posting's weight is ``tf / (tf + norm)``, Weaviate's BlockMax term weight without a
        (k1 + 1) factor; a query multiplies it by each term's idf.
        """
        if self._norm is None:
            average = self.average
            norm = np.empty((self.lengths.shape[1], self.rows), dtype=np.float64)
            for p in range(self.lengths.shape[1]):
                if average[p] > 0:
                    norm[p] = BM25_K1 * ((1 - BM25_B) + BM25_B * (self.lengths[:, p] / average[p]))
                else:
                    norm[p] = 1.0  # no row has a token in p, so none has a posting to weigh
            self._norm = norm
        return self._norm

    def append(self, added: _Postings) -> None:
        """Add the postings of rows numbered from ``rows`` on (``_postings(..., rows)``)."""
        self.lengths = np.concatenate((self.lengths, added.lengths))
        self.total = self.total + added.lengths.sum(axis=0, dtype=np.float64)
        self.present = self.present + (added.lengths > 0).sum(axis=0)
        self._norm = None
        segment = _segment(added.props)
        if segment.size:
            self.segments.append(segment)
        while (
            len(self.segments) > 1
            and self.segments[-1].size * MERGE_RATIO >= self.segments[-2].size
        ):
            last = self.segments.pop()
            self.segments[-1] = _merge_segments(self.segments[-1], last)

    def drop(self, keep: npt.NDArray[np.bool_]) -> None:
        """Remove the rows not kept and renumber the others, order unchanged."""
        if keep.all():
            return
        gone = self.lengths[~keep]
        self.total = self.total - gone.sum(axis=0, dtype=np.float64)
        self.present = self.present - (gone > 0).sum(axis=0)
        self.lengths = self.lengths[keep]
        self._norm = None
        number = np.cumsum(keep) - 1
        self.segments = [
            s
            for s in (
                _segment([_drop_pairs(pairs, keep, number) for pairs in _pairs_of(segment)])
                for segment in self.segments
            )
            if s.size
        ]

    def merged(self, width: int) -> list[_PropertyPostings]:
        """Return the postings of all segments as one segment (per property)."""
        if not self.segments:
            return _segment([_empty_pairs() for _ in range(width)]).props
        whole = self.segments[0]
        for segment in self.segments[1:]:
            whole = _merge_segments(whole, segment)
        return whole.props


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


def _finish(postings: _Postings) -> _KeywordIndex:
    """Return the index of freshly decoded postings: one segment."""
    return _KeywordIndex([_segment(postings.props)], postings.lengths)


def _segment(props: list[_Pairs]) -> _Segment:
    """Group each property's pairs by term."""
    out: list[_PropertyPostings] = []
    for pairs in props:
        term_start = _term_starts(pairs.pair_hash)
        out.append(
            _PropertyPostings(
                hashes=pairs.pair_hash[term_start],
                indptr=np.append(term_start, pairs.pair_hash.size).astype(np.int64),
                docs=pairs.docs,
                tf=pairs.tf,
            )
        )
    return _Segment(out)


def _empty_pairs() -> _Pairs:
    return _Pairs(
        np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    )


def _pairs_of(segment: _Segment) -> list[_Pairs]:
    """Return a segment's pairs, one term hash per pair."""
    return [
        _Pairs(np.repeat(pp.hashes, np.diff(pp.indptr)), pp.docs, pp.tf) for pp in segment.props
    ]


def _merge_segments(old: _Segment, added: _Segment) -> _Segment:
    """Merge two segments, all of whose ``added`` rows come after the ``old`` ones."""
    return _segment(
        [_merge_pairs(a, b) for a, b in zip(_pairs_of(old), _pairs_of(added), strict=True)]
    )


def _drop_pairs(pairs: _Pairs, keep: npt.NDArray[np.bool_], number: IntArray) -> _Pairs:
    """Remove the pairs of rows not kept; ``number`` gives the kept rows' new numbers."""
    pair_keep = keep[pairs.docs]
    return _Pairs(pairs.pair_hash[pair_keep], number[pairs.docs[pair_keep]], pairs.tf[pair_keep])


def _merge_pairs(old: _Pairs, added: _Pairs) -> _Pairs:
    """Merge two property's pair lists whose rows all come after the old ones.

    Within a term the old pairs come first: each pair's place in the merged order is its own
    place plus the number of pairs of the other side that sort before it.
    """
    if added.pair_hash.size == 0:
        return old
    if old.pair_hash.size == 0:
        return added
    term_start = _term_starts(old.pair_hash)
    terms = old.pair_hash[term_start]
    bounds = np.append(term_start, old.pair_hash.size)
    per_term = np.diff(bounds)
    # Counted per term, then spread over its pairs: a search per pair cost more than the rest.
    old_place = np.arange(old.pair_hash.size) + np.repeat(
        np.searchsorted(added.pair_hash, terms, "left"), per_term
    )
    new_place = (
        np.arange(added.pair_hash.size) + bounds[np.searchsorted(terms, added.pair_hash, "right")]
    )
    total = old.pair_hash.size + added.pair_hash.size
    pair_hash = np.empty(total, dtype=np.int64)
    docs = np.empty(total, dtype=np.int64)
    tf = np.empty(total, dtype=np.float32)
    pair_hash[old_place], pair_hash[new_place] = old.pair_hash, added.pair_hash
    docs[old_place], docs[new_place] = old.docs, added.docs
    tf[old_place], tf[new_place] = old.tf, added.tf
    return _Pairs(pair_hash, docs, tf)


def _term_starts(pair_hash: IntArray) -> IntArray:
    """Return where each term's run of pairs starts."""
    if pair_hash.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], pair_hash[1:] != pair_hash[:-1])))


def _bm25_top(
    part: _Partition,
    index: _KeywordIndex,
    counts: dict[str, int],
    allowed: npt.NDArray[np.bool_] | None,
    candidates: int,
) -> tuple[IntArray, FloatArray]:
    """Rank the partition like Weaviate's BlockMax-WAND BM25; return rows and raw scores.

    Each property is scored on its own (idf shared, ``agentic_memory.store.ranking.bm25_idf``; summed
    over the query terms in float64, kept as float32) and keeps its best
    ``per_property_limit`` rows; a row's score is the float32 sum of the properties that kept
    it, and the best ``candidates`` rows are returned. Ties at every cut keep the lowest
    rows, which stand in for the server's docIDs (write order). See ``docs/storage.md``.
    """
    n = part.rowids.size
    width = index.lengths.shape[1]
    hashes = np.fromiter(map(term_hash, counts), dtype=np.int64, count=len(counts))
    # Per segment, (terms, properties): where each term's postings start and end.
    spans: list[tuple[_Segment, list[list[int]], list[list[int]]]] = []
    doc_freq = np.zeros((hashes.size, width), dtype=np.int64)
    for segment in index.segments:
        lo = np.zeros((hashes.size, width), dtype=np.int64)
        hi = np.zeros_like(lo)
        for p, pp in enumerate(segment.props):
            if pp.hashes.size == 0:
                continue
            at = np.searchsorted(pp.hashes, hashes)
            found = (at < pp.hashes.size) & (
                pp.hashes[np.minimum(at, pp.hashes.size - 1)] == hashes
            )
            lo[found, p] = pp.indptr[at[found]]
            hi[found, p] = pp.indptr[at[found] + 1]
        doc_freq += hi - lo
        spans.append((segment, lo.tolist(), hi.tolist()))
    idfs = [
        bm25_idf(n, freqs, r) for freqs, r in zip(doc_freq.tolist(), counts.values(), strict=True)
    ]
    if not any(idfs):
        return _NO_HITS
    keep_each = per_property_limit(candidates)
    norm = index.norm()
    total = np.zeros(n, dtype=np.float32)
    kept_rows: list[IntArray] = []
    for p in range(width):
        docs: list[IntArray] = []
        weights: list[FloatArray64] = []
        # Term by term, each term's postings segment by segment: a row's contributions are
        # added in query-term order, as with one merged index.
        for t, idf in enumerate(idfs):
            for segment, lo_list, hi_list in spans:
                a, b = lo_list[t][p], hi_list[t][p]
                if b <= a:
                    continue
                pp = segment.props[p]
                rows = pp.docs[a:b]
                tf = pp.tf[a:b].astype(np.float64)
                docs.append(rows)
                weights.append(idf * (tf / (tf + norm[p, rows])))
        if not docs:
            continue
        # bincount adds each row's contributions in input order, i.e. query-term order, in
        # float64: the same sums as the server's per-document loop over the terms.
        scores: FloatArray64 = np.asarray(
            np.bincount(np.concatenate(docs), weights=np.concatenate(weights), minlength=n),
            dtype=np.float64,
        )
        best, narrow = _best_rows(scores, allowed, keep_each)
        # float32 sums in property order, as combineResults adds the kept scores.
        total[best] += narrow
        kept_rows.append(best)
    if not kept_rows:
        return _NO_HITS
    rows_kept = np.unique(np.concatenate(kept_rows))
    best = rows_kept[top_positions(total[rows_kept], candidates)]
    return best, total[best]


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

"""Keyword search: tokenising at write time and per-property BM25 postings in numpy.

Each row stores its searchable text's token counts once (``encode_terms``); a partition's
postings are assembled from them, merged in place when rows are added or deleted, and ranked
like Weaviate's BlockMax-WAND BM25 (``_bm25_top``; the rules in ``agentic_memory.store.ranking``).
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
    """Tokenise the searchable properties of a batch of objects once, at write time.

    Returns, per object, the token count of each searchable property (uint32 each) and one
    (term hash, term frequency, property index) entry per distinct term and property.
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
    weight: FloatArray64
    """``tf / (tf + k1 (1 - b + b len / avg_len))``, Weaviate's BlockMax term weight without a
    (k1 + 1) factor; a query multiplies it by each term's idf."""


@dataclass
class _KeywordIndex:
    """BM25 postings of one partition, per searchable property (as Weaviate keeps them)."""

    props: list[_PropertyPostings]
    lengths: FloatArray
    """(rows, searchable properties): token counts, for the length normalisation."""
    average: FloatArray64
    """Per property: the mean token count of the rows that have at least one token in it."""


@dataclass
class _Pairs:
    """One property's (term, row) pairs sorted by term hash, then row."""

    pair_hash: IntArray
    docs: IntArray
    tf: FloatArray


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


def _finish(postings: _Postings) -> _KeywordIndex:
    """Group each property's pairs by term and weigh them with its average length.

    A property's average counts only the rows that have at least one token in it, as the
    server's ``GetAveragePropertyLength`` counts only documents with postings.
    """
    lengths = postings.lengths
    present = (lengths > 0).sum(axis=0)
    total = lengths.sum(axis=0, dtype=np.float64)
    average = np.divide(total, present, out=np.zeros(lengths.shape[1]), where=present > 0)
    props: list[_PropertyPostings] = []
    for p, pairs in enumerate(postings.props):
        term_start = _term_starts(pairs.pair_hash)
        tf = pairs.tf.astype(np.float64)
        # Rows with postings in p have a positive length, so the average is positive here.
        norm = BM25_K1 * ((1 - BM25_B) + BM25_B * (lengths[pairs.docs, p] / average[p]))
        props.append(
            _PropertyPostings(
                hashes=pairs.pair_hash[term_start],
                indptr=np.append(term_start, pairs.pair_hash.size).astype(np.int64),
                docs=pairs.docs,
                tf=pairs.tf,
                weight=tf / (tf + norm),
            )
        )
    return _KeywordIndex(props=props, lengths=lengths, average=average)


def _as_postings(index: _KeywordIndex) -> _Postings:
    """Return the pairs of an index, one term hash per pair."""
    return _Postings(
        props=[
            _Pairs(np.repeat(pp.hashes, np.diff(pp.indptr)), pp.docs, pp.tf) for pp in index.props
        ],
        lengths=index.lengths,
    )


def _drop_rows(postings: _Postings, keep: npt.NDArray[np.bool_]) -> _Postings:
    """Remove the rows not kept and renumber the others, order unchanged."""
    if keep.all():
        return postings
    number = np.cumsum(keep) - 1
    props = []
    for pairs in postings.props:
        pair_keep = keep[pairs.docs]
        props.append(
            _Pairs(pairs.pair_hash[pair_keep], number[pairs.docs[pair_keep]], pairs.tf[pair_keep])
        )
    return _Postings(props=props, lengths=postings.lengths[keep])


def _merge_all(old: _Postings, added: _Postings) -> _Postings:
    """Return the pairs of the rows of ``old`` followed by the rows of ``added``."""
    return _Postings(
        props=[_merge_pairs(a, b) for a, b in zip(old.props, added.props, strict=True)],
        lengths=np.concatenate((old.lengths, added.lengths)),
    )


def _merge_pairs(old: _Pairs, added: _Pairs) -> _Pairs:
    """Merge two property's pair lists whose rows all come after the old ones.

    Within a term the old pairs come first: each pair's place in the merged order is its own
    place plus the number of pairs of the other side that sort before it.
    """
    if added.pair_hash.size == 0:
        return old
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
    hashes = np.fromiter(map(term_hash, counts), dtype=np.int64, count=len(counts))
    # (terms, properties): where each term's postings start and end in each property.
    lo = np.zeros((hashes.size, len(index.props)), dtype=np.int64)
    hi = np.zeros_like(lo)
    for p, pp in enumerate(index.props):
        if pp.hashes.size == 0:
            continue
        at = np.searchsorted(pp.hashes, hashes)
        found = (at < pp.hashes.size) & (pp.hashes[np.minimum(at, pp.hashes.size - 1)] == hashes)
        lo[found, p] = pp.indptr[at[found]]
        hi[found, p] = pp.indptr[at[found] + 1]
    doc_freqs = (hi - lo).tolist()
    idfs = [bm25_idf(n, freqs, r) for freqs, r in zip(doc_freqs, counts.values(), strict=True)]
    if not any(idfs):
        return _NO_HITS
    keep_each = per_property_limit(candidates, len(index.props))
    total = np.zeros(n, dtype=np.float32)
    kept_rows: list[IntArray] = []
    for p, pp in enumerate(index.props):
        spans = [
            (idf, int(lo[t, p]), int(hi[t, p])) for t, idf in enumerate(idfs) if hi[t, p] > lo[t, p]
        ]
        if not spans:
            continue
        # bincount adds each row's contributions in input order, i.e. query-term order, in
        # float64: the same sums as the server's per-document loop over the terms.
        scores: FloatArray64 = np.asarray(
            np.bincount(
                np.concatenate([pp.docs[a:b] for _, a, b in spans]),
                weights=np.concatenate([idf * pp.weight[a:b] for idf, a, b in spans]),
                minlength=n,
            ),
            dtype=np.float64,
        )
        best, narrow = _best_rows(scores, allowed, keep_each)
        # float32 sums in property order, as combineResults adds the kept scores.
        total[best] += narrow
        kept_rows.append(best)
    if not kept_rows:
        return _NO_HITS
    rows = np.unique(np.concatenate(kept_rows))
    best = rows[top_positions(total[rows], candidates)]
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

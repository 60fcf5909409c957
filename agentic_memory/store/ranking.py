"""Weaviate's keyword and hybrid ranking rules at the pinned server version, shared by both backends.

The embedded store computes BM25 and ``relativeScoreFusion`` itself; the Weaviate backend
fuses here only what the server cannot (a blank query or a collection without searchable
text) and sorts here only what the server cannot page (deep listings). Both follow the
server's source, cited per function (``weaviate/weaviate`` at tag ``v`` + ``WEAVIATE_VERSION``);
``docs/storage.md`` explains the rules and the remaining differences.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

WEAVIATE_VERSION = "1.32.27"
"""The Weaviate server version these rules follow and both compose files pin.

1.32.26 is the first release that writes no NaN average length when a memtable holding only
deletions is flushed (``lsmkv/memtable_flush_inverted.go``); 1.32.27 is the last 1.32 patch.
weaviate-client 4.16 (pinned in pyproject.toml) was built and tested for 1.32 (its CI ran
servers up to 1.32); later servers, including those that reclaim deleted documents' lengths
at compaction (1.37.13, 1.38.5), were never tested with it and change the BM25 code paths
this module follows. ``docs/weaviate.md`` says why in full."""

HYBRID_CANDIDATES = 100
"""``QUERY_HYBRID_MAXIMUM_RESULTS`` (default 100, ``usecases/config/environment.go``): each side
of a hybrid search takes ``max(limit, 100)`` candidates (``explorer_hybrid.go`` ``Hybrid``).
``docker-compose.yml`` pins the server to this value."""

QUERY_MAXIMUM_RESULTS = 10_000
"""``QUERY_MAXIMUM_RESULTS`` (default 10,000): the server refuses ``offset + limit`` above it."""

BM25_K1 = float(np.float32(1.2))
BM25_B = float(np.float32(0.75))
"""Weaviate's default BM25 parameters, which a collection created without an inverted-index
config gets (``usecases/schema/class.go`` ``setInvertedConfigDefaults``). They are float32 in
the class config (``usecases/config/config_handler.go`` ``DefaultBM25k1 = float32(1.2)``) and
widened to float64 for scoring (``entities/schema/inverted_index_config.go``), so k1 is
1.2000000476837158; b (0.75) is exact either way."""

NEAR_TIE_SQUARED = 1e-14
"""Fused scores closer than 1e-7 are ties for the server's sort (``hybrid_fusion.go``)."""

WEAVIATE_EN_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
"""Weaviate's default ``en`` stopword preset (``inverted/stopwords/presets.go``), dropped from
keyword queries (never from documents)."""

K = TypeVar("K", bound=Hashable)

_TOKEN_RE = re.compile(r"[^\W_]+")
_ASCII_WORDS = bytes(c if chr(c).isalnum() and c < 128 else 32 for c in bytes(range(256)).lower())
# Go lower-cases rune by rune with the simple Unicode mapping; Python's str.lower() uses the
# full mapping, which differs for two letters: U+0130 (İ -> "i̇", two code points) and capital
# sigma (final form ς at the end of a word). Mapping them first gives Go's result.
_GO_SIMPLE_LOWER = str.maketrans({"\u0130": "i", "\u03a3": "\u03c3"})


def tokenize(text: str) -> list[str]:
    """Split text like Weaviate's ``word`` tokenisation (``helpers/tokenizer.go`` tokenizeWord).

    Runs of letters and digits (Unicode categories L and N) are tokens; everything else,
    including ``_``, punctuation and combining marks, separates. Each token is then
    lower-cased with the simple Unicode mapping, as Go's ``strings.ToLower`` does.
    """
    if text.isascii():
        # Same result as the regex for ASCII, several times faster on large partitions.
        return text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    return [token.translate(_GO_SIMPLE_LOWER).lower() for token in _TOKEN_RE.findall(text)]


def query_term_counts(query: str) -> dict[str, int]:
    """Return a query's distinct tokens (first-occurrence order) and how often each occurs.

    Stopwords are dropped. A word repeated in the query multiplies its idf by the count
    (``TokenizeAndCountDuplicates``, ``bm25_searcher.go`` ``removeStopwordsFromQueryTerms``).
    Operators and punctuation in user text mean nothing special.
    """
    counts: dict[str, int] = {}
    for token in tokenize(query):
        if token not in WEAVIATE_EN_STOPWORDS:
            counts[token] = counts.get(token, 0) + 1
    return counts


def query_terms(query: str) -> list[str]:
    """Return a query's distinct tokens in order, without stopwords."""
    return list(query_term_counts(query))


def keyword_candidates(limit: int) -> int:
    """Return how many keyword candidates a hybrid search with ``limit`` takes.

    ``explorer_hybrid.go`` ``sparseSearch``: ``max(offset + 100, min(offset + limit, 10000))``
    with offset 0.
    """
    return max(HYBRID_CANDIDATES, min(limit, QUERY_MAXIMUM_RESULTS))


def vector_candidates(limit: int) -> int:
    """Return how many vector candidates a hybrid search takes (``denseSearch``)."""
    return max(HYBRID_CANDIDATES, limit)


def per_property_limit(limit: int) -> int:
    """Return the size of each property's top-k heap (``bm25_searcher_block.go`` wandBlock).

    Each searchable property is ranked on its own and keeps ``max(int(limit * 1.1), limit +
    10)`` documents before the per-document sums are cut to ``limit``. Since 1.32.16 this
    holds for one property too (before, one property kept ``limit``); with one property and
    one segment the result is the same either way. The server keeps such a heap per segment
    of the property's index; the embedded store has one (``docs/storage.md``, D4).
    """
    return int(max(float(limit) * 1.1, float(limit + 10)))


def bm25_idf(n_objects: int, doc_freqs: Iterable[int], repeats: int) -> float:
    """Return a query term's idf, shared by every property (``wandBlock``).

    ``doc_freqs`` holds the term's document frequency in each searchable property; the server
    averages those that are not zero with an integer division, then uses
    ``ln(1 + (N - n + 0.5) / (n + 0.5))`` times the number of times the word was repeated.
    """
    present = [n for n in doc_freqs if n > 0]
    if not present:
        return 0.0
    n = sum(present) // len(present)
    return math.log(1.0 + (n_objects - n + 0.5) / (n + 0.5)) * repeats


def top_rows(
    values: npt.NDArray[np.float32], pool: npt.NDArray[np.int64], k: int, *, smallest: bool = False
) -> npt.NDArray[np.int64]:
    """Return the ``k`` rows of ``pool`` with the largest (``smallest``: least) values.

    Ties at the cut keep the lowest rows, as Weaviate's top-k heaps keep the lowest docIDs
    (``priorityqueue`` ``NewMinWithId``). ``pool`` must be ascending; the result is unordered.
    """
    if pool.size <= k:
        return pool
    return pool[top_positions(values[pool], k, smallest=smallest)]


def top_positions(
    picked: npt.NDArray[np.float32], k: int, *, smallest: bool = False
) -> npt.NDArray[np.int64]:
    """Return the positions of the ``k`` largest (``smallest``: least) values, ties: lowest."""
    if picked.size <= k:
        return np.arange(picked.size)
    if smallest:
        kth = np.partition(picked, k - 1)[k - 1]
        better = np.flatnonzero(picked < kth)
    else:
        kth = np.partition(picked, picked.size - k)[picked.size - k]
        better = np.flatnonzero(picked > kth)
    tied = np.flatnonzero(picked == kth)
    return np.concatenate((better, tied[: k - better.size]))


def sorted_unique(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Return the distinct values, ascending: ``np.unique`` without its cost on first use.

    ``np.unique`` asks ``np.ma.is_masked`` first, which imports ``numpy.ma`` (about 30-60 ms,
    once per process): a cold search paid it.
    """
    ordered = np.sort(values)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def fusion_weights(alpha: float) -> tuple[np.float32, np.float32]:
    """Return the (vector, keyword) weights of a hybrid search.

    The client sends alpha as a 32-bit float; the server keeps ``float64(alpha32)`` and
    ``1 - float64(alpha32)`` and narrows each back to float32 (``hybrid_fusion.go``).
    """
    alpha32 = np.float32(alpha)
    return alpha32, np.float32(1.0 - float(alpha32))


def fuse_arrays(
    sides: Sequence[tuple[float, npt.NDArray[np.int64], npt.NDArray[np.float32]]],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Fuse scored candidate sets like ``FusionRelativeScore`` (``hybrid_fusion.go``).

    ``sides`` are (weight, object keys, raw scores) in the server's order: the vector set
    first, the keyword set last. Each set is min-max normalised over its own candidates (all
    equal: the full weight), weighted and summed per object, all in float32. Returns the
    objects (sorted keys), their fused scores and their secondary sort values: the raw score
    in the last set that holds them.
    """
    present = [(w, k, v) for w, k, v in sides if k.size]
    if not present:
        empty = np.zeros(0, dtype=np.float32)
        return np.zeros(0, dtype=np.int64), empty, empty
    keys = sorted_unique(np.concatenate([k for _, k, _ in present]))
    fused = np.zeros(keys.size, dtype=np.float32)
    secondary = np.zeros(keys.size, dtype=np.float32)
    seen = np.zeros(keys.size, dtype=bool)
    for weight, side_keys, values in present:
        w = np.float32(weight)
        at = np.searchsorted(keys, side_keys)
        high, low = values.max(), values.min()
        # Element-wise float32 operations round exactly like Go's scalar float32 arithmetic.
        part = np.full(values.size, w) if high == low else w * ((values - low) / (high - low))
        fused[at] = np.where(seen[at], part + fused[at], part)
        seen[at] = True
        secondary[at] = values
    return keys, fused, secondary


def fuse_relative_score(
    sides: Sequence[tuple[float, Mapping[K, float]]],
) -> tuple[dict[K, float], dict[K, float]]:
    """``fuse_arrays`` for candidate sets given as {object: raw score}; returns dicts."""
    slot: dict[K, int] = {}
    for _, scores in sides:
        for key in scores:
            slot.setdefault(key, len(slot))
    arrays = [
        (
            weight,
            np.fromiter((slot[k] for k in scores), dtype=np.int64, count=len(scores)),
            np.fromiter(scores.values(), dtype=np.float32, count=len(scores)),
        )
        for weight, scores in sides
    ]
    at, fused, secondary = fuse_arrays(arrays)
    keys = list(slot)
    chosen = [keys[i] for i in at.tolist()]
    return (
        dict(zip(chosen, fused.tolist(), strict=True)),
        dict(zip(chosen, secondary.tolist(), strict=True)),
    )


def _near(a: float, b: float) -> bool:
    # Go: a_b := float64(x[j].Score - x[i].Score) with float32 operands; a_b*a_b < 1e-14.
    diff = float(np.float32(b) - np.float32(a))
    return diff * diff < NEAR_TIE_SQUARED


def hybrid_before(
    score: Sequence[float], secondary: Sequence[float], uuid: Sequence[str]
) -> Callable[[int, int], bool]:
    """Return the server's ``less`` for fused results (``FusionRelativeScore``, descending).

    Scores within 1e-7 are ties; ties are ordered by the secondary value (descending, again
    with a 1e-7 tolerance), then by UUID string, ascending (1.32.24 and later; 1.32.9 sorted
    the UUIDs descending).
    """

    def before(i: int, j: int) -> bool:
        if _near(score[i], score[j]):
            if _near(secondary[i], secondary[j]):
                return uuid[i] < uuid[j]
            return secondary[i] > secondary[j]
        return score[i] > score[j]

    return before


def order_fused(
    fused: npt.NDArray[np.float32],
    secondary: npt.NDArray[np.float32],
    uuids: Sequence[str],
    limit: int | None = None,
) -> list[int]:
    """Order fused results as the server does, deterministically; return the first ``limit``.

    Returns positions into the arrays. The server sorts with ``sort.Slice`` (unstable, over Go
    map order) using ``hybrid_before``. Pre-ordered by score and secondary descending, then
    UUID ascending, the results fall into runs whose neighbouring scores are within 1e-7; any two results of
    different runs are ordered by score. Each run is then merge-sorted (Python's stable sort)
    with the server's comparison. Whenever that comparison is a strict weak order (it is
    unless near ties chain), this is the server's unique sorted order; otherwise the server's
    order is unspecified and this is the convention both this store and the test oracle follow.
    """
    n = len(uuids)
    if n == 0:
        return []
    rank = np.empty(n, dtype=np.int64)
    rank[sorted(range(n), key=uuids.__getitem__)] = np.arange(n)
    pre: list[int] = np.lexsort((rank, -secondary, -fused)).tolist()
    ordered = fused[pre]
    gaps = (ordered[1:] - ordered[:-1]).astype(np.float64)
    near = gaps * gaps < NEAR_TIE_SQUARED
    end = n if limit is None else min(limit, n)
    if not near[:end].any():
        # No near tie within the first ``end`` or across the cut: the pre-order stands.
        return pre[:end]
    score = fused.tolist()
    second = secondary.tolist()
    before = hybrid_before(score, second, uuids)

    def compare(i: int, j: int) -> int:
        if before(i, j):
            return -1
        if before(j, i):
            return 1
        return 0

    out: list[int] = []
    start = 0
    while start < end:
        stop = start + 1
        while stop < n and near[stop - 1]:
            stop += 1
        run = pre[start:stop]
        out.extend(sorted(run, key=functools.cmp_to_key(compare)) if len(run) > 1 else run)
        start = stop
    return out[:end]


def order_hybrid(
    keys: Iterable[K],
    score: Mapping[K, float],
    secondary: Mapping[K, float],
    uuid: Mapping[K, str],
    limit: int | None = None,
) -> list[K]:
    """``order_fused`` for results given as mappings; returns the keys in order."""
    items = list(keys)
    positions = order_fused(
        np.fromiter((score[k] for k in items), dtype=np.float32, count=len(items)),
        np.fromiter((secondary[k] for k in items), dtype=np.float32, count=len(items)),
        [uuid[k] for k in items],
        limit,
    )
    return [items[i] for i in positions]


def go_lower(text: str) -> str:
    """Lower-case text like Go's ``strings.ToLower`` (simple, context-free mapping)."""
    if text.isascii():
        return text.lower()
    return text.translate(_GO_SIMPLE_LOWER).lower()


def text_sort_key(text: str) -> str:
    """Return the key Weaviate sorts text by (``sorter/basic_comparators.go`` stringComparator).

    The server treats ``strings.EqualFold`` matches as equal and otherwise compares
    ``strings.ToLower`` of both sides byte-wise (code point order). The lower-cased text is
    that key; see ``docs/storage.md`` for the rare letters where EqualFold goes further.
    """
    return go_lower(text)


def side_agreement(keyword: Mapping[K, float], vector: Mapping[K, float], depth: int) -> float:
    """Return the share of the keyword side's best ``depth`` that the vector side also ranks there.

    ``keyword`` and ``vector`` hold each side's raw scores (BM25, cosine) of the candidates a
    hybrid search returned. Each side's best ``depth`` are taken by score, ties broken by the
    key so the result never depends on the order the candidates came in. A keyword side of
    fewer than ``depth`` hits is compared whole (its share of those few); an empty side
    agrees with nothing (0.0).
    """
    if depth <= 0 or not keyword or not vector:
        return 0.0

    def best(scores: Mapping[K, float]) -> set[K]:
        ranked = sorted(scores.items(), key=lambda item: (-item[1], str(item[0])))
        return {key for key, _ in ranked[:depth]}

    return len(best(keyword) & best(vector)) / min(depth, len(keyword))


def refuse(
    keyword: Mapping[K, float],
    vector: Mapping[K, float],
    alpha: float,
    uuid: Mapping[K, str],
    limit: int | None = None,
) -> tuple[list[K], dict[K, float]]:
    """Fuse both sides' raw scores again at another ``alpha``, as the server would have.

    A hybrid search reports each hit's raw keyword and vector scores (``SearchHit``), so its
    candidates can be fused at a weight chosen after seeing them, on either backend alike:
    ``relativeScoreFusion`` over the candidates given (``fuse_relative_score``), ordered with
    the server's tie rules (``order_hybrid``). Returns the keys in order and their scores.
    """
    vector_weight, keyword_weight = fusion_weights(alpha)
    fused, secondary = fuse_relative_score(
        [(float(vector_weight), vector), (float(keyword_weight), keyword)]
    )
    order = order_hybrid(fused, fused, secondary, uuid, limit)
    return order, {key: fused[key] for key in order}

"""Weaviate v1.32.9's keyword and hybrid ranking rules, shared by both backends.

The embedded store computes BM25 and ``relativeScoreFusion`` itself; the Weaviate backend
fuses here only what the server cannot (a blank query) and sorts here only what the server
cannot page (deep listings). Both follow the server's source, cited per function
(``weaviate/weaviate`` at tag v1.32.9); ``docs/storage.md`` explains the rules and the
remaining differences.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

HYBRID_CANDIDATES = 100
"""``QUERY_HYBRID_MAXIMUM_RESULTS`` (default 100, ``usecases/config/environment.go``): each side
of a hybrid search takes ``max(limit, 100)`` candidates (``explorer_hybrid.go`` ``Hybrid``).
``docker-compose.yml`` pins the server to this value."""

QUERY_MAXIMUM_RESULTS = 10_000
"""``QUERY_MAXIMUM_RESULTS`` (default 10,000): the server refuses ``offset + limit`` above it."""

BM25_K1 = 1.2
BM25_B = 0.75
"""Weaviate's default BM25 parameters, which a collection created without an inverted-index
config gets (``usecases/schema/class.go`` ``setInvertedConfigDefaults``)."""

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


def per_property_limit(limit: int, properties: int) -> int:
    """Return the size of each property's top-k heap (``bm25_searcher_block.go`` wandBlock).

    With several searchable properties each is ranked on its own and keeps
    ``max(int(limit * 1.1), limit + 10)`` documents before the per-document sums are cut to
    ``limit``; with one property, ``limit``.
    """
    if properties <= 1:
        return limit
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
    picked = values[pool]
    if smallest:
        kth = np.partition(picked, k - 1)[k - 1]
        better = picked < kth
    else:
        kth = np.partition(picked, picked.size - k)[picked.size - k]
        better = picked > kth
    chosen = pool[better]
    tied = pool[picked == kth]
    return np.concatenate((chosen, tied[: k - chosen.size]))


def _f32(value: float) -> np.float32:
    return np.float32(value)


def fusion_weights(alpha: float) -> tuple[np.float32, np.float32]:
    """Return the (vector, keyword) weights of a hybrid search.

    The client sends alpha as a 32-bit float; the server keeps ``float64(alpha32)`` and
    ``1 - float64(alpha32)`` and narrows each back to float32 (``hybrid_fusion.go``).
    """
    alpha32 = _f32(alpha)
    return alpha32, _f32(1.0 - float(alpha32))


def fuse_relative_score(
    sides: Sequence[tuple[float, Mapping[K, float]]],
) -> tuple[dict[K, float], dict[K, float]]:
    """Fuse scored candidate sets like ``FusionRelativeScore`` (``hybrid_fusion.go``).

    ``sides`` are (weight, raw scores) in the server's order: the vector set first, the keyword
    set last. Each set is min-max normalised over its own candidates (all equal: the full
    weight), weighted and summed per object, all in float32. Returns the fused scores and each
    object's secondary sort value: the raw score in the last set that holds it.
    """
    fused: dict[K, np.float32] = {}
    secondary: dict[K, float] = {}
    for weight, scores in sides:
        if not scores:
            continue
        w = _f32(weight)
        values = {key: _f32(v) for key, v in scores.items()}
        high = max(values.values())
        low = min(values.values())
        span = high - low
        for key, value in values.items():
            part = w if high == low else w * ((value - low) / span)
            previous = fused.get(key)
            fused[key] = part if previous is None else part + previous
            secondary[key] = float(value)
    return {key: float(v) for key, v in fused.items()}, secondary


def _near(a: float, b: float) -> bool:
    # Go: a_b := float64(x[j].Score - x[i].Score) with float32 operands; a_b*a_b < 1e-14.
    diff = float(_f32(b) - _f32(a))
    return diff * diff < NEAR_TIE_SQUARED


def hybrid_before(
    score: Mapping[K, float], secondary: Mapping[K, float], uuid: Mapping[K, str]
) -> Callable[[K, K], bool]:
    """Return the server's ``less`` for fused results (``FusionRelativeScore``, descending).

    Scores within 1e-7 are ties; ties are ordered by the secondary value (descending, again
    with a 1e-7 tolerance), then by UUID string, descending.
    """

    def before(i: K, j: K) -> bool:
        if _near(score[i], score[j]):
            if _near(secondary[i], secondary[j]):
                return uuid[i] > uuid[j]
            return secondary[i] > secondary[j]
        return score[i] > score[j]

    return before


def order_hybrid(
    keys: Iterable[K],
    score: Mapping[K, float],
    secondary: Mapping[K, float],
    uuid: Mapping[K, str],
) -> list[K]:
    """Order fused results as the server does, deterministically.

    The server sorts with ``sort.Slice`` (unstable) over Go map order using ``hybrid_before``.
    Whenever that comparison is a strict weak order on the results, its sorted order is unique
    and this returns it. Chains of near ties (a ≈ b ≈ c, a ≉ c) can make it inconsistent; the
    server's order is then unspecified, and this returns a stable merge sort (Python's) of the
    results pre-ordered by (score, secondary, uuid), descending.
    """
    pre = sorted(keys, key=lambda k: uuid[k], reverse=True)
    pre.sort(key=lambda k: (-score[k], -secondary[k]))
    if not any(_near(score[a], score[b]) for a, b in zip(pre, pre[1:], strict=False)):
        # No near ties: every pair is decided by the score, already in order.
        return pre
    before = hybrid_before(score, secondary, uuid)

    def compare(i: K, j: K) -> int:
        if before(i, j):
            return -1
        if before(j, i):
            return 1
        return 0

    return sorted(pre, key=functools.cmp_to_key(compare))


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

"""A plain model of Weaviate v1.32.9's hybrid ranking, the oracle of the differential tests.

Written straight from the server's source (``weaviate/weaviate`` at tag v1.32.9); every
function names the file and function it follows. It is deliberately unoptimised and shares no
code with ``agentic_memory.store``: it scores every document of a shard term by term, as the server's
BlockMax-WAND search would if it had to look at all of them (WAND only skips documents that
cannot enter the top k, so the result is the same).

It models one shard (a tenant, or a shared collection on one node) whose inverted index is
flushed (see ``docs/storage.md`` for v1.32.9's memtable pruning bug, which this model and the
embedded store do not reproduce), a collection created without an inverted-index config
(BlockMax WAND, k1 1.2, b 0.75, ``en`` stopwords), relativeScoreFusion, no autocut, and the
default ``QUERY_HYBRID_MAXIMUM_RESULTS`` (100) and ``QUERY_MAXIMUM_RESULTS`` (10,000).

Where the server's behaviour is unspecified (equal cosine distances at the vector candidate
cut, the order of chains of near-equal fused scores) the model states the convention it uses.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

K1 = 1.2
B = 0.75
QUERY_HYBRID_MAXIMUM_RESULTS = 100
QUERY_MAXIMUM_RESULTS = 10_000

# adapters/repos/db/inverted/stopwords/presets.go, preset "en".
EN_STOPWORDS = {
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for",
    "if", "in", "into", "is", "it", "no", "not", "of", "on", "or", "such", "that",
    "the", "their", "then", "there", "these", "they", "this", "to", "was", "will",
    "with",
}  # fmt: skip


# -- tokenisation ------------------------------------------------------------------------------


def _is_letter_or_number(char: str) -> bool:
    # Go: unicode.IsLetter (category L*) || unicode.IsNumber (category N*).
    return unicodedata.category(char)[0] in "LN"


def _go_to_lower_rune(char: str) -> str:
    # Go: unicode.ToLower, the simple (one rune to one rune) mapping of UnicodeData.txt.
    # Python's one-character lower() is the same except where SpecialCasing gives several
    # characters, which is only U+0130 (LATIN CAPITAL LETTER I WITH DOT ABOVE -> i).
    if char == "\u0130":
        return "i"
    lowered = char.lower()
    return lowered if len(lowered) == 1 else char


def tokenize_word(text: str) -> list[str]:
    """``adapters/repos/db/helpers/tokenizer.go`` ``tokenizeWord``.

    ``strings.FieldsFunc`` on "not a letter and not a number", then ``strings.ToLower`` of
    each term, rune by rune.
    """
    terms: list[str] = []
    current: list[str] = []
    for char in text:
        if _is_letter_or_number(char):
            current.append(char)
        elif current:
            terms.append("".join(current))
            current = []
    if current:
        terms.append("".join(current))
    return ["".join(_go_to_lower_rune(c) for c in term) for term in terms]


def tokenize_and_count_duplicates(query: str) -> dict[str, int]:
    """``helpers/tokenizer.go`` ``TokenizeAndCountDuplicates``, then the stopword removal of
    ``inverted/bm25_searcher.go`` ``removeStopwordsFromQueryTerms`` (word tokenisation only).

    The server iterates a Go map (random order); the model keeps first-occurrence order, which
    only decides the order of float64 additions.
    """
    counts: dict[str, int] = {}
    for term in tokenize_word(query):
        counts[term] = counts.get(term, 0) + 1
    return {t: c for t, c in counts.items() if t not in EN_STOPWORDS}


def analyze_text(value: Any) -> dict[str, int]:
    """``inverted/analyzer.go`` ``TextArray``: the terms of every element and their counts."""
    return dict(_analyze(tuple(value) if isinstance(value, list) else (value,)))


@functools.lru_cache(maxsize=1 << 16)
def _analyze(elements: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    # Cached only because the model re-reads every document for every query.
    counts: dict[str, int] = {}
    for element in elements:
        for term in tokenize_word(element):
            counts[term] = counts.get(term, 0) + 1
    return tuple(counts.items())


# -- the shard ---------------------------------------------------------------------------------


@dataclass
class Doc:
    """One stored object; ``doc_id`` is the shard's internal docID."""

    uuid: str
    properties: dict[str, Any]
    vector: list[float]
    doc_id: int


@dataclass
class Shard:
    """The live objects of one shard, and the searchable properties of its class."""

    searchable: list[str]
    docs: dict[str, Doc] = field(default_factory=dict)
    counter: int = 0
    memtable: bool = False
    """Model v1.32.9's unflushed state: a memtable term's WAND upper bound is 0 after
    ``SetIdf`` (``lsmkv/bucket.go`` addDataToTerm leaves MaxImpactTf at 0; fixed upstream in
    2a4878d6), so once a property's heap holds k documents no further one is scored."""

    def put(self, uuid: str, properties: dict[str, Any], vector: list[float]) -> None:
        """``shard_write_put.go`` ``determineInsertStatus``: a new object, or an update whose
        vector changed, gets the next docID; other updates keep theirs."""
        previous = self.docs.get(uuid)
        if previous is not None and previous.vector == vector:
            doc_id = previous.doc_id
        else:
            doc_id = self.counter
            self.counter += 1
        self.docs[uuid] = Doc(uuid, dict(properties), list(vector), doc_id)

    def delete(self, uuid: str) -> None:
        self.docs.pop(uuid, None)

    def by_doc_id(self) -> list[Doc]:
        return sorted(self.docs.values(), key=lambda d: d.doc_id)


# -- filters -----------------------------------------------------------------------------------


def _instant(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _field_token(value: str) -> str:
    # helpers/tokenizer.go tokenizeField: strings.TrimFunc(in, unicode.IsSpace).
    return value.strip()


def matches(doc: Doc, where: list[tuple[str, str, Any, str]]) -> bool:
    """Evaluate AND-ed conditions ``(property, operator, value, type)`` on one object.

    ``inverted/searcher.go`` and the row readers: text is compared as the field token (the
    whole value, surrounding whitespace trimmed); ``NotEqual`` is every document minus the
    equal ones, so objects without the property match it; ``ContainsAny`` on an array matches
    when any element is among the values.
    """
    for prop, op, value, ptype in where:
        have = doc.properties.get(prop)
        if op == "ne":
            if have is not None and _compare(have, value, ptype) == 0:
                return False
            continue
        if have is None:
            return False
        if op == "contains":
            if not any(_field_token(v) == _field_token(value) for v in have):
                return False
        elif op == "in":
            if not any(_compare(have, v, ptype) == 0 for v in value):
                return False
        else:
            c = _compare(have, value, ptype)
            ok = {"eq": c == 0, "gt": c > 0, "gte": c >= 0, "lt": c < 0, "lte": c <= 0}[op]
            if not ok:
                return False
    return True


def _compare(have: Any, value: Any, ptype: str) -> int:
    if ptype == "text":
        a, b = _field_token(have), _field_token(value)
    elif ptype == "date":
        a, b = _instant(have), _instant(value)
    else:
        a, b = have, value
    return (a > b) - (a < b)


# -- BM25: BlockMax WAND ------------------------------------------------------------------------


def property_average_length(shard: Shard, prop: str) -> float:
    """``lsmkv/bucket.go`` ``GetAveragePropertyLength`` over a flushed index: the sum of the
    documents' property lengths (token counts, ``shard_write_inverted_lsm.go``) divided by the
    number of documents that have postings in the property."""
    lengths = [sum(analyze_text(d.properties[prop]).values()) for d in _having(shard, prop)]
    lengths = [n for n in lengths if n > 0]
    return sum(lengths) / len(lengths) if lengths else 0.0


def _having(shard: Shard, prop: str) -> list[Doc]:
    return [d for d in shard.by_doc_id() if d.properties.get(prop) is not None]


def doc_frequency(shard: Shard, prop: str, term: str) -> int:
    """``lsmkv/bucket.go`` ``CreateDiskTerm``: n counts every live posting of the term in the
    property, before any filter."""
    return sum(1 for d in _having(shard, prop) if term in analyze_text(d.properties[prop]))


def global_idf(shard: Shard, term: str, repeats: int) -> float:
    """``inverted/bm25_searcher_block.go`` ``wandBlock``: the per-property document frequencies
    that are not zero are averaged with an integer division; N is the shard's object count
    (``generateQueryTermsAndStats``)."""
    freqs = [doc_frequency(shard, p, term) for p in shard.searchable]
    nonzero = [n for n in freqs if n > 0]
    if not nonzero:
        return 0.0
    n = sum(nonzero) // len(nonzero)
    big_n = len(shard.docs)
    return math.log(1.0 + (big_n - n + 0.5) / (n + 0.5)) * repeats


def property_scores(
    shard: Shard, prop: str, terms: dict[str, int], idfs: dict[str, float], allowed: set[str]
) -> dict[str, np.float32]:
    """``lsmkv/segment_blockmax.go`` ``Score`` summed by ``lsmkv/search_segment.go``
    ``DoBlockMaxWand``: per matching document, Σ over the query terms of
    ``tf / (tf + k1 (1 - b + b len / avg)) · idf`` in float64, kept as float32 by the heap
    (``priorityqueue.InsertAndPop``)."""
    avg = property_average_length(shard, prop)
    out: dict[str, np.float32] = {}
    for doc in _having(shard, prop):
        if doc.uuid not in allowed:
            continue
        counts = analyze_text(doc.properties[prop])
        length = float(sum(counts.values()))
        score = 0.0
        hit = False
        for term in terms:
            freq = float(counts.get(term, 0))
            if freq == 0:
                continue
            hit = True
            tf = freq / (freq + K1 * ((1 - B) + B * (length / avg)))
            score += tf * idfs[term] * 1.0
        if hit:
            out[doc.uuid] = np.float32(score)
    return out


def top_k_by_score_then_doc_id(
    shard: Shard, scores: dict[str, np.float32], k: int
) -> dict[str, np.float32]:
    """``priorityqueue.NewMinWithId`` with ``ShouldEnqueue`` (strictly greater) over documents in
    docID order: the k best scores, ties kept by the lowest docIDs."""
    order = sorted(scores, key=lambda u: (-float(scores[u]), shard.docs[u].doc_id))
    return {u: scores[u] for u in order[:k]}


def bm25(shard: Shard, query: str, limit: int, allowed: set[str]) -> list[tuple[str, np.float32]]:
    """``inverted/bm25_searcher_block.go`` ``wandBlock`` and ``combineResults``, then
    ``index.go`` ``objectSearchByShard``'s sort (score desc, UUID desc)."""
    terms = tokenize_and_count_duplicates(query)
    if not terms or not shard.searchable:
        return []
    idfs = {t: global_idf(shard, t, c) for t, c in terms.items()}
    per_property = limit
    if len(shard.searchable) > 1:
        per_property = int(max(float(limit) * 1.1, float(limit + 10)))
    combined: dict[str, np.float32] = {}
    for prop in shard.searchable:  # query properties, in the order the client sends them
        scores = property_scores(shard, prop, terms, idfs, allowed)
        if shard.memtable:
            first = sorted(scores, key=lambda u: shard.docs[u].doc_id)[:per_property]
            kept = {u: scores[u] for u in first}
        else:
            kept = top_k_by_score_then_doc_id(shard, scores, per_property)
        for uuid, score in kept.items():
            combined[uuid] = score if uuid not in combined else np.float32(combined[uuid] + score)
    best = top_k_by_score_then_doc_id(shard, combined, limit)
    return sorted(best.items(), key=lambda kv: (-float(kv[1]), _desc(kv[0])))


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)


# -- vector search -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def _normalize(vector: tuple[float, ...]) -> tuple[float, ...]:
    # vector/hnsw/distancer Normalize: each float32 component divided by the float32 norm.
    values = np.asarray(vector, dtype=np.float32)
    norm = np.float32(math.sqrt(math.fsum(float(x) * float(x) for x in values)))
    return tuple(float(np.float32(x / norm)) for x in values)


def cosine_distance(a: list[float], b: list[float]) -> np.float32:
    """The ``cosine-dot`` distancer: ``1 - dot`` of the normalised float32 vectors.

    The dot product is taken exactly and rounded once; the server's SIMD float32 sum may differ
    in the last bits (``docs/storage.md`` measures what that changes).
    """
    dot = math.fsum(x * y for x, y in zip(_normalize(tuple(a)), _normalize(tuple(b)), strict=True))
    return np.float32(np.float32(1) - np.float32(dot))


def near_vector(
    shard: Shard, vector: list[float], limit: int, allowed: set[str]
) -> list[tuple[str, np.float32]]:
    """The k nearest objects by cosine distance. A flat or HNSW search; equal distances at the
    cut are not ordered by the server, the model keeps the lowest docIDs."""
    dists = {
        d.uuid: cosine_distance(vector, d.vector) for d in shard.by_doc_id() if d.uuid in allowed
    }
    order = sorted(dists, key=lambda u: (float(dists[u]), shard.docs[u].doc_id))[:limit]
    return [(u, dists[u]) for u in order]


# -- hybrid --------------------------------------------------------------------------------------


@dataclass
class Result:
    uuid: str
    score: np.float32
    secondary: np.float32
    keyword: np.float32 | None = None
    vector: np.float32 | None = None


def fusion_relative_score(
    weights: list[float], sets: list[list[tuple[str, np.float32]]]
) -> dict[str, Result]:
    """``usecases/traverser/hybrid/hybrid_fusion.go`` ``FusionRelativeScore``."""
    merged: dict[str, Result] = {}
    for i, result_set in enumerate(sets):
        if not result_set:
            continue
        maximum = max(v for _, v in result_set)
        minimum = min(v for _, v in result_set)
        weight = np.float32(weights[i])
        for uuid, value in result_set:
            score = weight
            if maximum != minimum:
                score = np.float32(score * np.float32((value - minimum) / (maximum - minimum)))
            previous = merged.get(uuid)
            if previous is not None:
                score = np.float32(score + previous.score)
            result = Result(uuid, score, value)
            if previous is not None:
                result.keyword, result.vector = previous.keyword, previous.vector
            merged[uuid] = result
    return merged


def _less(a: Result, b: Result) -> bool:
    """The ``sort.Slice`` comparison of ``FusionRelativeScore`` (descending)."""
    a_b = float(np.float32(b.score - a.score))
    if a_b * a_b < 1e-14:
        a_b2 = float(np.float32(b.secondary - a.secondary))
        if a_b2 * a_b2 < 1e-14:
            return a.uuid > b.uuid
        return bool(a.secondary > b.secondary)
    return float(a.score) > float(b.score)


def _near(a: np.float32, b: np.float32) -> bool:
    a_b = float(np.float32(b - a))
    return a_b * a_b < 1e-14


def sort_fused(results: list[Result]) -> list[Result]:
    """Sort with the server's comparison (``_less``).

    Go runs an unstable pdqsort over map order. When the comparison is a strict weak order the
    sorted order is unique, and this finds it: results pre-ordered by (score, secondary, UUID)
    descending split into runs of neighbours whose scores are within 1e-7; results of
    different runs compare by score alone, so only each run needs the full comparison. When
    near ties chain the server's order is unspecified; the model then merge-sorts each run
    (Python's stable sort) from the pre-order, a convention the embedded store shares.
    """
    pre = sorted(results, key=lambda r: r.uuid, reverse=True)
    pre.sort(key=lambda r: (-float(r.score), -float(r.secondary)))

    def compare(a: Result, b: Result) -> int:
        return -1 if _less(a, b) else (1 if _less(b, a) else 0)

    out: list[Result] = []
    run: list[Result] = []
    for result in pre:
        if run and not _near(run[-1].score, result.score):
            out.extend(sorted(run, key=functools.cmp_to_key(compare)))
            run = []
        run.append(result)
    out.extend(sorted(run, key=functools.cmp_to_key(compare)))
    return out


def hybrid(
    shard: Shard,
    query: str,
    vector: list[float],
    alpha: float,
    limit: int,
    where: list[tuple[str, str, Any, str]] | None = None,
) -> list[Result]:
    """``usecases/traverser/explorer_hybrid.go`` ``Hybrid`` with relativeScoreFusion.

    alpha travels as a float32 (``base_search.proto`` Hybrid.alpha); each side takes
    ``max(QUERY_HYBRID_MAXIMUM_RESULTS, limit)`` candidates after the filter; the vector set
    comes first, the keyword set last; the fused list is sorted, cut to ``limit`` (offset 0,
    no autocut).
    """
    allowed = {d.uuid for d in shard.docs.values() if matches(d, where or [])}
    alpha64 = float(np.float32(alpha))
    sets: list[list[tuple[str, np.float32]]] = []
    weights: list[float] = []
    vector_hits: dict[str, np.float32] = {}
    keyword_hits: dict[str, np.float32] = {}
    candidates = max(QUERY_HYBRID_MAXIMUM_RESULTS, limit)
    if alpha64 > 0:
        # denseSearch: SecondarySortValue = 1 - distance (float32).
        found = [
            (u, np.float32(np.float32(1) - d))
            for u, d in near_vector(shard, vector, candidates, allowed)
        ]
        vector_hits = dict(found)
        sets.append(found)
        weights.append(alpha64)
    if 1 - alpha64 > 0:
        # sparseSearch: limit max(offset + 100, min(offset + limit, QUERY_MAXIMUM_RESULTS)).
        keyword_limit = max(QUERY_HYBRID_MAXIMUM_RESULTS, min(limit, QUERY_MAXIMUM_RESULTS))
        found = bm25(shard, query, keyword_limit, allowed)
        keyword_hits = dict(found)
        sets.append(found)
        weights.append(1 - alpha64)
    merged = fusion_relative_score(weights, sets)
    for uuid, result in merged.items():
        result.keyword = keyword_hits.get(uuid)
        result.vector = vector_hits.get(uuid)
    return sort_fused(list(merged.values()))[:limit]

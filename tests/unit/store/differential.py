"""Generated corpora and queries for the differential tests against ``weaviate_reference``.

A corpus is the content of one partition (a user) of one of a few collection schemas with
one to five searchable properties, written in order, with some objects deleted and some
rewritten (properties only: an update that changes the vector gives the object a new docID on
the server, which the embedded store does not model, see ``docs/storage.md``). A churn corpus
(``churn_corpus``) is written in two phases with a flush after each (writes; deletes,
rewrites and a few new objects), as a shard that lives longer than a memtable sees them. Texts mix
plain and repeated words, stopwords, punctuation, ``_``, case variants and non-ASCII letters
(accents, dotted capital I, final sigma, CJK, combining marks, numerals), have unequal lengths
and sometimes lack a property. Vectors are dyadic (±1 on 1, 4 or 16 of 16 axes, scaled), so
cosines are exact in float32 on every implementation and many are equal: the tie rules are
exercised without float noise. Queries vary words, repeats, filters, alpha (0, 1, tiny, any)
and limit (some above the 100 candidates).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    MemoryStore,
    Property,
    SearchHit,
    Where,
    make_id,
)
from tests.unit.store import weaviate_reference as ref

DIMS = 16

WORDS = (
    "zebra lion tiger bear wolf otter heron crane apple pear plum fig kiwi lime grape melon "
    "berry cherry peach river stone cloud storm light night music paper glass water fire earth "
    "printer laser jet tea coffee garden window engine rocket planet moon sun star"
).split()
UNICODE_WORDS = [
    "café", "Café", "CAFÉ", "naïve", "crème", "İstanbul", "istanbul", "ISTANBUL", "ΟΔΟΣ",
    "οδος", "Σοφία", "東京", "東京タワー", "straße", "STRASSE", "ǅemal", "Ⅻ", "½", "x²",
    "١٢٣", "cafe\u0301", "Ωmega", "ǈ", "Kelvin\u212a",
]  # fmt: skip
STOPWORDS = ["the", "and", "of", "a", "is", "The", "AND", "with", "to"]
SEPARATORS = [" ", " ", " ", ", ", "-", "_", "! ", "\n", " 🍕 ", "...", "'"]
KINDS = ["red", "green", "blue", "Blue", "red green"]
BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(name: str, searchable: list[str]) -> CollectionSpec:
    text = [Property(p, "text", searchable=True, filterable=False) for p in searchable]
    if "tags" in searchable:
        text = [
            Property(
                p, "text[]" if p == "tags" else "text", searchable=True, filterable=p == "tags"
            )
            for p in searchable
        ]
    filters = [
        Property("kind", "text"),
        Property("rank", "int"),
        Property("at", "date"),
        Property("flag", "bool"),
    ]
    if "tags" not in searchable:
        filters.append(Property("tags", "text[]"))
    return CollectionSpec(name=name, per_user=True, properties=(*text, *filters))


SPECS = {
    1: ["body"],
    2: ["title", "body"],
    3: ["title", "body", "tags"],
    5: ["title", "body", "note", "summary", "tags"],
}


def specs(prefix: str) -> dict[int, CollectionSpec]:
    """The schemas of the generated corpora, by number of searchable properties."""
    return {n: _spec(f"{prefix}{n}", props) for n, props in SPECS.items()}


@dataclass
class Query:
    text: str
    vector: list[float]
    alpha: float
    limit: int
    where: list[Where] = field(default_factory=list)


@dataclass
class Corpus:
    """What to write to one partition, and the queries to run against it."""

    searchable: list[str]
    writes: list[list[MemoryObject]]
    deletes: list[str]
    rewrites: list[MemoryObject]
    queries: list[Query]


def _word(rng: random.Random, weights: list[float]) -> str:
    roll = rng.random()
    if roll < 0.12:
        return rng.choice(UNICODE_WORDS)
    if roll < 0.2:
        return rng.choice(STOPWORDS)
    word = rng.choices(WORDS, weights=weights)[0]
    return word.upper() if rng.random() < 0.05 else word


def _text(rng: random.Random, weights: list[float], longest: int) -> str:
    n = rng.choice([0, 1, 2, 3, rng.randint(1, longest), rng.randint(1, longest)])
    parts: list[str] = []
    for _ in range(n):
        word = _word(rng, weights)
        parts.append(word)
        if rng.random() < 0.1:
            parts.append(word)  # a repeat
        parts.append(rng.choice(SEPARATORS))
    return "".join(parts).strip() if rng.random() < 0.9 else "".join(parts)


def _vector(rng: random.Random) -> list[float]:
    k = rng.choice([1, 4, 4, 16])
    axes = rng.sample(range(DIMS), k)
    scale = rng.choice([1.0, 2.0, 0.5, 3.0])
    out = [0.0] * DIMS
    for a in axes:
        out[a] = scale * rng.choice([1.0, -1.0])
    return out


def _properties(
    rng: random.Random, searchable: list[str], weights: list[float], i: int
) -> dict[str, Any]:
    props: dict[str, Any] = {}
    longest = rng.choice([4, 12, 30])
    for name in searchable:
        if rng.random() < 0.2:
            continue  # missing property
        if name == "tags":
            props[name] = [_text(rng, weights, 3) for _ in range(rng.randint(0, 3))]
        else:
            props[name] = _text(rng, weights, longest)
    if rng.random() < 0.9:
        props["kind"] = rng.choice(KINDS)
    if rng.random() < 0.9:
        props["rank"] = rng.randint(-3, 12)
    if rng.random() < 0.9:
        props["at"] = (BASE_TIME + timedelta(hours=rng.randint(0, 200))).isoformat()
    if rng.random() < 0.8:
        props["flag"] = rng.random() < 0.5
    if "tags" not in searchable and rng.random() < 0.8:
        props["tags"] = rng.sample(KINDS, rng.randint(0, 2))
    return props


def _where(rng: random.Random) -> list[Where]:
    out: list[Where] = []
    for _ in range(rng.choice([1, 1, 2])):
        pick = rng.randrange(7)
        if pick == 0:
            out.append(Where("kind", "eq", rng.choice(KINDS)))
        elif pick == 1:
            out.append(Where("kind", "ne", rng.choice(KINDS)))
        elif pick == 2:
            out.append(Where("kind", "in", rng.sample(KINDS, 2)))
        elif pick == 3:
            out.append(
                Where("rank", rng.choice(["gt", "gte", "lt", "lte", "eq"]), rng.randint(-2, 10))
            )
        elif pick == 4:
            moment = (BASE_TIME + timedelta(hours=rng.randint(0, 200))).isoformat()
            out.append(Where("at", rng.choice(["gt", "lt"]), moment))
        elif pick == 5:
            out.append(Where("flag", "eq", rng.random() < 0.5))
        else:
            out.append(Where("tags", "contains", rng.choice(KINDS)))
    return out


def _query(rng: random.Random, weights: list[float], corpus_words: list[str]) -> Query:
    n = rng.choice([0, 1, 1, 2, 2, 3, 4, 6])
    words: list[str] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.5 and corpus_words:
            words.append(rng.choice(corpus_words))
        elif roll < 0.6:
            words.append("unknownword")
        else:
            words.append(_word(rng, weights))
        if rng.random() < 0.15:
            words.append(words[-1])  # a repeated query word
    text = rng.choice([" ", " ", ", ", "?"]).join(words)
    alpha = rng.choice(
        [0.0, 1.0, 0.5, rng.random(), rng.random(), rng.random(), 1e-9, 1e-46, 1 - 1e-9, 0.3]
    )
    limit = rng.choice([1, 2, 3, 5, 10, 10, 20, rng.randint(1, 40), 100, 101, 150])
    where = _where(rng) if rng.random() < 0.3 else []
    return Query(text, _vector(rng), alpha, limit, where)


def corpus(seed: int, queries: int, *, max_docs: int = 250) -> Corpus:
    """Generate one corpus with ``queries`` queries; ``max_docs`` bounds its size."""
    rng = random.Random(seed)
    searchable = SPECS[rng.choice(list(SPECS))]
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    rng.shuffle(weights)
    big = rng.random() < 0.12 and max_docs > 100
    size = rng.randint(101, max_docs) if big else rng.randint(1, min(60, max_docs))
    if big:
        # Few distinct words: most documents match, so the 100-candidate and per-property
        # (110) cuts and the ties at them decide the result.
        weights = [w if i < 8 else 0.0 for i, w in enumerate(weights)]
    objects: list[MemoryObject] = []
    for i in range(size):
        oid = make_id("diff", str(seed), str(i))
        if objects and rng.random() < 0.15:
            # A copy of an earlier object: equal BM25 scores and cosines, so ties at the cuts.
            twin = rng.choice(objects)
            objects.append(MemoryObject(oid, dict(twin.properties), list(twin.vector)))
            continue
        vector = _vector(rng) if rng.random() < 0.9 else [0.0] * (DIMS - 1) + [1.0]
        objects.append(MemoryObject(oid, _properties(rng, searchable, weights, i), vector))
    writes: list[list[MemoryObject]] = []
    start = 0
    while start < size:
        step = rng.randint(1, max(1, size // 2))
        writes.append(objects[start : start + step])
        start += step
    deletes = [o.id for o in objects if rng.random() < 0.08]
    live = [o for o in objects if o.id not in set(deletes)]
    rewrites = [
        MemoryObject(o.id, _properties(rng, searchable, weights, 0), o.vector)
        for o in live
        if rng.random() < 0.08
    ]
    corpus_words = [
        w
        for o in objects
        for name in searchable
        for w in ref.tokenize_word(" ".join(_as_list(o.properties.get(name))))
    ]
    return Corpus(
        searchable=searchable,
        writes=writes,
        deletes=deletes,
        rewrites=rewrites,
        queries=[_query(rng, weights, corpus_words) for _ in range(queries)],
    )


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def load(
    store: MemoryStore,
    spec: CollectionSpec,
    user: str,
    case: Corpus,
    *,
    one_at_a_time: bool = False,
) -> ref.Shard:
    """Write a corpus to the store and to a model shard, in the same order.

    ``one_at_a_time`` writes each object in its own batch: a server stores a batch's objects
    concurrently, so their docIDs (which decide what the 1.32 memtable WAND bound leaves
    unscored) follow the model's write order only when no two share a batch.
    """
    shard = ref.Shard(searchable=list(case.searchable))
    for batch in case.writes:
        _write(store, spec, user, batch, one_at_a_time)
        for obj in batch:
            shard.put(obj.id, _stored(spec, dict(obj.properties)), list(obj.vector))
    if case.deletes:
        store.delete(spec.name, case.deletes, user=user)
        for oid in case.deletes:
            shard.delete(oid)
    if case.rewrites:
        _write(store, spec, user, case.rewrites, one_at_a_time)
        for obj in case.rewrites:
            shard.put(obj.id, _stored(spec, dict(obj.properties)), list(obj.vector))
    return shard


def _write(
    store: MemoryStore,
    spec: CollectionSpec,
    user: str,
    objs: list[MemoryObject],
    one_at_a_time: bool,
) -> None:
    for batch in [[o] for o in objs] if one_at_a_time else [objs]:
        store.upsert(spec.name, batch, user=user).raise_for_failures()


def _stored(spec: CollectionSpec, props: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if v is not None}


def model_where(spec: CollectionSpec, where: list[Where]) -> list[tuple[str, str, Any, str]]:
    """Translate store conditions into the model's ``(property, op, value, type)``."""
    return [(w.prop, w.op, w.value, spec.prop(w.prop).type.removesuffix("[]")) for w in where]


Row = tuple[str, float, float | None, float | None]


def as_rows(hits: list[SearchHit]) -> list[Row]:
    return [(h.id, h.score, h.keyword_score, h.vector_score) for h in hits]


def model_rows(results: list[ref.Result]) -> list[Row]:
    return [
        (
            r.uuid,
            float(r.score),
            None if r.keyword is None else float(r.keyword),
            None if r.vector is None else float(r.vector),
        )
        for r in results
    ]


def compare(
    store: MemoryStore, spec: CollectionSpec, user: str, shard: ref.Shard, query: Query
) -> tuple[list[Row], list[Row]]:
    """Run one query on the store and on the model; return (store rows, model rows)."""
    hits = store.hybrid(
        spec.name,
        query=query.text,
        vector=query.vector,
        alpha=query.alpha,
        limit=query.limit,
        user=user,
        where=query.where,
    )
    expected = ref.hybrid(
        shard, query.text, query.vector, query.alpha, query.limit, model_where(spec, query.where)
    )
    return as_rows(hits), model_rows(expected)


# -- churn: two phases with a flush after each ---------------------------------------------------


@dataclass
class ChurnCorpus:
    """What to write to one partition in two phases, and the queries to run after each step."""

    searchable: list[str]
    first: list[list[MemoryObject]]
    """Phase 1: new objects, in batches."""
    deletes: list[str]
    rewrites: list[MemoryObject]
    """Phase 2: new properties, same vector (the server keeps the docID)."""
    moved: list[MemoryObject]
    """Phase 2: new properties and a new vector (the server gives a new docID)."""
    added: list[MemoryObject]
    """Phase 2: new objects."""
    queries: list[Query]


def _ambiguous_rewrite(searchable: list[str], old: dict[str, Any], new: dict[str, Any]) -> bool:
    # An unchanged property of several distinct terms is rewritten or not by Go map order
    # (weaviate_reference.Shard.put): the generator avoids it, so the server's state is known.
    for name in searchable:
        before = ref.analyze_text(old[name]) if old.get(name) is not None else {}
        after = ref.analyze_text(new[name]) if new.get(name) is not None else {}
        if before == after and len(before) > 1:
            return True
    return False


def churn_corpus(seed: int, queries: int, *, moved: bool = False) -> ChurnCorpus:
    """Generate a churn corpus: 120 to 260 objects, then 6-15 % deleted, 6-15 % rewritten and
    a few new ones; half of the corpora use few distinct words, so that more than 110 objects
    match and the per-segment heaps (D4) decide. ``moved`` also gives some rewrites a new
    vector."""
    rng = random.Random(seed)
    searchable = SPECS[rng.choice(list(SPECS))]
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    rng.shuffle(weights)
    if rng.random() < 0.5:
        weights = [w if i < 8 else 0.0 for i, w in enumerate(weights)]
    size = rng.randint(120, 260)
    objects: list[MemoryObject] = []
    for i in range(size):
        oid = make_id("churn", str(seed), str(i))
        if objects and rng.random() < 0.1:
            twin = rng.choice(objects)
            objects.append(MemoryObject(oid, dict(twin.properties), list(twin.vector)))
            continue
        objects.append(MemoryObject(oid, _properties(rng, searchable, weights, i), _vector(rng)))
    first: list[list[MemoryObject]] = []
    start = 0
    while start < size:
        step = rng.randint(20, 100)
        first.append(objects[start : start + step])
        start += step
    delete_rate, rewrite_rate = rng.uniform(0.06, 0.15), rng.uniform(0.06, 0.15)
    deletes = [o.id for o in objects if rng.random() < delete_rate]
    gone = set(deletes)
    rewrites: list[MemoryObject] = []
    moves: list[MemoryObject] = []
    for o in objects:
        if o.id in gone or rng.random() >= rewrite_rate:
            continue
        props = _properties(rng, searchable, weights, 0)
        for _ in range(20):
            if not _ambiguous_rewrite(searchable, o.properties, props):
                break
            props = _properties(rng, searchable, weights, 0)
        else:
            continue
        if moved and rng.random() < 0.3:
            moves.append(MemoryObject(o.id, props, _vector(rng)))
        else:
            rewrites.append(MemoryObject(o.id, props, list(o.vector)))
    added = [
        MemoryObject(
            make_id("churn", str(seed), "added", str(i)),
            _properties(rng, searchable, weights, i),
            _vector(rng),
        )
        for i in range(rng.randint(0, 12))
    ]
    corpus_words = [
        w
        for o in objects
        for name in searchable
        for w in ref.tokenize_word(" ".join(_as_list(o.properties.get(name))))
    ]
    return ChurnCorpus(
        searchable=searchable,
        first=first,
        deletes=deletes,
        rewrites=rewrites,
        moved=moves,
        added=added,
        queries=[_query(rng, weights, corpus_words) for _ in range(queries)],
    )


def churn_first(
    store: MemoryStore | None, spec: CollectionSpec, user: str, case: ChurnCorpus, shard: ref.Shard
) -> None:
    """Write phase 1 to the store (if any) and to the model shard, in the same order."""
    for batch in case.first:
        if store is not None:
            store.upsert(spec.name, batch, user=user).raise_for_failures()
        for obj in batch:
            shard.put(obj.id, _stored(spec, dict(obj.properties)), list(obj.vector))


def churn_second(
    store: MemoryStore | None, spec: CollectionSpec, user: str, case: ChurnCorpus, shard: ref.Shard
) -> None:
    """Write phase 2 (deletes, rewrites, moved objects, new objects) to the store and model."""
    if case.deletes:
        if store is not None:
            store.delete(spec.name, case.deletes, user=user)
        for oid in case.deletes:
            shard.delete(oid)
    for batch in (case.rewrites, case.moved, case.added):
        if not batch:
            continue
        if store is not None:
            store.upsert(spec.name, batch, user=user).raise_for_failures()
        for obj in batch:
            shard.put(obj.id, _stored(spec, dict(obj.properties)), list(obj.vector))


EXACT = {
    "keep_versions": False,
    "truncate_average": False,
    "heap_per_segment": False,
    "count_superseded": False,
    "memtable_pruning": False,
}
"""The model's switches for exact statistics: what the embedded store computes."""
SERVER = {key: True for key in EXACT}
"""The model's switches for the server's statistics (and its memtable WAND bound)."""


def model_rows_with(
    shard: ref.Shard,
    spec: CollectionSpec,
    query: Query,
    switches: dict[str, bool],
    report: list[str] | None = None,
) -> list[Row]:
    """Run one query on the model with the given statistics switches."""
    saved = {key: getattr(shard, key) for key in switches}
    for key, value in switches.items():
        setattr(shard, key, value)
    try:
        found = ref.hybrid(
            shard,
            query.text,
            query.vector,
            query.alpha,
            query.limit,
            model_where(spec, query.where),
            report,
        )
    finally:
        for key, value in saved.items():
            setattr(shard, key, value)
    return model_rows(found)


def store_rows(store: MemoryStore, spec: CollectionSpec, user: str, query: Query) -> list[Row]:
    """Run one query on the store."""
    return as_rows(
        store.hybrid(
            spec.name,
            query=query.text,
            vector=query.vector,
            alpha=query.alpha,
            limit=query.limit,
            user=user,
            where=query.where,
        )
    )


# -- comparisons with stated tolerances ---------------------------------------------------------

FLOAT32_ULPS = 4
"""D9: an arm64 build of the server fuses multiply-adds (Go may fuse ``x*y + z``, also across
statements), which moves a float64 intermediate by an ulp and, rarely, a float32 score by one.
Scores compared with a live server may differ by this many float32 ulps; results whose fused
scores are that close may trade places."""
TOP10_OVERLAP = 0.8
"""D6: where the model finds a block bound that may let BlockMax WAND skip a document, at
least this share of the model's top 10 must be in the server's top 10, and every common hit
must have the model's raw scores (within ``FLOAT32_ULPS``)."""


def _close(a: float | None, b: float | None, ulps: int) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a == b:
        return True
    scale = float(np.spacing(np.float32(max(abs(a), abs(b)))))
    return abs(a - b) <= ulps * scale


def tolerant_difference(got: list[Row], want: list[Row], *, ulps: int = FLOAT32_ULPS) -> str | None:
    """Why ``got`` differs from ``want`` beyond D9's tolerance, or ``None``.

    Every score must be within ``ulps`` float32 ulps; the order must be the model's except
    among results whose fused scores are that close (they may trade places, also across the
    cut).
    """
    if len(got) != len(want):
        return f"{len(got)} hits, the model has {len(want)}"
    want_by_id = {row[0]: row for row in want}
    position = {row[0]: i for i, row in enumerate(want)}
    for i, row in enumerate(got):
        expected = want_by_id.get(row[0])
        if expected is None:
            # Only a near tie at the cut may bring in another result.
            if not _close(row[1], want[-1][1], ulps):
                return f"hit {row[0]} at {i} is not in the model's list"
            continue
        for label, a, b in zip(("fused", "keyword", "vector"), row[1:], expected[1:], strict=True):
            if not _close(a, b, ulps):
                return f"{label} score of {row[0]}: {a!r} vs the model's {b!r}"
        if position[row[0]] != i and not _close(row[1], want[i][1], ulps):
            return f"{row[0]} is at {i}, the model has it at {position[row[0]]}"
    return None


def top10_difference(got: list[Row], want: list[Row], *, ulps: int = FLOAT32_ULPS) -> str | None:
    """The D6 tolerance: top-10 overlap of at least ``TOP10_OVERLAP`` and the model's raw
    scores for every common hit; ``None`` when met."""
    top_got = {row[0]: row for row in got[:10]}
    top_want = {row[0]: row for row in want[:10]}
    if top_want:
        overlap = len(top_got.keys() & top_want.keys()) / len(top_want)
        if overlap < TOP10_OVERLAP:
            return f"top-10 overlap {overlap:.2f} < {TOP10_OVERLAP}"
    want_by_id = {row[0]: row for row in want}
    for row in got:
        expected = want_by_id.get(row[0])
        if expected is None:
            continue
        for label, a, b in (("keyword", row[2], expected[2]), ("vector", row[3], expected[3])):
            if a is not None and b is not None and not _close(a, b, ulps):
                return f"{label} score of {row[0]}: {a!r} vs the model's {b!r}"
    return None


def top10_overlap(got: list[Row], want: list[Row]) -> float:
    """The share of the top 10 of ``want`` that is in the top 10 of ``got`` (1.0 when empty)."""
    top_want = {row[0] for row in want[:10]}
    if not top_want:
        return 1.0 if not got[:10] else 0.0
    return len({row[0] for row in got[:10]} & top_want) / len(top_want)

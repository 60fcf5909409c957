"""Generated corpora and queries for the differential tests against ``weaviate_reference``.

A corpus is the content of one partition (a user) of one of a few collection schemas with
one to five searchable properties, written in order, with some objects deleted and some
rewritten (properties only: an update that changes the vector gives the object a new docID on
the server, which the embedded store does not model, see ``docs/storage.md``). Texts mix
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

from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    MemoryStore,
    Property,
    SearchHit,
    Where,
    make_id,
)
from tests.storage import weaviate_reference as ref

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


def load(store: MemoryStore, spec: CollectionSpec, user: str, case: Corpus) -> ref.Shard:
    """Write a corpus to the store and to a model shard, in the same order."""
    shard = ref.Shard(searchable=list(case.searchable))
    for batch in case.writes:
        store.upsert(spec.name, batch, user=user).raise_for_failures()
        for obj in batch:
            shard.put(obj.id, _stored(spec, dict(obj.properties)), list(obj.vector))
    if case.deletes:
        store.delete(spec.name, case.deletes, user=user)
        for oid in case.deletes:
            shard.delete(oid)
    if case.rewrites:
        store.upsert(spec.name, case.rewrites, user=user).raise_for_failures()
        for obj in case.rewrites:
            shard.put(obj.id, _stored(spec, dict(obj.properties)), list(obj.vector))
    return shard


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

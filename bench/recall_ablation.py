"""What each lever of the message log's recall gives on LoCoMo: alone, together, and without.

Indexes the conversations once, exactly as ``bench/locomo_bench.py`` does (the project's
``MessageLog`` on an embedded store), then asks the store once per question for the
candidates the default recall fuses (``FUSION_POOL`` hits of an alpha-0.5 search, each with
its raw BM25 and cosine scores). Every variant is then ranked from those same candidates by
the product's own functions: ``adaptive_fusion`` or ``ranking.refuse`` at a fixed alpha,
then ``_rerank`` with the weights of the variant. So the variants differ only in the lever,
and the default row equals the benchmark's ``amem`` row. The keyword text's turn after
(each turn's keyword text holds the turn that follows it) is an index-time lever: a copy of
the log with the keyword text computed without it, the same vectors, is searched too. Fixed-alpha rows fuse the same 200
candidates instead of the store's own search at that alpha: they match the benchmark's
fixed-alpha rows to about ±0.005.

Run::

    python bench/recall_ablation.py ../shared/data/locomo-dev.json [--out table.md]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentic_memory.kinds.messages import MESSAGES, adaptive_fusion
from agentic_memory.kinds.messages import recall as log_module
from agentic_memory.kinds.recall_text import keyword_query, search_text
from agentic_memory.models.embeddings import EmbeddingSettings, get_embeddings
from agentic_memory.store import MemoryObject, MemoryStore, SearchHit
from agentic_memory.store.ranking import refuse, side_agreement
from bench.locomo_bench import (
    DEPTH,
    HEADLINE_CATEGORIES,
    Conversation,
    MeteredEmbeddings,
    ProjectIndex,
    QuestionScore,
    _user,
    load_locomo,
    score_ranking,
    summarise,
)

WITHOUT_FOLLOWING = "MessageLogWithoutFollowing"
"""A copy of the indexed log whose keyword texts leave out the turn after each turn: the
keyword text before that lever, searched with the same vectors."""


@dataclass(frozen=True)
class Asked:
    """One question with the store's candidates for it, from each keyword text."""

    category: int
    text: str
    evidence: tuple[str, ...]
    hits: dict[bool, list[SearchHit]]
    """The candidates with the turn after in the keyword text (``True``, the product's
    index) and without it (``False``)."""
    dia: dict[str, str]


@dataclass(frozen=True)
class Variant:
    """A way to rank: the fusion weight (``None``: per query) and the re-rank weights."""

    name: str
    alpha: float | None = None
    weights: tuple[tuple[str, float], ...] = ()
    depth: int | None = None
    cap: float = 1.0
    following: bool = False
    """Whether each turn's keyword text holds the turn after it (the default since then)."""


DEFAULT = "the default: both + the turn after in the keyword text"
"""The row that equals the benchmark's ``amem`` row."""

BEFORE = (("SPEAKER_WEIGHT", 0.0),)
VARIANTS = (
    Variant("before this round (alpha 0.4, no speaker term)", 0.4, BEFORE),
    Variant("the same, alpha 0 (its keyword side)", 0.0, BEFORE),
    Variant("+ per-query alpha (side agreement) alone", None, BEFORE),
    Variant("+ speaker term alone (alpha 0.4)", 0.4),
    Variant("both (the default before the turn after)", None),
    Variant("both, alpha 0 (keyword side)", 0.0),
    Variant("both, alpha 1 (vector side)", 1.0),
    Variant("agreement depth 5", None, depth=5),
    Variant("agreement depth 20", None, depth=20),
    Variant("alpha = 0.6 x agreement", None, cap=0.6),
    Variant("speaker weight 0.1", None, (("SPEAKER_WEIGHT", 0.1),)),
    Variant("speaker weight 0.5", None, (("SPEAKER_WEIGHT", 0.5),)),
    Variant("speaker term, fixed alpha 0.2", 0.2),
    Variant("speaker term, fixed alpha 0.3", 0.3),
    Variant("+ the turn after alone (alpha 0.4, no speaker term)", 0.4, BEFORE, following=True),
    Variant(DEFAULT, None, following=True),
    Variant("the default, alpha 0 (keyword side)", 0.0, following=True),
    Variant("the default without the speaker term", None, BEFORE, following=True),
)


def _copy_without_following(store: MemoryStore, users: Sequence[str]) -> None:
    """Copy the log, each turn's keyword text computed without the turn after it."""
    store.ensure_collection(dataclasses.replace(MESSAGES, name=WITHOUT_FOLLOWING))
    for user in users:
        stored = list(store.iterate(MESSAGES.name, user=user, include_vector=True))
        text = {(o.properties["thread_id"], o.properties["turn"]): o.properties for o in stored}
        copies = []
        for o in stored:
            p = o.properties
            before = text.get((p["thread_id"], p["turn"] - 1), {}).get("content", "")
            prepared = search_text(
                p["content"],
                speaker=p.get("speaker") or "",
                created_at=p["created_at"],
                previous=before,
            )
            assert o.vector is not None
            copies.append(MemoryObject(o.id, {**p, "search_text": prepared}, o.vector))
        store.upsert(WITHOUT_FOLLOWING, copies, user=user).raise_for_failures()


def ask_all(conversations: Sequence[Conversation], folder: Path) -> list[Asked]:
    """Index the conversations and fetch every question's candidates once."""
    embeddings = MeteredEmbeddings(get_embeddings(EmbeddingSettings.from_env()))
    index = ProjectIndex(embeddings, folder)
    asked: list[Asked] = []
    try:
        for conversation in conversations:
            index.index(conversation)
        store = index.log.store
        _copy_without_following(store, [_user(c) for c in conversations])
        for conversation in conversations:
            user = _user(conversation)
            for q in conversation.questions:
                vector = embeddings.embed_query(q.text)
                hits = {
                    following: store.hybrid(
                        MESSAGES.name if following else WITHOUT_FOLLOWING,
                        query=keyword_query(q.text),
                        vector=vector,
                        alpha=log_module.ADAPTIVE_PROBE_ALPHA,
                        limit=log_module.FUSION_POOL,
                        user=user,
                    )
                    for following in (True, False)
                }
                dia = {h.id: index._dia[h.id] for found in hits.values() for h in found}
                asked.append(Asked(q.category, q.text, q.evidence, hits, dia))
    finally:
        index.close()
    return asked


@contextlib.contextmanager
def _weights(pairs: Sequence[tuple[str, Any]]) -> Iterator[None]:
    old = {name: getattr(log_module, name) for name, _ in pairs}
    try:
        for name, value in pairs:
            setattr(log_module, name, value)
        yield
    finally:
        for name, value in old.items():
            setattr(log_module, name, value)


def _fused(hits: list[SearchHit], variant: Variant) -> list[SearchHit]:
    pool = log_module.RERANK_POOL
    if variant.alpha is None and variant.cap == 1.0:
        return adaptive_fusion(hits, pool)
    keyword = {h.id: h.keyword_score for h in hits if h.keyword_score is not None}
    vector = {h.id: h.vector_score for h in hits if h.vector_score is not None}
    if variant.alpha is None:
        alpha = variant.cap * side_agreement(keyword, vector, log_module.AGREEMENT_DEPTH)
    else:
        alpha = variant.alpha
    by_id = {h.id: h for h in hits}
    order, scores = refuse(keyword, vector, alpha, {i: i for i in by_id}, pool)
    return [SearchHit(i, by_id[i].properties, scores[i]) for i in order]


def evaluate(asked: Sequence[Asked], variant: Variant) -> dict[str, Any]:
    """Score one variant: overall (categories 1-4) and per category."""
    settings: list[tuple[str, Any]] = list(variant.weights)
    if variant.depth is not None:
        settings.append(("AGREEMENT_DEPTH", variant.depth))
    scores: list[QuestionScore] = []
    with _weights(settings):
        for q in asked:
            ranked = log_module._rerank(_fused(q.hits[variant.following], variant), DEPTH, q.text)
            recall, hit, rr = score_ranking([q.dia[m.id] for m in ranked], q.evidence)
            scores.append(QuestionScore(q.category, recall, hit, rr))
    overall = summarise([s for s in scores if s.category in HEADLINE_CATEGORIES])
    per = {c: summarise([s for s in scores if s.category == c]) for c in range(1, 6)}
    return {"overall": overall, "per": per}


def render(rows: Sequence[tuple[Variant, dict[str, Any]]]) -> str:
    """Return the ablation table in Markdown."""
    lines = [
        "| variant | R@10 | MRR | R@20 | 1 multi-hop | 2 temporal | 3 open-domain | "
        "4 single-hop | 5 adversarial |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, result in rows:
        o, per = result["overall"], result["per"]
        cats = " | ".join(f"{per[c].recall[10]:.3f}" for c in range(1, 6))
        lines.append(
            f"| {variant.name} | {o.recall[10]:.3f} | {o.mrr:.3f} | {o.recall[20]:.3f} | {cats} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, say: Callable[[str], None] = print) -> int:
    """Run the ablation from the command line; return the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("data", help="a LoCoMo-format JSON file")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    conversations = load_locomo(args.data)
    with tempfile.TemporaryDirectory(prefix="amem-ablation-") as tmp:
        asked = ask_all(conversations, Path(tmp))
    table = render([(v, evaluate(asked, v)) for v in VARIANTS])
    say(table)
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Recall: the hybrid hits of a query re-ranked with their thread, neighbours and own words."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from agentic_memory.kinds.messages.schema import LoggedMessage, RecalledMessage
from agentic_memory.kinds.recall_text import keywords
from agentic_memory.store import (
    SearchHit,
    StoredObject,
)
from agentic_memory.store.ranking import refuse, side_agreement
from agentic_memory.text_cache import TextCache

RERANK_POOL = 50
"""How many hybrid hits recall re-ranks (at least; more when ``k`` is larger)."""
FUSION_POOL = 200
"""How many hits the adaptive search (``alpha=None``) asks the store for: both sides'
candidates with their raw scores, fused again here at the query's own weight."""
AGREEMENT_DEPTH = 10
"""How deep the two sides are compared for the adaptive weight: the share of the keyword
side's best ten that the vector side also ranks in its best ten is the vector side's weight."""
ADAPTIVE_PROBE_ALPHA = 0.5
"""The weight of the adaptive search's store call: any weight strictly between 0 and 1 makes
the store search both sides and report each hit's raw scores; the hits are re-fused anyway."""
THREAD_WEIGHT = 0.25
"""Weight of the best hit of a turn's thread: a turn in a conversation that was about the
query outranks an equally good match in one that was not."""
NEIGHBOUR_WEIGHT = 0.25
"""Weight of the better of the turns just before and after it: the answer to a question
sits next to the turn that asked it."""
SPEAKER_WEIGHT = 0.25
"""Weight of a turn said by someone the query names ("What does Nate play?"): a question
about a person asks about what that person said. Equal to the other context weights."""
OWN_WORDS_WEIGHT = 1.0
"""Weight of the share of the query's keywords the turn itself says (its speaker and text,
not the turns before and after it that its keyword text also holds): a classic coordination factor,
counted like the hybrid relevance, so a turn that says the words outranks the reply that
only follows them."""
IMPORTANCE_WEIGHT = 0.2
"""An important turn closes this share of the gap between its score and a perfect one
(``score + IMPORTANCE_WEIGHT * (1 - score)``): it outranks an equally relevant turn, and
a turn somewhat more relevant, but not a clearly better match. When every candidate is
equally important the order does not change (the lift is monotonic)."""


def _keyword_set(text: str) -> frozenset[str]:
    return frozenset(keywords(text))


OWN_KEYWORDS: TextCache[frozenset[str]] = TextCache(
    _keyword_set, max_entries=1 << 12, max_chars=1 << 19
)
"""The keywords of recalled turns (speaker and content): the same turns come back query after
query. Bounded by the characters it holds, so a long-running process does not grow with
every new turn it recalls (a set of stems costs about 12 bytes per character of its text)."""


def _own_keywords(speaker: str, content: str) -> frozenset[str]:
    return OWN_KEYWORDS(f"{speaker} {content}")


def adaptive_fusion(hits: Sequence[SearchHit], limit: int) -> list[SearchHit]:
    """Fuse a hybrid search's hits again at the weight the two sides' agreement gives.

    The vector side's weight is :func:`~agentic_memory.store.ranking.side_agreement` of the
    hits' raw keyword and vector scores at :data:`AGREEMENT_DEPTH`; the hits are then fused
    with ``relativeScoreFusion`` at that weight and ordered with the server's tie rules
    (:func:`~agentic_memory.store.ranking.refuse`). When no turn matches the query's
    keywords the vectors alone rank (weight 1), and without vector hits the keywords do.
    Returns the best ``limit``, their ``score`` the new fused score.
    """
    by_id = {h.id: h for h in hits}
    keyword = {h.id: h.keyword_score for h in hits if h.keyword_score is not None}
    vector = {h.id: h.vector_score for h in hits if h.vector_score is not None}
    if not keyword:
        # Agreement 0 would weigh the vectors 0: every hit would score 0 and the order be lost.
        alpha = 1.0
    else:
        alpha = side_agreement(keyword, vector, AGREEMENT_DEPTH)
    order, fused = refuse(keyword, vector, alpha, {i: i for i in by_id}, limit)
    return [dataclasses.replace(by_id[i], score=fused[i]) for i in order]


@functools.lru_cache(maxsize=1 << 10)
def _speaker_keywords(speaker: str) -> frozenset[str]:
    return frozenset(keywords(speaker))


def _rerank(hits: Sequence[SearchHit], k: int, query: str) -> list[RecalledMessage]:
    """Re-rank hybrid hits with their context and the query keywords they say themselves."""
    wanted = set(keywords(query))
    best: dict[str, float] = {}
    at: dict[tuple[str, int], float] = {}
    for h in hits:
        thread = str(h.properties.get("thread_id", ""))
        turn = int(h.properties.get("turn", 0))
        best[thread] = max(best.get(thread, 0.0), h.score)
        at[(thread, turn)] = h.score
    scale = 1.0 + THREAD_WEIGHT + NEIGHBOUR_WEIGHT + SPEAKER_WEIGHT + OWN_WORDS_WEIGHT
    scored: list[tuple[float, SearchHit]] = []
    for h in hits:
        thread = str(h.properties.get("thread_id", ""))
        turn = int(h.properties.get("turn", 0))
        neighbour = max(at.get((thread, turn - 1), 0.0), at.get((thread, turn + 1), 0.0))
        speaker = str(h.properties.get("speaker") or "")
        # Named: every word of the speaker's name is among the query's keywords.
        name = _speaker_keywords(speaker)
        named = 1.0 if name and name <= wanted else 0.0
        own = 0.0
        if wanted:
            said = _own_keywords(speaker, str(h.properties.get("content", "")))
            own = len(wanted & said) / len(wanted)
        score = (
            h.score
            + THREAD_WEIGHT * best[thread]
            + NEIGHBOUR_WEIGHT * neighbour
            + SPEAKER_WEIGHT * named
            + OWN_WORDS_WEIGHT * own
        ) / scale
        score = min(1.0, max(0.0, score))
        if h.properties.get("important"):
            score += IMPORTANCE_WEIGHT * (1.0 - score)
        scored.append((score, h))
    scored.sort(key=lambda pair: (-pair[0], pair[1].id))
    return [
        RecalledMessage(**LoggedMessage._fields(StoredObject(h.id, h.properties)), score=score)
        for score, h in scored[:k]
    ]

"""Recall: the hybrid hits of a query re-ranked with their thread, neighbours and own words."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from agentic_memory.kinds.messages.schema import LoggedMessage, RecalledMessage
from agentic_memory.kinds.recall_text import keywords
from agentic_memory.store import (
    SearchHit,
    StoredObject,
)

RERANK_POOL = 50
"""How many hybrid hits recall re-ranks (at least; more when ``k`` is larger)."""
THREAD_WEIGHT = 0.25
"""Weight of the best hit of a turn's thread: a turn in a conversation that was about the
query outranks an equally good match in one that was not."""
NEIGHBOUR_WEIGHT = 0.25
"""Weight of the better of the turns just before and after it: the answer to a question
sits next to the turn that asked it."""
OWN_WORDS_WEIGHT = 1.0
"""Weight of the share of the query's keywords the turn itself says (its speaker and text,
not the turn before it that its keyword text also holds): a classic coordination factor,
counted like the hybrid relevance, so a turn that says the words outranks the reply that
only follows them."""
IMPORTANCE_WEIGHT = 0.2
"""An important turn closes this share of the gap between its score and a perfect one
(``score + IMPORTANCE_WEIGHT * (1 - score)``): it outranks an equally relevant turn, and
a turn somewhat more relevant, but not a clearly better match. When every candidate is
equally important the order does not change (the lift is monotonic)."""


@functools.lru_cache(maxsize=1 << 14)
def _own_keywords(speaker: str, content: str) -> frozenset[str]:
    # The same turns come back query after query: their keywords are worth keeping.
    return frozenset(keywords(f"{speaker} {content}"))


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
    scale = 1.0 + THREAD_WEIGHT + NEIGHBOUR_WEIGHT + OWN_WORDS_WEIGHT
    scored: list[tuple[float, SearchHit]] = []
    for h in hits:
        thread = str(h.properties.get("thread_id", ""))
        turn = int(h.properties.get("turn", 0))
        neighbour = max(at.get((thread, turn - 1), 0.0), at.get((thread, turn + 1), 0.0))
        own = 0.0
        if wanted:
            said = _own_keywords(
                str(h.properties.get("speaker") or ""), str(h.properties.get("content", ""))
            )
            own = len(wanted & said) / len(wanted)
        score = (
            h.score
            + THREAD_WEIGHT * best[thread]
            + NEIGHBOUR_WEIGHT * neighbour
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

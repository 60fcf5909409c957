"""Recall's per-query fusion weight and speaker term, on both backends alike."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

import agentic_memory.store.weaviate as wv
import agentic_memory.store.weaviate.store as wv_store
from agentic_memory.api import Memory
from agentic_memory.graph.context import Context
from agentic_memory.kinds.messages import (
    AGREEMENT_DEPTH,
    MESSAGES,
    MessageLog,
    adaptive_fusion,
)
from agentic_memory.kinds.messages import recall as messages_module
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError, SearchHit
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.ranking import refuse, side_agreement
from tests.unit.store import weaviate_reference as ref
from tests.unit.store.weaviate.conftest import scripted_client
from tests.unit.store.weaviate.server import FakeWeaviate

KEEP = RetentionPolicy(message_days=None, max_messages=None, purge_interval_minutes=None)


# -- the two pieces in ranking.py -------------------------------------------------------------


def test_side_agreement_is_the_share_of_the_keyword_top_the_vector_side_shares() -> None:
    keyword = {"a": 9.0, "b": 8.0, "c": 7.0, "d": 1.0}
    vector = {"a": 0.9, "d": 0.8, "e": 0.7, "b": 0.1}
    # Best 2 by keywords: a, b; by vectors: a, d.
    assert side_agreement(keyword, vector, 2) == 0.5
    assert side_agreement(keyword, vector, 4) == 0.75
    assert side_agreement(keyword, keyword, 3) == 1.0
    assert side_agreement({}, vector, 2) == 0.0
    assert side_agreement(keyword, {}, 2) == 0.0
    assert side_agreement(keyword, vector, 0) == 0.0
    # A keyword side shorter than the depth is compared whole: one of its two is shared.
    assert side_agreement({"a": 2.0, "c": 1.0}, vector, 10) == 0.5
    # Ties at the cut go by key, whatever order the candidates came in.
    tied = {"z": 1.0, "y": 1.0, "x": 1.0}
    assert side_agreement(tied, {"x": 1.0}, 1) == 1.0
    assert side_agreement(dict(reversed(list(tied.items()))), {"x": 1.0}, 1) == 1.0


def test_refusing_the_raw_scores_gives_the_servers_fusion_at_that_alpha() -> None:
    # Fewer objects than either side's 100 candidates: an alpha-0.5 search returns every
    # candidate with both raw scores, so fusing them again at any alpha must give exactly
    # what the server's own search at that alpha gives (the reference model of the server).
    rng = random.Random(7)
    words = "apple pear plum fig lime kiwi date grape melon berry".split()
    shard = ref.Shard(searchable=["text"])
    for i in range(40):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        shard.put(f"00000000-0000-0000-0000-{i:012d}", {"text": text}, ref_vector(rng))
    query, vector = "plum fig grape", ref_vector(rng)
    probe = ref.hybrid(shard, query, vector, 0.5, 200)
    keyword = {h.uuid: h.keyword for h in probe if h.keyword is not None}
    vec = {h.uuid: h.vector for h in probe if h.vector is not None}
    assert len(keyword) > 10 and len(vec) == 40
    for alpha in (0.1, 0.3, 0.5, 0.7, 0.9):
        order, scores = refuse(keyword, vec, alpha, {k: k for k in vec}, 20)
        server = ref.hybrid(shard, query, vector, alpha, 20)
        assert order == [h.uuid for h in server]
        assert [scores[k] for k in order] == pytest.approx([h.score for h in server], abs=1e-6)


def ref_vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1.0, 1.0) for _ in range(8)]


def _hit(i: int, keyword: float | None, vector: float | None) -> SearchHit:
    return SearchHit(
        id=f"id-{i:03d}", properties={}, score=0.0, keyword_score=keyword, vector_score=vector
    )


def test_adaptive_fusion_weighs_the_vectors_by_how_far_the_sides_agree() -> None:
    n = 2 * AGREEMENT_DEPTH
    # The sides rank the same ten first (in opposite orders): full agreement, so the
    # vectors alone order the hits.
    agree = [_hit(i, float(n - i), float(i) if i < 10 else -float(i)) for i in range(n)]
    order = [h.id for h in adaptive_fusion(agree, n)]
    assert order[:10] == [f"id-{i:03d}" for i in reversed(range(10))]
    # No shared top ten: the keywords alone order them, whatever the vectors say.
    disagree = [_hit(i, float(n - i), float(i)) for i in range(n)]
    order = [h.id for h in adaptive_fusion(disagree, n)]
    assert order == [f"id-{i:03d}" for i in range(n)]
    # The fused score is relativeScoreFusion's: the best hit of the deciding side scores 1.
    assert adaptive_fusion(disagree, 3)[0].score == pytest.approx(1.0)
    assert len(adaptive_fusion(disagree, 3)) == 3
    # A hit one side did not find counts only on the other; no hits, nothing.
    lone = [_hit(0, 5.0, None), _hit(1, None, 0.9), _hit(2, 1.0, 0.1)]
    assert {h.id for h in adaptive_fusion(lone, 10)} == {"id-000", "id-001", "id-002"}
    assert adaptive_fusion([], 10) == []
    # No keyword hit at all: the vectors alone rank, with their relativeScoreFusion scores
    # (agreement 0 would weigh them 0 and leave every score 0, the order lost).
    only_vectors = [_hit(i, None, 0.1 * i) for i in range(5)]
    fused = adaptive_fusion(only_vectors, 5)
    assert [h.id for h in fused] == [f"id-{i:03d}" for i in reversed(range(5))]
    assert [h.score for h in fused] == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


# -- the message log ------------------------------------------------------------------------


def test_the_speaker_a_question_names_outranks_one_who_only_mentions_them(
    mem: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Joanna's turn says every word of the question, Nate's name twice: BM25 prefers it to
    # Nate's longer turn. The question asks what Nate plays, and Nate's own turn says it.
    said = [
        ("Joanna", "Nate, do you play chess? Nate plays it well, I hear"),
        ("Nate", "I play chess every weekend at the club"),
        ("Joanna", "We play outside when it is sunny"),
        ("Joanna", "The kids play in the garden"),
        ("Joanna", "Music plays all day at the cafe"),
    ]
    for i, (name, text) in enumerate(said):
        role = "assistant" if name == "Nate" else "user"
        mem.remember("alice", f"t{i}", [{"role": role, "name": name, "content": text}])
    question = "What does Nate play, chess?"
    hits = mem.recall("alice", question, k=2, alpha=0.0)
    assert [h.speaker for h in hits] == ["Nate", "Joanna"]
    monkeypatch.setattr(messages_module, "SPEAKER_WEIGHT", 0.0)
    without = mem.recall("alice", question, k=2, alpha=0.0)
    assert [h.speaker for h in without] == ["Joanna", "Nate"]


def test_a_query_no_turn_has_the_words_of_is_ranked_by_its_vector(mem: Memory) -> None:
    said = [
        "My cat sleeps on the sofa all afternoon",
        "The quarterly budget meeting ran late",
        "We hiked up the mountain trail at dawn",
        "I baked sourdough bread this morning",
    ]
    for i, text in enumerate(said):
        mem.remember("alice", f"t{i}", [{"role": "user", "content": text}])
    query = "kitten napping"  # neither word (nor its stem) is in any turn
    adaptive = mem.recall("alice", query, k=4)
    vectors = mem.recall("alice", query, k=4, alpha=1.0)
    assert [h.content for h in adaptive] == [h.content for h in vectors]
    assert adaptive[0].score > adaptive[-1].score


def test_a_bad_alpha_is_refused_before_anything_is_searched(mem: Memory) -> None:
    mem.remember("alice", "t1", [{"role": "user", "content": "my bike is red", "id": "1"}])
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(InvalidInputError, match="alpha"):
            mem.recall("alice", "bike", alpha=bad)  # type: ignore[arg-type]
    assert [h.content for h in mem.recall("alice", "bike", alpha=None)] == ["my bike is red"]


def test_only_past_turns_alpha_may_be_left_to_the_query() -> None:
    assert Context().past_turns_alpha is None
    assert Context(past_turns_alpha=0.3).past_turns_alpha == 0.3
    with pytest.raises(ValueError, match="episodic_alpha"):
        Context(episodic_alpha=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="past_turns_alpha"):
        Context(past_turns_alpha=2.0)


def _log_on(backend: str, tmp_path: Path, embeddings: LocalEmbeddings) -> MessageLog:
    if backend == "embedded":
        store: EmbeddedStore | wv.WeaviateStore = EmbeddedStore(
            tmp_path / "store", dims=embeddings.dims
        )
    else:
        store = wv.WeaviateStore(
            scripted_client(FakeWeaviate()), dims=embeddings.dims, lock_dir=tmp_path / "locks"
        )
    return MessageLog(store, embeddings, retention=KEEP)


TALK = [
    ("Maria", "I volunteered at the homeless shelter yesterday and met a man named David"),
    ("John", "That is inspiring! How did the shelter residents react?"),
    ("Maria", "One of the residents, Cindy, wrote us a heartfelt letter of gratitude"),
    ("John", "I started a new job as a mentor at the local school this week"),
    ("Maria", "Congrats John! What do you teach the kids there?"),
    ("John", "Mostly maths and some basketball after class, they love the game"),
    ("Maria", "I adopted a puppy named Shadow, he loves long walks in the park"),
    ("John", "Shadow sounds lovely. My dog Max chases squirrels all day"),
]
QUESTIONS = [
    "What people has Maria met while volunteering?",
    "What does John teach at school?",
    "What are the names of their dogs?",
    "Who wrote a letter of gratitude?",
    "basketball",
]


async def _recalled(log: MessageLog) -> dict[str, list[tuple[str, int, float]]]:
    for session in range(3):
        for start in range(0, len(TALK), 2):
            await log.aremember(
                "alice",
                f"s{session}",
                [
                    {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "name": speaker,
                        "content": f"{text} (session {session})",
                        "id": str(start + i),
                    }
                    for i, (speaker, text) in enumerate(TALK[start : start + 2])
                ],
            )
    return {
        q: [(h.thread_id, h.turn, h.score) for h in await log.arecall("alice", q, k=8)]
        for q in QUESTIONS
    }


def test_adaptive_recall_ranks_alike_on_both_backends(
    tmp_path: Path, embeddings: LocalEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wv_store, "BATCH_SIZE", 1)
    embedded = _log_on("embedded", tmp_path, embeddings)
    weaviate = _log_on("weaviate", tmp_path, embeddings)
    try:
        here, there = asyncio.run(_recalled(embedded)), asyncio.run(_recalled(weaviate))
    finally:
        embedded.store.close()
        weaviate.store.close()
    for q in QUESTIONS:
        assert len(here[q]) == 8
        assert [(t, n) for t, n, _ in here[q]] == [(t, n) for t, n, _ in there[q]], q
        assert [s for *_, s in here[q]] == pytest.approx([s for *_, s in there[q]], abs=1e-6)
    # The per-query weight is in use: some question is not ranked as alpha 0 or 1 rank it.
    fixed = {
        alpha: {
            q: [(h.thread_id, h.turn) for h in embedded_again(tmp_path, embeddings, q, alpha)]
            for q in QUESTIONS
        }
        for alpha in (0.0, 1.0)
    }
    adaptive = {q: [(t, n) for t, n, _ in here[q]] for q in QUESTIONS}
    assert adaptive != fixed[0.0] and adaptive != fixed[1.0]


def embedded_again(
    tmp_path: Path, embeddings: LocalEmbeddings, query: str, alpha: float
) -> list[Any]:
    store = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    try:
        log = MessageLog(store, embeddings, retention=KEEP)
        return asyncio.run(log.arecall("alice", query, k=8, alpha=alpha))
    finally:
        store.close()


def test_both_backends_store_the_same_keyword_texts_with_the_turn_after(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    texts = {}
    for backend in ("embedded", "weaviate"):
        log = _log_on(backend, tmp_path / backend, embeddings)
        try:
            asyncio.run(_recalled(log))
            texts[backend] = {
                (o.properties["thread_id"], o.properties["turn"]): o.properties["search_text"]
                for o in log.store.iterate(MESSAGES.name, user="alice")
            }
        finally:
            log.store.close()
    assert texts["embedded"] == texts["weaviate"]
    # Every exchange is logged in its own call: the answer of one gets the next one's words.
    assert "puppi" in texts["weaviate"][("s0", 5)].split()
    assert "puppi" not in texts["weaviate"][("s0", 4)].split()

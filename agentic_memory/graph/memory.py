"""The graph's one door to long-term memory: the operations its nodes use, typed.

The memory is the run's LangGraph store (``compile_graph(store=...)``, or the one
``langgraph.json`` names); ``memory_of(runtime.store)`` wraps it in an :class:`AgentMemory`
and refuses any store that is not agentic_memory's. The nodes call its methods and take the
pure names they render with from here; they import no memory kind
(``tests/unit/graph/test_memory_seam.py``). A method that follows a run's settings takes the
run's :class:`~agentic_memory.graph.context.Context`, so no kind's signature is written twice.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from agentic_memory.api import Memory
from agentic_memory.graph.context import Context
from agentic_memory.kinds.episodes import Reflection, render_episode
from agentic_memory.kinds.episodes.memory import RecalledEpisode
from agentic_memory.kinds.facts import (
    ExtractedFact,
    Fact,
    mentions_secret,
    render_constraints,
    render_facts,
)
from agentic_memory.kinds.facts.extraction import extract_facts, usable_facts
from agentic_memory.kinds.facts.self_statements import looks_like_self_statement
from agentic_memory.kinds.facts.store import FactChange
from agentic_memory.kinds.knowledge import KnowledgeHit, citation_label, default_relevance_floor
from agentic_memory.kinds.messages import MAX_MESSAGE_CHARS, RecalledMessage
from agentic_memory.kinds.rules import render_rules, rules_scope
from agentic_memory.kinds.rules.learning import RulesLearned, alearn
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import MemoryStore

__all__ = [
    "MAX_MESSAGE_CHARS",
    "AgentMemory",
    "MemoryNotConfiguredError",
    "Reflection",
    "RulesLearned",
    "citation_label",
    "extract_facts",
    "looks_like_self_statement",
    "memory_of",
    "mentions_secret",
    "render_constraints",
    "render_episode",
    "render_facts",
    "render_rules",
]

logger = logging.getLogger(__name__)


class MemoryNotConfiguredError(RuntimeError):
    """The run's store is not agentic_memory's: the graph has no memory to work with."""


def memory_of(store: Any) -> AgentMemory:
    """Return the memory behind a run's store.

    Raises:
        MemoryNotConfiguredError: the store is missing or is not agentic_memory's.
    """
    if isinstance(store, AgenticStore):
        return AgentMemory(store.memory)
    kind = "no store" if store is None else f"a {type(store).__name__}"
    raise MemoryNotConfiguredError(
        f"the agent's memory needs agentic_memory's store, but the run has {kind}: compile "
        "with agentic_memory.graph.graph.compile_graph(store=...) or builder.compile(store=AgenticStore(...)); "
        'under langgraph dev, langgraph.json names it ("store": {"path": "agentic_memory.graph.store.store"})'
    )


class AgentMemory:
    """What the agent's nodes do with long-term memory, over one :class:`Memory`."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory

    # -- threads and the message log --------------------------------------------------------

    async def thread_owner(self, user: str, thread: str) -> str | None:
        """Return the user whose turns a thread's log holds (None: nobody's yet)."""
        return await self._memory.messages.athread_owner(user, thread)

    async def take_back_turns(self, user: str, thread: str, keys: Sequence[str], since: str) -> int:
        """Forget the turns a failed run logged (its messages' keys, logged since it began)."""
        return await self._memory.messages.aforget_logged_since(user, thread, list(keys), since)

    async def log_turn(
        self, ctx: Context, user: str, thread: str, turn: Sequence[BaseMessage | dict[str, Any]]
    ) -> list[str]:
        """Log a turn under the run's retention; a turn the memory model flagged is kept for good."""
        memory = self._memory
        return await memory.messages.aremember(
            user, thread, list(turn), marked_by="model", retention=ctx.retention(memory.retention)
        )

    async def recall_turns(
        self, ctx: Context, user: str, query: str, thread: str
    ) -> list[RecalledMessage]:
        """Recall the user's turns of other threads (``past_turns_k``, ``past_turns_alpha``)."""
        return await self._memory.messages.arecall(
            user, query, k=ctx.past_turns_k, alpha=ctx.past_turns_alpha, exclude_thread=thread
        )

    # -- episodes ---------------------------------------------------------------------------

    async def recall_episodes(self, ctx: Context, user: str, query: str) -> list[RecalledEpisode]:
        """Recall the user's past episodes (``episodic_k``, ``episodic_alpha``, recency)."""
        return await self._memory.episodes.arecall(
            user,
            query,
            k=ctx.episodic_k,
            alpha=ctx.episodic_alpha,
            half_life_days=ctx.recency_half_life_days,
        )

    async def store_episode(
        self, user: str, thread: str, reflection: Reflection, transcript: str, conversation: int
    ) -> str:
        """Store a conversation's episode; the same conversation stored again replaces it."""
        return await self._memory.episodes.astore(
            user, thread, reflection, transcript, conversation=conversation
        )

    # -- knowledge --------------------------------------------------------------------------

    async def search_knowledge(
        self, ctx: Context, user: str, query: str
    ) -> list[tuple[str, bool, KnowledgeHit]]:
        """Search each of the run's knowledge bases, shared and the user's own, in parallel.

        Returns:
            ``(kb, own, hit)`` for every hit, unsorted.
        """
        memory = self._memory
        searches = [(kb, owner) for kb in ctx.knowledge_bases for owner in (None, user)]
        floor = ctx.semantic_min_similarity
        if floor is None:
            floor = default_relevance_floor(memory.embeddings)
        found = await asyncio.gather(
            *(
                memory.asearch_knowledge(
                    kb,
                    query,
                    k=ctx.semantic_k,
                    alpha=ctx.semantic_alpha,
                    owner=owner,
                    min_similarity=floor,
                )
                for kb, owner in searches
            )
        )
        return [
            (kb, owner is not None, hit)
            for (kb, owner), hits in zip(searches, found, strict=True)
            for hit in hits
        ]

    def for_ingestion(self) -> tuple[MemoryStore, Embeddings]:
        """Return the store and embeddings the ingestion pipeline (knowledge's writer) takes."""
        return self._memory.store, self._memory.embeddings

    # -- facts ------------------------------------------------------------------------------

    async def current_facts(self, user: str) -> list[Fact]:
        """Return the user's facts in force."""
        return await self._memory.facts.acurrent(user)

    async def remember_facts(
        self, user: str, facts: Sequence[ExtractedFact], thread: str
    ) -> list[FactChange]:
        """Store what a message stated; a bad fact is logged and skipped, never fails the turn."""
        usable = usable_facts(facts)
        if not usable:
            return []
        return await self._memory.facts.aremember(user, usable, source_thread=thread)

    async def rank_facts(self, query: str, facts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Order facts by their similarity to the message, most similar first (embeddings)."""
        if len(facts) < 2 or not query.strip():
            return list(facts)
        texts = [query, *(f"{f['subject']}: {f['value']}" for f in facts)]
        try:
            vectors = await self._memory.embeddings.aembed_documents(texts)
        except Exception as exc:
            logger.warning("facts not ranked for the compact prompt: %s", exc)
            return list(facts)
        head = vectors[0]

        def similarity(vector: Sequence[float]) -> float:
            dot = sum(a * b for a, b in zip(head, vector, strict=False))
            norm = math.sqrt(sum(a * a for a in vector)) or 1.0
            return float(dot / norm)

        order = sorted(range(len(facts)), key=lambda i: -similarity(vectors[i + 1]))
        return [facts[i] for i in order]

    # -- rules ------------------------------------------------------------------------------

    @staticmethod
    def rules_scope(ctx: Context, user: str) -> str:
        """Return the scope of the rules a run follows: the user's, or the shared ones."""
        return rules_scope(user, shared=ctx.rules_scope == "global")

    async def rules_in_force(self, scope: str) -> dict[str, Any]:
        """Return the rules in force in a scope, as the state holds them."""
        latest = await self._memory.rules.alatest(scope)
        return {
            "rules": [r.to_dict() for r in latest.rules],
            "rules_version": latest.version,
        }

    async def learn_rules(
        self,
        model: BaseChatModel,
        *,
        scope: str,
        user: str,
        lessons: Sequence[dict[str, Any]],
        personal: Sequence[str],
        openings: Sequence[str],
    ) -> RulesLearned:
        """Rewrite the scope's rules from the lessons (:func:`agentic_memory.kinds.rules.learning.alearn`)."""
        return await alearn(
            self._memory.rules,
            self._memory.shared_rules,
            model,
            scope=scope,
            user=user,
            lessons=lessons,
            personal=personal,
            openings=openings,
        )

"""One whole conversation through the graph with the real offline model (SmolLM2-135M).

Its answers are weak, but every structured output (facts, the reflection, the rules) must
validate, so the memories get written.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.kinds.episodes import Reflection
from agentic_memory.kinds.rules import RuleSet
from agentic_memory.models.calls import summarize_calls
from agentic_memory.models.chat import resolve_chat_model
from tests.unit.models.conftest import local_model_file, local_server, requires_local

pytestmark = [pytest.mark.integration, requires_local]

__all__ = ["local_model_file", "local_server"]  # fixtures, imported for this module


async def test_a_conversation_with_the_local_model(local_server, store, embeddings) -> None:
    # Building the model reads CA certificates and prompt files: off the guarded loop, as
    # the graph itself resolves its models (graph/resources.py).
    model = await asyncio.to_thread(resolve_chat_model, "local", max_tokens=128)
    app = await asyncio.to_thread(
        compile_graph,
        checkpointer=InMemorySaver(),
        store=store,
        embeddings=embeddings,
        chat_model=model,
    )
    config = {"configurable": {"thread_id": "t1"}}
    context = {"user_id": "alice"}
    first = await app.ainvoke(
        {"messages": [HumanMessage("Hi, my name is Alice and I am vegetarian.")]},
        config,
        context=context,
    )
    assert isinstance(first["messages"][-1].content, str)
    assert [c["purpose"] for c in first["model_calls"]] == ["facts", "answer"]
    assert all(c["model"] == "local:smollm2-135m" for c in first["model_calls"])
    end = await app.ainvoke(
        {"messages": [HumanMessage("Thanks, bye!")], "end_conversation": True},
        config,
        context=context,
    )
    assert end["conversation_ended"] is True
    assert end["reflection"] is not None and 0 <= end["reflection"]["importance"] <= 1
    memory = app.store.memory
    episodes = await memory.episodes.alist("alice")
    assert [e.id for e in episodes] == [end["reflection"]["id"]]
    # The bundled model writes no lesson (its lessons were invented when measured): the
    # episode holds what the user said, and no rules are learned from it.
    assert end["reflection"]["fallback"] == "a bundled model writes no lessons"
    assert "Alice" in episodes[0].conversation_summary
    assert episodes[0].what_to_avoid.startswith("No lesson recorded")
    assert all(c["input_tokens"] > 0 for c in end["model_calls"])
    # The statement of turn 1 was remembered.
    current = {(f.subject, f.value) for f in await memory.facts.acurrent("alice")}
    assert {("name", "Alice"), ("diet", "vegetarian")} <= current

    # Every structured memory written validates against its schema.
    stored = episodes[0]
    Reflection.model_validate(
        {
            "context_tags": list(stored.context_tags),
            "conversation_summary": stored.conversation_summary,
            "what_worked": stored.what_worked,
            "what_to_avoid": stored.what_to_avoid,
            "importance": stored.importance,
        }
    )
    for fact in await memory.facts.acurrent("alice"):
        assert fact.subject.strip() and fact.value.strip()
    if end["rules_version_created"] is not None:
        latest = await memory.rules.alatest("alice")
        assert latest.version == end["rules_version_created"]
        RuleSet.model_validate({"rules": [dataclasses.asdict(r) for r in latest.rules]})
        assert latest.source_episodes == (stored.id,)

    # The cost records add up: a statement's turn is facts + answer ("Thanks, bye!" states
    # nothing: the small model is not asked for facts), and the end asks for no reflection.
    assert [c["purpose"] for c in end["model_calls"]] == ["answer"]
    for turn in (first, end):
        calls = turn["model_calls"]
        total = summarize_calls(calls)
        assert total["calls"] == len(calls)
        assert total["input_tokens"] == sum(c["input_tokens"] for c in calls)
        assert total["output_tokens"] == sum(c["output_tokens"] for c in calls)
        assert total["seconds"] == pytest.approx(sum(c["seconds"] for c in calls))
        assert not total["estimated"], "the local server reports its own token usage"
        assert all(c["output_tokens"] > 0 and c["seconds"] > 0 for c in calls)

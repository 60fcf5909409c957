"""One whole conversation through the graph with the real offline model (Gemma 3 270M).

It is a base model: its answers are weak, but every structured output (facts, the
reflection, the rules) must validate, so the memories get written.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from graph.graph import compile_graph
from graph.resources import get_resources
from llm.chat import resolve_chat_model
from tests.llm.conftest import local_model_file, local_server, requires_local

pytestmark = [pytest.mark.integration, requires_local]

__all__ = ["local_model_file", "local_server"]  # fixtures, imported for this module


async def test_a_conversation_with_the_local_model(local_server, store, embeddings) -> None:
    model = resolve_chat_model("local", max_tokens=128)
    app = compile_graph(
        checkpointer=InMemorySaver(), store=store, embeddings=embeddings, chat_model=model
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
    assert all(c["model"] == "local:gemma3-270m" for c in first["model_calls"])
    end = await app.ainvoke(
        {"messages": [HumanMessage("Thanks, bye!")], "end_conversation": True},
        config,
        context=context,
    )
    assert end["conversation_ended"] is True
    assert end["reflection"] is not None and 0 <= end["reflection"]["importance"] <= 1
    episodes = await get_resources(app.config).episodes.alist("alice")
    assert [e.id for e in episodes] == [end["reflection"]["id"]]
    rules = [c for c in end["model_calls"] if c["purpose"] == "rules"]
    assert rules and all(c["input_tokens"] > 0 for c in end["model_calls"])

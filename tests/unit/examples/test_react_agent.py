"""A prebuilt ReAct agent reads and writes agentic memory through ``AgenticStore``.

The model is scripted (tool calls as a real model makes them); the store, the tools and the
agent are real. The facts searched were written by the memory kinds, as the memory agent
writes them, so both agents share one memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from examples.react_agent_with_memory import build_agent
from tests.unit.models.conftest import MessageScriptModel


def call(name: str, args: dict[str, Any], id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": id, "type": "tool_call"}])


@pytest.fixture
def agentic(tmp_path: Path) -> Any:
    embeddings = LocalEmbeddings()
    with EmbeddedStore(tmp_path / "store", dims=embeddings.dims) as store:
        yield AgenticStore(store, embeddings)


async def test_a_react_agent_saves_and_searches_the_users_memory(agentic: AgenticStore) -> None:
    # What the memory agent learned about alice earlier, through its fact kind.
    await agentic.facts.aremember("alice", [{"subject": "drink", "value": "green tea"}])
    await agentic.facts.aremember("bob", [{"subject": "drink", "value": "black coffee"}])
    model = MessageScriptModel(
        replies=[
            call("save_memory", {"content": "Alice is training for a marathon in May"}, "c1"),
            AIMessage("Noted: marathon in May."),
            call("search_memory", {"query": "tea marathon"}, "c2"),
            AIMessage("You like green tea and you run a marathon in May."),
        ]
    )
    agent = build_agent(model, agentic)
    config = {"configurable": {"user_id": "alice"}}
    await agent.ainvoke(
        {"messages": [{"role": "user", "content": "I'm training for a marathon in May."}]}, config
    )
    saved = await agentic.asearch(("memories", "alice"))
    assert [item.value["content"] for item in saved] == ["Alice is training for a marathon in May"]

    out = await agent.ainvoke(
        {"messages": [{"role": "user", "content": "What do you know about me?"}]}, config
    )
    found = [m for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert "marathon in May" in found.content and "green tea" in found.content
    assert "coffee" not in found.content  # bob's fact is in another namespace
    assert await agentic.asearch(("memories", "bob")) == []


async def test_the_tools_refuse_a_run_without_a_user(agentic: AgenticStore) -> None:
    model = MessageScriptModel(
        replies=[call("save_memory", {"content": "x"}, "c1"), AIMessage("done")]
    )
    with pytest.raises(ValueError, match="need the run's user"):
        await build_agent(model, agentic).ainvoke({"messages": [{"role": "user", "content": "hi"}]})
    assert await agentic.alist_namespaces() == []


async def test_a_plain_state_graph_reads_the_agents_facts(agentic: AgenticStore) -> None:
    await agentic.facts.aremember("alice", [{"subject": "diet", "value": "vegetarian"}])

    class S(TypedDict):
        query: str
        found: list[str]

    async def look(state: S, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.store is not None
        hits = await runtime.store.asearch(("facts", "alice"), query=state["query"])
        return {"found": [f"{h.key}={h.value['value']}" for h in hits]}

    builder = StateGraph(S)
    builder.add_node(look)
    builder.add_edge(START, "look")
    out = await builder.compile(store=agentic).ainvoke({"query": "what does she eat?", "found": []})
    assert out["found"] == ["diet=vegetarian"]

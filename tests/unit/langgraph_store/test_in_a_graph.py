"""A plain LangGraph graph compiled with ``store=AgenticStore`` reads and writes the memory.

Nodes reach the store as ``runtime.store`` (sync and async nodes alike), the way any
LangGraph code does; what one node writes, the kinds and the next run see.
"""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from agentic_memory.langgraph_store import AgenticStore


class State(TypedDict, total=False):
    user: str
    question: str
    found: list[str]


def remember(state: State, runtime: Runtime[None]) -> State:
    assert runtime.store is not None
    user = state["user"]
    runtime.store.put(("facts", user), "diet", {"value": "vegetarian", "category": "preference"})
    runtime.store.put(("memories", user), "q", {"text": state["question"]})
    return {}


async def recall(state: State, runtime: Runtime[None]) -> State:
    assert runtime.store is not None
    hits = await runtime.store.asearch(("facts", state["user"]), query=state["question"])
    notes = await runtime.store.asearch(("memories", state["user"]), query=state["question"])
    return {"found": [h.value["value"] for h in hits] + [n.value["text"] for n in notes]}


async def test_a_graph_uses_the_store_through_its_runtime(amem: AgenticStore) -> None:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    graph = builder.compile(store=amem)

    out = await graph.ainvoke({"user": "alice", "question": "what food does she eat?"})
    assert out["found"] == ["vegetarian", "what food does she eat?"]
    assert [f.value for f in await amem.facts.acurrent("alice")] == ["vegetarian"]
    assert await amem.asearch(("facts", "bob")) == []

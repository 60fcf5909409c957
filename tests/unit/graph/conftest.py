"""Fixtures of the graph tests: a real embedded store in a tmp dir, WordLlama, fake models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableLambda
from langgraph.runtime import Runtime

from agentic_memory.api import Memory
from agentic_memory.graph.context import Context
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.resources import MODELS_KEY, BoundModels
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel

_EMBEDDINGS = LocalEmbeddings()

REFLECTION = {
    "context_tags": ["meal planning", "dietary constraints"],
    "conversation_summary": "The user planned dinners; vegetarian with a peanut allergy.",
    "what_worked": "Asking about constraints first, then listing a few safe recipes.",
    "what_to_avoid": "Suggesting satay sauce, which contains peanuts.",
    "importance": 0.8,
}

RULES = {
    "rules": [
        {
            "instruction": "Ask about dietary constraints before suggesting food",
            "rationale": "suggestions must be safe to eat",
        },
        {
            "instruction": "Keep recipe lists to three items",
            "rationale": "short lists were easier to act on",
        },
    ]
}


def no_facts(_: list[BaseMessage]) -> dict[str, Any]:
    return {"facts": []}


@pytest.fixture
def embeddings() -> LocalEmbeddings:
    return _EMBEDDINGS


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    opened = EmbeddedStore(tmp_path / "store", dims=_EMBEDDINGS.dims)
    yield opened
    opened.close()


@pytest.fixture
def model() -> ScriptedChatModel:
    """One fake for answers and memory calls; facts default to none, summaries scripted."""
    return ScriptedChatModel(
        default_text="Noted.",
        structured_defaults={
            "ExtractedFacts": no_facts,
            "Summary": {"text": "Earlier the user and the assistant talked."},
            "Reflection": REFLECTION,
            "RuleSet": RULES,
        },
    )


@pytest.fixture
def agentic(store: EmbeddedStore, embeddings: LocalEmbeddings) -> AgenticStore:
    """The LangGraph store over the tmp store: what the graph sees as ``runtime.store``."""
    return AgenticStore(store, embeddings)


@pytest.fixture
def app(agentic: AgenticStore, model: ScriptedChatModel) -> Any:
    """The graph with an in-memory checkpointer, bound to the tmp store and the fake."""
    from langgraph.checkpoint.memory import InMemorySaver

    return compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model)


@pytest.fixture
def resources(agentic: AgenticStore) -> tuple[Memory, AgenticStore]:
    """The memory kinds the graph's nodes use, and the store they sit behind."""
    return agentic.memory, agentic


@pytest.fixture
def run_node(agentic: AgenticStore, model: ScriptedChatModel) -> Callable[..., Any]:
    """Run one node function on a state, inside a runnable context like the graph does."""
    bound = BoundModels(answer=model, memory=model)

    async def run(node: Any, state: Any, *, thread: str = "t1", **context: Any) -> Any:
        runtime = Runtime(context=Context(**context), store=agentic)
        config = {"configurable": {"thread_id": thread, MODELS_KEY: bound}}

        async def call(s: Any) -> Any:
            return await node(s, runtime)

        return await RunnableLambda(call).ainvoke(state, config)

    return run

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from agentic_memory.api import Memory
from agentic_memory.graph import builder, compile_graph, graph
from agentic_memory.graph.context import Context
from agentic_memory.graph.memory import MemoryNotConfiguredError
from agentic_memory.graph.resources import MODELS_KEY
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.rules import RuleBook


def test_topology_snapshot(snapshot) -> None:
    assert graph.get_graph().draw_mermaid(with_styles=False) == snapshot


def test_served_graph_has_no_checkpointer_and_describes_its_context() -> None:
    assert graph.checkpointer is None
    assert graph.name == "Agentic Memory"
    assert builder.context_schema is Context
    for f in dataclasses.fields(Context):
        assert f.metadata.get("description"), f.name
    # What Studio shows: every context field with its description.
    schema = graph.get_context_jsonschema()
    assert schema is not None
    assert set(schema["properties"]) == {f.name for f in dataclasses.fields(Context)}
    assert all(prop.get("description") for prop in schema["properties"].values())
    assert list(graph.get_input_jsonschema()["properties"]) == ["messages", "end_conversation"]


def test_memory_facade_has_the_sub_apis(store, embeddings) -> None:
    mem = Memory(store, embeddings)
    assert isinstance(mem.episodes, EpisodicMemory)
    assert isinstance(mem.facts, FactStore)
    assert isinstance(mem.rules, RuleBook)
    assert mem.facts is mem.facts
    asyncio.run(mem.facts.aremember("alice", [{"subject": "name", "value": "Alice"}]))
    assert [f.value for f in asyncio.run(mem.facts.acurrent("alice"))] == ["Alice"]


def test_compile_graph_opens_the_configured_store(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    app = compile_graph()
    try:
        assert (tmp_path / "home" / "store").exists()
        assert app.checkpointer is None
        assert app.store is not None and app.store.memory.store.dims == 256
        # No models bound: they are resolved from each run's context.
        assert MODELS_KEY not in (app.config or {}).get("configurable", {})
    finally:
        app.store.close()


def test_compiled_graphs_leave_nothing_behind(store, embeddings, model) -> None:
    # Each compiled graph holds its own store and models: nothing registered process-wide,
    # so a dropped graph frees them.
    import gc
    import weakref

    app = compile_graph(store=store, embeddings=embeddings, chat_model=model)
    ref = weakref.ref(app)
    del app
    gc.collect()
    assert ref() is None


async def test_a_graph_without_agentic_memorys_store_says_so() -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.store.memory import InMemoryStore

    app = builder.compile(store=InMemoryStore())
    with pytest.raises(MemoryNotConfiguredError, match="needs agentic_memory's store"):
        await app.ainvoke(
            {"messages": [HumanMessage("hi")]},
            {"configurable": {"thread_id": "t"}},
            context={"user_id": "alice"},
        )

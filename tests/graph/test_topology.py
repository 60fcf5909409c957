from __future__ import annotations

import dataclasses
from pathlib import Path

from agentic_memory.api import Memory
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.rules import RuleBook
from graph import builder, compile_graph, graph
from graph.context import Context
from graph.resources import RESOURCES_KEY, close_default_resources, get_resources


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
    mem.facts.remember("alice", [{"subject": "name", "value": "Alice"}])
    assert [f.value for f in mem.facts.current("alice")] == ["Alice"]


def test_compile_graph_opens_the_configured_store_lazily(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    app = compile_graph()
    assert (tmp_path / "home" / "store").exists()
    assert app.checkpointer is None
    token = app.config["configurable"][RESOURCES_KEY]
    resources = get_resources(app.config)
    assert resources.memory_store.dims == 256 and resources.answer_model is None
    assert token
    resources.memory_store.close()


def test_default_resources_open_under_amem_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "served"))
    try:
        resources = get_resources(None)
        assert get_resources({"configurable": {}}) is resources
        assert (tmp_path / "served" / "store").exists()
    finally:
        close_default_resources()

"""langgraph.json is valid for the installed CLI and names the served graph."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

from langgraph_cli.config import validate_config_file

REPO = Path(__file__).resolve().parents[3]


def test_langgraph_json_is_valid_and_points_at_the_graph() -> None:
    raw = json.loads((REPO / "langgraph.json").read_text())
    config = validate_config_file(REPO / "langgraph.json")
    assert config["python_version"] == "3.11"
    assert config["dependencies"] == ["."]
    assert config["graphs"] == {
        "agent": "agentic_memory.graph.graph:graph",
        "ingest": "agentic_memory.ingest.graph:graph",
    }
    # The server keeps its checkpoints in this package's checkpointer: private, under
    # AMEM_HOME, and a deleted thread is deleted whole (docs/persistence.md).
    for name in ("langgraph.json", "langgraph.auth.json"):
        served_config = validate_config_file(REPO / name)
        assert served_config["checkpointer"] == {
            "backend": "custom",
            "path": "agentic_memory.graph.persistence.open_checkpointer",
        }, name
        assert served_config["store"] == {"path": "agentic_memory.graph.store.store"}, name
    # An "env" file is referenced only if it exists, or the CLI would fail on it.
    assert "env" not in raw or (REPO / raw["env"]).is_file()

    expected_names = {"agent": "Agentic Memory", "ingest": "Ingest"}
    for graph_id, target in config["graphs"].items():
        # Module paths: the server imports the installed package, one module per file, the
        # same objects as `from agentic_memory.graph.graph import graph` in a notebook.
        module_name, _, attribute = target.partition(":")
        served = getattr(importlib.import_module(module_name), attribute)
        assert served.name == expected_names[graph_id]
        assert served.checkpointer is None, "langgraph dev brings its own checkpointer"


def test_context_fields_are_described_for_studio() -> None:
    from agentic_memory.graph.context import Context

    missing = [f.name for f in dataclasses.fields(Context) if not f.metadata.get("description")]
    assert missing == []

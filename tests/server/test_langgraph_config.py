"""langgraph.json is valid for the installed CLI and names the served graph."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

from langgraph_cli.config import validate_config_file

REPO = Path(__file__).resolve().parents[2]


def test_langgraph_json_is_valid_and_points_at_the_graph() -> None:
    raw = json.loads((REPO / "langgraph.json").read_text())
    config = validate_config_file(REPO / "langgraph.json")
    assert config["python_version"] == "3.11"
    assert config["dependencies"] == ["."]
    assert config["graphs"] == {
        "agent": "./graph/graph.py:graph",
        "ingest": "./ingest/graph.py:graph",
    }
    # The server keeps its checkpoints in this package's checkpointer: private, under
    # AMEM_HOME, and a deleted thread is deleted whole (docs/persistence.md).
    for name in ("langgraph.json", "langgraph.auth.json"):
        served_config = validate_config_file(REPO / name)
        assert served_config["checkpointer"] == {
            "backend": "custom",
            "path": "./graph/persistence.py:open_checkpointer",
        }, name
        assert served_config["store"] == {"path": "./graph/store.py:store"}, name
    # An "env" file is referenced only if it exists, or the CLI would fail on it.
    assert "env" not in raw or (REPO / raw["env"]).is_file()

    expected_names = {"agent": "Agentic Memory", "ingest": "Ingest"}
    for graph_id, target in config["graphs"].items():
        path, _, attribute = target.partition(":")
        spec = importlib.util.spec_from_file_location(f"served_{graph_id}", REPO / path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Registered first, as the server does: TypedDict hints resolve through sys.modules.
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        served = getattr(module, attribute)
        assert served.name == expected_names[graph_id]
        assert served.checkpointer is None, "langgraph dev brings its own checkpointer"


def test_context_fields_are_described_for_studio() -> None:
    from graph.context import Context

    missing = [f.name for f in dataclasses.fields(Context) if not f.metadata.get("description")]
    assert missing == []

"""``graph/store.py``, the store ``langgraph.json`` names, loaded the way the server loads it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from langgraph_cli.config import validate_config_file

from agentic_memory.langgraph_store import AgenticStore

REPO = Path(__file__).resolve().parents[3]


def load_store_module() -> ModuleType:
    # langgraph_api.store._load_store: a file path is imported under a made-up module name.
    spec = importlib.util.spec_from_file_location("served_store_module", REPO / "graph/store.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("config", ["langgraph.json", "langgraph.auth.json"])
def test_both_configurations_name_the_store(config: str) -> None:
    validated = validate_config_file(REPO / config)
    assert validated["store"] == {"path": "agentic_memory.graph.store.store"}
    assert (
        json.loads((REPO / config).read_text())["store"]["path"]
        == "agentic_memory.graph.store.store"
    )


def test_the_ttl_settings_come_from_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_store_module()
    assert module.server_ttl_config({"path": "x"}) is None
    monkeypatch.delenv("LANGGRAPH_STORE", raising=False)
    assert module.server_ttl_config() is None
    settings = {"path": "agentic_memory.graph.store.store", "ttl": {"default_ttl": 60}}
    monkeypatch.setenv("LANGGRAPH_STORE", json.dumps(settings))
    assert module.server_ttl_config() == {"default_ttl": 60}
    monkeypatch.setenv("LANGGRAPH_STORE", "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        module.server_ttl_config()


async def test_the_store_opens_sweeps_and_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    module = await asyncio.to_thread(load_store_module)  # file reads: off the guarded loop
    settings = {"path": "agentic_memory.graph.store.store", "ttl": {"default_ttl": 60}}
    monkeypatch.setenv("LANGGRAPH_STORE", json.dumps(settings))
    async with module.store() as opened:
        assert opened.ttl_config == {"default_ttl": 60}
        assert isinstance(opened, AgenticStore)
        assert opened._sweeper is not None and not opened._sweeper.done()
        await opened.aput(("notes", "alice"), "k", {"text": "hello"})
        item = await opened.aget(("notes", "alice"), "k")
        assert item is not None and item.value == {"text": "hello"}
        sweeper = opened._sweeper
    assert sweeper.done()
    from starlette.exceptions import HTTPException

    # Refused outside a run: as the server answers it (400, no traceback in its log).
    with pytest.raises(HTTPException, match="closed"):
        await opened.aget(("notes", "alice"), "k")
    # Everything lives under AMEM_HOME (tests point it at a temporary directory).
    assert await asyncio.to_thread((Path(os.environ["AMEM_HOME"]) / "store").is_dir)


def test_a_refused_store_request_is_an_http_error_outside_a_run(tmp_path: Path) -> None:
    """The server logs a route's ValueError with its traceback; an HTTPException it does not."""
    from langchain_core.runnables import RunnableLambda
    from starlette.exceptions import HTTPException

    from agentic_memory.graph.store import ServedStore
    from agentic_memory.models.embeddings import LocalEmbeddings
    from agentic_memory.store import InvalidInputError
    from agentic_memory.store.embedded import EmbeddedStore

    with EmbeddedStore(tmp_path / "store", dims=LocalEmbeddings().dims) as memory:
        served = ServedStore(memory, LocalEmbeddings())
        with pytest.raises(HTTPException, match="needs 'value'") as refused:
            served.put(("facts", "alice"), "pet", {"category": "other"})
        assert refused.value.status_code == 400
        with pytest.raises(HTTPException) as forbidden:
            served.put(("rules", "_global"), "latest", {"rules": [{"instruction": "x"}]})
        assert forbidden.value.status_code == 403
        # In a graph run (a node calling the store) the store's own error stays.
        in_a_run = RunnableLambda(
            lambda _: served.put(("facts", "alice"), "pet", {"category": "other"})
        )
        with pytest.raises(InvalidInputError, match="needs 'value'"):
            in_a_run.invoke(None)
        assert served.get(("facts", "alice"), "pet") is None

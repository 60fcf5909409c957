"""The graph reaches memory through one seam: ``memory_of(runtime.store)`` and its methods."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore

from agentic_memory.graph.resources import MemoryNotConfiguredError, memory_of
from agentic_memory.ingest.graph import builder as ingest_builder

PACKAGE = Path(__file__).resolve().parents[3] / "agentic_memory"
NODES = sorted((PACKAGE / "graph").glob("*.py"))
# What the application may take from the storage layer: errors, checks and shared names, not
# the engine (no filters, no collections, no raw reads or writes).
STORE_NAMES = {
    "GLOBAL_SCOPE",
    "InvalidInputError",
    "StoreError",
    "MemoryStore",
    "check_user_id",
    "amem_home",
    "private_dir",
    "private_file",
    "tighten",
}


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "agentic_memory.store"
        ):
            found += [f"imports {a.name}" for a in node.names if a.name not in STORE_NAMES]
        # A memory's engine (`mem.store`, `memory.store`) is below the seam; the run's
        # `runtime.store` is the seam's input (and `auth.on.store` the server's hook).
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "store"
            and ast.unparse(node.value) not in {"runtime", "auth.on"}
        ):
            found.append(f"line {node.lineno}: .store")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "agentic_memory.kinds."
        ):
            found += [f"imports private {a.name}" for a in node.names if a.name.startswith("_")]
    return found


@pytest.mark.parametrize("path", NODES, ids=lambda p: p.name)
def test_the_agent_stays_above_the_memory_seam(path: Path) -> None:
    assert _violations(path) == []


def test_ingestion_takes_only_the_seam_from_the_store_layer() -> None:
    # Its node hands the memory's store to the ingestion pipeline, the knowledge kind's
    # writer; it imports nothing of the engine.
    found = _violations(PACKAGE / "ingest" / "graph.py")
    assert [v for v in found if not v.endswith(": .store")] == []


def test_the_checker_sees_a_raw_store_call(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from agentic_memory.store import Where\n"
        "from agentic_memory.kinds.messages import _rerank\n"
        "async def node(mem):\n"
        "    return await mem.store.acount('Messages', where=[Where('a', 'eq', 1)])\n"
    )
    assert _violations(bad) == ["imports Where", "imports private _rerank", "line 4: .store"]


def test_a_foreign_store_is_a_clear_error() -> None:
    with pytest.raises(MemoryNotConfiguredError, match="InMemoryStore"):
        memory_of(InMemoryStore())
    with pytest.raises(MemoryNotConfiguredError, match="no store"):
        memory_of(None)


async def test_ingestion_refuses_a_foreign_store_instead_of_writing_elsewhere() -> None:
    app = ingest_builder.compile(store=InMemoryStore())
    with pytest.raises(MemoryNotConfiguredError, match="InMemoryStore"):
        await app.ainvoke(
            {"documents": [{"name": "a.md", "text": "hello"}]}, context={"user_id": "alice"}
        )

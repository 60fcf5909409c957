"""The graph reaches memory through one seam: ``graph.memory.memory_of`` and its methods."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore

from agentic_memory.graph.memory import MemoryNotConfiguredError, memory_of
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


@pytest.mark.parametrize("path", [p for p in NODES if p.name != "memory.py"], ids=lambda p: p.name)
def test_the_agent_stays_above_the_memory_seam(path: Path) -> None:
    assert _violations(path) == []


def test_the_seam_hands_the_engine_only_to_ingestion() -> None:
    # The ingestion pipeline (the knowledge kind's writer) takes the store and embeddings:
    # ``AgentMemory.for_ingestion`` is the one place below the seam the graph package reads.
    path = PACKAGE / "graph" / "memory.py"
    tree = ast.parse(path.read_text())
    (method,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "for_ingestion"
    ]
    inside = {f"line {line}: .store" for line in range(method.lineno, (method.end_lineno or 0) + 1)}
    assert _violations(path)
    assert set(_violations(path)) <= inside


def test_ingestion_takes_only_the_seam_from_the_store_layer() -> None:
    # Its node hands the memory's store to the ingestion pipeline, the knowledge kind's
    # writer; it imports nothing of the engine.
    found = _violations(PACKAGE / "ingest" / "graph.py")
    assert [v for v in found if not v.endswith(": .store")] == []


# What the nodes and the modules they are made of may import from the package: the seam,
# the graph's own pure modules, prompts, the model-call helpers and the model-output checks,
# and the storage layer's errors and shared names. A memory kind is reached through
# ``graph.memory`` only.
SEAM_USERS = ("nodes.py", "admission.py", "prompting.py")
MAY_IMPORT = {
    "agentic_memory",  # ``from agentic_memory import prompts``
    "agentic_memory.checkpoints",
    "agentic_memory.graph.admission",
    "agentic_memory.graph.context",
    "agentic_memory.graph.context_window",
    "agentic_memory.graph.memory",
    "agentic_memory.graph.prompting",
    "agentic_memory.graph.resources",
    "agentic_memory.graph.state",
    "agentic_memory.kinds.model_output",
    "agentic_memory.models.calls",
    "agentic_memory.models.chat",
    "agentic_memory.store",
}


def _package_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentic_memory"):
            found.add(str(node.module))
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("agentic_memory")}
    return found


@pytest.mark.parametrize("name", SEAM_USERS)
def test_the_nodes_import_memory_only_through_the_seam(name: str) -> None:
    assert _package_imports(PACKAGE / "graph" / name) - MAY_IMPORT == set()


def test_only_the_seam_touches_the_memory_it_wraps() -> None:
    # ``AgentMemory`` keeps the kinds in ``_memory``: nothing else in the graph reads it.
    for path in NODES:
        if path.name == "memory.py":
            continue
        tree = ast.parse(path.read_text())
        private = [
            n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "_memory"
        ]
        assert private == [], f"{path.name} reads the seam's memory at lines {private}"


def test_the_seam_check_sees_a_kind_import(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.py"
    bad.write_text(
        "from agentic_memory.kinds.facts import FactStore\n"
        "from agentic_memory.graph.memory import memory_of\n"
        "import agentic_memory.api\n"
    )
    assert _package_imports(bad) - MAY_IMPORT == {
        "agentic_memory.kinds.facts",
        "agentic_memory.api",
    }


def test_ingestion_takes_the_seam_and_public_names_only() -> None:
    path = PACKAGE / "ingest" / "graph.py"
    private = [
        f"{node.module}.{a.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentic_memory")
        for a in node.names
        if a.name.startswith("_") or any(p.startswith("_") for p in str(node.module).split("."))
    ]
    assert private == []
    assert "agentic_memory.graph.memory" in _package_imports(path)


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

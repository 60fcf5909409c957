"""Paths and permissions live in ``agentic_memory.paths``, which every layer may use."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agentic_memory"


def _imported(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_the_paths_module_depends_on_the_standard_library_only() -> None:
    outside = {
        m for m in _imported(PACKAGE / "paths.py") if m.split(".")[0] not in sys.stdlib_module_names
    }
    assert outside == set()


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").glob("*.py")), ids=lambda p: p.name)
def test_the_models_take_their_folders_from_paths_not_from_the_store(path: Path) -> None:
    layers = ("agentic_memory.store", "agentic_memory.graph", "agentic_memory.ingest")
    assert [m for m in _imported(path) if m.startswith(layers)] == []

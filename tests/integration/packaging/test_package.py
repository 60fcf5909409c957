"""One installable package under a free name, and the library apart from the application."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

LIBRARY = [
    "agentic_memory",
    "agentic_memory.api",
    "agentic_memory.forget",
    "agentic_memory.transfer",
    "agentic_memory.tools",
    "agentic_memory.kinds",
    "agentic_memory.kinds.registry",
    "agentic_memory.store",
    "agentic_memory.store.embedded",
    "agentic_memory.store.weaviate",
    "agentic_memory.langgraph_store",
    "agentic_memory.models.chat",
    "agentic_memory.models.embeddings",
]


@pytest.mark.integration
def test_the_wheel_installs_one_package_under_a_free_name(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    # "agentic-memory" on PyPI is another project; top-level graph/ingest/prompts would
    # shadow a user's own modules (and the `prompts` project).
    info = "langgraph_agentic_memory-0.1.0.dist-info"
    assert tops == {"agentic_memory", info}
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "\nName: langgraph-agentic-memory\n" in metadata
    # The application ships inside it: the graph, ingestion and every prompt file.
    assert "agentic_memory/graph/graph.py" in names
    assert "agentic_memory/ingest/graph.py" in names
    prompts = sorted(p.name for p in (ROOT / "agentic_memory/prompts").glob("*.md"))
    assert prompts and all(f"agentic_memory/prompts/{p}" in names for p in prompts)


def test_the_library_never_imports_the_application() -> None:
    probe = (
        "import importlib, json, sys\n"
        f"for name in {LIBRARY!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['agentic_memory', 'graph'], ['agentic_memory', 'ingest']) or m.split('.')[0] in "
        "('graph', 'ingest', 'prompts'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=ROOT
    )
    assert json.loads(out.stdout) == []


def test_the_top_level_folders_are_the_package_s_own() -> None:
    for name in ("graph", "ingest", "prompts"):
        link = ROOT / name
        assert link.is_symlink() and link.resolve() == (ROOT / "agentic_memory" / name).resolve()
    # Every served target is a module of the installed package, not a file path: the server
    # and a notebook share one copy of each module.
    for config in ("langgraph.json", "langgraph.auth.json"):
        data = json.loads((ROOT / config).read_text())
        targets = [*data["graphs"].values(), data["store"]["path"], data["checkpointer"]["path"]]
        targets += [data["auth"]["path"]] if "auth" in data else []
        assert all(t.startswith("agentic_memory.") and "/" not in t for t in targets), config

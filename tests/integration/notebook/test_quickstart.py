"""Execute notebooks/quickstart.ipynb top to bottom: with the default offline model, as a user
with no key runs it, and with the notebook's scripted fake model, whose answers are exact.

The kernel is this interpreter (a kernelspec installed into a temporary folder), so the
notebook imports the project exactly as the tests do. Its temporary files go to a ``TMPDIR``
of the test's own, which must be empty afterwards: the notebook leaves nothing in /tmp.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.unit.models.conftest import requires_local

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "quickstart.ipynb"
KERNEL = "amem-quickstart-test"


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    prefix = tmp_path / "jupyter"
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", KERNEL],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    return KERNEL


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def _run(nb: nbformat.NotebookNode, kernel: str, tmp_path: Path) -> str:
    client = NotebookClient(
        nb, kernel_name=kernel, timeout=600, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    return "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")


@pytest.fixture
def tmpdir_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel's TMPDIR: where the notebook's AMEM_HOME (and anything else) goes."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


@requires_local
def test_quickstart_runs_with_the_default_offline_model_and_leaves_nothing(
    kernel: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmpdir_of_its_own: Path
) -> None:
    monkeypatch.delenv("AMEM_NOTEBOOK_FAKE_MODEL", raising=False)
    monkeypatch.delenv("AMEM_LOCAL_MODEL", raising=False)
    monkeypatch.delenv("AMEM_LOCAL_MODEL_PATH", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    out = _run(nb, kernel, tmp_path)
    assert "Traceback" not in out
    assert "Model: the offline local model (local:smollm2-135m, served by llama.cpp)." in out
    # The self-statements are remembered whatever the small model answers.
    assert "(I'll remember: name = Alice)" in out
    assert "(I'll remember: diet = vegetarian)" in out
    shown = [_text(c) for c in nb.cells if c.source.strip() == "await show_memories()"]
    assert len(shown) == 2 and all("diet = vegetarian" in s for s in shown)
    assert shown[1].count("Episodes:") == 1 and "Rules (version" in shown[1]
    # Two conversations answered (each turn printed its answer), and the rules cells ran.
    assert out.count("assistant: ") == 4
    assert "version 1: 5 rules" in out
    assert "removed " in out
    assert list(tmpdir_of_its_own.iterdir()) == [], "the notebook left files in its TMPDIR"


def test_quickstart_runs_top_to_bottom(
    kernel: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmpdir_of_its_own: Path
) -> None:
    monkeypatch.setenv("AMEM_NOTEBOOK_FAKE_MODEL", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # What a user who forgets the await meets: the kernel's loop is running, so the sync
    # form refuses with a message naming the method to await (before the store is closed).
    probe = nbformat.v4.new_code_cell(
        "try:\n"
        "    Memory(store, embeddings).recall('alice', 'rice')\n"
        "except Exception as exc:\n"
        "    print('refused:', type(exc).__name__, exc)"
    )
    nb.cells.insert(len(nb.cells) - 1, probe)
    out = _run(nb, kernel, tmp_path)
    assert "Traceback" not in out
    assert "Model: the notebook's scripted fake model." in out
    assert "ok=True" in out
    # First conversation: facts remembered as they are said, the manual cited with its page.
    assert "(I'll remember: name = Alice)" in out
    assert "(I'll remember: diet = vegetarian)" in out
    assert "Nice to meet you, Alice!" in out
    assert "1.5 cups of water" in out and "[rice-cooker.pdf p.1]" in out
    # Memories after the first conversation.
    shown = [_text(c) for c in nb.cells if c.source.strip() == "await show_memories()"]
    assert len(shown) == 2
    assert "diet = vegetarian" in shown[0] and "Rules (version 2)" in shown[0]
    assert shown[0].count("The user asked:") == 1 and shown[1].count("The user asked:") == 2
    # The second conversation, on a new thread, knows the diet and recalls the first one.
    assert "Since you are vegetarian, how about a mushroom risotto tonight?" in out
    assert "(Last time: The user asked: Hi, my name is Alice" in out
    assert "[rice-cooker.pdf p.2]" in out
    # Rules: three versions, a diff, a rollback to version 2 written as version 4.
    assert "version 3:" in out
    assert "version 4 restores version 2:" in out
    refused = _text(probe)
    assert refused.startswith("refused: SyncCallInEventLoopError"), refused
    assert "await mem.arecall(...)" in refused
    assert list(tmpdir_of_its_own.iterdir()) == [], "the notebook left files in its TMPDIR"

"""The notebook snippet in docs/python-api.md runs as written and prints what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def test_the_documented_snippet_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    snippet = blocks[0]
    exec(compile(snippet, str(DOC), "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert "['bills', 'trip-1']" in out
    assert "Alps" in out[0]  # the best hit for 'mountain holiday'
    assert any(line.startswith("0 human I want to go hiking") for line in out)
    assert any("{'source': 'notebook'}" in line for line in out)

"""The snippets in docs/python-api.md run as written and print what they say."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import allow_blocking

DOC = Path(__file__).resolve().parents[3] / "docs" / "python-api.md"


def test_the_documented_snippet_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    snippet = blocks[0]
    exec(compile(snippet, str(DOC), "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert "['bills', 'trip-1']" in out
    assert "Alps" in out[0]  # the best hit for 'mountain holiday'
    assert any(line.startswith("0 human I want to go hiking") for line in out)
    assert any("{'source': 'notebook'}" in line for line in out)


@allow_blocking("the snippet opens and closes the store on the loop, as a notebook cell does")
async def test_the_documented_notebook_snippet_runs_in_a_running_loop(
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    snippet = blocks[1]
    code = compile(snippet, str(DOC), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    await eval(code, {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("Hiking in July")
    assert out[1] == "[]"
    assert out[2].startswith("a blocking memory call was made from a running event loop")
    assert out[2].endswith("use await mem.arecall(...) there")

"""``make run``'s first lines: who can read what, then which chat model will answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentic_memory.graph.serve as serve
import agentic_memory.models.chat as chat


def _first_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> list[str]:
    ran: list[Any] = []
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(serve.os, "execv", lambda *args: ran.append(args))
    monkeypatch.setattr(serve.os, "chdir", lambda _: None)
    monkeypatch.setattr(serve.os, "umask", lambda _: 0o022)
    serve.main(["--port", "2999"])
    assert ran, "langgraph dev was not started"
    return capsys.readouterr().out.splitlines()


def test_the_second_line_names_the_offline_model_without_a_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(chat, "local_model_available", lambda: True)
    lines = _first_lines(monkeypatch, capsys, tmp_path)
    assert lines[0].startswith("WARNING: no authentication")
    assert lines[1].startswith("Chat model: offline, SmolLM2-135M-Instruct")
    assert "OPENAI_API_KEY or AMEM_BASE_URL" in lines[1]


def test_it_names_an_endpoint_or_openai_when_they_are_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("AMEM_MODEL_NAME", "qwen2.5:0.5b")
    line = _first_lines(monkeypatch, capsys, tmp_path)[1]
    assert line == (
        "Chat model: qwen2.5:0.5b at the endpoint http://127.0.0.1:8080/v1 "
        "(AMEM_BASE_URL; a small model)."
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert _first_lines(monkeypatch, capsys, tmp_path)[1] == (
        "Chat model: OpenAI gpt-4o-mini (OPENAI_API_KEY is set)."
    )


def test_it_says_when_no_model_is_there(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(chat, "local_model_available", lambda: False)
    line = _first_lines(monkeypatch, capsys, tmp_path)[1]
    assert line.startswith("Chat model: none configured: runs will fail")
    monkeypatch.setenv("AMEM_LOCAL_MODEL", "llama-70b")
    line = _first_lines(monkeypatch, capsys, tmp_path)[1]
    assert "AMEM_LOCAL_MODEL='llama-70b' is not a bundled model" in line

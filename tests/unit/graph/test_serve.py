"""``make run``'s first lines: who can read what, then which chat model will answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentic_memory.graph.serve as serve
import agentic_memory.models.chat as chat


def _first_lines(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    ran: list[Any] | None = None,
    *args: str,
) -> list[str]:
    ran = [] if ran is None else ran
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(serve.os, "execv", lambda *args: ran.append(args))
    monkeypatch.setattr(serve.os, "chdir", lambda _: None)
    monkeypatch.setattr(serve.os, "umask", lambda _: 0o022)
    serve.main(["--port", "2999", *args])
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


def test_the_server_does_not_watch_its_data_folder_for_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ran: list[Any] = []
    _first_lines(monkeypatch, capsys, tmp_path, ran)
    _first_lines(monkeypatch, capsys, tmp_path, ran, "--no-reload", "--n-jobs-per-worker", "4")
    first, second = (list(command) for _, command in ran)
    assert first.count("--no-reload") == 1
    assert second.count("--no-reload") == 1
    assert second[-3:] == ["--no-reload", "--n-jobs-per-worker", "4"]
    _first_lines(monkeypatch, capsys, tmp_path, ran, "--reload")
    assert "--no-reload" not in ran[-1][1] and "--reload" not in ran[-1][1]


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


def test_a_second_server_on_the_same_home_is_refused_until_the_first_is_gone(
    tmp_path: Path,
) -> None:
    # Two servers on one home would load the same .langgraph_api/ and overwrite each other's
    # threads; the lock is the kernel's, so a killed server leaves nothing to clean up.
    folder = serve.prepare(tmp_path / "home")
    first = serve.claim(folder, 2031)
    try:
        with pytest.raises(SystemExit, match=r"another server already serves .*pid \d+, port 2031"):
            serve.claim(folder, 2032)
    finally:
        os.close(first)
    os.close(serve.claim(folder, 2032))


def test_the_lock_outlives_exec_in_the_server_process(tmp_path: Path) -> None:
    folder = serve.prepare(tmp_path / "home")
    fd = serve.claim(folder, 2031)
    # What execv hands to langgraph dev: the descriptor stays open in the new program.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.stdin.read()"],
        pass_fds=(fd,),
        stdin=subprocess.PIPE,
    )
    os.close(fd)
    try:
        with pytest.raises(SystemExit, match="another server already serves"):
            serve.claim(folder, 2032)
    finally:
        holder.communicate(b"")
    os.close(serve.claim(folder, 2032))


def test_a_busy_port_is_replaced_by_a_free_one_and_the_lines_name_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ran: list[Any] = []
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(serve.os, "execv", lambda *args: ran.append(args))
    monkeypatch.setattr(serve.os, "chdir", lambda _: None)
    monkeypatch.setattr(serve.os, "umask", lambda _: 0o022)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert serve.free_port("127.0.0.1", port) != port
        serve.main(["--port", str(port)])
    out = capsys.readouterr()
    served = int(ran[0][1][ran[0][1].index("--port") + 1])
    assert served != port
    assert f"port {port} is in use on 127.0.0.1: serving on port {served}" in out.err
    assert f"http://127.0.0.1:{served} " in out.out.splitlines()[0]
    assert serve.free_port("127.0.0.1", port) == port  # free again


def test_a_refused_start_leaves_the_home_free(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AMEM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(serve.os, "chdir", lambda _: None)
    monkeypatch.setattr(serve.os, "umask", lambda _: 0o022)

    def missing(*_: Any) -> None:
        raise FileNotFoundError("langgraph")

    monkeypatch.setattr(serve.os, "execv", missing)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(FileNotFoundError):
        serve.main(["--port", str(port)])
    os.close(serve.claim(serve.prepare(tmp_path / "home"), port))


def test_a_killed_server_leaves_its_home_free(tmp_path: Path) -> None:
    # The kernel drops the lock with its last holder, SIGKILL included: nothing to clean up.
    folder = serve.prepare(tmp_path / "home")
    fd = serve.claim(folder, 2031)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(fd,))
    os.close(fd)
    try:
        with pytest.raises(SystemExit, match="another server already serves"):
            serve.claim(folder, 2032)
    finally:
        holder.kill()
        holder.wait()
    os.close(serve.claim(folder, 2032))

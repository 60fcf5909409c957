"""The local server's life: a death told in one line and recovered, and no orphans.

These run everywhere: a stand-in server (``standin_server.py``) takes llama.cpp's place under
the real launcher, so a crash can be chosen (SIGILL as on a CPU that refuses AMX, SIGSEGV
mid-stream). The same lifecycle with the real llama.cpp server runs when the ``[local]``
extra is installed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

import agentic_memory.models.chat as chat
import agentic_memory.models.local_server as local_server
from agentic_memory.graph.nodes import AnswerFailedError
from agentic_memory.models.calls import ainvoke_text
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.models.local_server import LocalModelServer, LocalServerDied, describe_exit
from tests.unit.models.conftest import requires_local

STANDIN = str(Path(__file__).resolve().parents[2] / "unit" / "models" / "standin_server.py")
ROOT = Path(__file__).resolve().parents[3]


def _process_gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie waiting for init counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _process_gone(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A config file for the stand-in; the process-wide server becomes the stand-in."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"stand-in")
    config = tmp_path / "standin.json"
    config.write_text(json.dumps({"starts_file": str(tmp_path / "starts")}))
    monkeypatch.setenv("STANDIN_CONFIG", str(config))
    server = LocalModelServer(model, server=STANDIN, ready_timeout=30)
    monkeypatch.setattr(local_server, "_SINGLETON", server)
    # The local model is "installed" as far as model selection is concerned.
    monkeypatch.setattr(chat, "local_model_available", lambda: True)
    yield config
    server.stop()


def _configure(config: Path, **settings: object) -> None:
    data = json.loads(config.read_text())
    data.update(settings)
    config.write_text(json.dumps(data))


async def test_a_server_killed_by_sigill_is_restarted_and_the_request_retried_once(
    standin: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _configure(standin, die_signal="SIGILL", die_on_starts=[1])
    model = resolve_chat_model("local", max_tokens=16)
    server = local_server.get_local_server()

    with caplog.at_level(logging.WARNING):
        reply, _ = await ainvoke_text(model, [HumanMessage("hi")], purpose="answer")
    # The request that killed the first server was sent again to a new one, and answered.
    assert reply.content == "hello from start 2"
    deaths = [
        r.getMessage()
        for r in caplog.records
        if r.name.endswith("local_server") and r.levelno == logging.ERROR
    ]
    assert len(deaths) == 1 and "killed by SIGILL" in deaths[0] and "\n" not in deaths[0]
    assert "llama_build.py ensure --force" in deaths[0]  # the command that fixes it
    retries = [r.getMessage() for r in caplog.records if r.name.endswith("models.chat")]
    assert retries == [f"{deaths[0]}; retrying the request once on a new server"]
    assert server.log_path is not None and deaths[0] in server.log_path.read_text()
    log = server.log_path.read_text()
    assert log.count("starting") == 2 and "standin: start 2" in log


async def test_a_server_that_dies_again_on_the_retry_is_reported_in_one_line(
    standin: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _configure(standin, die_signal="SIGILL", die_on_starts=[1, 2])
    model = resolve_chat_model("local", max_tokens=16)
    server = local_server.get_local_server()

    with caplog.at_level(logging.ERROR, logger="agentic_memory.models.local_server"):
        with pytest.raises(LocalServerDied) as died:
            await ainvoke_text(model, [HumanMessage("hi")], purpose="answer")
    message = str(died.value)
    assert "\n" not in message
    assert "killed by SIGILL" in message
    assert "llama.cpp was built for another CPU" in message
    assert "llama_build.py ensure --force" in message
    assert server.log_path is not None and str(server.log_path) in message
    assert died.value.returncode == -signal.SIGILL
    assert _process_gone(died.value.pid)
    # Both deaths are in the Python log (the langgraph dev server's log), once each; the
    # error raised is the second.
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[-1] == message
    assert message in server.log_path.read_text()

    # The next call starts a third server, and is answered.
    reply, _ = await ainvoke_text(model, [HumanMessage("hi again")], purpose="answer")
    assert reply.content == "hello from start 3"
    assert server.pid is not None and server.pid != died.value.pid


async def test_a_crash_in_the_middle_of_a_stream_is_reported(standin: Path) -> None:
    # Half an answer already reached the caller: the request cannot be sent again.
    _configure(standin, die_signal="SIGSEGV", die_on_starts=[1])
    model = resolve_chat_model("local", max_tokens=16)
    with pytest.raises(LocalServerDied, match=r"killed by SIGSEGV: a crash inside llama\.cpp"):
        async for _ in model.astream([HumanMessage("hi")]):
            pass
    chunks = [c.content async for c in model.astream([HumanMessage("hi")])]
    assert "".join(str(c) for c in chunks) == "hello from start 2"


async def test_a_stream_whose_server_died_before_its_first_chunk_is_retried(
    standin: Path,
) -> None:
    _configure(standin, die_signal="SIGSEGV", die_on_starts=[1], die_before_stream=True)
    model = resolve_chat_model("local", max_tokens=16)
    chunks = [c.content async for c in model.astream([HumanMessage("hi")])]
    assert "".join(str(c) for c in chunks) == "hello from start 2"


def test_the_sync_path_retries_once(standin: Path) -> None:
    _configure(standin, die_signal="SIGKILL", die_on_starts=[1])
    model = resolve_chat_model("local", max_tokens=16)
    assert model.invoke([HumanMessage("hi")]).content == "hello from start 2"


def test_the_sync_path_reports_a_second_death(standin: Path) -> None:
    _configure(standin, die_signal="SIGKILL", die_on_starts=[1, 2])
    model = resolve_chat_model("local", max_tokens=16)
    with pytest.raises(LocalServerDied, match="killed by SIGKILL: out of memory"):
        model.invoke([HumanMessage("hi")])
    assert model.invoke([HumanMessage("hi")]).content == "hello from start 3"


def test_the_sync_stream_is_retried_before_its_first_chunk(standin: Path) -> None:
    _configure(standin, die_signal="SIGKILL", die_on_starts=[1], die_before_stream=True)
    model = resolve_chat_model("local", max_tokens=16)
    assert "".join(str(c.content) for c in model.stream([HumanMessage("hi")])) == (
        "hello from start 2"
    )


def test_a_crash_in_the_middle_of_a_sync_stream_is_reported(standin: Path) -> None:
    # As the async stream: what reached the caller cannot be sent again, the death is raised.
    _configure(standin, die_signal="SIGSEGV", die_on_starts=[1])
    model = resolve_chat_model("local", max_tokens=16)
    with pytest.raises(LocalServerDied, match="killed by SIGSEGV"):
        for _ in model.stream([HumanMessage("hi")]):
            pass
    assert "".join(str(c.content) for c in model.stream([HumanMessage("hi")])) == (
        "hello from start 2"
    )


async def test_other_failures_of_the_async_paths_are_not_blamed_on_the_server(
    standin: Path,
) -> None:
    model = resolve_chat_model("local", max_tokens=16)
    assert (await model.ainvoke([HumanMessage("hi")])).content == "hello from start 1"
    with pytest.raises(TypeError) as raised:  # the stop list cannot be serialised
        await model.ainvoke("hi", stop=object())  # type: ignore[arg-type]
    assert not isinstance(raised.value, LocalServerDied)
    with pytest.raises(TypeError) as streamed:
        async for _ in model.astream("hi", stop=object()):  # type: ignore[arg-type]
            pass
    assert not isinstance(streamed.value, LocalServerDied)
    assert local_server.get_local_server().running
    # No second server was started for them.
    assert (await model.ainvoke([HumanMessage("hi")])).content == "hello from start 1"


def test_other_failures_are_not_blamed_on_the_server(standin: Path) -> None:
    # A request the client refuses before sending leaves a healthy server: its own error
    # comes through unchanged.
    model = resolve_chat_model("local", max_tokens=16)
    assert model.invoke([HumanMessage("hi")]).content == "hello from start 1"
    with pytest.raises(TypeError) as raised:  # the stop list cannot be serialised
        model.invoke("hi", stop=object())  # type: ignore[arg-type]
    assert not isinstance(raised.value, LocalServerDied)
    assert local_server.get_local_server().running


def test_exit_descriptions() -> None:
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-signal.SIGTERM) == "killed by SIGTERM"
    assert describe_exit(-signal.SIGILL).startswith("killed by SIGILL: llama.cpp was built")
    assert describe_exit(-200) == "killed by signal 200"
    assert "was gone" in describe_exit(75)


def test_a_server_that_dies_during_start_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "dies.py"
    script.write_text(
        "import os, signal, resource\n"
        "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
        "os.kill(os.getpid(), signal.SIGILL)\n"
    )
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    server = LocalModelServer(model, server=str(script), ready_timeout=30)
    with pytest.raises(
        local_server.LocalServerError, match=r"exited during start \(killed by SIGILL"
    ):
        server.start()
    assert not server.running


# -- no orphans -----------------------------------------------------------------------------

_PARENT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentic_memory.models.local_server import LocalModelServer

    model, target = Path(sys.argv[1]), sys.argv[2]
    server = LocalModelServer(model, server=target, ready_timeout=120, n_ctx=512)
    server.start()
    print(server.pid, flush=True)
    time.sleep(600)
    """
)


def _start_parent(model: Path, target: str) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(model), target],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert parent.stdout is not None
    line = parent.stdout.readline().strip()
    if not line:
        parent.kill()
        parent.wait()
        pytest.fail("the parent did not start its server")
    return parent, int(line)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_server_exits_when_its_parent_dies(
    tmp_path: Path, standin: Path, how: signal.Signals
) -> None:
    model = tmp_path / "model.gguf"
    parent, server_pid = _start_parent(model, STANDIN)
    try:
        assert not _process_gone(server_pid)
        os.kill(parent.pid, how)
        parent.wait(timeout=10)
        assert _wait_gone(server_pid, 5.0), f"the server {server_pid} outlived its parent"
    finally:
        if not _process_gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


@pytest.mark.integration
@requires_local
def test_the_real_llama_server_exits_when_its_parent_is_killed(local_model_file: Path) -> None:
    parent, server_pid = _start_parent(local_model_file, "llama_cpp.server")
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(server_pid, 5.0), f"llama.cpp's server {server_pid} outlived its parent"
    finally:
        if not _process_gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)


async def test_a_graph_turn_fails_with_the_line_and_the_next_turn_works(
    standin: Path, tmp_path: Path
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph.graph import compile_graph
    from agentic_memory.models.embeddings import LocalEmbeddings
    from agentic_memory.store.embedded import EmbeddedStore
    from tests.fakes import ScriptedChatModel

    _configure(standin, die_signal="SIGILL", die_on_starts=[2, 3])
    embeddings = LocalEmbeddings()
    memory = ScriptedChatModel(structured_defaults={"ExtractedFacts": {"facts": []}})
    with EmbeddedStore(tmp_path / "store", dims=embeddings.dims) as store:
        app = compile_graph(
            checkpointer=InMemorySaver(),
            store=store,
            embeddings=embeddings,
            chat_model=resolve_chat_model("local", max_tokens=16),
            memory_model=memory,
        )
        config = {"configurable": {"thread_id": "t1"}}
        context = {"user_id": "alice"}
        first = await app.ainvoke({"messages": [HumanMessage("hi")]}, config, context=context)
        assert first["messages"][-1].content == "hello from start 1"
        # The server is killed between turns: the next request starts a new one, which
        # dies, and so does the one the retry starts: the turn fails with the line.
        pid = local_server.get_local_server().pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert _wait_gone(pid)
        with pytest.raises(
            AnswerFailedError, match=r"died: killed by SIGILL: llama\.cpp was built"
        ) as failed:
            await app.ainvoke({"messages": [HumanMessage("and now")]}, config, context=context)
        assert isinstance(failed.value.__cause__, LocalServerDied)
        assert "the thread is as it was before it" in str(failed.value)
        out = await app.ainvoke({"messages": [HumanMessage("hi again")]}, config, context=context)
    assert out["messages"][-1].content == "hello from start 4"

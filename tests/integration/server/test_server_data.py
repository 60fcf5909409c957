"""Where ``make run``'s server keeps its data, who can read it, and how forgetting reaches it.

``make run`` runs ``python -m agentic_memory.graph.serve``: ``langgraph dev`` started from
``$AMEM_HOME/langgraph-dev`` with umask 077, its checkpoints in the checkpointer
``langgraph.json`` names (``$AMEM_HOME/checkpoints.sqlite``). These tests run that command
for real (a free port, the scripted model server), hold conversations through the SDK and
through ``amem chat`` in the same ``AMEM_HOME``, and check file modes and file bytes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from agentic_memory.graph.serve import SERVER_DIR, exposure_line, prepare
from tests.fake_openai import FakeOpenAIServer
from tests.integration.server.conftest import STARTUP_TIMEOUT_S, _stop, free_port

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]
FLUSH_S = 10
"""langgraph_runtime_inmem rewrites its files every 10 s (``_persistence._flush_interval``)."""

ALICE_SERVER_SECRET = "ZEBRA-4411-server"
ALICE_CHAT_SECRET = "PLUM-7781-chat"
BOB_SECRET = "OTTER-5522-bob"


@contextmanager
def served(cwd: Path, env: dict[str, str], log: Path, *args: str) -> Iterator[tuple[str, str]]:
    """Run ``python -m agentic_memory.graph.serve`` as ``make run`` does; yield its URL and first line."""
    port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                str(BIN / "python"),
                "-m",
                "agentic_memory.graph.serve",
                "--port",
                str(port),
                "--no-reload",
                *args,
            ],
            cwd=cwd,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"not ready in {STARTUP_TIMEOUT_S}s:\n{log.read_text()}")
            time.sleep(0.5)
        yield url, log.read_text().splitlines()[0]
    finally:
        _stop(process)
        print(f"\n----- server log ({log}) -----\n{log.read_text(errors='replace')[-20000:]}")


def _env(fake: FakeOpenAIServer, home: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "AMEM_HOME": home,
        "AMEM_STORE": "embedded",
        "AMEM_BASE_URL": fake.base_url,
        "AMEM_MODEL_NAME": "fake-model",
        "AMEM_MODEL_CLASS": "capable",
        "LANGSMITH_TRACING": "false",
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }


async def _turn(url: str, user: str, text: str) -> str:
    client = get_client(url=url)
    thread = await client.threads.create(metadata={"user_id": user})
    out = await client.runs.wait(
        thread["thread_id"],
        "agent",
        input={"messages": [{"role": "user", "content": text}]},
        context={"user_id": user},
        raise_error=True,
    )
    assert isinstance(out, dict) and out["messages"][-1]["type"] == "ai", out
    return str(thread["thread_id"])


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _holding(folder: Path, secret: str) -> list[str]:
    return [str(p.relative_to(folder)) for p in _files(folder) if secret.encode() in p.read_bytes()]


def _amem(
    cwd: Path, env: dict[str, str], *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "amem"), *args],
        cwd=cwd,
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


async def test_make_run_keeps_server_data_private_and_forget_reaches_all_of_it(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    with FakeOpenAIServer() as fake:
        # A relative AMEM_HOME, as a user may set it: it means the folder where make ran.
        env = _env(fake, "home")
        home = elsewhere / "home"
        with served(elsewhere, env, tmp_path / "serve.log") as (url, first_line):
            assert first_line.startswith("WARNING: no authentication: anyone who can reach")
            assert 'client.store.search_items(("facts",))' in first_line
            alice_thread = await _turn(url, "alice", f"My bank code is {ALICE_SERVER_SECRET}.")
            bob_thread = await _turn(url, "bob", f"My bank code is {BOB_SECRET}.")
            # Alice also talks through `amem chat` on the same AMEM_HOME: a t-… thread.
            chat = _amem(
                elsewhere,
                env,
                "chat",
                "--user",
                "alice",
                "--no-stream",
                stdin=f"{ALICE_CHAT_SECRET}\n",
            )
            assert chat.returncode == 0, chat.stderr
            chat_thread = chat.stdout.partition("New conversation on thread ")[2].split()[0]
            assert chat_thread.startswith("t-")
            time.sleep(FLUSH_S + 1)

            server_dir = home / SERVER_DIR
            data = server_dir / ".langgraph_api"
            assert not (elsewhere / ".langgraph_api").exists(), "nothing in the working dir"
            assert data.is_dir() and (home / "checkpoints.sqlite").is_file()
            # Private: the folders 0700, every file the server or the store wrote 0600.
            for folder in (server_dir, data):
                assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
            loose = {
                str(p): oct(stat.S_IMODE(p.stat().st_mode))
                for p in _files(home)
                if stat.S_IMODE(p.stat().st_mode) & 0o077
            }
            assert loose == {}
            # Her words are on disk before she is forgotten (the checks below are not vacuous).
            assert _holding(home, ALICE_SERVER_SECRET) and _holding(home, ALICE_CHAT_SECRET)

            forgot = _amem(
                elsewhere, env, "memories", "forget", "--user", "alice", "--all", "--yes",
                "--server", url, "--json",
            )  # fmt: skip
            assert forgot.returncode == 0, forgot.stderr
            report: dict[str, Any] = json.loads(forgot.stdout)
            assert report["server_threads"] == [alice_thread]
            assert chat_thread in report["threads"]  # refused by the server, deleted locally
            assert report["server_error"] is None and report["server_failed"] == []
            client = get_client(url=url)
            with pytest.raises(NotFoundError):
                await client.threads.get(alice_thread)
            assert (await client.threads.get(bob_thread))["metadata"]["user_id"] == "bob"

            time.sleep(FLUSH_S + 1)
            # No file under AMEM_HOME holds what she said, through either path, any more:
            # the server's own files, the checkpoints (and their write-ahead log), the store.
            assert _holding(home, ALICE_SERVER_SECRET) == []
            assert _holding(home, ALICE_CHAT_SECRET) == []
            assert _holding(home, BOB_SECRET), "bob's conversation is still there"

        # A restart on the same AMEM_HOME finds bob's thread where the checkpointer left it.
        with served(elsewhere, env, tmp_path / "serve2.log") as (url, _):
            state = await get_client(url=url).threads.get_state(bob_thread)
            assert BOB_SECRET in json.dumps(state["values"]["messages"])
            with pytest.raises(NotFoundError):
                await get_client(url=url).threads.get(alice_thread)


def test_the_first_line_says_who_can_read_what() -> None:
    open_config = json.loads((REPO / "langgraph.json").read_text())
    auth_config = json.loads((REPO / "langgraph.auth.json").read_text())
    line = exposure_line(open_config, "http://127.0.0.1:2024")
    assert "no authentication" in line and "make run CONFIG=langgraph.auth.json" in line
    assert "AMEM_AUTH_TOKENS" in line and "\n" not in line
    line = exposure_line(auth_config, "http://127.0.0.1:2024")
    assert line.startswith("Authentication on") and "AMEM_AUTH_TOKENS" in line


def test_prepare_links_the_graphs_and_tightens_an_older_folder(tmp_path: Path) -> None:
    old = tmp_path / "home" / SERVER_DIR / ".langgraph_api"
    old.mkdir(parents=True, mode=0o755)
    os.chmod(old, 0o755)
    stale = old / ".langgraph_ops.pckl"
    stale.write_bytes(b"threads")
    os.chmod(stale, 0o644)
    (old.parent / "graph").symlink_to(tmp_path)  # a link left pointing elsewhere
    folder = prepare(tmp_path / "home")
    assert folder == old.parent and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(old.stat().st_mode) == 0o700
    assert stat.S_IMODE(stale.stat().st_mode) == 0o600
    for name in ("graph", "ingest"):
        assert (folder / name).resolve() == (REPO / name).resolve()
    assert prepare(tmp_path / "home") == folder  # twice: the same

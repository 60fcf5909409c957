"""Fixtures for the server tests: the scripted OpenAI-compatible server, a real ``langgraph dev``.

``run_dev_server`` starts ``langgraph dev`` from a scratch directory holding a copy of one of
the repository's configuration files and symlinks to the packages it names (the CLI resolves
graph paths against its working directory and writes ``.langgraph_api/`` there), so the
repository stays clean and the test exercises the exact configuration users run. It uses the
embedded store under a temporary ``AMEM_HOME``, and the scripted model server for models.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[3]
LANGGRAPH = Path(sys.executable).with_name("langgraph")
STARTUP_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    url: str
    log: Path
    home: Path
    fake: FakeOpenAIServer

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else "(no log)"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    # The CLI spawns workers; signal the whole session it leads.
    for sig, wait_s in ((signal.SIGINT, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def run_dev_server(
    tmp_path: Path,
    *,
    config: str = "langgraph.json",
    tool_scripts: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    run: str = "server",
) -> Iterator[DevServer]:
    """Run ``langgraph dev`` with a repository config file until the block ends.

    ``run`` names the log. The working directory (where the server keeps its threads, in
    ``.langgraph_api/``) and the ``AMEM_HOME`` are always the same under ``tmp_path``, so a
    second run in one test is a restart on the same threads and memories.
    """
    if not LANGGRAPH.exists():
        pytest.skip(f"langgraph CLI not found next to {sys.executable}")
    # A second server on the same tmp_path is a restart: same folder, same threads, same data.
    workdir = tmp_path / "server"
    workdir.mkdir(exist_ok=True)
    settings = json.loads((REPO / config).read_text())
    shutil.copy(REPO / config, workdir / "langgraph.json")
    paths = list(settings["graphs"].values())
    for key in ("auth", "store", "checkpointer"):
        if isinstance(settings.get(key), dict) and settings[key].get("path"):
            paths.append(settings[key]["path"])
    # Module paths (agentic_memory.graph.graph:graph) come from the installed package; only
    # file paths need their folder beside the copied configuration.
    for package in {Path(path.partition(":")[0]).parts[0] for path in paths if "/" in path}:
        if package != "." and not (workdir / package).exists():
            (workdir / package).symlink_to(REPO / package, target_is_directory=True)
    home = tmp_path / "amem-home"
    log = tmp_path / f"langgraph-dev-{run}.log"
    port = free_port()
    with FakeOpenAIServer(tool_scripts=dict(tool_scripts or {})) as fake:
        environment = dict(os.environ)
        environment.update(
            AMEM_HOME=str(home),
            AMEM_STORE="embedded",
            AMEM_BASE_URL=fake.base_url,
            AMEM_MODEL_NAME="fake-model",
            # The scripted server plays a capable model (the full prompt), at 127.0.0.1.
            AMEM_MODEL_CLASS="capable",
            LANGGRAPH_NO_VERSION_CHECK="true",
            LANGSMITH_TRACING="false",
            HF_HUB_OFFLINE="1",
            PYTHONUNBUFFERED="1",
        )
        environment.update(env or {})
        with log.open("ab") as sink:
            process = subprocess.Popen(
                [
                    str(LANGGRAPH),
                    "dev",
                    "--no-browser",
                    "--no-reload",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                cwd=workdir,
                env=environment,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = DevServer(url=f"http://127.0.0.1:{port}", log=log, home=home, fake=fake)
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while True:
                if process.poll() is not None:
                    pytest.fail(
                        f"langgraph dev exited with {process.returncode}:\n{server.log_text()}"
                    )
                try:
                    with urllib.request.urlopen(f"{server.url}/ok", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"langgraph dev not ready in {STARTUP_TIMEOUT_S}s:\n{server.log_text()}"
                    )
                time.sleep(0.5)
            yield server
        finally:
            _stop(process)
            # Captured output: pytest shows it only when the test fails.
            print(f"\n----- langgraph dev log ({log}) -----\n{server.log_text()[-20000:]}")

"""The deployment's smoke script against two replicas that run here.

Two ``langgraph dev`` servers on free ports stand for two replicas of the agent's server:
authentication on (``langgraph.auth.json``), the PostgreSQL checkpointer for both
(``graph/persistence.py``'s ``open_checkpointer`` named as the server's checkpointer, on
a real PostgreSQL the tests start), the memory on one Weaviate (the tests' fake, ranking
like the server, on real ports) with writes coordinated through the same PostgreSQL, each
replica with its own ``AMEM_HOME`` (another machine), and the scripted model server.
``deploy/smoke.py`` runs as users run it: a turn on A, A restarted by ``--restart`` (which
stops the process and starts a new one), B continuing the thread and seeing the memories,
A seeing B's turn. Without a shared checkpointer the script fails, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.fake_openai import FakeOpenAIServer
from tests.integration.deploy import replica
from tests.integration.server.conftest import free_port
from tests.unit.store.weaviate.network import NetworkWeaviate
from tests.unit.store.weaviate.server import FakeWeaviate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[3]
TOKEN = "smoke-token"
USER = "smoke"


@contextmanager
def two_replicas(
    tmp_path: Path, postgres_uri: str, *, shared_checkpointer: bool
) -> Iterator[list[tuple[str, Path]]]:
    """Start two replicas; yield (URL, state file) of each; stop them."""
    if not replica.LANGGRAPH.exists():
        pytest.skip(f"langgraph CLI not found next to {sys.executable}")
    config = json.loads((REPO / "langgraph.auth.json").read_text())
    if shared_checkpointer:
        # The server's checkpointer: PostgreSQL at AMEM_POSTGRES_URI (graph/persistence.py).
        config["checkpointer"] = {
            "backend": "custom",
            "path": "agentic_memory.graph.persistence.open_checkpointer",
        }
    else:
        # Each replica keeps its own checkpoints (the server's in-memory default).
        config.pop("checkpointer", None)
    with (
        NetworkWeaviate(FakeWeaviate()) as weaviate,
        FakeOpenAIServer(tool_scripts={"ExtractedFacts": {"facts": []}}) as model,
    ):
        states: list[Path] = []
        urls: list[str] = []
        try:
            for i in range(2):
                workdir = tmp_path / f"replica{i}"
                workdir.mkdir()
                (workdir / "langgraph.json").write_text(json.dumps(config))
                for package in ("graph", "ingest"):
                    (workdir / package).symlink_to(REPO / package, target_is_directory=True)
                env = dict(os.environ)
                env.update(
                    AMEM_HOME=str(tmp_path / f"replica{i}-home"),
                    AMEM_STORE="weaviate",
                    WEAVIATE_URL=weaviate.url,
                    WEAVIATE_GRPC_PORT=str(weaviate.grpc_port),
                    AMEM_POSTGRES_URI=postgres_uri,
                    AMEM_AUTH_TOKENS=f"{TOKEN}={USER}",
                    AMEM_BASE_URL=model.base_url,
                    AMEM_MODEL_NAME="fake-model",
                    LANGGRAPH_NO_VERSION_CHECK="true",
                    LANGSMITH_TRACING="false",
                    HF_HUB_OFFLINE="1",
                    PYTHONUNBUFFERED="1",
                    PYTHONPATH=str(REPO),
                )
                state = tmp_path / f"replica{i}.json"
                port = free_port()
                replica.launch(workdir, port, env, tmp_path / f"replica{i}.log", state)
                states.append(state)
                urls.append(f"http://127.0.0.1:{port}")
            yield list(zip(urls, states, strict=True))
        finally:
            for state in states:
                replica.stop(state)
            for i in range(len(states)):
                log = tmp_path / f"replica{i}.log"
                text = log.read_text(errors="replace") if log.exists() else "(no log)"
                print(f"\n----- replica {i} log -----\n{text[-8000:]}")


def smoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "deploy" / "smoke.py"), *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )


def test_the_smoke_script_passes_against_two_replicas_sharing_postgres(
    tmp_path: Path, postgres_uri: str
) -> None:
    with two_replicas(tmp_path, postgres_uri, shared_checkpointer=True) as replicas:
        (a, a_state), (b, _) = replicas
        first_pid = json.loads(a_state.read_text())["pid"]
        result = smoke(
            "--replica",
            a,
            "--replica",
            b,
            "--token",
            TOKEN,
            "--user",
            USER,
            "--restart",
            f"{sys.executable} -m tests.integration.deploy.replica restart {a_state}",
            "--timeout",
            "240",
        )
        print(result.stdout, result.stderr)
        assert result.returncode == 0, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        assert [line.split(" (")[0] for line in lines if line.startswith("ok")] == [
            "ok   replicas ready",
            "ok   a turn on replica A",
            "ok   the turn is in the memory store",
            "ok   replica A restarts",
            "ok   replica B continues the thread and sees the memories",
            "ok   replica A, restarted, sees replica B's turn",
        ]
        assert json.loads(a_state.read_text())["pid"] != first_pid, "A was not restarted"
        assert "cleanup: 4 logged message(s) deleted; thread deleted" in result.stdout
        # The replicas coordinated their memory writes through the checkpointer's database.
        with psycopg.connect(postgres_uri, autocommit=True) as conn:
            (sessions,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentic-memory'"
            ).fetchone() or (0,)
        assert sessions >= 1


def test_the_smoke_script_fails_when_the_replicas_do_not_share_a_checkpointer(
    tmp_path: Path, postgres_uri: str
) -> None:
    with two_replicas(tmp_path, postgres_uri, shared_checkpointer=False) as replicas:
        (a, _), (b, _) = replicas
        result = smoke(
            "--replica", a, "--replica", b, "--token", TOKEN, "--user", USER, "--timeout", "240"
        )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL replica B continues the thread" in result.stdout
    assert "is the checkpointer shared by every replica" in result.stdout
    assert "smoke check FAILED" in result.stdout


def test_the_smoke_script_refuses_other_than_two_replicas() -> None:
    result = smoke("--replica", "http://127.0.0.1:1")
    assert result.returncode == 2
    assert "exactly two --replica" in result.stderr

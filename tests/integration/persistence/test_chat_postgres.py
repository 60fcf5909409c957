"""The chat and `forget --thread` on the PostgreSQL checkpointer (``AMEM_POSTGRES_URI``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.persistence.conftest import postgres_uri  # noqa: F401  (the server fixture)
from tests.unit.cli.test_chat import AMEM, TIMEOUT, env, home, server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


def test_a_thread_resumes_and_is_forgotten_in_postgres(
    env: dict[str, str],  # noqa: F811
    postgres_uri: str,  # noqa: F811
) -> None:
    env = {**env, "AMEM_POSTGRES_URI": postgres_uri}

    def amem(*args: str, script: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AMEM, *args], input=script, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )

    first = amem(
        "chat", "--user", "pat", "--thread", "pg1", "--new", "--no-stream", script="Hello\n"
    )
    assert first.returncode == 0, first.stderr
    second = amem("chat", "--user", "pat", "--thread", "pg1", "--no-stream", script="/quit\n")
    assert "Resuming thread pg1 (2 messages)" in second.stdout
    forgotten = amem("memories", "forget", "--user", "pat", "--thread", "pg1", "--json")
    assert forgotten.returncode == 0, forgotten.stderr
    report = json.loads(forgotten.stdout)
    assert report["threads"] == ["pg1"]
    assert {(r["store"], r["collection"]): r["deleted"] for r in report["deleted"]}[
        ("checkpointer", "checkpoints")
    ] > 0
    third = amem(
        "chat", "--user", "pat", "--thread", "pg1", "--new", "--no-stream", script="/quit\n"
    )
    assert "New conversation on thread pg1" in third.stdout
    # SQLite was never used.
    assert not (Path(env["AMEM_HOME"]) / "checkpoints.sqlite").exists()

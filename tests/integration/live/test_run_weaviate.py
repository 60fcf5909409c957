"""``make test-weaviate`` without Docker: the runner against a fake ``docker`` on PATH and a
fake readiness endpoint, and the Makefile target as a dry run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.live import run_weaviate

ROOT = Path(__file__).resolve().parents[3]

FAKE_DOCKER = """\
#!{python}
import json, os, sys
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
fail = os.environ.get("FAKE_DOCKER_FAIL", "")
if fail and fail in sys.argv[1:]:
    sys.exit(1)
if "logs" in sys.argv:
    print("weaviate-1  | fake server log line")
"""


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake ``docker`` first on PATH; returns the file its calls are logged to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "docker.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.delenv("FAKE_DOCKER_FAIL", raising=False)
    # The stand-in suite needs none of the project's pytest plugins: a faster start.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return log


def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


class _Ready(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v1/.well-known/ready" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A readiness endpoint standing in for the started server; its port is the test port."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    port = int(httpd.server_address[1])
    monkeypatch.setenv("WEAVIATE_TEST_HTTP_PORT", str(port))
    monkeypatch.setenv("WEAVIATE_TEST_GRPC_PORT", "50999")
    try:
        yield port
    finally:
        httpd.shutdown()
        httpd.server_close()


def _suite(tmp_path: Path, *, passes: bool) -> list[str]:
    """A stand-in for the live suite: records the environment pytest runs it with."""
    seen = tmp_path / "seen.json"
    test = tmp_path / "test_stand_in.py"
    test.write_text(
        textwrap.dedent(
            f"""
            import json, os
            def test_stand_in():
                keys = ("WEAVIATE_URL", "WEAVIATE_GRPC_PORT", "WEAVIATE_GRPC_HOST",
                        "AMEM_REQUIRE_WEAVIATE", "WEAVIATE_HTTP_PORT")
                with open({str(seen)!r}, "w") as f:
                    json.dump({{k: os.environ.get(k) for k in keys}}, f)
                assert {passes!r}
            """
        )
    )
    return ["--", str(test), "-q", "-p", "no:cacheprovider"]


def _compose_prefix() -> list[str]:
    return run_weaviate.compose()[1:]  # without "docker"


def test_starts_waits_runs_the_suite_and_removes_the_project(
    docker: Path, server: int, tmp_path: Path
) -> None:
    assert run_weaviate.main(_suite(tmp_path, passes=True)) == 0
    calls = _calls(docker)
    prefix = _compose_prefix()
    assert calls == [["compose", "version"], [*prefix, "up", "-d"], [*prefix, "down", "-v"]]
    assert prefix[:3] == ["compose", "-p", "amem-weaviate-test"]
    assert prefix[3:] == [
        "-f",
        str(ROOT / "docker-compose.yml"),
        "-f",
        str(ROOT / "tests/integration/live/weaviate-test.compose.yml"),
    ]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {
        "WEAVIATE_URL": f"http://127.0.0.1:{server}",
        "WEAVIATE_GRPC_PORT": "50999",
        "WEAVIATE_GRPC_HOST": "127.0.0.1",
        "AMEM_REQUIRE_WEAVIATE": "1",
        "WEAVIATE_HTTP_PORT": str(server),
    }


def test_a_failing_suite_fails_the_run_and_still_removes_the_project(
    docker: Path, server: int, tmp_path: Path
) -> None:
    assert run_weaviate.main(_suite(tmp_path, passes=False)) == 1
    assert _calls(docker)[-1] == [*_compose_prefix(), "down", "-v"]


def test_a_server_that_never_gets_ready_fails_with_its_log(
    docker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("WEAVIATE_TEST_HTTP_PORT", str(run_weaviate.free_port()))
    assert run_weaviate.main(["--timeout", "1", *_suite(tmp_path, passes=True)]) == 1
    calls = _calls(docker)
    prefix = _compose_prefix()
    assert calls[-2:] == [[*prefix, "logs", "--tail", "60"], [*prefix, "down", "-v"]]
    assert not (tmp_path / "seen.json").exists()  # the suite never ran
    assert "was not ready after 1 s" in capsys.readouterr().err


def test_a_failed_start_fails_and_cleans_up(
    docker: Path, server: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "up")
    assert run_weaviate.main(_suite(tmp_path, passes=True)) == 1
    assert _calls(docker)[-1] == [*_compose_prefix(), "down", "-v"]
    assert not (tmp_path / "seen.json").exists()


def test_keep_leaves_the_server_running(
    docker: Path, server: int, tmp_path: Path, capsys: Any
) -> None:
    assert run_weaviate.main(["--keep", *_suite(tmp_path, passes=True)]) == 0
    assert [*_compose_prefix(), "down", "-v"] not in _calls(docker)
    assert "left running at" in capsys.readouterr().err


def test_without_docker_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert run_weaviate.main(_suite(tmp_path, passes=True)) == 2
    assert "needs Docker" in capsys.readouterr().err
    assert not (tmp_path / "seen.json").exists()


def test_without_the_compose_plugin_nothing_runs(
    docker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "version")
    assert run_weaviate.main(_suite(tmp_path, passes=True)) == 2
    assert _calls(docker) == [["compose", "version"]]


def test_the_make_target_runs_the_runner() -> None:
    dry = subprocess.run(
        # Under `make test` the parent's MAKELEVEL would make this make print directory lines.
        ["make", "-n", "--no-print-directory", "-W", ".venv/bin/.installed", "test-weaviate"]
        + ["ARGS=--keep"],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}},
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        dry.stdout.strip()
        .splitlines()[-1]
        .endswith("/python -m tests.integration.live.run_weaviate --keep")
    )


def test_the_test_project_overrides_only_what_the_suite_needs() -> None:
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    over = yaml.safe_load((ROOT / "tests/integration/live/weaviate-test.compose.yml").read_text())
    assert set(over["services"]) == {"weaviate"} <= set(base["services"])
    service = over["services"]["weaviate"]
    assert set(service) == {"restart", "environment"}
    assert int(service["environment"]["PERSISTENCE_MEMTABLES_FLUSH_DIRTY_AFTER_SECONDS"]) >= 3600
    # A project of its own: never the user's agentic-memory containers or volume.
    assert run_weaviate.PROJECT != base["name"]

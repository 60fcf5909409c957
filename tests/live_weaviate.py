"""The live Weaviate of a test session: the pinned server, started on first use, stopped at the end.

Every test that needs a real Weaviate asks for ``live_weaviate`` (the server) or
``weaviate_env`` (the server, with ``WEAVIATE_URL``, ``WEAVIATE_GRPC_HOST`` and
``WEAVIATE_GRPC_PORT`` set for the test, so ``open_store(backend="weaviate")`` reaches it).

- With ``WEAVIATE_URL`` set in the environment, the tests use that server (it must answer
  ``/v1/.well-known/ready``) and start none.
- Otherwise the first such test starts one node of the binary ``make weaviate-server`` built
  (``agentic_memory.store.weaviate.launcher``) on free ports with a data folder of the
  session's temporary directory, configured like ``docker-compose.yml`` except that the
  periodic memtable flush waits an hour (the churn suite forces its flushes and a timer
  flush must not come in between). It is stopped by its PID when the session ends, also
  after a failure or Ctrl-C (and the kernel kills it if pytest itself is killed).
- Without a binary (no Go, no module proxy: ``make weaviate-server`` said why in one line)
  the tests skip with that line, or fail with it when ``AMEM_REQUIRE_WEAVIATE`` is set.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from agentic_memory.store.weaviate.launcher import Node, unavailable_reason

SESSION_SERVER_ENV = {"PERSISTENCE_MEMTABLES_FLUSH_DIRTY_AFTER_SECONDS": "3600"}
"""What the session's server sets beyond ``docker-compose.yml``."""


@dataclass(frozen=True)
class LiveWeaviate:
    """A ready Weaviate: the session's own node, or the one ``WEAVIATE_URL`` names."""

    url: str
    grpc_host: str
    grpc_port: int
    node: Node | None
    """The launched node; ``None`` for a server of the environment."""

    def client_env(self) -> dict[str, str]:
        """Return the variables that point the store at this server."""
        return {
            "WEAVIATE_URL": self.url,
            "WEAVIATE_GRPC_HOST": self.grpc_host,
            "WEAVIATE_GRPC_PORT": str(self.grpc_port),
        }


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with ``reason``; fail with it when ``AMEM_REQUIRE_WEAVIATE`` asks for a live run."""
    if os.environ.get("AMEM_REQUIRE_WEAVIATE"):
        pytest.fail(f"AMEM_REQUIRE_WEAVIATE is set but {reason}", pytrace=False)
    pytest.skip(reason)


def _ready(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/.well-known/ready", timeout=5) as r:
            return None if r.status == 200 else f"HTTP {r.status}"
    except (urllib.error.URLError, OSError) as exc:
        return str(exc)


def start_node(folder: Path) -> Node:
    """Start a node with its data under ``folder``; the caller stops it."""
    for attempt in range(3):
        node = Node(folder / f"node{attempt + 1}", extra_env=SESSION_SERVER_ENV)
        try:
            node.start()
            return node
        except RuntimeError as exc:
            # A free port can be taken by another program before the server binds it.
            if "address already in use" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture
def own_weaviate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveWeaviate]:
    """A node of this test's own: the session's may hold its collections at another size."""
    if os.environ.get("WEAVIATE_URL", "").strip():
        skip_or_fail("this test starts a node of its own; unset WEAVIATE_URL to run it")
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    node = start_node(tmp_path / "weaviate")
    live = LiveWeaviate(node.url, "127.0.0.1", node.ports.grpc, node)
    for key, value in live.client_env().items():
        monkeypatch.setenv(key, value)
    try:
        yield live
    finally:
        node.stop()


@pytest.fixture(scope="session")
def live_weaviate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveWeaviate]:
    """The session's Weaviate (see the module docstring)."""
    external = os.environ.get("WEAVIATE_URL", "").strip()
    if external:
        problem = _ready(external)
        if problem is not None:
            skip_or_fail(f"Weaviate at WEAVIATE_URL={external} is not ready ({problem})")
        host = os.environ.get("WEAVIATE_GRPC_HOST", "").strip()
        host = host or (urllib.parse.urlsplit(external).hostname or "localhost")
        port = int(os.environ.get("WEAVIATE_GRPC_PORT", "").strip() or 50051)
        yield LiveWeaviate(external, host, port, None)
        return
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    node = start_node(tmp_path_factory.mktemp("weaviate"))
    try:
        yield LiveWeaviate(node.url, "127.0.0.1", node.ports.grpc, node)
    finally:
        node.stop()
        # The objects are throw-away; the log beside them stays for a failed run.
        shutil.rmtree(node.data_dir, ignore_errors=True)


@pytest.fixture
def weaviate_env(live_weaviate: LiveWeaviate, monkeypatch: pytest.MonkeyPatch) -> LiveWeaviate:
    """The session's Weaviate, with the store's variables pointing at it for this test."""
    for key, value in live_weaviate.client_env().items():
        monkeypatch.setenv(key, value)
    return live_weaviate

"""A three-node Weaviate cluster on this machine, for the cluster tests (issue 29, item 4).

``weaviate_cluster`` starts the pinned server (``make weaviate-server`` builds it) as three
processes of ``agentic_memory.store.weaviate.launcher.Cluster``: each node its own free
ports (REST, gRPC, gossip, data, Raft) and data folder, joined by gossip and one Raft group,
``REPLICATION_MINIMUM_FACTOR`` 3 as in ``docker-compose.cluster.yml``. It is started by the
first test that needs it and stopped (each node by its PID) when the session ends; without
a binary the tests skip with ``make weaviate-server``'s one-line reason, or fail with it
under ``AMEM_REQUIRE_WEAVIATE``.

Each test gets the cluster with every node running and none of the app's collections left
(``cluster``), and opens stores on the node it names (``LiveCluster.store``), with the
replication factor and consistency level the docs name for a cluster (3, ``QUORUM``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pytest

from agentic_memory.store.weaviate import ScaleSettings, WeaviateStore
from agentic_memory.store.weaviate.launcher import Cluster, Node, unavailable_reason
from tests.integration.persistence.conftest import postgres_uri
from tests.live_weaviate import skip_or_fail

__all__ = ["postgres_uri"]  # the persistence tests' PostgreSQL, for the machines test

T = TypeVar("T")

CLUSTER_ENV = {
    "REPLICATION_MINIMUM_FACTOR": "3",
    # Async replication's timers, shortened from 30 s so that a restarted node catches up in
    # seconds, not a minute (the defaults are measured in docs/weaviate.md).
    "ASYNC_REPLICATION_FREQUENCY": "5s",
    "ASYNC_REPLICATION_PROPAGATION_DELAY": "5s",
}
"""What the test cluster sets beyond ``docker-compose.yml``'s settings."""

REPLICAS = 3
CATCH_UP_TIMEOUT_S = 240.0
"""How long a restarted node may take to hold every object again (async replication)."""


@dataclass
class LiveCluster:
    """The session's three nodes, and stores opened on any of them."""

    cluster: Cluster

    @property
    def nodes(self) -> list[Node]:
        return self.cluster.nodes

    def store(
        self,
        node: Node,
        dims: int,
        *,
        consistency: str = "QUORUM",
        coordinator: str | None = "local",
    ) -> WeaviateStore:
        """Open the store on ``node`` as a deployment does: replication factor 3."""
        return WeaviateStore.connect(
            dims,
            url=node.url,
            grpc_port=node.ports.grpc,
            scale=ScaleSettings(replication_factor=REPLICAS, consistency=consistency),
            coordinator=coordinator,
        )

    def leader(self) -> Node:
        """The node that leads the Raft group now (it holds the schema's writes)."""
        for node in self.nodes:
            if not node.running():
                continue
            with urllib.request.urlopen(node.url + "/v1/cluster/statistics", timeout=10) as r:
                stats = json.load(r)["statistics"]
            names = {s.get("leaderId") for s in stats} - {None, ""}
            if len(names) == 1:
                [name] = names
                return next(n for n in self.nodes if n.name == name)
        raise AssertionError("the cluster has no leader")

    def restart(self, node: Node) -> None:
        self.cluster.restart(node)

    def start_stopped(self) -> None:
        """Bring back any node an earlier test (or a failure) left down."""
        for node in self.nodes:
            if not node.running():
                self.cluster.restart(node)

    def drop_app_collections(self) -> None:
        cleaner = self.store(self.nodes[0], 8)
        try:
            for name in cleaner.collections():
                cleaner.drop_collection(name)
        finally:
            cleaner.close()


def eventually(check: Callable[[], T], ok: Callable[[T], bool], timeout: float) -> T:
    """Call ``check`` until ``ok`` holds for its value or ``timeout`` passes; return the last."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if ok(value) or time.monotonic() >= deadline:
            return value
        time.sleep(1.0)


def replicas_agree(
    readers: dict[str, WeaviateStore], collection: str, user: str | None, timeout: float
) -> float:
    """Wait until every node's own replica of ``collection`` holds the same objects.

    Same ids and same properties, listed through each node (a listing reads the replica of
    the node it reaches). Counts alone do not show an update a replica missed: a write at
    ``QUORUM`` may leave one replica behind until async replication brings it the newer
    version. Returns the seconds it took; fails naming the nodes that differ.
    """

    def contents() -> dict[str, dict[str, dict[str, object]]]:
        return {
            name: {o.id: dict(o.properties) for o in reader.iterate(collection, user=user)}
            for name, reader in readers.items()
        }

    def agree(seen: dict[str, dict[str, dict[str, object]]]) -> bool:
        first = next(iter(seen.values()))
        return all(held == first for held in seen.values())

    started = time.monotonic()
    seen = eventually(contents, agree, timeout)
    first_name, first = next(iter(seen.items()))
    differ = {
        name: sorted(oid for oid in set(held) | set(first) if held.get(oid) != first.get(oid))[:3]
        for name, held in seen.items()
        if held != first
    }
    assert not differ, f"{collection} ({user}): objects differing from {first_name}'s: {differ}"
    return time.monotonic() - started


@pytest.fixture(scope="session")
def weaviate_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    """Three nodes of the pinned server, joined, for the whole session."""
    reason = unavailable_reason()
    if reason is not None:
        skip_or_fail(reason)
    root = tmp_path_factory.mktemp("weaviate-cluster")
    cluster = Cluster(root / "nodes", size=REPLICAS, extra_env=CLUSTER_ENV)
    try:
        cluster.start()
        yield LiveCluster(cluster)
    finally:
        cluster.stop()
        # The objects are throw-away; the logs beside the data folders stay for a failed run.
        for node in cluster.nodes:
            shutil.rmtree(node.data_dir, ignore_errors=True)


@pytest.fixture
def cluster(weaviate_cluster: LiveCluster) -> Iterator[LiveCluster]:
    """The session's cluster with every node running and none of the app's collections."""
    weaviate_cluster.start_stopped()
    weaviate_cluster.drop_app_collections()
    yield weaviate_cluster
    with contextlib.suppress(Exception):
        weaviate_cluster.start_stopped()

"""Agent processes on different nodes write the same user's memories: exact counts, nothing lost.

The replicas test (``tests/integration/replicas/test_machines.py``) on the live cluster: each
machine is a spawned process with its own ``AMEM_HOME`` (its own lock files) and its own
client, connected to its own node of the three (as a deployment's replicas each talk to
their node), writing facts, rule versions and turns of one user at once, at ``QUORUM`` with
replication factor 3; a real PostgreSQL, started by the tests, coordinates them (the
deployment's database, ``AMEM_POSTGRES_URI``). A node answers searches from its own replica,
which may not hold yet what another machine wrote a moment ago through another node; the
server's create checks the id at ``QUORUM`` before writing.

Afterwards, through every node at ``ALL``: every acknowledged fact version, rule version and
turn is there exactly once, in each writer's order, and the counts are exact.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import queue
import time
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds.facts import FACTS
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.kinds.rules import RULES
from agentic_memory.store.weaviate import ScaleSettings, WeaviateStore
from tests.integration.cluster.conftest import (
    CATCH_UP_TIMEOUT_S,
    LiveCluster,
    eventually,
    replicas_agree,
)
from tests.integration.concurrency.workers import DIMS
from tests.integration.replicas import machines
from tests.integration.replicas.checks import CHECKS
from tests.integration.replicas.machines import USER, Plan, writer_name
from tests.unit.store.weaviate.network import connect

pytestmark = [pytest.mark.weaviate, pytest.mark.timeout(900)]

WRITES = {"facts": 10, "rules": 10, "messages": 16}
RESULT_TIMEOUT_S = 600
SCALE = ScaleSettings(replication_factor=3, consistency="QUORUM")


def _open_on_node(plan: Plan) -> WeaviateStore:
    """``machines.open_machine_store``, at the consistency level the docs name for a cluster."""
    os.environ["AMEM_HOME"] = plan.home
    os.environ.pop("AMEM_COORDINATOR_URI", None)
    assert plan.postgres is not None
    os.environ["AMEM_POSTGRES_URI"] = plan.postgres
    store = WeaviateStore(connect(plan.http_port, plan.grpc_port), dims=DIMS, scale=SCALE)
    # The store's default coordinator is the deployment's database, not this machine's files.
    assert store.coordination.uri == plan.postgres, store.coordination.describe()
    return store


def cluster_machine_main(plan: Plan, start: Any, results: Any) -> None:
    """A machine of the replicas test whose store is opened on its node at ``QUORUM``."""
    machines.open_machine_store = _open_on_node
    machines.machine_main(plan, start, results)


def test_machines_on_three_nodes_lose_nothing_with_postgres(
    cluster: LiveCluster, tmp_path: Path, postgres_uri: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    plans = [
        Plan(
            name=f"m{i}",
            home=str(tmp_path / f"m{i}"),
            http_port=node.ports.http,
            grpc_port=node.ports.grpc,
            postgres=postgres_uri,
            writes=WRITES,
        )
        for i, node in enumerate(cluster.nodes)
    ]
    start = ctx.Barrier(len(plans))
    processes = [ctx.Process(target=cluster_machine_main, args=(p, start, results)) for p in plans]
    started = time.monotonic()
    for process in processes:
        process.start()
    reports: dict[str, dict[str, Any]] = {}
    try:
        while len(reports) < len(plans):
            try:
                name, acknowledged, _ = results.get(timeout=RESULT_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(
                    f"machines did not finish in {RESULT_TIMEOUT_S}s: have {sorted(reports)}"
                )
            assert "error" not in acknowledged, f"machine {name} failed: {acknowledged['error']}"
            reports[name] = acknowledged
        for process in processes:
            process.join(timeout=60)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
    assert [p.exitcode for p in processes] == [0] * len(plans)
    print(f"\n{len(plans)} machines wrote in {time.monotonic() - started:.1f}s")

    expected = {
        FACTS.name: len(plans) * WRITES["facts"],
        RULES.name: len(plans) * WRITES["rules"] + 1,  # and the default version 1
        MESSAGES.name: len(plans) * WRITES["messages"],
    }
    readers = {
        node.name: WeaviateStore(
            connect(node.ports.http, node.ports.grpc),
            dims=DIMS,
            scale=ScaleSettings(replication_factor=3, consistency="ALL"),
        )
        for node in cluster.nodes
    }
    try:
        for name, reader in readers.items():
            for collection, count in expected.items():
                held = eventually(
                    functools.partial(reader.count, collection, user=USER),
                    count.__eq__,
                    CATCH_UP_TIMEOUT_S,
                )
                assert held == count, f"{name} holds {held} of {count} in {collection}"
        # A count misses an update one replica has not had yet (a fact's flag cleared at
        # QUORUM): the checks below read each node's replica once they all agree, listed at
        # ONE (a listing at ALL would repair what it reads on the way).
        own = {node.name: cluster.store(node, DIMS, consistency="ONE") for node in cluster.nodes}
        try:
            for collection in expected:
                took = replicas_agree(own, collection, USER, CATCH_UP_TIMEOUT_S)
                print(f"the replicas of {collection} agreed after {took:.1f}s")
        finally:
            for store in own.values():
                store.close()
        for name, reader in readers.items():
            for kind, check in CHECKS.items():
                acknowledged = {
                    writer_name(p.name, kind, 0): reports[p.name][writer_name(p.name, kind, 0)]
                    for p in plans
                }
                done = {writer: WRITES[kind] for writer in acknowledged}
                held = check(reader, acknowledged, done, [])
                print(f"{name} at ALL: {kind} {held} stored, each acknowledged write once")
    finally:
        for reader in readers.values():
            reader.close()

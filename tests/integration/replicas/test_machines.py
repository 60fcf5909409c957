"""Writers on several machines lose no fact version, rule version or turn, with PostgreSQL.

Each machine is a spawned process with its own ``AMEM_HOME`` (its own lock files: the file
locks of one machine do not reach another) and its own real weaviate client, writing facts,
rule versions and turns of one user at once through one ``NetworkWeaviate``, whose create
checks and then writes with a 20 ms window between (``usecases/objects/add.go``: ``Exists``,
then the put; on a replicated cluster the replicator runs in between). A real PostgreSQL,
started by the tests, is the deployment's database (``AMEM_POSTGRES_URI``, the
checkpointer's), which the store coordinates through by default.

One more machine, the victim, writes the same memories until the server kills it with
SIGKILL while one of its creates is inside the window, holding the lock (its write lands,
unacknowledged); PostgreSQL releases the lock with the dead session, the others go on.
Counts are exact: every acknowledged write once, in order; the victim's a prefix.

Without PostgreSQL the same machines lose updates (the last test), which is why the
deployment guide puts every replica on the checkpointer's database.

The same machines, with PostgreSQL and their sweepers, also write through the session's live
Weaviate (the last test) and pass the same exact checks. No victim there: the live server's
create window cannot be hooked, and a writer killed at a random moment showed, once in six
runs, a version another machine had acknowledged replaced by the dead writer's create (its
request, past the server's existence check, landed after PostgreSQL had released the dead
session's lock and the other machine had written: a lock is no fence). That gap belongs to
the coordination design (docs/storage.md, "Concurrent writers").
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import signal
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.langgraph_store.generic import ITEMS
from agentic_memory.langgraph_store.store import MIN_SWEEP_MINUTES
from agentic_memory.store import Where
from agentic_memory.store.weaviate import WeaviateStore
from tests.integration.concurrency.workers import DIMS, HashEmbeddings
from tests.integration.replicas.checks import CHECKS
from tests.integration.replicas.conftest import SharedWeaviate
from tests.integration.replicas.machines import USER, Plan, machine_main, writer_name
from tests.unit.store.weaviate.network import NetworkWeaviate, connect, request_text

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

MACHINES = 3
WRITES = {"facts": 5, "rules": 5, "messages": 8}
VICTIM = "victim"
KILL_AT_CREATE = 4
"""The victim dies while its 4th create is in the server's window."""
RESULT_TIMEOUT_S = 400


@dataclass
class Outcome:
    acknowledged: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    """Kind -> writer -> what its calls reported."""
    done: dict[str, dict[str, int]] = field(default_factory=dict)
    """Kind -> finished writer -> writes it made."""
    killed: dict[str, list[str]] = field(default_factory=dict)
    """Kind -> writers of the killed machine."""
    sweeps: dict[str, dict[str, int]] = field(default_factory=dict)
    kill_seen: list[str] = field(default_factory=list)


def run_machines(
    network: SharedWeaviate,
    tmp_path: Path,
    postgres: str | None,
    *,
    victim: bool,
    sweep_minutes: float | None = None,
) -> Outcome:
    """Start the machines (and the victim) together; return what they reported."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()

    def plan(name: str, writes: dict[str, int]) -> Plan:
        return Plan(
            name=name,
            home=str(tmp_path / name),
            http_port=network.http_port,
            grpc_port=network.grpc_port,
            postgres=postgres,
            writes=writes,
            sweep_minutes=sweep_minutes,
        )

    plans = [plan(f"m{i}", WRITES) for i in range(MACHINES)]
    if victim:
        plans.append(plan(VICTIM, dict.fromkeys(WRITES, 10_000)))
    start = ctx.Barrier(len(plans))
    processes = {p.name: ctx.Process(target=machine_main, args=(p, start, results)) for p in plans}
    outcome = Outcome()
    creates = 0
    lock = threading.Lock()

    def kill_in_window(body: dict[str, Any]) -> None:
        nonlocal creates
        if VICTIM not in request_text(body):
            return
        with lock:
            creates += 1
            if creates == KILL_AT_CREATE:
                pid = processes[VICTIM].pid
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                outcome.kill_seen.append(request_text(body))

    if victim:
        assert network.server is not None, "only the fake's create window can be hooked"
        network.server.in_window = kill_in_window
    for process in processes.values():
        process.start()
    try:
        reports: dict[str, tuple[dict[str, Any], dict[str, int]]] = {}
        while len(reports) < MACHINES:
            try:
                name, acknowledged, sweeps = results.get(timeout=RESULT_TIMEOUT_S)
            except queue.Empty:
                pytest.fail(
                    f"machines did not finish in {RESULT_TIMEOUT_S}s: have {sorted(reports)}"
                )
            assert "error" not in acknowledged, f"machine {name} failed: {acknowledged['error']}"
            reports[name] = (acknowledged, sweeps)
        for name, process in processes.items():
            process.join(timeout=None if name != VICTIM else 60)
    finally:
        for process in processes.values():
            if process.is_alive():
                process.kill()
                process.join()
        if network.server is not None:
            network.server.in_window = None
    for name, process in processes.items():
        expected = -signal.SIGKILL if name == VICTIM else 0
        assert process.exitcode == expected, f"{name} exited with {process.exitcode}"
    if victim:
        assert outcome.kill_seen, "the victim was not killed inside a create"
    for kind in WRITES:
        outcome.acknowledged[kind] = {}
        outcome.done[kind] = {}
        outcome.killed[kind] = [writer_name(VICTIM, kind, 0)] if victim else []
        for name, (acknowledged, _) in reports.items():
            writer = writer_name(name, kind, 0)
            outcome.acknowledged[kind][writer] = acknowledged[writer]
            outcome.done[kind][writer] = WRITES[kind]
    outcome.sweeps = {name: sweeps for name, (_, sweeps) in reports.items()}
    return outcome


def check_everything(store: WeaviateStore, outcome: Outcome) -> dict[str, int]:
    return {
        kind: check(store, outcome.acknowledged[kind], outcome.done[kind], outcome.killed[kind])
        for kind, check in CHECKS.items()
    }


@pytest.fixture
def reader(network: SharedWeaviate) -> Any:
    store = WeaviateStore(connect(network.http_port, network.grpc_port), dims=DIMS)
    yield store
    store.close()


def test_machines_lose_nothing_with_postgres_while_one_is_killed_mid_write(
    network: SharedWeaviate, tmp_path: Path, postgres_uri: str, reader: WeaviateStore
) -> None:
    outcome = run_machines(network, tmp_path, postgres_uri, victim=True)
    counts = check_everything(reader, outcome)
    # Every finished machine's writes are there, plus what the victim stored before dying.
    assert counts["facts"] >= MACHINES * WRITES["facts"]
    assert counts["rules"] >= MACHINES * WRITES["rules"] + 1
    assert counts["messages"] >= MACHINES * WRITES["messages"]
    # The victim's create in flight landed, after its client was killed.
    assert any(VICTIM in text for text in outcome.kill_seen)


def _seed_expired(reader: WeaviateStore) -> tuple[int, int]:
    """Old turns of another thread and generic items whose TTL ran out; return their counts."""
    long_ago = datetime.now(UTC) - timedelta(days=400)
    log = MessageLog(reader, HashEmbeddings())
    old_turns = [{"role": "user", "content": f"old turn {i}"} for i in range(12)]
    asyncio.run(log.aremember(USER, "old", old_turns, now=long_ago))
    clock = AgenticStore(reader, HashEmbeddings(), clock=lambda: long_ago)
    for i in range(7):
        clock.put(("scratch", USER), f"note{i}", {"text": f"note {i}"}, ttl=5)
    clock.put(("scratch", USER), "kept", {"text": "no ttl"})
    return len(old_turns), 7


def test_machines_lose_nothing_with_the_sweeper_running_in_every_process(
    network: SharedWeaviate, tmp_path: Path, postgres_uri: str, reader: WeaviateStore
) -> None:
    old_turns, expired_items = _seed_expired(reader)
    # The shortest interval the store allows (one second): a shorter one is refused.
    outcome = run_machines(
        network, tmp_path, postgres_uri, victim=True, sweep_minutes=MIN_SWEEP_MINUTES
    )
    check_everything(reader, outcome)
    # Every surviving machine's sweeper ran while the writers wrote, and together they
    # deleted exactly what had expired: the old thread, the generic items past their TTL.
    for name, sweeps in outcome.sweeps.items():
        assert sweeps["ttl_runs"] >= 1 and sweeps["retention_runs"] >= 1, (name, sweeps)
    old = reader.count(MESSAGES.name, user=USER, where=[Where("thread_id", "eq", "old")])
    assert old == 0
    assert reader.count(ITEMS.name) == 1  # the item without a TTL
    deleted_turns = sum(s["retention"] for s in outcome.sweeps.values())
    deleted_items = sum(s["ttl"] for s in outcome.sweeps.values())
    # The victim's sweeper may have deleted some before it died: never more than once.
    assert deleted_turns <= old_turns and deleted_items <= expired_items
    print(f"\nsweeps per machine: {outcome.sweeps}")


def test_without_postgres_the_same_machines_lose_updates(
    fake_network: NetworkWeaviate, tmp_path: Path
) -> None:
    """The check the tests above pass fails when the machines share no lock."""
    network = SharedWeaviate(fake_network.http_port, fake_network.grpc_port, fake_network.server)
    outcome = run_machines(network, tmp_path, None, victim=False)
    reader = WeaviateStore(connect(network.http_port, network.grpc_port), dims=DIMS)
    failures: dict[str, str] = {}
    for kind, check in CHECKS.items():
        try:
            check(reader, outcome.acknowledged[kind], outcome.done[kind], [])
        except AssertionError as exc:
            failures[kind] = str(exc).splitlines()[0]
    reader.close()
    assert failures, "no update was lost without PostgreSQL: the fake's window never opened"
    print(f"\nlost without PostgreSQL: {failures}")


@pytest.mark.weaviate
def test_machines_on_the_live_server_lose_nothing_with_postgres_and_their_sweepers(
    live_network: SharedWeaviate, tmp_path: Path, postgres_uri: str
) -> None:
    reader = WeaviateStore(connect(live_network.http_port, live_network.grpc_port), dims=DIMS)
    try:
        old_turns, expired_items = _seed_expired(reader)
        outcome = run_machines(
            live_network, tmp_path, postgres_uri, victim=False, sweep_minutes=MIN_SWEEP_MINUTES
        )
        counts = check_everything(reader, outcome)
        assert counts == {
            "facts": MACHINES * WRITES["facts"],
            "rules": MACHINES * WRITES["rules"] + 1,
            "messages": MACHINES * WRITES["messages"],
        }
        for name, sweeps in outcome.sweeps.items():
            assert sweeps["ttl_runs"] >= 1 and sweeps["retention_runs"] >= 1, (name, sweeps)
        old = reader.count(MESSAGES.name, user=USER, where=[Where("thread_id", "eq", "old")])
        assert old == 0 and reader.count(ITEMS.name) == 1
        # Sweepers racing may both count a delete, never delete what had not expired.
        assert sum(s["retention"] for s in outcome.sweeps.values()) >= old_turns
        assert sum(s["ttl"] for s in outcome.sweeps.values()) >= expired_items
    finally:
        reader.close()

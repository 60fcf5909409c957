"""PostgreSQL coordination of Weaviate's create-only writes: the setting, the lock, failing closed.

Against a real PostgreSQL started by the tests. ``PostgresLocks`` objects stand for machines
(each has its own connections); the store tests use the in-process fake Weaviate through the
real client, with two store handles on different lock directories as two machines.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agentic_memory.store.weaviate as wv
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import ConflictError, InvalidInputError, MemoryObject, make_id
from agentic_memory.store.coordination import (
    NAMESPACE,
    CoordinatorError,
    PostgresLocks,
    coordination_setting,
    lock_key,
)
from tests.integration.concurrency.workers import DIMS
from tests.unit.store.weaviate.conftest import scripted_client
from tests.unit.store.weaviate.server import FakeWeaviate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

VEC = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def msg(key: str, turn: int) -> MemoryObject:
    props = {"content": key, "role": "human", "thread_id": "t", "turn": turn}
    return MemoryObject(make_id(key), props, VEC)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def advisory_locks(uri: str) -> list[tuple[int, int, bool]]:
    """(classid, objid, granted) of the advisory locks this module's namespace holds now."""
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT classid::bigint, objid::bigint, granted FROM pg_locks "
            "WHERE locktype = 'advisory' AND classid::bigint = %s",
            (NAMESPACE,),
        ).fetchall()
    return [(int(c), int(o), bool(g)) for c, o, g in rows]


def objid(*key: str) -> int:
    # pg_locks shows the second key as an unsigned 32-bit oid.
    return lock_key(*key) % 2**32


# -- the setting ----------------------------------------------------------------------------


def test_the_setting_defaults_to_the_deployments_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    assert coordination_setting().uri is None
    # `langgraph dev` runs the agent with DATABASE_URI=:memory: (found by `make run
    # STORE=weaviate`, whose server failed to start): no database, so this machine's locks.
    monkeypatch.setenv("DATABASE_URI", ":memory:")
    assert coordination_setting().uri is None
    monkeypatch.setenv("POSTGRES_URI", "postgresql://server@db/langgraph")
    assert coordination_setting().source == "POSTGRES_URI"
    monkeypatch.setenv("DATABASE_URI", "postgresql://server@db/database")
    assert coordination_setting().source == "DATABASE_URI"  # what LangGraph's server reads first
    monkeypatch.setenv("AMEM_POSTGRES_URI", "postgresql://agent:secret@db/checkpoints")
    chosen = coordination_setting()
    assert (chosen.uri, chosen.source) == (
        "postgresql://agent:secret@db/checkpoints",
        "AMEM_POSTGRES_URI",
    )
    assert "secret" not in chosen.describe() and "***" in chosen.describe()
    monkeypatch.setenv("AMEM_COORDINATOR_URI", "postgres://locks@other/db")
    assert coordination_setting().uri == "postgres://locks@other/db"
    monkeypatch.setenv("AMEM_COORDINATOR_URI", "local")
    local = coordination_setting()
    assert local.uri is None and "AMEM_COORDINATOR_URI=local" in local.describe()
    # An argument wins over every variable.
    assert coordination_setting("host=db dbname=x").uri == "host=db dbname=x"
    assert coordination_setting("LOCAL").uri is None


@pytest.mark.parametrize(
    "value", ["mysql://db/x", "http://db:5432/x", "host=db dbname", "postgresql://db:notaport/x"]
)
def test_a_bad_setting_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AMEM_POSTGRES_URI", value)
    with pytest.raises(InvalidInputError, match="AMEM_POSTGRES_URI"):
        coordination_setting()
    with pytest.raises(InvalidInputError, match="coordinator argument"):
        coordination_setting(value)


def test_a_bad_setting_is_refused_before_connecting_to_weaviate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMEM_COORDINATOR_URI", "mysql://db/x")
    # Nothing listens on this port: the error must come from the setting, not the server.
    with pytest.raises(InvalidInputError, match="AMEM_COORDINATOR_URI"):
        wv.WeaviateStore.connect(DIMS, url=f"http://127.0.0.1:{unused_port()}")


# -- the lock -------------------------------------------------------------------------------


@pytest.fixture
def machines(postgres_uri: str) -> Iterator[Callable[..., PostgresLocks]]:
    made: list[PostgresLocks] = []

    def make(**kwargs: Any) -> PostgresLocks:
        locks = PostgresLocks(postgres_uri, **kwargs)
        made.append(locks)
        return locks

    yield make
    for locks in made:
        locks.close()


def test_one_key_is_held_by_one_machine_at_a_time(
    machines: Callable[..., PostgresLocks], postgres_uri: str
) -> None:
    a, b = machines(), machines()
    order: list[str] = []
    b_waiting = threading.Event()

    def second() -> None:
        b_waiting.set()
        with b.hold("MessageLog", "alice"):
            order.append("b")

    with ThreadPoolExecutor(1) as pool:
        with a.hold("MessageLog", "alice") as held:
            held.check()
            assert advisory_locks(postgres_uri) == [(NAMESPACE, objid("MessageLog", "alice"), True)]
            waiting = pool.submit(second)
            b_waiting.wait()
            # b's session queues behind a's lock in PostgreSQL.
            deadline = time.monotonic() + 30
            while len(advisory_locks(postgres_uri)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert sorted(g for *_, g in advisory_locks(postgres_uri)) == [False, True]
            order.append("a")
    waiting.result()
    assert order == ["a", "b"]
    assert advisory_locks(postgres_uri) == []


def test_other_keys_do_not_wait(machines: Callable[..., PostgresLocks]) -> None:
    a, b = machines(), machines(wait_seconds=2)
    with a.hold("MessageLog", "alice"), b.hold("MessageLog", "bob"), b.hold("UserFact", "alice"):
        pass


def test_a_lock_held_too_long_elsewhere_fails_closed(
    machines: Callable[..., PostgresLocks],
) -> None:
    a, b = machines(), machines(wait_seconds=0.3)
    with a.hold("UserFact", "alice"):
        with pytest.raises(CoordinatorError, match=r"more than 0\.3 s.*nothing was written"):
            with b.hold("UserFact", "alice"):
                pytest.fail("the lock was granted twice")
    with b.hold("UserFact", "alice"):  # and b works again afterwards
        pass


HOLDER = """
import sys, time
from agentic_memory.store.coordination import PostgresLocks
with PostgresLocks(sys.argv[1]).hold("ProceduralRules", "alice"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_the_lock_of_a_killed_holder_is_released(
    machines: Callable[..., PostgresLocks], postgres_uri: str, tmp_path: Path
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, postgres_uri], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        waiter = machines(wait_seconds=0.5)
        with pytest.raises(CoordinatorError):
            with waiter.hold("ProceduralRules", "alice"):
                pass
        holder.kill()  # SIGKILL: no unlock, no commit; PostgreSQL sees the socket close
        holder.wait()
        with machines(wait_seconds=20).hold("ProceduralRules", "alice"):
            pass
    finally:
        holder.kill()
        holder.wait()


def _terminate(postgres_uri: str, state: str) -> int:
    with psycopg.connect(postgres_uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'agentic-memory' AND state = %s",
            (state,),
        ).fetchall()
    return len(rows)


def test_a_session_ended_while_holding_reports_the_write_failed(
    machines: Callable[..., PostgresLocks], postgres_uri: str
) -> None:
    a = machines()
    with pytest.raises(CoordinatorError, match="ended before the write finished"):
        with a.hold("MessageLog", "alice"):
            assert _terminate(postgres_uri, "idle in transaction") == 1
    with a.hold("MessageLog", "alice"):  # a new connection
        pass


def test_a_stuck_holder_is_ended_by_postgres_and_cannot_overlap(
    machines: Callable[..., PostgresLocks],
) -> None:
    """A holder idle past ``idle_seconds`` loses its session; it writes nothing after
    ``hold_seconds``, and another machine takes the lock meanwhile."""
    stuck = machines(hold_seconds=0.2, idle_seconds=1.0)
    other = machines(wait_seconds=20)
    taken = threading.Event()

    def take() -> None:
        with other.hold("UserFact", "alice"):
            taken.set()

    with pytest.raises(CoordinatorError) as ended:
        with stuck.hold("UserFact", "alice") as held:
            with ThreadPoolExecutor(1) as pool:
                got = pool.submit(take)
                time.sleep(1.5)  # stuck past PostgreSQL's idle-in-transaction timeout
                with pytest.raises(CoordinatorError, match=r"held for more than 0\.2 s"):
                    held.check()
                got.result(timeout=20)
    assert taken.is_set()
    assert "ended before the write finished" in str(ended.value)


def test_a_pooled_connection_postgres_dropped_is_replaced(
    machines: Callable[..., PostgresLocks], postgres_uri: str
) -> None:
    a = machines()
    with a.hold("MessageLog", "alice"):
        pass
    assert _terminate(postgres_uri, "idle") == 1  # the pooled connection, between writes
    with a.hold("MessageLog", "alice"):
        pass


def test_an_unreachable_postgres_fails_closed_without_leaking_the_password() -> None:
    locks = PostgresLocks(
        f"postgresql://agent:hunter2@127.0.0.1:{unused_port()}/db", connect_seconds=2
    )
    with pytest.raises(CoordinatorError, match="nothing was written") as info:
        with locks.hold("MessageLog", "alice"):
            pytest.fail("no lock without PostgreSQL")
    assert "hunter2" not in str(info.value) and "agent:***@" in str(info.value)


def test_bad_times_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="below idle_seconds"):
        PostgresLocks("postgresql://db/x", hold_seconds=300, idle_seconds=300)
    with pytest.raises(InvalidInputError, match="wait_seconds"):
        PostgresLocks("postgresql://db/x", wait_seconds=0)


# -- the store ------------------------------------------------------------------------------


@pytest.fixture
def server() -> FakeWeaviate:
    return FakeWeaviate()


@pytest.fixture
def open_store(server: FakeWeaviate, tmp_path: Path) -> Iterator[Callable[..., wv.WeaviateStore]]:
    opened: list[wv.WeaviateStore] = []

    def _open(machine: str, coordinator: str) -> wv.WeaviateStore:
        store = wv.WeaviateStore(
            scripted_client(server),
            dims=DIMS,
            lock_dir=tmp_path / "locks" / machine,
            coordinator=coordinator,
        )
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


def test_two_machines_racing_one_id_create_it_once_with_postgres(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore], postgres_uri: str
) -> None:
    """The race ``test_writers_on_two_machines_can_both_create_one_id`` loses, won."""
    stores = [open_store("m1", postgres_uri), open_store("m2", postgres_uri)]
    stores[0].ensure_collection(MESSAGES)
    held_during_create: list[list[tuple[int, int, bool]]] = []

    def in_window(_: str) -> None:
        held_during_create.append(advisory_locks(postgres_uri))
        time.sleep(0.1)  # the other machine would pass its checks now, without the lock

    server.pause_create = in_window
    start = threading.Barrier(2)

    def attempt(i: int) -> str:
        start.wait()
        try:
            stores[i].insert(MESSAGES.name, [msg("race", i)], user="alice")
        except ConflictError:
            return "conflict"
        return "created"

    with ThreadPoolExecutor(2) as pool:
        outcomes = sorted(pool.map(attempt, range(2)))
    assert outcomes == ["conflict", "created"]
    assert server.creates == 1
    # The create ran while this machine held the partition's lock in PostgreSQL.
    (locks,) = held_during_create
    assert (NAMESPACE, objid(MESSAGES.name, "alice"), True) in locks


def test_an_unreachable_coordinator_fails_the_insert_and_writes_nothing(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    store = open_store("m1", f"postgresql://agent:hunter2@127.0.0.1:{unused_port()}/db")
    store.ensure_collection(MESSAGES)
    before = len(server.rest)
    with pytest.raises(CoordinatorError, match="nothing was written"):
        store.insert(MESSAGES.name, [msg("a", 0), msg("b", 1)], user="alice")
    assert not [r for r in server.rest[before:] if r[1] == "/v1/objects"]
    assert store.count(MESSAGES.name, user="alice") == 0
    # Reads and upserts do not need the coordinator.
    store.upsert(MESSAGES.name, [msg("c", 2)], user="alice")
    assert store.count(MESSAGES.name, user="alice") == 1


def test_a_write_that_outlives_its_hold_stops_and_undoes_itself(
    server: FakeWeaviate, tmp_path: Path, postgres_uri: str
) -> None:
    store = wv.WeaviateStore(
        scripted_client(server), dims=DIMS, lock_dir=tmp_path / "locks", coordinator=postgres_uri
    )
    try:
        store.ensure_collection(MESSAGES)
        remote = store._inserts.remote
        assert remote is not None
        remote.hold_seconds = 0.2
        server.pause_create = lambda _: time.sleep(0.3)  # Weaviate answering slowly
        with pytest.raises(CoordinatorError, match="held for more than 0.2 s"):
            store.insert(MESSAGES.name, [msg("a", 0), msg("b", 1)], user="alice")
        assert server.creates == 1  # the second create never started…
        assert store.count(MESSAGES.name, user="alice") == 0  # …and the first was undone
    finally:
        store.close()

"""Concurrent writers on several simulated machines: throughput and the cost of coordinating them.

Three parts, one run:

A. **The PostgreSQL primitive, per write** (loopback, no Weaviate): what each way of deciding
   a race costs one writer, alone and with ``--clients`` writers at once on distinct keys and
   on one key. ``advisory``: ``PostgresLocks.hold`` as the store uses it (``BEGIN``, the
   timeouts and ``pg_advisory_xact_lock`` in one round trip, ``COMMIT`` in another).
   ``ledger``: an insert-only table whose primary key (partition, object id) decides the race
   (one ``INSERT``, all the batch's ids or none). ``lease``: the same table used as a lock
   (insert a row per partition, delete it after the write; a writer that finds the row
   retries).
B. **Writers on simulated machines** (``--machines`` processes, each with its own lock
   directory and weaviate client, ``--writers`` threads each, ``--writes`` writes per writer)
   against the in-memory Weaviate of the tests served on real ports (its create keeps a
   ``--window`` ms check-to-write window), for facts (one subject superseded over and over)
   and logged turns (one thread), with every writer on one user (contended) or each on its
   own user (the common case: many users). Modes: ``local`` (file locks only: each machine
   excludes only itself), ``advisory`` (what the store does with PostgreSQL configured),
   ``ledger`` (facts only: a turn's guard, "no later turn in the thread", is not an id, so no
   unique key of a ledger expresses it). Reported: writes/s over the whole run, p50 ms per
   write, the time per write spent taking and releasing the PostgreSQL lock (its wait
   included), and what was lost (checked exactly as the tests check).
C. **A writer killed mid-write**, then another machine writes the same subject: with the
   advisory lock PostgreSQL releases the dead session's lock; with the ledger the dead
   writer's claim stays, and the id it claimed can never be created. And a subject forgotten
   and written again: the ledger still holds its first value's id.

The Weaviate is the tests' fake (``tests/unit/store/weaviate/network.py``), a Python server: absolute
writes/s say little about a real cluster; the ratios between modes and the PostgreSQL costs
per write are what to compare. PostgreSQL runs on the same machine (loopback round trips).

Run (from the repository root): ``PYTHONPATH=$PWD python bench/replicas_bench.py
[--postgres URI] [--machines 3] [--writers 2] [--writes 15] [--ops 400] [--clients 6]
[--window 2] [--rounds 3] [--out bench/results/replicas.md]``. Without ``--postgres`` a throw-away server
is started with ``initdb`` (as user ``postgres`` when run as root).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import importlib
import multiprocessing
import os
import platform
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the fake Weaviate lives with the tests
    sys.path.insert(0, str(ROOT))

from agentic_memory.kinds.facts import FACTS, FactStore, successor_id  # noqa: E402
from agentic_memory.kinds.messages import MessageLog  # noqa: E402
from agentic_memory.store import ConflictError  # noqa: E402
from agentic_memory.store.coordination import (  # noqa: E402
    Held,
    PostgresLocks,
    WriteLocks,
)
from agentic_memory.store.locks import KeyLocks  # noqa: E402
from agentic_memory.store.types import CollectionSpec, UpsertResult, Writes  # noqa: E402
from agentic_memory.store.weaviate import WeaviateStore, tenant_name  # noqa: E402

DIMS = 8
MODES = ("local", "advisory", "ledger")
LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS amem_ledger ("
    "partition text NOT NULL, oid uuid NOT NULL, claimed_at timestamptz NOT NULL DEFAULT now(), "
    "PRIMARY KEY (partition, oid))"
)
LEASE_DDL = "CREATE TABLE IF NOT EXISTS amem_lease (partition text PRIMARY KEY)"


def _tests(module: str) -> Any:
    """Import a module of the tests (loaded dynamically: not part of the typed packages)."""
    return importlib.import_module(f"tests.{module}")


# -- PostgreSQL -------------------------------------------------------------------------------


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Start a PostgreSQL server on a free port (as the tests do); yield its URI."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    bindir = Path(found[-1]).parent if found else Path(shutil.which("initdb") or "initdb").parent
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="amem-bench-pg-"))
    if prefix:
        owner = pwd.getpwnam("postgres")
        os.chown(base, owner.pw_uid, owner.pw_gid)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    data = base / "data"
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
        + ["--no-sync", "-E", "UTF8", "--no-locale"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-h 127.0.0.1 -p {port} -k {base} -c fsync=off -c max_connections=200"
    subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log")]
        + ["-o", options, "-w", "start"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def given_postgres(uri: str) -> Iterator[str]:
    """Yield a PostgreSQL the caller runs."""
    yield uri


def _ddl(uri: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(LEDGER_DDL)
        conn.execute(LEASE_DDL)
        conn.execute("TRUNCATE amem_ledger, amem_lease")


class _Pooled:
    """Autocommit connections taken from a pool for one statement at a time, as the store's."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = psycopg.connect(self.uri, autocommit=True)
        try:
            yield conn
        finally:
            with self._lock:
                self._idle.append(conn)

    def prewarm(self, n: int) -> None:
        """Open ``n`` connections now, so that no timed write opens one."""
        opened = [psycopg.connect(self.uri, autocommit=True) for _ in range(n)]
        with self._lock:
            self._idle.extend(opened)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class Ledger(_Pooled):
    """An insert-only ledger of created ids: its primary key decides which writer creates."""

    def claim(self, partition: str, ids: Sequence[str]) -> bool:
        """Claim every id or none (one statement); return whether this writer won."""
        with self._conn() as conn:
            try:
                conn.execute(
                    "INSERT INTO amem_ledger (partition, oid) SELECT %s, unnest(%s::uuid[])",
                    (partition, list(ids)),
                )
            except psycopg.errors.UniqueViolation:
                return False
        return True


class Lease(_Pooled):
    """The ledger's table used as a lock: a row per held partition, deleted after the write."""

    @contextmanager
    def hold(self, partition: str) -> Iterator[None]:
        """Hold the partition's row for the block (retrying while another writer has it)."""
        with self._conn() as conn:
            while True:
                try:
                    conn.execute("INSERT INTO amem_lease (partition) VALUES (%s)", (partition,))
                    break
                except psycopg.errors.UniqueViolation:
                    time.sleep(0.001)
            try:
                yield
            finally:
                conn.execute("DELETE FROM amem_lease WHERE partition = %s", (partition,))


# -- A. the primitive --------------------------------------------------------------------------


def _one_op(strategy: str, objects: Any) -> Callable[[str], None]:
    if strategy == "advisory":
        locks: PostgresLocks = objects

        def advisory(key: str) -> None:
            with locks.hold("UserFact", key):
                pass

        return advisory
    if strategy == "ledger":
        ledger: Ledger = objects

        def claim(key: str) -> None:
            ledger.claim(key, [str(uuid.uuid4())])

        return claim
    lease: Lease = objects

    def leased(key: str) -> None:
        with lease.hold(key):
            pass

    return leased


def _time_clients(
    op: Callable[[str], None], clients: int, per_client: int, same_key: bool
) -> tuple[list[float], float]:
    """Run ``op`` from ``clients`` threads at once; return each call's seconds and the wall."""
    times: list[float] = []
    lock = threading.Lock()

    def run(c: int) -> None:
        mine = []
        for i in range(per_client):
            key = "shared" if same_key else f"k{c}-{i % 7}"
            t = time.perf_counter()
            op(key)
            mine.append(time.perf_counter() - t)
        with lock:
            times.extend(mine)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, range(clients)))
    return times, time.perf_counter() - start


def primitive_costs(uri: str, ops: int, clients: int) -> list[dict[str, Any]]:
    """Time each strategy: alone, ``clients`` at once on distinct keys, and on one key."""
    _ddl(uri)
    rows: list[dict[str, Any]] = []
    for strategy in ("advisory", "ledger", "lease"):
        made: PostgresLocks | Ledger | Lease
        if strategy == "advisory":
            made = PostgresLocks(uri)
        elif strategy == "ledger":
            made = Ledger(uri)
        else:
            made = Lease(uri)
        op = _one_op(strategy, made)
        _time_clients(op, clients, 10, False)  # connections opened, plans cached
        for label, n_clients, same_key in (
            ("1 writer", 1, False),
            (f"{clients} writers, distinct keys", clients, False),
            (f"{clients} writers, one key", clients, True),
        ):
            times, wall = _time_clients(op, n_clients, max(1, ops // n_clients), same_key)
            rows.append(
                {
                    "strategy": strategy,
                    "case": label,
                    "ops_per_s": len(times) / wall,
                    "p50_ms": 1000 * statistics.median(times),
                    "p95_ms": 1000 * float(np.percentile(np.array(times), 95)),
                    "round_trips": {"advisory": 2, "ledger": 1, "lease": 2}[strategy],
                }
            )
        made.close()
    return rows


# -- B. simulated machines ---------------------------------------------------------------------


class TimedLocks(PostgresLocks):
    """``PostgresLocks`` that adds up the time spent taking and releasing the lock."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.seconds = 0.0
        self._add = threading.Lock()

    @contextmanager
    def hold(self, *key: str) -> Iterator[Held]:
        """Hold ``key`` as ``PostgresLocks`` does, counting the time outside the block."""
        entered = time.perf_counter()
        with super().hold(*key) as held:
            taken = time.perf_counter()
            yield held
            leaving = time.perf_counter()
        done = time.perf_counter()
        with self._add:
            self.seconds += (taken - entered) + (done - leaving)


class LedgerStore(WeaviateStore):
    """The Weaviate store with the ledger deciding ids instead of a lock across machines."""

    def __init__(self, client: Any, *, ledger: Ledger, **kwargs: Any) -> None:
        super().__init__(client, coordinator="local", **kwargs)
        self.ledger = ledger
        self.seconds = 0.0
        self._add = threading.Lock()

    def _insert(self, spec: CollectionSpec, user: str | None, batch: Writes) -> UpsertResult:
        if batch.unless:
            raise NotImplementedError("a ledger of ids cannot decide an insert's guard")
        partition = f"{spec.name}/{tenant_name(user) if user is not None else ''}"
        started = time.perf_counter()
        won = self.ledger.claim(partition, [o.id for o in batch.objects])
        with self._add:
            self.seconds += time.perf_counter() - started
        if not won:
            raise ConflictError(f"an id of {spec.name!r} is claimed in the ledger")
        return super()._insert(spec, user, batch)

    def close(self) -> None:
        """Close the store and the ledger's connections."""
        super().close()
        self.ledger.close()


@dataclass
class Run:
    """One configuration of part B and what it measured."""

    mode: str
    kind: str
    shared: bool
    writes: int = 0
    wall_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    coordination_s: float = 0.0
    lost: str = ""
    round: int = 0


def _open(mode: str, uri: str, http: int, grpc: int, home: str) -> WeaviateStore:
    client = _tests("weaviate_unit.network").connect(http, grpc)
    lock_dir = Path(home) / "locks"
    if mode == "ledger":
        return LedgerStore(client, ledger=Ledger(uri), dims=DIMS, lock_dir=lock_dir)
    store = WeaviateStore(client, dims=DIMS, lock_dir=lock_dir, coordinator="local")
    if mode == "advisory":
        store._inserts = WriteLocks(KeyLocks(lock_dir), TimedLocks(uri))
    return store


def machine(
    mode: str,
    uri: str,
    http: int,
    grpc: int,
    home: str,
    kind: str,
    users: list[str],
    n: int,
    start: Any,
    results: Any,
) -> None:
    """One simulated machine: a writer thread per user slot; put its timings on ``results``."""
    workers = _tests("concurrency.workers")
    store = _open(mode, uri, http, grpc, home)
    latencies: list[float] = []
    lock = threading.Lock()

    def write(slot: int) -> None:
        user = users[slot]
        emb = workers.HashEmbeddings()
        facts, log = FactStore(store, emb), MessageLog(store, emb)
        mine: list[float] = []
        name = f"{Path(home).name}w{slot}"
        for i in range(n):
            t = time.perf_counter()
            if kind == "facts":
                value = workers.fact_value(name, i)
                asyncio.run(facts.aremember(user, [{"subject": "city", "value": value}]))
            else:
                text = workers.message_text(name, i)
                asyncio.run(log.aremember(user, "t", [{"role": "user", "content": text}]))
            mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    # Connections are opened before the clock starts, as a running server has them.
    remote = store._inserts.remote
    if isinstance(remote, PostgresLocks):
        for conn in [remote._connect() for _ in users]:
            remote._give_back(conn)
    if isinstance(store, LedgerStore):
        store.ledger.prewarm(len(users))
    try:
        start.wait()  # every machine has opened its store: only the writes are timed
        began = time.monotonic()
        with ThreadPoolExecutor(len(users)) as pool:
            list(pool.map(write, range(len(users))))
        ended = time.monotonic()
        coordination = (
            remote.seconds if isinstance(remote, TimedLocks) else getattr(store, "seconds", 0.0)
        )
        results.put((began, ended, latencies, coordination))
    finally:
        store.close()


def run_machines(
    net: Any, uri: str, mode: str, kind: str, shared: bool, machines: int, writers: int, n: int
) -> Run:
    """Run ``machines`` processes at once; check what they wrote; return the measurements."""
    tag = uuid.uuid4().hex[:6]
    run = Run(mode, kind, shared)
    homes = [tempfile.mkdtemp(prefix=f"amem-bench-m{m}-") for m in range(machines)]
    user_of = {
        (m, w): (f"u{tag}" if shared else f"u{tag}-{m}-{w}")
        for m in range(machines)
        for w in range(writers)
    }
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start = ctx.Barrier(machines)
    processes = [
        ctx.Process(
            target=machine,
            args=(
                mode,
                uri,
                net.http_port,
                net.grpc_port,
                homes[m],
                kind,
                [user_of[(m, w)] for w in range(writers)],
                n,
                start,
                results,
            ),
        )
        for m in range(machines)
    ]
    for process in processes:
        process.start()
    outputs = [results.get(timeout=1800) for _ in processes]
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"a machine failed ({process.exitcode})")
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)
    run.wall_s = max(o[1] for o in outputs) - min(o[0] for o in outputs)
    run.latencies = [x for o in outputs for x in o[2]]
    run.writes = len(run.latencies)
    run.coordination_s = sum(o[3] for o in outputs)
    run.lost = _lost(net, kind, sorted(set(user_of.values())), machines * writers * n)
    return run


def _lost(net: Any, kind: str, users: list[str], expected: int) -> str:
    """Count what is stored against what was acknowledged (every call here was)."""
    reader = WeaviateStore(
        _tests("weaviate_unit.network").connect(net.http_port, net.grpc_port),
        dims=DIMS,
        coordinator="local",
    )
    try:
        emb = _tests("concurrency.workers").HashEmbeddings()
        stored = 0
        duplicate_turns = 0
        for user in users:
            if kind == "facts":
                stored += len(asyncio.run(FactStore(reader, emb).ahistory(user, "city")))
            else:
                logged = asyncio.run(
                    MessageLog(reader, emb).alist(user, thread_id="t", limit=10_000)
                )
                stored += len(logged)
                duplicate_turns += len(logged) - len({m.turn for m in logged})
    finally:
        reader.close()
    lost = expected - stored
    text = f"{lost} of {expected}" if lost else "none"
    if duplicate_turns:
        text += f", {duplicate_turns} duplicate turn numbers"
    return text


# -- C. a killed writer; a forgotten subject -----------------------------------------------------


def _hold_forever(uri: str, key: tuple[str, str]) -> None:
    with PostgresLocks(uri).hold(*key):
        print("held", flush=True)
        time.sleep(3600)


def recovery(net: Any, uri: str) -> list[dict[str, str]]:
    """Report what another machine's next write meets after a writer died mid-write."""
    rows: list[dict[str, str]] = []
    emb = _tests("concurrency.workers").HashEmbeddings()
    for mode in ("advisory", "ledger"):
        home = tempfile.mkdtemp(prefix="amem-bench-recovery-")
        user = f"r{uuid.uuid4().hex[:6]}"
        store = _open(mode, uri, net.http_port, net.grpc_port, home)
        try:
            facts = FactStore(store, emb)
            asyncio.run(facts.aremember(user, [{"subject": "city", "value": "Lyon"}]))
            current = asyncio.run(facts.ahistory(user, "city"))[-1]
            if mode == "advisory":
                ctx = multiprocessing.get_context("spawn")
                holder = ctx.Process(
                    target=_hold_forever, args=(uri, (FACTS.name, tenant_name(user)))
                )
                holder.start()
                time.sleep(3)  # it holds the lock, as a writer between its checks and create
                assert holder.pid is not None
                os.kill(holder.pid, signal.SIGKILL)
                holder.join()
                died = "lock held, then SIGKILL"
            else:
                # A writer that claimed the successor of the current value and died before
                # creating it: what it leaves behind is the claim.
                assert isinstance(store, LedgerStore)
                store.ledger.claim(
                    f"{FACTS.name}/{tenant_name(user)}",
                    [successor_id(user, "city", current.id)],
                )
                died = "successor claimed, then killed before its create"
            started = time.perf_counter()
            try:
                asyncio.run(facts.aremember(user, [{"subject": "city", "value": "Oslo"}]))
                outcome = "written"
            except ConflictError as exc:
                outcome = f"ConflictError: {str(exc)[:60]}"
            took = time.perf_counter() - started
            forgotten = asyncio.run(facts.aforget(user, "city"))
            try:
                asyncio.run(facts.aremember(user, [{"subject": "city", "value": "Paris"}]))
                again = "written"
            except ConflictError:
                again = "ConflictError (its first value's id is claimed)"
            rows.append(
                {
                    "mode": mode,
                    "dead writer": died,
                    "next write by another machine": f"{outcome} after {took:.2f} s",
                    "subject forgotten, written again": f"{again} ({forgotten} value(s) deleted)",
                }
            )
        finally:
            store.close()
            shutil.rmtree(home, ignore_errors=True)
    return rows


# -- report ------------------------------------------------------------------------------------


def _load() -> str:
    try:
        return ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def render(
    args: argparse.Namespace,
    primitives: list[dict[str, Any]],
    runs: list[Run],
    recovered: list[dict[str, str]],
    loads: tuple[str, str],
) -> str:
    """Return the report as Markdown."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with psycopg.connect(args.postgres_uri) as conn:
        pg = conn.info.server_version
    lines = [
        "# Writers on several machines: throughput and the cost of coordination",
        "",
        f"Measured {stamp} by `python bench/replicas_bench.py --machines {args.machines} "
        f"--writers {args.writers} --writes {args.writes} --ops {args.ops} --clients "
        f"{args.clients} --window {args.window:g} --rounds {args.rounds}` ({platform.machine()}, {os.cpu_count()} cores "
        f"shared with other jobs, load average {loads[0]} at the start and {loads[1]} at the "
        f"end; Python {platform.python_version()}; PostgreSQL {pg // 10000}.{pg % 100} on "
        "loopback).",
        "",
        "## A. The PostgreSQL primitive, per write",
        "",
        "| strategy | case | round trips | ops/s | p50 ms | p95 ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in primitives:
        lines.append(
            f"| {row['strategy']} | {row['case']} | {row['round_trips']} | "
            f"{row['ops_per_s']:,.0f} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} |"
        )
    lines += [
        "",
        f"## B. {args.machines} machines x {args.writers} writers x {args.writes} writes, "
        f"fake Weaviate with a {args.window:g} ms create window",
        "",
        f"Medians of {args.rounds} rounds (modes interleaved, each round starting with another); "
        "'x local' is each round's ratio to the same round's run without coordination; 'lost' "
        "per round.",
        "",
        "| kind | users | mode | writes/s | x local | p50 ms per write | PostgreSQL ms per write "
        "(wait included) | lost |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    local = {(r.kind, r.shared, r.round): r.writes / r.wall_s for r in runs if r.mode == "local"}
    groups: dict[tuple[str, bool, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.kind, r.shared, r.mode), []).append(r)
    for (kind, shared, mode), group in groups.items():
        rates = [r.writes / r.wall_s for r in group]
        # Each round's ratio to the same round's run without coordination, then the median.
        ratios = [r.writes / r.wall_s / local[(r.kind, r.shared, r.round)] for r in group]
        latencies = [x for r in group for x in r.latencies]
        per_write = statistics.median(1000 * r.coordination_s / r.writes for r in group)
        lines.append(
            f"| {kind} | {'one shared' if shared else 'one per writer'} | {mode} | "
            f"{statistics.median(rates):.1f} | x{statistics.median(ratios):.2f} | "
            f"{1000 * statistics.median(latencies):.1f} | "
            f"{per_write if mode != 'local' else 0:.2f} | "
            f"{'; '.join(r.lost for r in group)} |"
        )
    lines += [
        "",
        "## C. A writer dies mid-write; a subject is forgotten",
        "",
        "| mode | dead writer | next write by another machine | subject forgotten, written again |",
        "|---|---|---|---|",
    ]
    for row in recovered:
        lines.append("| " + " | ".join(row.values()) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the three parts and write the report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URI (default: start one)")
    parser.add_argument("--machines", type=int, default=3)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--writes", type=int, default=15)
    parser.add_argument("--ops", type=int, default=400)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--window", type=float, default=2.0, help="create window, ms")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of part B")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "replicas.md"))
    args = parser.parse_args()
    load_start = _load()
    with (
        given_postgres(args.postgres) if args.postgres else throwaway_postgres() as uri,
        _tests("weaviate_unit.network").NetworkWeaviate() as net,
    ):
        args.postgres_uri = uri
        net.server.create_window = args.window / 1000
        print("A. primitives", flush=True)
        primitives = primitive_costs(uri, args.ops, args.clients)
        _ddl(uri)
        runs: list[Run] = []
        for round_ in range(args.rounds):
            for kind in ("facts", "messages"):
                for shared in (True, False):
                    modes = [m for m in MODES if not (m == "ledger" and kind == "messages")]
                    # Each round starts with another mode, so a change of load hits all alike.
                    for mode in modes[round_ % len(modes) :] + modes[: round_ % len(modes)]:
                        print(f"B. round {round_ + 1}: {kind} shared={shared} {mode}", flush=True)
                        run = run_machines(
                            net, uri, mode, kind, shared, args.machines, args.writers, args.writes
                        )
                        run.round = round_
                        runs.append(run)
                        net.server.rest.clear()
                        net.server.grpc.clear()
        print("C. recovery", flush=True)
        recovered = recovery(net, uri)
        report = render(args, primitives, runs, recovered, (load_start, _load()))
    Path(args.out).write_text(report)
    print(report)


if __name__ == "__main__":
    main()

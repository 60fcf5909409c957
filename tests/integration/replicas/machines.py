"""Simulated machines: each is a spawned process with its own ``AMEM_HOME`` (so its own lock
files), its own Weaviate client and store handle, talking to one shared ``NetworkWeaviate``
and, when coordinated, one PostgreSQL, as the replicas of a LangGraph deployment do.

A machine runs one writer thread per memory kind and writer slot, all on the machine's one
store handle (a server replica serves every run with one store), optionally the store's
sweeper (``AgenticStore.start_ttl_sweeper``) beside them, and reports what every call
acknowledged. Module-level functions, so ``multiprocessing`` can start them by name.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store.weaviate import WeaviateStore
from tests.integration.concurrency.workers import DIMS, WRITERS, HashEmbeddings
from tests.unit.store.weaviate.network import connect

USER = "alice"
SUBJECT = "city"
THREAD = "t"
SWEEP_POLICY = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=0)
"""What every machine's sweeper applies: turns older than 30 days go, at every sweep."""


@dataclass
class Plan:
    """What one machine does."""

    name: str
    home: str
    http_port: int
    grpc_port: int
    postgres: str | None
    """The deployment's PostgreSQL (``AMEM_POSTGRES_URI``); ``None``: file locks only."""
    writes: dict[str, int] = field(default_factory=dict)
    """Kind -> writes per writer."""
    writers: int = 1
    """Writers per kind."""
    sweep_minutes: float | None = None


def writer_name(machine: str, kind: str, slot: int) -> str:
    """Name of a writer; its facts, rules and messages carry it."""
    return f"{machine}{kind[0]}{slot}"


ARGS: dict[str, tuple[str, ...]] = {
    "facts": (USER, SUBJECT),
    "rules": (USER,),
    "messages": (USER, THREAD),
}


def open_machine_store(plan: Plan) -> WeaviateStore:
    """Open the machine's store as the server would: settings from the environment."""
    os.environ["AMEM_HOME"] = plan.home
    os.environ.pop("AMEM_COORDINATOR_URI", None)
    if plan.postgres is not None:
        # The checkpointer's database: the coordinator's default.
        os.environ["AMEM_POSTGRES_URI"] = plan.postgres
    else:
        os.environ.pop("AMEM_POSTGRES_URI", None)
    return WeaviateStore(connect(plan.http_port, plan.grpc_port), dims=DIMS)


def _counted(
    fn: Callable[[], Awaitable[int]], tally: dict[str, int], key: str
) -> Callable[[], Awaitable[int]]:
    async def wrapper() -> int:
        n = await fn()
        tally[key] += n
        tally[key + "_runs"] += 1
        return n

    return wrapper


def _sweep(store: WeaviateStore, minutes: float, stop: threading.Event) -> dict[str, int]:
    """Run the store's own sweeper until ``stop``; return what it did."""
    tally = {"ttl": 0, "ttl_runs": 0, "retention": 0, "retention_runs": 0}
    agentic = AgenticStore(store, HashEmbeddings(), retention=SWEEP_POLICY)
    # Counted where the sweeper calls them (instance attributes win over the methods).
    agentic.asweep_ttl = _counted(agentic.asweep_ttl, tally, "ttl")  # type: ignore[method-assign]
    agentic.asweep_retention = _counted(  # type: ignore[method-assign]
        agentic.asweep_retention, tally, "retention"
    )

    async def run() -> None:
        await agentic.start_ttl_sweeper(minutes)
        # Until the writers are done, and at least one whole sweep (TTL, then retention) has
        # run: on a loaded machine the writers can finish inside the first sweep.
        deadline = asyncio.get_running_loop().time() + 120
        while not stop.is_set() or (
            tally["retention_runs"] < 1 and asyncio.get_running_loop().time() < deadline
        ):
            await asyncio.sleep(0.05)
        await agentic.stop_ttl_sweeper()

    asyncio.run(run())
    return tally


def machine_main(plan: Plan, start: Any, results: Any) -> None:
    """Entry point of a machine: write, report ``(name, acknowledged, sweeps)`` on ``results``."""
    store = open_machine_store(plan)
    stop = threading.Event()
    sweeper: ThreadPoolExecutor | None = None
    swept: Any = None
    try:
        jobs = [
            (kind, writer_name(plan.name, kind, slot), n)
            for kind, n in plan.writes.items()
            for slot in range(plan.writers)
        ]
        start.wait()
        if plan.sweep_minutes is not None:
            sweeper = ThreadPoolExecutor(1)
            swept = sweeper.submit(_sweep, store, plan.sweep_minutes, stop)
        with ThreadPoolExecutor(len(jobs)) as pool:
            futures = {
                writer: pool.submit(WRITERS[kind], store, writer, n, *ARGS[kind])
                for kind, writer, n in jobs
            }
            acknowledged = {writer: future.result() for writer, future in futures.items()}
        stop.set()
        sweeps = swept.result() if swept is not None else {}
        results.put((plan.name, acknowledged, sweeps))
    except BaseException as exc:
        stop.set()
        results.put((plan.name, {"error": f"{type(exc).__name__}: {exc}"}, {}))
        raise
    finally:
        if sweeper is not None:
            sweeper.shutdown(wait=True)
        store.close()

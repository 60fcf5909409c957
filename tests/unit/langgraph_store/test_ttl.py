"""TTLs of generic items, with a controllable clock, on both backends.

LangGraph's contract (``PutOp.ttl``, ``TTLConfig``): an item expires ``ttl`` minutes after it
was last accessed; reads refresh the timer unless ``refresh_ttl=False`` (default from
``TTLConfig.refresh_on_read``); ``default_ttl`` applies to puts that do not give one; a sweep
deletes expired items. Ours adds: an expired item is never returned, even before a sweep.
``InMemoryStore`` does not support TTLs (``supports_ttl`` is False), so these run on
``AgenticStore`` only.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from langgraph.store.base import GetOp, PutOp

from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.langgraph_store.generic import ITEMS, TOUCHES
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError
from tests.unit.langgraph_store.conftest import AGENTIC, Clock, open_agentic

NS = ("cache", "alice")


def stored(store: AgenticStore) -> int:
    """Items physically in the store, expired or not."""
    return store.memory_store.count(ITEMS.name)


def test_an_item_expires_after_its_ttl(agentic: AgenticStore, clock: Clock) -> None:
    agentic.put(NS, "short", {"v": 1}, ttl=1)
    agentic.put(NS, "long", {"v": 2}, ttl=10)
    agentic.put(NS, "forever", {"v": 3})
    clock.advance(seconds=59)
    assert agentic.get(NS, "short", refresh_ttl=False) is not None
    clock.advance(seconds=2)
    # Expired: gone from every read before any sweep.
    assert agentic.get(NS, "short") is None
    assert {i.key for i in agentic.search(NS)} == {"long", "forever"}
    assert {i.key for i in agentic.search(NS, query="v")} == {"long", "forever"}
    assert stored(agentic) == 3
    assert agentic.sweep_ttl() == 1
    assert stored(agentic) == 2
    clock.advance(minutes=60)
    assert agentic.list_namespaces() == [NS]
    assert [i.key for i in agentic.search(NS)] == ["forever"]
    assert agentic.sweep_ttl() == 1
    assert agentic.sweep_ttl() == 0


def test_reads_refresh_the_ttl(agentic: AgenticStore, clock: Clock) -> None:
    agentic.put(NS, "got", {"v": 1}, ttl=1)
    agentic.put(NS, "found", {"v": 2}, ttl=1)
    agentic.put(NS, "ignored", {"v": 3}, ttl=1)
    clock.advance(seconds=50)
    assert agentic.get(NS, "got") is not None  # refreshes: now expires at 110 s
    assert [i.key for i in agentic.search(NS, filter={"v": 2})] == ["found"]  # refreshes
    assert agentic.get(NS, "ignored", refresh_ttl=False) is not None  # does not
    clock.advance(seconds=50)  # 100 s
    assert agentic.get(NS, "ignored") is None
    assert agentic.get(NS, "got", refresh_ttl=False) is not None
    assert agentic.search(NS, filter={"v": 2}, refresh_ttl=False) != []
    clock.advance(seconds=15)  # 115 s: the refreshes of 50 s have run out
    assert agentic.get(NS, "got") is None
    assert agentic.search(NS) == []
    assert agentic.sweep_ttl() == 3
    assert agentic.memory_store.count(TOUCHES.name) == 0  # spent refreshes are swept too


def test_a_put_restarts_the_ttl_and_drops_older_refreshes(
    agentic: AgenticStore, clock: Clock
) -> None:
    agentic.put(NS, "k", {"v": 1}, ttl=10)
    clock.advance(minutes=5)
    assert agentic.get(NS, "k") is not None  # a refresh to 15 min, for this put only
    agentic.put(NS, "k", {"v": 2}, ttl=1)  # the new put decides: 6 min
    clock.advance(minutes=2)
    assert agentic.get(NS, "k") is None
    agentic.put(NS, "k", {"v": 3})  # no ttl: never expires
    clock.advance(days=400)
    item = agentic.get(NS, "k")
    assert item is not None and item.value == {"v": 3}


def test_a_refresh_never_undoes_a_put(agentic: AgenticStore, clock: Clock) -> None:
    # A read that found the old put refreshes it after a new put landed: the refresh writes
    # only a touch of the old put, so the new value and its own TTL stand.
    agentic.put(NS, "k", {"v": "old"}, ttl=1)
    found = asyncio.run(agentic._generic.get(NS, "k"))
    assert found is not None and found[1] is not None
    agentic.put(NS, "k", {"v": "new"}, ttl=2)
    clock.advance(seconds=30)
    asyncio.run(agentic._generic.refresh([found[1]]))
    item = agentic.get(NS, "k", refresh_ttl=False)
    assert item is not None and item.value == {"v": "new"}
    clock.advance(seconds=100)  # 130 s: the new put's 2 minutes are over
    assert agentic.get(NS, "k") is None


def test_the_sweeper_spares_an_item_put_again_meanwhile(
    agentic: AgenticStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    agentic.put(NS, "k", {"v": "old"}, ttl=1)
    clock.advance(minutes=2)
    space = agentic._generic
    original = space._dead
    interfered: list[bool] = []

    async def dead_then_put(objs: list[object], stamp: float) -> set[str]:
        found = await original(objs, stamp)  # type: ignore[arg-type]
        if found and not interfered:
            # Another writer puts the item between the sweeper's read and its delete.
            interfered.append(True)
            await agentic.aput(NS, "k", {"v": "new"}, ttl=5)
        return found

    monkeypatch.setattr(space, "_dead", dead_then_put)
    assert agentic.sweep_ttl() == 0
    assert interfered
    monkeypatch.undo()
    item = agentic.get(NS, "k")
    assert item is not None and item.value == {"v": "new"}


def test_expired_namespaces_are_not_listed(agentic: AgenticStore, clock: Clock) -> None:
    agentic.put(("tmp", "a"), "k", {"v": 1}, ttl=1)
    agentic.put(("tmp", "b"), "k", {"v": 1}, ttl=5)
    clock.advance(minutes=2)
    assert agentic.list_namespaces(prefix=("tmp",)) == [("tmp", "b")]


def test_re_putting_an_expired_item_starts_it_afresh(agentic: AgenticStore, clock: Clock) -> None:
    agentic.put(NS, "k", {"v": 1}, ttl=1)
    first = agentic.get(NS, "k")
    clock.advance(minutes=5)
    agentic.put(NS, "k", {"v": 2}, ttl=1)
    second = agentic.get(NS, "k")
    assert first is not None and second is not None
    assert second.created_at > first.created_at  # the expired item was gone


@pytest.mark.parametrize("backend", AGENTIC)
def test_ttl_config_defaults(
    backend: str, tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock
) -> None:
    store = open_agentic(
        backend, tmp_path, embeddings, clock, ttl={"default_ttl": 1, "refresh_on_read": False}
    )
    try:
        store.put(NS, "default", {"v": 1})  # default_ttl: 1 minute
        store.put(NS, "none", {"v": 2}, ttl=None)  # explicitly none
        store.put(("facts", "alice"), "diet", {"value": "vegetarian"})  # kinds never expire
        clock.advance(seconds=50)
        assert store.get(NS, "default") is not None  # refresh_on_read False: no refresh
        clock.advance(seconds=20)
        assert store.get(NS, "default") is None
        assert store.get(NS, "none") is not None
        fact = store.get(("facts", "alice"), "diet")
        assert fact is not None and fact.value["value"] == "vegetarian"
        with pytest.raises(InvalidInputError, match="never expire"):
            store.put(("facts", "alice"), "diet", {"value": "vegan"}, ttl=1)  # chosen: refused
        store.put(NS, "refreshed", {"v": 3})
        clock.advance(seconds=50)
        assert store.get(NS, "refreshed", refresh_ttl=True) is not None  # explicit refresh
        clock.advance(seconds=50)
        assert store.get(NS, "refreshed") is not None
    finally:
        store.close()


def test_ttl_values_are_checked(agentic: AgenticStore) -> None:
    for bad in (0, -1, float("nan"), float("inf"), "5", True):
        with pytest.raises(InvalidInputError, match="ttl"):
            agentic.batch([PutOp(NS, "k", {"v": 1}, ttl=bad)])  # type: ignore[arg-type]
    assert agentic.batch([GetOp(NS, "k")]) == [None]
    for config in ({"default_ttl": 0}, {"sweep_interval_minutes": -1}, {"refresh": True}):
        with pytest.raises(InvalidInputError):
            AgenticStore(agentic.memory_store, agentic.embeddings, ttl=config)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "namespace", [("facts", "alice"), ("episodes", "alice"), ("rules", "alice")]
)
def test_memory_kinds_never_expire(amem: AgenticStore, namespace: tuple[str, ...]) -> None:
    with pytest.raises(InvalidInputError, match="never expire silently"):
        amem.put(namespace, "latest", {"value": "x"}, ttl=5)


def test_messages_refuse_a_ttl_for_retention_policies(amem: AgenticStore) -> None:
    with pytest.raises(InvalidInputError, match="retention policies"):
        amem.put(("messages", "alice", "t1"), "m1", {"role": "user", "content": "hi"}, ttl=5)
    assert amem.search(("messages", "alice")) == []


async def test_the_background_sweeper(agentic: AgenticStore, clock: Clock) -> None:
    await agentic.aput(NS, "k", {"v": 1}, ttl=1)
    await agentic.aput(NS, "keep", {"v": 2})
    clock.advance(minutes=2)
    task = await agentic.start_ttl_sweeper(sweep_interval_minutes=1 / 60)
    assert await agentic.start_ttl_sweeper() is task  # already running
    for _ in range(500):
        if await asyncio.to_thread(stored, agentic) == 1:
            break
        await asyncio.sleep(0.02)
    assert await asyncio.to_thread(stored, agentic) == 1
    assert await agentic.stop_ttl_sweeper(timeout=5) is True
    assert task.done()
    assert await agentic.asweep_ttl() == 0


async def test_no_sweeper_without_a_ttl_config(agentic: AgenticStore) -> None:
    task = await agentic.start_ttl_sweeper()
    await task  # done at once: nothing configured to sweep (as LangGraph's Postgres store)
    assert await agentic.stop_ttl_sweeper() is True


async def test_closing_stops_the_sweeper(
    tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock
) -> None:
    store = await asyncio.to_thread(
        open_agentic, "embedded", tmp_path, embeddings, clock, ttl={"sweep_interval_minutes": 1}
    )
    task = await store.start_ttl_sweeper()
    async with store:
        assert not task.done()
    assert task.done()
    with pytest.raises(InvalidInputError, match="closed"):
        await store.aget(NS, "k")


async def test_stopping_a_sweeper_whose_loop_is_stopped_returns(agentic: AgenticStore) -> None:
    """A loop stopped but not closed runs no callback: the stop must not wait for one."""
    loop = asyncio.new_event_loop()
    started = asyncio.run_coroutine_threadsafe(
        agentic.start_ttl_sweeper(sweep_interval_minutes=60), loop
    )
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    task = await asyncio.wrap_future(started)
    loop.call_soon_threadsafe(loop.stop)
    await asyncio.to_thread(runner.join)
    try:
        # The guard only turns a hang into a failure; the stop itself takes no time.
        assert await asyncio.wait_for(agentic.stop_ttl_sweeper(), 30) is True
        # Should that loop run again, the sweeper does not.
        await asyncio.to_thread(loop.run_until_complete, asyncio.sleep(0))
        assert task.cancelled()
    finally:
        loop.close()


def test_closing_a_store_whose_sweeper_loop_is_closed(
    tmp_path: Path, embeddings: LocalEmbeddings, clock: Clock
) -> None:
    store = open_agentic("embedded", tmp_path, embeddings, clock, ttl={"sweep_interval_minutes": 1})
    loop = asyncio.new_event_loop()
    loop.run_until_complete(store.start_ttl_sweeper())
    loop.close()  # the sweeper's loop gone before the store
    store.close()
    with pytest.raises(InvalidInputError, match="closed"):
        store.get(NS, "k")

"""``insert`` and concurrent writers on the Weaviate backend, through the real client.

The server is ``FakeWeaviate``: objects in memory, and a create that checks and then writes
with nothing held in between, as the pinned Weaviate version does. Several ``WeaviateStore`` handles with
one lock directory stand for processes of one machine (each handle has its own thread locks;
they meet in the lock files); handles with different lock directories stand for machines.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import agentic_memory.store.weaviate as wv
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import (
    ConflictError,
    MemoryObject,
    SchemaConflictError,
    StoreError,
    Where,
    make_id,
)
from tests.integration.concurrency.checks import check_facts, check_messages, check_rules
from tests.integration.concurrency.workers import DIMS, run_threads
from tests.unit.store.weaviate.conftest import scripted_client
from tests.unit.store.weaviate.server import FakeWeaviate

VEC = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.fixture
def server() -> FakeWeaviate:
    return FakeWeaviate()


@pytest.fixture
def open_store(server: FakeWeaviate, tmp_path: Path) -> Iterator[Callable[..., wv.WeaviateStore]]:
    """Open store handles on the fake server; ``machine`` picks the lock directory."""
    opened: list[wv.WeaviateStore] = []

    def _open(machine: str = "m1") -> wv.WeaviateStore:
        store = wv.WeaviateStore(
            scripted_client(server), dims=DIMS, lock_dir=tmp_path / "locks" / machine
        )
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


def msg(key: str, turn: int, thread: str = "t") -> MemoryObject:
    props = {"content": key, "role": "human", "thread_id": thread, "turn": turn}
    return MemoryObject(make_id(key), props, VEC)


def test_insert_checks_then_creates_each_object(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    store = open_store()
    store.ensure_collection(MESSAGES)
    guard = [Where("thread_id", "eq", "t"), Where("turn", "gt", 0)]
    store.insert(MESSAGES.name, [msg("a", 1), msg("b", 2)], user="alice", unless=guard)
    first, second = server.requests("search")
    assert first.filters.target.property == "_id"
    assert set(first.filters.value_text_array.values) == {make_id("a"), make_id("b")}
    assert [f.target.property for f in second.filters.filters] == ["thread_id", "turn"]
    creates = [body for method, path, body in server.rest if path == "/v1/objects"]
    assert [(c["id"], c["tenant"], c["properties"]["turn"]) for c in creates] == [
        (make_id("a"), "alice", 1),
        (make_id("b"), "alice", 2),
    ]
    assert creates[0]["vectors"] == {wv.VECTOR_NAME: VEC}
    assert not server.requests("batch_objects")
    listed = store.list_objects(MESSAGES.name, user="alice", sort_by="turn")
    assert [o.properties["content"] for o in listed] == ["a", "b"]


def test_a_conflict_found_by_the_checks_creates_nothing(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    store = open_store()
    store.ensure_collection(MESSAGES)
    store.insert(MESSAGES.name, [msg("a", 0)], user="alice")
    before = len(server.rest)
    with pytest.raises(ConflictError) as info:
        store.insert(MESSAGES.name, [msg("b", 1), msg("a", 2)], user="alice")
    assert info.value.existing == (make_id("a"),)
    with pytest.raises(ConflictError, match="guard"):
        store.insert(
            MESSAGES.name, [msg("c", 0)], user="alice", unless=[Where("thread_id", "eq", "t")]
        )
    assert not [r for r in server.rest[before:] if r[1] == "/v1/objects"]
    assert store.count(MESSAGES.name, user="alice") == 1


def test_a_create_the_server_refuses_undoes_the_batch(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    store = open_store()
    store.ensure_collection(MESSAGES)
    store.insert(MESSAGES.name, [msg("seed", 0)], user="alice")
    elsewhere = open_store("m2")

    def other_machine(oid: str) -> None:
        # While this store creates "a", a writer on another machine creates "b".
        if oid == make_id("a"):
            server.pause_create = None
            elsewhere.insert(MESSAGES.name, [msg("b", 9)], user="alice")

    server.pause_create = other_machine
    with pytest.raises(ConflictError, match="another writer") as info:
        store.insert(MESSAGES.name, [msg("a", 1), msg("b", 2)], user="alice")
    assert info.value.existing == (make_id("b"),)
    (undo,) = server.requests("batch_delete")
    assert list(undo.filters.value_text_array.values) == [make_id("a")]
    listed = store.list_objects(MESSAGES.name, user="alice", sort_by="turn")
    assert [(o.properties["content"], o.properties["turn"]) for o in listed] == [
        ("seed", 0),
        ("b", 9),
    ]


def test_other_server_errors_undo_the_batch_and_are_store_errors(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    store = open_store()
    store.ensure_collection(MESSAGES)
    real = server._create

    def flaky(request: Any) -> Any:
        if b'"content":"b"' in request.content:
            import httpx

            return httpx.Response(500, json={"error": [{"message": "disk full"}]})
        return real(request)

    server._create = flaky  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="insert failed") as info:
        store.insert(MESSAGES.name, [msg("a", 1), msg("b", 2)], user="alice")
    assert not isinstance(info.value, ConflictError)
    assert store.count(MESSAGES.name, user="alice") == 0


def _race_one_id(
    server: FakeWeaviate, stores: list[wv.WeaviateStore], pause: Callable[[str], None]
) -> list[str]:
    stores[0].ensure_collection(MESSAGES)
    server.pause_create = pause
    start = threading.Barrier(len(stores))

    def attempt(i: int) -> str:
        start.wait()
        try:
            stores[i].insert(MESSAGES.name, [msg("race", i)], user="alice")
        except ConflictError:
            return "conflict"
        return "created"

    with ThreadPoolExecutor(len(stores)) as pool:
        return sorted(pool.map(attempt, range(len(stores))))


def test_writers_of_one_machine_exclude_each_other(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    # Each create lingers in the server's window; a second writer would pass the check then.
    outcomes = _race_one_id(
        server, [open_store("m1"), open_store("m1"), open_store("m1")], lambda _: time.sleep(0.1)
    )
    assert outcomes == ["conflict", "conflict", "created"]
    assert server.creates == 1


def test_writers_on_two_machines_can_both_create_one_id(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    """Without PostgreSQL, across machines only Weaviate's check-then-write stands guard
    (``tests/integration/replicas/test_coordination.py`` wins the same race with it)."""
    both_checked = threading.Barrier(2, timeout=10)
    outcomes = _race_one_id(
        server, [open_store("m1"), open_store("m2")], lambda _: both_checked.wait()
    )
    assert outcomes == ["created", "created"]  # both told "created"…
    assert server.creates == 2  # …and the later write replaced the earlier one
    assert len(server.objects[(MESSAGES.name, "alice")]) == 1


# -- the memory classes on Weaviate -------------------------------------------------------


WRITERS = 4


@pytest.mark.parametrize(
    ("kind", "n", "args"),
    [
        # Few fact updates: each retires the old value with an upsert, and the client's
        # batch waits a second for more objects before it sends a small one.
        ("facts", 6, ("alice", "city")),
        ("rules", 10, ("alice",)),
        ("messages", 15, ("alice", "t")),
    ],
)
def test_memory_writers_of_one_machine_lose_nothing(
    open_store: Callable[..., wv.WeaviateStore], kind: str, n: int, args: tuple[str, ...]
) -> None:
    """Four writers, each with its own store handle (as four processes would have)."""
    reported = run_threads(open_store, kind, "w", WRITERS, n, *args)
    writers = [f"wt{t}" for t in range(WRITERS)]
    check = {"facts": check_facts, "rules": check_rules, "messages": check_messages}[kind]
    check(open_store(), reported, writers, n)


def test_threads_sharing_one_handle_lose_nothing(
    open_store: Callable[..., wv.WeaviateStore],
) -> None:
    shared = open_store()
    reported = run_threads(open_store, "messages", "s", WRITERS, 15, "alice", "t", shared=shared)
    check_messages(shared, reported, [f"st{t}" for t in range(WRITERS)], 15)
    assert shared.count(MESSAGES.name, user="alice") == WRITERS * 15


# -- update: read and write under the partition lock -------------------------------------------


def _bump(current: Any) -> MemoryObject:
    props = {**current.properties, "turn": int(current.properties["turn"]) + 1}
    return MemoryObject(current.id, props, current.vector)


def test_updates_of_one_machine_lose_nothing(
    open_store: Callable[..., wv.WeaviateStore],
) -> None:
    first = open_store()
    first.ensure_collection(MESSAGES)
    first.insert(MESSAGES.name, [msg("counter", 0)], user="alice")
    handles = [open_store("m1") for _ in range(4)]
    start = threading.Barrier(len(handles))

    def run(handle: wv.WeaviateStore) -> None:
        handle.ensure_collection(MESSAGES)
        start.wait()
        for _ in range(10):
            assert handle.update(MESSAGES.name, [make_id("counter")], _bump, user="alice").ids

    with ThreadPoolExecutor(len(handles)) as pool:
        list(pool.map(run, handles))
    got = first.get(MESSAGES.name, make_id("counter"), user="alice", include_vector=True)
    assert got is not None and got.properties["turn"] == 40
    assert got.vector == pytest.approx(VEC)
    # An id that is not stored is skipped; a tenant never written reads as empty.
    assert first.update(MESSAGES.name, [make_id("none")], _bump, user="alice").ids == []
    assert first.update(MESSAGES.name, [make_id("counter")], _bump, user="nobody").ids == []


def test_marks_and_edits_racing_on_weaviate_all_survive(
    open_store: Callable[..., wv.WeaviateStore],
) -> None:
    from agentic_memory.kinds.messages import MessageLog
    from tests.integration.concurrency.workers import (
        HashEmbeddings,
        mark_turns,
        relog_turns,
        turn_key,
    )

    turns = 30
    setup = open_store()
    asyncio.run(
        MessageLog(setup, HashEmbeddings()).aremember(
            "alice",
            "t",
            [{"role": "user", "content": f"original {i}", "id": turn_key(i)} for i in range(turns)],
        )
    )
    step = threading.Barrier(2, timeout=60)
    racers = [(relog_turns, open_store("m1")), (mark_turns, open_store("m1"))]
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda r: r[0](r[1], "alice", "t", list(range(turns)), step), racers))
    assert done == [turns, turns]
    logged = asyncio.run(
        MessageLog(setup, HashEmbeddings()).alist("alice", thread_id="t", limit=100)
    )
    assert [m.important for m in logged] == [True] * turns
    assert [m.content for m in logged] == [f"edited {i}" for i in range(turns)]


def test_replicas_starting_together_both_ensure_the_collection(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    """A store that found no collection, then sees it exist, reads it again (another
    replica created it in between) instead of calling it foreign."""
    first, second = open_store("m1"), open_store("m2")
    real = first._load_spec_and_dims
    calls = 0

    def interleaved(name: str) -> Any:
        nonlocal calls
        calls += 1
        found = real(name)
        if calls == 1:
            second.ensure_collection(MESSAGES)  # the other replica, between the two reads
        return found

    first._load_spec_and_dims = interleaved  # type: ignore[method-assign]
    first.ensure_collection(MESSAGES)
    assert first.spec(MESSAGES.name) == second.spec(MESSAGES.name)
    assert calls == 2
    # One collection was created: the server refuses a second create of the same class.
    creates = [r for r in server.rest if r[0] == "POST" and r[1] == "/v1/schema"]
    assert len(creates) == 1


def test_a_collection_this_store_did_not_create_is_still_refused(
    server: FakeWeaviate, open_store: Callable[..., wv.WeaviateStore]
) -> None:
    store = open_store()
    store._client.collections.create("Foreign")
    foreign = dataclasses.replace(MESSAGES, name="Foreign")
    with pytest.raises(SchemaConflictError, match="did not create"):
        store.ensure_collection(foreign)


def test_exclusive_blocks_of_two_processes_take_turns_and_an_insert_inside_does_not_wait(
    open_store: Callable[..., wv.WeaviateStore],
) -> None:
    # Two handles with one lock directory: two processes of one machine upgrading a
    # collection. The second waits for the first; an insert made inside the block (on
    # whatever stripe its key falls) is not held up by the block's own lock.
    first, second = open_store(), open_store()
    first.ensure_collection(MESSAGES)
    inside = threading.Event()
    with first.exclusive("upgrade", MESSAGES.name):
        for i in range(70):  # more keys than stripes: one shares the block's stripe
            first.insert(MESSAGES.name, [msg(f"k{i}", i)], user="alice")

        def enter() -> None:
            with second.exclusive("upgrade", MESSAGES.name):
                inside.set()

        waiter = threading.Thread(target=enter)
        waiter.start()
        assert not inside.wait(0.5)
    assert inside.wait(30)
    waiter.join(30)

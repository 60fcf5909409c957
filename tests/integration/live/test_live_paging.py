"""Past 10,000 objects on the live server: iteration, deep listings, export, update, insert, forget.

The server refuses ``offset + limit`` beyond ``QUERY_MAXIMUM_RESULTS`` (10,000), and so any
one lookup of more objects; ``tests/unit/store/weaviate/test_paging.py`` runs the same paths
against a fake that refuses them the same way, ``tests/unit/store/test_paging.py`` on the
embedded store. One user's 10,180 messages are written once for the module (about 20 s); the
insert writes 10,010 objects one create at a time (about a minute). These tests use the app's
own collections, so they run on the session's own server only.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator

import pytest

from agentic_memory.forget import forget_thread, forget_user
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.store import ConflictError, MemoryObject, Where, make_id
from agentic_memory.store.weaviate import WeaviateStore, tenant_name
from agentic_memory.transfer import export_memories
from tests.live_weaviate import LiveWeaviate, skip_or_fail

pytestmark = pytest.mark.weaviate

ALICE = "pager@example.com"
BOB = "bob-pager"
BIG = 10_060  # messages in the thread "big", more than one request may return
SMALL = 120
WINDOW = 10_000


def _vector(i: int) -> list[float]:
    return [float(i % 7), 1.0, -0.5, 0.25]


def _message(i: int, thread: str) -> MemoryObject:
    props = {"content": f"turn {i} of {thread}", "role": "human", "thread_id": thread, "turn": i}
    return MemoryObject(make_id("page", thread, str(i)), props, _vector(i))


@pytest.fixture(scope="module")
def messages() -> list[MemoryObject]:
    return [_message(i, "big" if i < BIG else "small") for i in range(BIG + SMALL)]


@pytest.fixture(scope="module")
def store(live_weaviate: LiveWeaviate, messages: list[MemoryObject]) -> Iterator[WeaviateStore]:
    """A store on the live server holding ALICE's messages, written once in one upsert."""
    if live_weaviate.node is None:
        skip_or_fail(
            "writes and drops the app's own collections: runs on the session's server only"
        )
    opened = WeaviateStore.connect(4, url=live_weaviate.url, grpc_port=live_weaviate.grpc_port)
    try:
        if MESSAGES.name in opened.collections():
            opened.drop_collection(MESSAGES.name)
        opened.ensure_collection(MESSAGES)
        opened.upsert(MESSAGES.name, messages, user=ALICE).raise_for_failures()
        yield opened
    finally:
        if MESSAGES.name in opened.collections():
            opened.drop_collection(MESSAGES.name)
        opened.close()


def test_the_server_refuses_a_lookup_past_the_window(store: WeaviateStore) -> None:
    collection = store._client.collections.get(MESSAGES.name).with_tenant(tenant_name(ALICE))
    with pytest.raises(Exception, match="maximum results"):
        collection.query.fetch_objects(limit=100, offset=WINDOW)


def test_iterate_reads_every_object_once_in_id_order(
    store: WeaviateStore, messages: list[MemoryObject]
) -> None:
    got = [o.id for o in store.iterate(MESSAGES.name, user=ALICE, page_size=2000)]
    assert got == sorted(m.id for m in messages)
    where = [Where("thread_id", "eq", "small"), Where("turn", "gte", BIG + 10)]
    small = list(
        store.iterate(MESSAGES.name, user=ALICE, where=where, page_size=64, include_vector=True)
    )
    expected = sorted(messages[BIG + 10 :], key=lambda m: m.id)
    assert [o.id for o in small] == [m.id for m in expected]
    assert [o.vector for o in small] == [m.vector for m in expected]
    everything_big = list(
        store.iterate(MESSAGES.name, user=ALICE, where=[Where("thread_id", "eq", "big")])
    )
    assert len(everything_big) == BIG == len({o.id for o in everything_big})


def test_deep_listing_is_served_past_the_window(store: WeaviateStore) -> None:
    page = store.list_objects(
        MESSAGES.name, user=ALICE, sort_by="turn", descending=True, offset=10_100, limit=40
    )
    total = BIG + SMALL
    assert [o.properties["turn"] for o in page] == list(range(total - 10_101, total - 10_141, -1))
    shallow = store.list_objects(MESSAGES.name, user=ALICE, sort_by="turn", offset=20, limit=5)
    assert [o.properties["turn"] for o in shallow] == [20, 21, 22, 23, 24]
    log = MessageLog(store, embeddings=None)  # type: ignore[arg-type]
    turns = asyncio.run(log.alist(ALICE, thread_id="big", offset=BIG - 10, limit=20))
    assert [t.turn for t in turns] == list(range(BIG - 10, BIG))


def test_export_past_the_window_writes_every_object_with_its_vector(
    store: WeaviateStore, messages: list[MemoryObject]
) -> None:
    out = io.StringIO()
    summary = export_memories(store, out, embedding_model="test", page_size=5000)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["kind"] == "header" and ALICE in lines[0]["users"]
    body = [b for b in lines[1:] if b.get("user") == ALICE]
    assert len(body) == len(messages) == summary.counts[(MESSAGES.name, ALICE)]
    by_id = {m.id: m for m in messages}
    assert {b["id"] for b in body} == set(by_id)
    assert all(b["vector"] == by_id[b["id"]].vector for b in body)


def test_an_update_of_more_ids_than_the_window(
    store: WeaviateStore, messages: list[MemoryObject]
) -> None:
    ids = [m.id for m in messages]
    result = store.update(
        MESSAGES.name,
        ids,
        lambda c: MemoryObject(c.id, {**c.properties, "role": "ai"}, c.vector or _vector(0)),
        user=ALICE,
    )
    assert result.ok and sorted(result.ids) == sorted(ids)
    assert store.count(MESSAGES.name, user=ALICE, where=[Where("role", "eq", "ai")]) == len(ids)


def test_an_insert_of_more_ids_than_the_window(store: WeaviateStore) -> None:
    objects = [_message(i, "inserted") for i in range(WINDOW + 10)]
    # The last id is taken: the existence check reads every chunk, and nothing is written.
    store.upsert(MESSAGES.name, [objects[-1]], user=BOB).raise_for_failures()
    with pytest.raises(ConflictError) as info:
        store.insert(MESSAGES.name, objects, user=BOB)
    assert info.value.existing == (objects[-1].id,)
    assert store.count(MESSAGES.name, user=BOB) == 1
    store.delete(MESSAGES.name, [objects[-1].id], user=BOB)
    store.insert(MESSAGES.name, objects, user=BOB)
    assert store.count(MESSAGES.name, user=BOB) == len(objects)
    assert asyncio.run(forget_user(store, BOB)).deleted[("weaviate", MESSAGES.name)] == len(objects)


def test_forget_a_thread_and_a_user_past_the_window(store: WeaviateStore) -> None:
    report = asyncio.run(forget_thread(store, ALICE, "big"))
    assert report.deleted[("weaviate", MESSAGES.name)] == BIG
    assert store.count(MESSAGES.name, user=ALICE) == SMALL
    report = asyncio.run(forget_user(store, ALICE))
    assert report.deleted[("weaviate", MESSAGES.name)] == SMALL
    assert store.users(MESSAGES.name) == []

"""Past 10,000 objects on Weaviate, through the real client and a stateful fake server.

The server refuses ``offset + limit`` beyond ``QUERY_MAXIMUM_RESULTS`` (10,000); the store
iterates with the ``after`` cursor (or ``_id >`` keyset pages when filtered) and serves deep
listings from those, so export, forget and listings work on any number of objects.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from weaviate.exceptions import WeaviateQueryError

import agentic_memory.store.weaviate as wv
from agentic_memory.forget import forget_thread, forget_user
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.store import InvalidInputError, MemoryObject, StoreError, Where, make_id
from agentic_memory.transfer import export_memories
from tests.unit.store.weaviate.conftest import client_over
from tests.unit.store.weaviate.server import QUERY_MAXIMUM_RESULTS, FakeWeaviate

VEC = [0.5, -0.25, 0.0, 1.0]
ALICE = "alice@example.com"
TENANT = wv.tenant_name(ALICE)
BIG = 10_060  # messages in the thread "big", more than one delete_many can remove
SMALL = 120


@pytest.fixture(scope="module")
def messages() -> list[MemoryObject]:
    out = []
    for i in range(BIG + SMALL):
        thread = "big" if i < BIG else "small"
        out.append(
            MemoryObject(
                make_id("msg", str(i)),
                {
                    "content": f"turn {i} of {thread}",
                    "role": "human" if i % 2 else "ai",
                    "thread_id": thread,
                    "turn": i,
                },
                [float(i % 7), 1.0, -0.5, 0.25],
            )
        )
    return out


@pytest.fixture(scope="module")
def written(messages: list[MemoryObject]) -> FakeWeaviate:
    """A server holding the messages, written once through the real client's batching."""
    w = FakeWeaviate()
    with client_over(w) as client:
        store = wv.WeaviateStore(client, dims=len(VEC))
        store.ensure_collection(MESSAGES)
        store.upsert(MESSAGES.name, messages, user=ALICE).raise_for_failures()
    return w


@pytest.fixture
def server(written: FakeWeaviate) -> Iterator[tuple[FakeWeaviate, wv.WeaviateStore]]:
    w = FakeWeaviate()
    w.schemas = copy.deepcopy(written.schemas)
    w.tenants = copy.deepcopy(written.tenants)
    w.objects = {key: dict(bucket) for key, bucket in written.objects.items()}
    with client_over(w) as client:
        yield w, wv.WeaviateStore(client, dims=len(VEC))


def _windows(w: FakeWeaviate) -> list[int]:
    return [r.offset + r.limit for r in w.requests("search")]


def test_the_server_refuses_offset_paging_past_the_window(
    server: tuple[FakeWeaviate, wv.WeaviateStore],
) -> None:
    w, store = server
    collection = store._client.collections.get(MESSAGES.name).with_tenant(TENANT)
    with pytest.raises(WeaviateQueryError, match="maximum results"):
        collection.query.fetch_objects(limit=100, offset=QUERY_MAXIMUM_RESULTS)


def test_iterate_reads_every_object_once_in_id_order(
    server: tuple[FakeWeaviate, wv.WeaviateStore], messages: list[MemoryObject]
) -> None:
    w, store = server
    got = [o.id for o in store.iterate(MESSAGES.name, user=ALICE, page_size=2000)]
    assert got == sorted(m.id for m in messages)
    requests = w.requests("search")
    # The cursor: no filters, no offset, each page after the last id of the previous one.
    assert [r.after for r in requests] == ["", *got[1999::2000]]
    assert all(not r.HasField("filters") and r.offset == 0 for r in requests)

    w.grpc.clear()
    small = list(
        store.iterate(
            MESSAGES.name,
            user=ALICE,
            where=[Where("thread_id", "eq", "small"), Where("turn", "gte", BIG + 10)],
            page_size=64,
            include_vector=True,
        )
    )
    expected = sorted(messages[BIG + 10 :], key=lambda m: m.id)
    assert [o.id for o in small] == [m.id for m in expected]
    assert [o.vector for o in small] == [m.vector for m in expected]
    assert small[0].properties["thread_id"] == "small"
    # Filtered pages: sorted by id, the next one starting after the last id.
    second = w.requests("search")[1]
    assert [s.path[0] for s in second.sort_by] == ["_id"] and not second.after
    conditions = second.filters.filters
    assert conditions[-1].target.property == "_id"
    assert conditions[-1].operator == conditions[-1].OPERATOR_GREATER_THAN
    assert conditions[-1].value_text == small[63].id
    assert max(_windows(w)) <= QUERY_MAXIMUM_RESULTS

    with pytest.raises(InvalidInputError, match="page_size"):
        store.iterate(MESSAGES.name, user=ALICE, page_size=QUERY_MAXIMUM_RESULTS + 1)


def test_deep_listing_is_served_past_the_window(
    server: tuple[FakeWeaviate, wv.WeaviateStore], messages: list[MemoryObject]
) -> None:
    w, store = server
    page = store.list_objects(
        MESSAGES.name, user=ALICE, sort_by="turn", descending=True, offset=10_100, limit=40
    )
    total = BIG + SMALL
    assert [o.properties["turn"] for o in page] == list(range(total - 10_101, total - 10_141, -1))
    shallow = store.list_objects(MESSAGES.name, user=ALICE, sort_by="turn", offset=20, limit=5)
    assert [o.properties["turn"] for o in shallow] == [20, 21, 22, 23, 24]
    assert max(_windows(w)) <= QUERY_MAXIMUM_RESULTS
    # The message log's own listing goes through it.
    log = MessageLog(store, embeddings=None)  # type: ignore[arg-type]
    turns = asyncio.run(log.alist(ALICE, thread_id="big", offset=BIG - 10, limit=20))
    assert [t.turn for t in turns] == list(range(BIG - 10, BIG))


def test_export_past_the_window_writes_every_object_with_its_vector(
    server: tuple[FakeWeaviate, wv.WeaviateStore], messages: list[MemoryObject]
) -> None:
    w, store = server
    out = io.StringIO()
    summary = export_memories(store, out, embedding_model="test", page_size=5000)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["users"] == [ALICE]
    body = lines[1:]
    assert len(body) == len(messages) == summary.counts[(MESSAGES.name, ALICE)]
    by_id = {m.id: m for m in messages}
    assert {b["id"] for b in body} == set(by_id)
    assert all(b["vector"] == by_id[b["id"]].vector for b in body)
    # No per-object get: vectors come with the pages.
    assert len(w.requests("search")) < 10
    assert max(_windows(w)) <= QUERY_MAXIMUM_RESULTS


def test_an_update_of_more_ids_than_the_window_reads_them_in_chunks(
    server: tuple[FakeWeaviate, wv.WeaviateStore], messages: list[MemoryObject]
) -> None:
    w, store = server
    ids = [m.id for m in messages]
    result = store.update(
        MESSAGES.name,
        ids,
        lambda c: MemoryObject(c.id, {**c.properties, "role": "ai"}, c.vector or VEC),
        user=ALICE,
    )
    assert sorted(result.ids) == sorted(ids) and result.ok
    assert store.count(MESSAGES.name, user=ALICE, where=[Where("role", "eq", "human")]) == 0
    # The server refuses a lookup of more than QUERY_MAXIMUM_RESULTS objects.
    assert max(_windows(w)) <= QUERY_MAXIMUM_RESULTS


async def test_forget_a_thread_and_a_user_past_the_window(
    server: tuple[FakeWeaviate, wv.WeaviateStore],
) -> None:
    w, store = server
    report = await forget_thread(store, ALICE, "big")
    assert report.deleted[("weaviate", MESSAGES.name)] == BIG
    # delete_many removes at most QUERY_MAXIMUM_RESULTS per call: the store repeats it.
    assert len(w.requests("batch_delete")) >= 2
    assert store.count(MESSAGES.name, user=ALICE) == SMALL
    report = await forget_user(store, ALICE)
    assert report.deleted[("weaviate", MESSAGES.name)] == SMALL
    assert store.users(MESSAGES.name) == []
    assert max(_windows(w)) <= QUERY_MAXIMUM_RESULTS


def test_errors_stay_store_errors(server: tuple[FakeWeaviate, wv.WeaviateStore]) -> None:
    w, store = server

    def broken(request: Any) -> Any:
        raise WeaviateQueryError("deadline exceeded", "GRPC search")

    store._client._connection.grpc_search = broken
    with pytest.raises(StoreError, match="deadline exceeded"):
        list(store.iterate(MESSAGES.name, user=ALICE))

"""``add_properties`` on Weaviate, through the real client down to the REST calls it makes.

The pinned Weaviate version adds a property with ``POST /v1/schema/{class}/properties``
(``usecases/schema/property.go`` AddClassProperty): appended to the class, with the server's
index defaults; a name already in use (in any case) is a 422. The client asks for the schema
first and refuses a name it sees, so two processes can both pass that check: the loser's
422 must count as success when the property is there with the same shape.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import pytest

import agentic_memory.store.weaviate as wv
from agentic_memory.store import (
    CollectionSpec,
    MemoryObject,
    Property,
    SchemaConflictError,
    StoreError,
    Where,
    make_id,
)
from tests.unit.store.weaviate.conftest import Wire, client_over
from tests.unit.store.weaviate.server import FakeWeaviate

VEC = [0.5, -0.25, 0.0, 1.0]
ALICE = "alice@example.com"
SPEC = CollectionSpec(
    name="Notes",
    per_user=True,
    properties=(
        Property("body", "text", searchable=True, filterable=False),
        Property("thread_id", "text"),
        Property("created_at", "date"),
    ),
)
PINNED = Property("pinned", "bool", description="kept for good")
WHO = Property("pinned_by", "text", filterable=False)


def _posts(w: Wire) -> list[Any]:
    return [
        body for method, path, body in w.rest if method == "POST" and path.endswith("/properties")
    ]


def test_the_request_and_the_schema_afterwards(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=len(VEC))
    store.ensure_collection(SPEC)
    assert store.add_properties(SPEC.name, [PINNED, WHO]) == ["pinned", "pinned_by"]
    pinned, who = _posts(w)
    assert pinned["name"] == "pinned" and pinned["dataType"] == ["boolean"]
    assert pinned["indexFilterable"] is True and pinned["description"] == "kept for good"
    assert who["dataType"] == ["text"] and who["tokenization"] == "field"
    assert who["indexFilterable"] is False and who["indexSearchable"] is False
    # The internal user property stays where it was; ours are appended after it.
    names = [p["name"] for p in w.schemas["Notes"]["properties"]]
    assert names == ["body", "thread_id", "created_at", wv.USER_PROPERTY, "pinned", "pinned_by"]
    # A fresh store reads the grown schema back from the server, and accepts the spec.
    other = wv.WeaviateStore(client, dims=len(VEC))
    grown = CollectionSpec(SPEC.name, (*SPEC.properties, PINNED, WHO), per_user=True)
    assert other.spec(SPEC.name).properties == grown.properties
    other.ensure_collection(grown)
    # Adding again sends nothing.
    w.rest.clear()
    assert other.add_properties(SPEC.name, [PINNED]) == []
    assert _posts(w) == []


def test_a_process_that_loses_the_race_still_succeeds(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=len(VEC))
    store.ensure_collection(SPEC)
    real = w.handle

    def other_process_first(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/properties"):
            # Another process adds the same property between this client's check and post.
            real(request)
        return real(request)

    w.handle = other_process_first  # type: ignore[method-assign]
    with client_over(w) as racing:
        assert wv.WeaviateStore(racing, dims=len(VEC)).add_properties(SPEC.name, [PINNED]) == []
    assert [p["name"] for p in w.schemas["Notes"]["properties"]].count("pinned") == 1


def test_a_refused_change_is_an_error_and_changes_nothing(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=len(VEC))
    store.ensure_collection(SPEC)
    before = copy.deepcopy(w.schemas)
    real = w.handle

    def forbidden(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/properties"):
            return httpx.Response(403, json={"error": [{"message": "forbidden"}]})
        return real(request)

    w.handle = forbidden  # type: ignore[method-assign]
    with client_over(w) as refused:
        other = wv.WeaviateStore(refused, dims=len(VEC))
        with pytest.raises(StoreError, match="403|forbidden"):
            other.add_properties(SPEC.name, [PINNED])
        assert other.spec(SPEC.name).properties == SPEC.properties
    assert w.schemas == before


def test_a_property_of_another_shape_is_a_conflict(wire: tuple[Wire, Any]) -> None:
    w, client = wire
    store = wv.WeaviateStore(client, dims=len(VEC))
    store.ensure_collection(SPEC)
    # Another version added "pinned" as text meanwhile; this store still caches the old spec.
    wv.WeaviateStore(client, dims=len(VEC)).add_properties(SPEC.name, [Property("pinned", "text")])
    with pytest.raises(SchemaConflictError, match="pinned"):
        store.add_properties(SPEC.name, [PINNED])


def test_old_objects_match_not_equal_on_the_added_property() -> None:
    """Filters on an added property, through the stateful fake server (NotEqual: all minus equal)."""
    w = FakeWeaviate()
    with client_over(w) as client:
        store = wv.WeaviateStore(client, dims=len(VEC))
        store.ensure_collection(SPEC)
        old = [
            MemoryObject(make_id("n", str(i)), {"body": f"note {i}", "thread_id": "t"}, VEC)
            for i in range(3)
        ]
        store.upsert(SPEC.name, old, user=ALICE).raise_for_failures()
        store.add_properties(SPEC.name, [PINNED])
        store.upsert(
            SPEC.name,
            [MemoryObject(make_id("n", "p"), {"body": "p", "thread_id": "t", "pinned": True}, VEC)],
            user=ALICE,
        ).raise_for_failures()
        unpinned = [Where("pinned", "ne", True)]
        assert store.count(SPEC.name, user=ALICE, where=unpinned) == 3
        assert store.delete_where(SPEC.name, unpinned, user=ALICE) == 3
        left = list(store.iterate(SPEC.name, user=ALICE))
        assert [o.properties.get("pinned") for o in left] == [True]


def test_a_message_log_from_before_importance_gains_it_on_weaviate() -> None:
    """A Weaviate class written by the version before importance: the log adds the two
    properties on first use (no object rewritten), then marks and purges by them."""
    from datetime import UTC, datetime

    from agentic_memory.kinds.messages import MESSAGES, MESSAGES_V2, MessageLog
    from agentic_memory.kinds.retention import RetentionPolicy
    from agentic_memory.models.embeddings import LocalEmbeddings

    emb = LocalEmbeddings()
    w = FakeWeaviate()
    old = datetime(2025, 1, 1, tzinfo=UTC)
    with client_over(w) as client:
        store = wv.WeaviateStore(client, dims=emb.dims)
        # Turns as the earlier version stored them: no importance properties.
        store.ensure_collection(MESSAGES_V2)
        turns = [{"role": "user", "content": "old turn"}, {"role": "ai", "content": "answer"}]
        texts = [f"{t['role']}: {t['content']}" for t in turns]
        vectors = emb.embed_documents(texts)
        store.upsert(
            MESSAGES.name,
            [
                MemoryObject(
                    make_id("m", str(i)),
                    {
                        "content": t["content"],
                        "role": "human" if t["role"] == "user" else "ai",
                        "thread_id": "t",
                        "turn": i,
                        "created_at": old.isoformat(),
                        "search_text": t["content"],
                    },
                    vectors[i],
                )
                for i, t in enumerate(turns)
            ],
            user=ALICE,
        ).raise_for_failures()
        before = {o.id: o.properties for o in store.iterate(MESSAGES.name, user=ALICE)}
        policy = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=None)
        fresh = wv.WeaviateStore(client, dims=emb.dims)  # another process: the old schema
        log = MessageLog(fresh, emb, retention=policy)
        listed = asyncio.run(log.alist(ALICE, thread_id="t"))
        assert [(m.content, m.important) for m in listed] == [
            ("old turn", False),
            ("answer", False),
        ]
        names = {p.name for p in fresh.spec(MESSAGES.name).properties}
        assert {"important", "important_by"} <= names
        assert {o.id: o.properties for o in fresh.iterate(MESSAGES.name, user=ALICE)} == before
        asyncio.run(log.amark_important(ALICE, [listed[0].id]))
        report = asyncio.run(log.apurge(ALICE, now=datetime(2026, 1, 1, tzinfo=UTC)))
        assert (report.expired, report.remaining) == (1, 1)
        assert [m.content for m in asyncio.run(log.alist(ALICE, thread_id="t"))] == ["old turn"]

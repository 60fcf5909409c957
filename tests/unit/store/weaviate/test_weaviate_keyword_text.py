"""Knowledge chunks and episodes of an earlier version on Weaviate, upgraded to the keyword text.

Through the real client against the stateful fake server: the classes are recreated with
``search_text`` as the only ``indexSearchable`` property, every object (each tenant's) comes
back with its id, properties and vector, and a search sends the prepared query for
``search_text`` alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

import agentic_memory.store.weaviate as wv
from agentic_memory.kinds._restage import STAGING_PREFIX
from agentic_memory.kinds.episodes import EPISODES, EPISODES_V2, EpisodicMemory, search_text_of
from agentic_memory.kinds.knowledge import (
    KNOWLEDGE_PROPERTIES_V1,
    SourceInfo,
    acommit_source,
    arenew_generation,
    chunk_id,
    knowledge_collection,
    manifest_collection,
    search_knowledge,
)
from agentic_memory.kinds.recall_text import chunk_search_text
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import MemoryObject, make_id
from agentic_memory.sync_edge import run_sync
from tests.unit.store.weaviate.conftest import client_over
from tests.unit.store.weaviate.server import FakeWeaviate

ALICE = "alice@example.com"
BOB = "bob@example.com"


@pytest.fixture(scope="module")
def emb() -> LocalEmbeddings:
    return LocalEmbeddings()


def _searchable(w: FakeWeaviate, name: str) -> set[str]:
    return {p["name"] for p in w.schemas[name]["properties"] if p.get("indexSearchable")}


def _old_chunks(
    store: wv.WeaviateStore, emb: LocalEmbeddings, owner: str | None, word: str
) -> None:
    spec = dataclasses.replace(
        knowledge_collection("docs", owner), properties=KNOWLEDGE_PROPERTIES_V1
    )
    store.ensure_collection(spec)
    store.ensure_collection(manifest_collection("docs", owner))
    text = f"The {word} observatory tracks comets."
    revision = f"rev-{word}"
    props = {
        "text": text,
        "title": "Old Notes",
        "source": f"/papers/{word}.pdf",
        "sha256": "0" * 64,
        "page_start": 3,
        "page_end": 3,
        "chunk_index": 0,
        "char_start": 0,
        "char_end": len(text),
        "revision": revision,
    }
    vector = emb.embed_documents([text])[0]
    store.upsert(spec.name, [MemoryObject(chunk_id(revision, 0), props, vector)], user=owner)
    info = SourceInfo(
        f"/papers/{word}.pdf",
        "Old Notes",
        revision,
        "0" * 64,
        3,
        1,
        800,
        200,
        "2026-01-01T00:00:00+00:00",
    )
    run_sync(acommit_source(store, "docs", info, owner), instead=None)
    run_sync(arenew_generation(store, "docs", owner), instead=None)


def _objects(store: wv.WeaviateStore, name: str, user: str | None) -> dict[str, Any]:
    return {
        o.id: (o.properties, o.vector) for o in store.iterate(name, user=user, include_vector=True)
    }


def test_old_knowledge_bases_are_upgraded_on_weaviate(emb: LocalEmbeddings) -> None:
    w = FakeWeaviate()
    with client_over(w) as client:
        old = wv.WeaviateStore(client, dims=emb.dims)
        _old_chunks(old, emb, None, "Kelmar")
        for owner, word in ((ALICE, "Arvel"), (BOB, "Brisk")):
            _old_chunks(old, emb, owner, word)
        assert _searchable(w, "Knowledge_Docs") == {"text", "title"}
        before = {
            ("Knowledge_Docs", None): _objects(old, "Knowledge_Docs", None),
            **{
                ("UserKnowledge_Docs", u): _objects(old, "UserKnowledge_Docs", u)
                for u in (ALICE, BOB)
            },
        }

        store = wv.WeaviateStore(client, dims=emb.dims)  # the next version's process
        w.grpc.clear()
        hits = search_knowledge(store, emb, "docs", "Observatories?", alpha=0.0)
        assert [h.text for h in hits] == ["The Kelmar observatory tracks comets."]
        hybrid = [r for kind, r in w.grpc if kind == "search" and r.HasField("hybrid_search")]
        assert hybrid and hybrid[-1].hybrid_search.query == "observatori"
        assert list(hybrid[-1].hybrid_search.properties) == ["search_text"]
        search_knowledge(store, emb, "docs", "comets", alpha=0.0, owner=ALICE)

        for name in ("Knowledge_Docs", "UserKnowledge_Docs"):
            assert _searchable(w, name) == {"search_text"}
        assert not any(n.startswith(STAGING_PREFIX) for n in store.collections())
        for (name, user), objects in before.items():
            after = _objects(store, name, user)
            assert after.keys() == objects.keys()
            for oid, (props, vector) in objects.items():
                new_props, new_vector = after[oid]
                assert new_vector == pytest.approx(vector)
                assert {k: new_props[k] for k in props} == props
                assert new_props["search_text"] == chunk_search_text(
                    props["text"], title="Old Notes"
                )
        # Each user's chunks stayed in their own tenant.
        assert [p["text"] for p, _ in _objects(store, "UserKnowledge_Docs", BOB).values()] == [
            "The Brisk observatory tracks comets."
        ]


def test_old_episodes_are_upgraded_on_weaviate(emb: LocalEmbeddings) -> None:
    w = FakeWeaviate()
    now = datetime(2026, 6, 1, tzinfo=UTC)
    with client_over(w) as client:
        old = wv.WeaviateStore(client, dims=emb.dims)
        old.ensure_collection(EPISODES_V2)
        for user, summary in ((ALICE, "Hiking in Norway."), (BOB, "Baking bread.")):
            props = {
                "conversation": "user: hello",
                "context_tags": ["trip"],
                "conversation_summary": summary,
                "what_worked": "Lists.",
                "what_to_avoid": "Jargon.",
                "thread_id": "t1",
                "created_at": now.isoformat(),
                "importance": 0.4,
                "important": user == BOB,
            }
            oid = make_id("episode", user, "t1", "1")
            old.upsert(
                EPISODES.name,
                [MemoryObject(oid, props, emb.embed_documents([summary])[0])],
                user=user,
            )
        before = {u: _objects(old, EPISODES.name, u) for u in (ALICE, BOB)}

        store = wv.WeaviateStore(client, dims=emb.dims)
        memory = EpisodicMemory(store, emb)
        assert [e.conversation_summary for e in asyncio.run(memory.alist(BOB))] == ["Baking bread."]
        assert _searchable(w, EPISODES.name) == {"search_text"}
        w.grpc.clear()
        asyncio.run(memory.arecall(ALICE, "hikes", alpha=0.0, now=now))
        hybrid = [r for kind, r in w.grpc if kind == "search" and r.HasField("hybrid_search")]
        assert hybrid[-1].hybrid_search.query == "hike"
        assert list(hybrid[-1].hybrid_search.properties) == ["search_text"]
        for user, objects in before.items():
            after = _objects(store, EPISODES.name, user)
            assert after.keys() == objects.keys()
            for oid, (props, vector) in objects.items():
                new_props, new_vector = after[oid]
                assert new_vector == pytest.approx(vector)
                assert {k: new_props[k] for k in props} == props
                assert new_props["search_text"] == search_text_of(props)
        assert asyncio.run(memory.acount(BOB, important=True)) == 1

"""Export and import through the live server: every memory kind, both ways, all or nothing.

The memories ``tests/unit/cli/conftest.py`` seeds (two users' facts with a superseded one,
episodes, turns, rule versions, a global rule set, a knowledge base) are exported from an
embedded store, imported into the session's live Weaviate, exported from it again and
imported back into a fresh embedded store: ids, properties and vectors survive both trips.
An import that fails in its middle leaves the live server as it was. These tests write the
app's own collections, so they run on the session's own server only (its app collections
are dropped first).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import agentic_memory.store.weaviate.store as wv_store
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.weaviate import WeaviateStore
from agentic_memory.transfer import TransferError, export_to_file, import_memories
from tests.live_weaviate import LiveWeaviate, skip_or_fail
from tests.unit.cli.conftest import T0, seed_memories
from tests.unit.cli.helpers import assert_same, snapshot, without_shared_rules

pytestmark = pytest.mark.weaviate

MODEL = "wordllama-l2-supercat-256"


@pytest.fixture(scope="module")
def embeddings() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
def live(live_weaviate: LiveWeaviate, embeddings: LocalEmbeddings) -> Iterator[WeaviateStore]:
    if live_weaviate.node is None:
        skip_or_fail("writes the app's own collections: runs on the session's server only")
    store = WeaviateStore.connect(
        embeddings.dims, url=live_weaviate.url, grpc_port=live_weaviate.grpc_port
    )
    try:
        for name in store.collections():
            store.drop_collection(name)
        yield store
    finally:
        for name in store.collections():
            store.drop_collection(name)
        store.close()


@pytest.fixture
def seeded_store(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[EmbeddedStore]:
    store = EmbeddedStore(tmp_path / "source", dims=embeddings.dims)
    seed_memories(store, embeddings)
    yield store
    store.close()


def test_a_round_trip_through_the_live_server_keeps_ids_properties_and_vectors(
    live: WeaviateStore,
    seeded_store: EmbeddedStore,
    tmp_path: Path,
    embeddings: LocalEmbeddings,
) -> None:
    before = without_shared_rules(snapshot(seeded_store))
    export_to_file(seeded_store, tmp_path / "out.jsonl", embedding_model=MODEL)
    summary = import_memories(
        live,
        tmp_path / "out.jsonl",
        embeddings=embeddings,
        embedding_model=MODEL,
        allow_shared=True,
    )
    assert summary.total == len(before) and not summary.reembedded
    assert_same(before, without_shared_rules(snapshot(live)))
    # Importing the same file again changes nothing.
    again = snapshot(live)
    import_memories(
        live,
        tmp_path / "out.jsonl",
        embeddings=embeddings,
        embedding_model=MODEL,
        allow_shared=True,
    )
    assert_same(again, snapshot(live))
    # And back: what the live server exports is what the embedded store held.
    export_to_file(live, tmp_path / "back.jsonl", embedding_model=MODEL)
    with EmbeddedStore(tmp_path / "back", dims=embeddings.dims) as back:
        import_memories(
            back,
            tmp_path / "back.jsonl",
            embeddings=embeddings,
            embedding_model=MODEL,
            allow_shared=True,
        )
        assert_same(before, without_shared_rules(snapshot(back)))


def test_an_import_that_fails_in_its_middle_leaves_the_live_server_as_it_was(
    live: WeaviateStore,
    seeded_store: EmbeddedStore,
    tmp_path: Path,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One object per request, so that the failure comes after many writes.
    monkeypatch.setattr(wv_store, "BATCH_SIZE", 1)
    export_to_file(seeded_store, tmp_path / "out.jsonl", embedding_model=MODEL)
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    alice = [lines[0]] + [ln for ln in lines[1:] if json.loads(ln)["user"] == "alice"]
    (tmp_path / "alice.jsonl").write_text("\n".join(alice) + "\n")
    # Alice's diet is older on the server: the import retires it, then fails on a turn the
    # server already has with other content.
    asyncio.run(
        FactStore(live, embeddings).aremember(
            "alice", [{"subject": "diet", "value": "omnivore"}], now=T0 - timedelta(days=30)
        )
    )
    asyncio.run(
        MessageLog(live, embeddings).aremember(
            "alice", "alice-t2", [{"role": "user", "content": "a different turn", "id": "own"}]
        )
    )
    before = snapshot(live)
    with pytest.raises(TransferError, match="already has a turn 0"):
        import_memories(
            live, tmp_path / "alice.jsonl", embeddings=embeddings, embedding_model=MODEL
        )
    assert snapshot(live) == before

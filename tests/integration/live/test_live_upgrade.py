"""A volume written by the earlier pin (Weaviate 1.32.9), opened by the pinned server.

The first versions of this store created collections with an inverted-index config
(``Configure.inverted_index(bm25_k1=1.2, bm25_b=0.75)``), which gave them the older ``wand``
scorer on 1.32.9; the pinned server keeps them so (since 1.32.22 it turns BlockMax WAND on
only for new collections). A 1.32.9 node writes such a collection and one created as the
store creates them now; a 1.32.27 node is then started on the same data folder. The store
must report the old-scorer collection (``volume_issues``, a logged warning naming the way
out) and not the other, keep serving both, and the way out the docs give (export, drop,
import) must leave a BlockMax collection with the same objects and nothing to report.

``make weaviate-server`` builds 1.32.9 too (``WEAVIATE_EARLIER_PIN``); without it the test
skips with the build step's reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from weaviate.classes.config import Configure

from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MESSAGES, MessageLog
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.weaviate import WeaviateStore
from agentic_memory.store.weaviate.launcher import Node, server_path, unavailable_reason
from agentic_memory.transfer import export_to_file, import_memories
from tests.live_weaviate import skip_or_fail

pytestmark = pytest.mark.weaviate

EARLIER_PIN = "1.32.9"
MODEL = "wordllama-l2-supercat-256"
KEPT = FACTS
OLD = MESSAGES
TURNS = [{"role": "user", "content": f"zebra lion number {i}"} for i in range(12)]


@pytest.fixture(scope="module")
def emb() -> LocalEmbeddings:
    return LocalEmbeddings()


def _scorer(node: Node, name: str) -> Any:
    with urllib.request.urlopen(f"{node.url}/v1/schema/{name}") as reply:
        return json.load(reply)["invertedIndexConfig"].get("usingBlockMaxWAND")


def _connect(node: Node, emb: LocalEmbeddings) -> WeaviateStore:
    return WeaviateStore.connect(emb.dims, url=node.url, grpc_port=node.ports.grpc)


@pytest.fixture
def earlier_volume(tmp_path: Path, emb: LocalEmbeddings) -> Iterator[Path]:
    """A data folder written by a 1.32.9 node: the message log created as the first store
    versions created collections, the facts as the store creates them now."""
    if not server_path(EARLIER_PIN).is_file():
        skip_or_fail(unavailable_reason(EARLIER_PIN) or f"no weaviate-server {EARLIER_PIN}")
    data = tmp_path / "node1"
    with Node(data, version=EARLIER_PIN) as old:
        store = _connect(old, emb)
        try:
            store.ensure_collection(KEPT)
            create = store._client.collections.create

            def with_an_inverted_config(name: str, **kwargs: Any) -> Any:
                kwargs["inverted_index_config"] = Configure.inverted_index(bm25_k1=1.2, bm25_b=0.75)
                return create(name, **kwargs)

            store._client.collections.create = with_an_inverted_config
            store.ensure_collection(OLD)
            store._client.collections.create = create
            asyncio.run(MessageLog(store, emb).aremember("alice", "t1", TURNS))
            asyncio.run(
                FactStore(store, emb).aremember("alice", [{"subject": "pet", "value": "zebra"}])
            )
            assert _scorer(old, OLD.name) is None  # 1.32.9 wrote no flag: the older scorer
        finally:
            store.close()
    yield data


def test_the_pinned_server_reports_an_old_scorer_collection_and_the_migration_clears_it(
    earlier_volume: Path, tmp_path: Path, emb: LocalEmbeddings, caplog: pytest.LogCaptureFixture
) -> None:
    with Node(earlier_volume) as node:
        assert node.meta()["version"] != EARLIER_PIN
        assert _scorer(node, OLD.name) is None and _scorer(node, KEPT.name) is True
        store = _connect(node, emb)
        try:
            with caplog.at_level(logging.WARNING):
                issues = store.check_volume()
            assert list(issues) == [OLD.name]
            assert "older BM25 scorer" in issues[OLD.name]
            assert "weaviate-migration.md" in caplog.text
            # Both still serve.
            turns = asyncio.run(MessageLog(store, emb).alist("alice", thread_id="t1"))
            assert [t.content for t in turns] == [t["content"] for t in TURNS]
            (fact,) = asyncio.run(FactStore(store, emb).acurrent("alice"))
            assert fact.value == "zebra"
            # The way out: export, drop, import (docs/weaviate-migration.md).
            export_to_file(store, tmp_path / "mem.jsonl", embedding_model=MODEL)
            before = {o.id for o in store.iterate(OLD.name, user="alice")}
            for name in store.collections():
                store.drop_collection(name)
        finally:
            store.close()
        store = _connect(node, emb)
        try:
            import_memories(store, tmp_path / "mem.jsonl", embeddings=emb, embedding_model=MODEL)
            assert {o.id for o in store.iterate(OLD.name, user="alice")} == before
            assert store.check_volume() == {}
            assert _scorer(node, OLD.name) is True
        finally:
            store.close()

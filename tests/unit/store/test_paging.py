"""Past 10,000 objects on the embedded store: iteration, deep listings, export and forget.

The same paths run through the Weaviate backend in ``tests/unit/store/weaviate/test_paging.py``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agentic_memory.forget import forget_thread, forget_user
from agentic_memory.kinds.episodes import EPISODES
from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.store import MemoryObject, Where, make_id
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.transfer import export_memories

DIMS = 4
ALICE = "alice@example.com"
BIG = 10_200
SMALL = 150


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("paging") / "store"
    store = EmbeddedStore(path, dims=DIMS)
    store.ensure_collection(MESSAGES)
    objects = [
        MemoryObject(
            make_id("msg", str(i)),
            {
                "content": f"turn {i}",
                "role": "human",
                "thread_id": "big" if i < BIG else "small",
                "turn": i,
            },
            [float(i % 5), 1.0, 0.0, 0.5],
        )
        for i in range(BIG + SMALL)
    ]
    store.upsert(MESSAGES.name, objects, user=ALICE).raise_for_failures()
    store.ensure_collection(FACTS)
    facts = [
        MemoryObject(
            make_id("fact", str(i)),
            {
                "subject": f"s{i % 2}",
                "value": f"v{i}",
                "current": False,
                "source_thread": "big",
                "valid_from": "2026-01-01T00:00:00+00:00",
            },
            [1.0, 0.0, 0.0, 0.0],
        )
        for i in range(10_050)
    ]
    store.upsert(FACTS.name, facts, user=ALICE).raise_for_failures()
    store.close()
    return path


@pytest.fixture
def store(written: Path, tmp_path: Path) -> EmbeddedStore:
    copy = tmp_path / "store"
    copy.mkdir()
    for f in written.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    return EmbeddedStore(copy, dims=DIMS)


def test_iterate_and_deep_listings(store: EmbeddedStore) -> None:
    ids = [o.id for o in store.iterate(MESSAGES.name, user=ALICE, page_size=3000)]
    assert len(ids) == BIG + SMALL and ids == sorted(ids) and len(set(ids)) == len(ids)
    small = list(
        store.iterate(MESSAGES.name, user=ALICE, where=[Where("thread_id", "eq", "small")])
    )
    assert sorted(o.properties["turn"] for o in small) == list(range(BIG, BIG + SMALL))
    deep = store.list_objects(MESSAGES.name, user=ALICE, sort_by="turn", offset=10_180, limit=5)
    assert [o.properties["turn"] for o in deep] == list(range(10_180, 10_185))
    # Deleting what was seen while iterating skips nothing (keyset, not offset, pages).
    seen = 0
    for obj in store.iterate(MESSAGES.name, user=ALICE, page_size=500):
        seen += 1
        if seen % 500 == 0:
            store.delete(MESSAGES.name, [obj.id], user=ALICE)
    assert seen == BIG + SMALL


async def test_facts_of_a_subject_past_10000(store: EmbeddedStore) -> None:
    facts = FactStore(store, embeddings=None)  # type: ignore[arg-type]
    assert len(await facts.ahistory(ALICE, "s1")) == 5025


def test_export_past_10000(store: EmbeddedStore) -> None:
    out = io.StringIO()
    summary = export_memories(store, out, embedding_model="test", page_size=4000)
    lines = [json.loads(line) for line in out.getvalue().splitlines()[1:]]
    assert summary.counts[(MESSAGES.name, ALICE)] == BIG + SMALL
    assert summary.counts[(FACTS.name, ALICE)] == 10_050
    assert len(lines) == BIG + SMALL + 10_050
    assert all(line["vector"] is not None and len(line["vector"]) == DIMS for line in lines)


async def test_forget_a_thread_then_the_user_past_10000(store: EmbeddedStore) -> None:
    report = await forget_thread(store, ALICE, "big")
    assert report.deleted[("embedded", MESSAGES.name)] == BIG
    assert report.deleted[("embedded", FACTS.name)] == 10_050
    assert await store.acount(MESSAGES.name, user=ALICE) == SMALL
    report = await forget_user(store, ALICE)
    assert report.deleted[("embedded", MESSAGES.name)] == SMALL
    assert await store.ausers(MESSAGES.name) == [] and await store.ausers(FACTS.name) == []
    assert EPISODES.name not in await store.acollections()

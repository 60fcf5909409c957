"""Episodes' prepared keyword text: what it holds, recall by it, and the upgrade of old stores."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.kinds._restage import STAGING_PREFIX
from agentic_memory.kinds.episodes import (
    EPISODES,
    EPISODES_V1,
    EPISODES_V2,
    EpisodicMemory,
    Reflection,
    embedding_text,
    search_text_of,
)
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import CollectionSpec, MemoryObject, make_id
from agentic_memory.store.embedded import EmbeddedStore

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def reflection(summary: str, tags: list[str], worked: str = "Short answers.") -> Reflection:
    return Reflection(
        context_tags=tags,
        conversation_summary=summary,
        what_worked=worked,
        what_to_avoid="Long digressions.",
        importance=0.5,
    )


@pytest.fixture
def episodes(store: EmbeddedStore, embeddings: LocalEmbeddings) -> EpisodicMemory:
    return EpisodicMemory(store, embeddings)


def test_the_keyword_text_holds_tags_reflection_and_conversation(
    episodes: EpisodicMemory, store: EmbeddedStore
) -> None:
    r = reflection("Planned hiking in the Dolomites.", ["mountains"], "Maps with trails.")
    oid = asyncio.run(episodes.astore("alice", "t1", r, "user: any huts open in June?", now=NOW))
    stored = store.get(EPISODES.name, oid, user="alice")
    assert stored is not None
    words = stored.properties["search_text"].split()
    assert {"mountain", "hike", "dolomit", "trail", "hut", "june"} <= set(words)
    assert not {"the", "in", "any", "with"} & set(words)
    assert stored.properties["search_text"] == search_text_of(stored.properties)
    assert EPISODES.searchable == ("search_text",)


def test_recall_meets_other_word_forms_and_tags(episodes: EpisodicMemory) -> None:
    asyncio.run(
        episodes.astore("alice", "t1", reflection("Planned hiking trips.", ["alps"]), "x", now=NOW)
    )
    asyncio.run(
        episodes.astore("alice", "t2", reflection("Fixed a bicycle.", ["repair"]), "y", now=NOW)
    )
    hits = asyncio.run(episodes.arecall("alice", "hikes", k=2, alpha=0.0, now=NOW))
    assert [h.episode.thread_id for h in hits] == ["t1"]
    hits = asyncio.run(episodes.arecall("alice", "repairs", k=2, alpha=0.0, now=NOW))
    assert [h.episode.thread_id for h in hits] == ["t2"]


def test_a_query_of_only_stop_words_finds_nothing_by_keywords(episodes: EpisodicMemory) -> None:
    asyncio.run(episodes.astore("alice", "t1", reflection("What was that?", ["x"]), "z", now=NOW))
    assert asyncio.run(episodes.arecall("alice", "what was that", alpha=0.0, now=NOW)) == []
    assert asyncio.run(episodes.arecall("alice", "what was that", alpha=0.5, now=NOW))


def test_hostile_text_and_other_users(episodes: EpisodicMemory, store: EmbeddedStore) -> None:
    r = reflection("Кошки \x07спят; 東京タワー\x1b[0m visit", ["путешествие"])
    oid = asyncio.run(episodes.astore("alice", "t1", r, "user: \x01 hi " + "ж" * 50_000, now=NOW))
    stored = store.get(EPISODES.name, oid, user="alice")
    assert stored is not None and "\x07" not in stored.properties["search_text"]
    for query in ("кошки", "東京タワー", "путешествие"):
        hits = asyncio.run(episodes.arecall("alice", query, alpha=0.0, now=NOW))
        assert [h.episode.id for h in hits] == [oid], query
        assert asyncio.run(episodes.arecall("bob", query, alpha=0.0, now=NOW)) == []


def test_storing_again_and_marking_keep_the_keyword_text_in_sync(
    episodes: EpisodicMemory, store: EmbeddedStore
) -> None:
    oid = asyncio.run(
        episodes.astore("alice", "t1", reflection("Zeppelin tours.", ["air"]), "x", now=NOW)
    )
    asyncio.run(episodes.amark_important("alice", [oid]))
    asyncio.run(
        episodes.astore(
            "alice", "t1", reflection("Dirigible tours.", ["air"]), "x", conversation=1, now=NOW
        )
    )
    stored = store.get(EPISODES.name, oid, user="alice")
    assert stored is not None and stored.properties["important"] is True
    assert stored.properties["search_text"] == search_text_of(stored.properties)
    assert asyncio.run(episodes.arecall("alice", "zeppelin", alpha=0.0, now=NOW)) == []
    assert asyncio.run(episodes.arecall("alice", "dirigibles", alpha=0.0, now=NOW))


# -- a store of an earlier schema ------------------------------------------------------------


def _old_properties(summary: str, tags: list[str], important: bool | None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "conversation": "user: hello",
        "context_tags": tags,
        "conversation_summary": summary,
        "what_worked": "Lists.",
        "what_to_avoid": "Jargon.",
        "thread_id": "t1",
        "created_at": NOW.isoformat(),
        "importance": 0.4,
    }
    if important is not None:
        props["important"] = important
    return props


def _old_store(path: Path, embeddings: LocalEmbeddings, spec: CollectionSpec) -> EmbeddedStore:
    store = EmbeddedStore(path, dims=embeddings.dims)
    store.ensure_collection(spec)
    with_flag = spec is EPISODES_V2
    for user, summary in (("alice", "Hiking in Norway."), ("bob", "Baking sourdough bread.")):
        props = _old_properties(
            summary, ["travel" if user == "alice" else "food"], True if with_flag else None
        )
        store.upsert(
            spec.name,
            [
                MemoryObject(
                    make_id("episode", user, "t1", "1"),
                    props,
                    embeddings.embed_documents([embedding_text(props)])[0],
                )
            ],
            user=user,
        ).raise_for_failures()
    return store


@pytest.mark.parametrize(
    "old", [EPISODES_V1, EPISODES_V2], ids=["before-important", "before-keyword-text"]
)
def test_old_episodes_are_upgraded_on_first_use(
    tmp_path: Path, embeddings: LocalEmbeddings, old: CollectionSpec
) -> None:
    _old_store(tmp_path / "s", embeddings, old).close()
    store = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    before = {
        u: {o.id: o for o in store.iterate(EPISODES.name, user=u, include_vector=True)}
        for u in ("alice", "bob")
    }
    memory = EpisodicMemory(store, embeddings)
    hits = asyncio.run(memory.arecall("alice", "hikes", alpha=0.0, now=NOW))
    assert [h.episode.conversation_summary for h in hits] == ["Hiking in Norway."]
    assert asyncio.run(memory.arecall("alice", "sourdough", alpha=0.0, now=NOW)) == []
    assert store.spec(EPISODES.name).searchable == ("search_text",)
    assert not any(n.startswith(STAGING_PREFIX) for n in store.collections())
    for user, objects in before.items():
        for oid, obj in objects.items():
            now = store.get(EPISODES.name, oid, user=user, include_vector=True)
            assert now is not None and now.vector == pytest.approx(obj.vector)
            assert {k: now.properties[k] for k in obj.properties} == obj.properties
            assert now.properties["search_text"] == search_text_of(obj.properties)
    assert asyncio.run(memory.acount("bob", important=True)) == (1 if old is EPISODES_V2 else 0)
    store.close()


def test_an_episode_upgrade_killed_after_the_drop_is_finished(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    store = _old_store(tmp_path / "s", embeddings, EPISODES_V2)

    class Killed(Exception):
        pass

    real_drop = store.drop_collection

    def drop_then_die(name: str) -> None:
        real_drop(name)
        if name == EPISODES.name:
            raise Killed

    store.drop_collection = drop_then_die  # type: ignore[method-assign]
    with pytest.raises(Killed):
        asyncio.run(EpisodicMemory(store, embeddings).alist("alice"))
    store.drop_collection = real_drop  # type: ignore[method-assign]
    assert EPISODES.name not in store.collections()
    store.close()

    reopened = EmbeddedStore(tmp_path / "s", dims=embeddings.dims)
    memory = EpisodicMemory(reopened, embeddings)
    assert [e.conversation_summary for e in asyncio.run(memory.alist("bob"))] == [
        "Baking sourdough bread."
    ]
    assert sorted(reopened.collections()) == [EPISODES.name]
    reopened.close()


def test_an_export_of_old_episodes_imports_into_an_upgraded_store(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    from agentic_memory.transfer import export_memories, import_memories

    old = _old_store(tmp_path / "old", embeddings, EPISODES_V2)
    path = tmp_path / "old.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_memories(old, out, embedding_model="wordllama")
    old.close()
    target = EmbeddedStore(tmp_path / "new", dims=embeddings.dims)
    memory = EpisodicMemory(target, embeddings)
    asyncio.run(memory.astore("carol", "t9", reflection("Chess openings.", ["games"]), "x"))
    import_memories(target, path, embeddings=embeddings, embedding_model="wordllama")
    hits = asyncio.run(memory.arecall("alice", "hikes", alpha=0.0, now=NOW))
    assert [h.episode.conversation_summary for h in hits] == ["Hiking in Norway."]
    assert asyncio.run(memory.acount("bob", important=True)) == 1
    target.close()

"""Fixtures for the CLI, inspector, forget and transfer tests: a real embedded store, seeded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentic_memory.ingest.pipeline import ingest_paths
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.legacy import write_shared_version

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


@dataclass
class Reflection:
    context_tags: list[str]
    conversation_summary: str
    what_worked: str
    what_to_avoid: str
    importance: float = 0.5


@dataclass
class Seeded:
    """What the seed wrote, to check against."""

    episodes: dict[str, list[str]] = field(default_factory=dict)
    threads: dict[str, list[str]] = field(default_factory=dict)
    kb_source: str = ""


@pytest.fixture(scope="session")
def embeddings() -> LocalEmbeddings:
    return LocalEmbeddings()


@pytest.fixture
def store(tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path / "amem-home" / "store", dims=embeddings.dims)
    yield s
    s.close()


def add_messages(
    store: EmbeddedStore, embeddings: LocalEmbeddings, user: str, thread: str, texts: list[str]
) -> None:
    turns = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)
    ]
    asyncio.run(MessageLog(store, embeddings).aremember(user, thread, turns, now=T0))


def seed_memories(store: EmbeddedStore, embeddings: LocalEmbeddings) -> Seeded:
    """Two users with facts (one superseded), episodes, messages, rules; a global rule set; a KB."""
    seeded = Seeded()
    facts = FactStore(store, embeddings)
    episodes = EpisodicMemory(store, embeddings)
    rules = RuleBook(store, embeddings)
    for user, city, diet in (("alice", "Lyon", "vegetarian"), ("bob", "Oslo", "vegan")):
        t1, t2 = f"{user}-t1", f"{user}-t2"
        seeded.threads[user] = [t1, t2]
        add_messages(
            store, embeddings, user, t1, [f"I live in {city}", "Noted.", f"I am {diet}", "Ok"]
        )
        add_messages(store, embeddings, user, t2, ["I moved to Paris", "Congratulations."])
        asyncio.run(
            facts.aremember(
                user,
                [{"subject": "home city", "value": city, "category": "identity"}],
                source_thread=t1,
                now=T0,
            )
        )
        asyncio.run(
            facts.aremember(
                user,
                [{"subject": "diet", "value": diet, "category": "preference"}],
                source_thread=t1,
                now=T0,
            )
        )
        asyncio.run(
            facts.aremember(
                user,
                [{"subject": "home city", "value": "Paris", "category": "identity"}],
                source_thread=t2,
                now=T0 + timedelta(days=1),
            )
        )
        e1 = asyncio.run(
            episodes.astore(
                user,
                t1,
                Reflection(
                    ["food", "travel"],
                    f"{user} talked about {diet} food in {city}",
                    "short answers",
                    "long lists",
                ),
                f"user: I live in {city}",
                now=T0,
            )
        )
        e2 = asyncio.run(
            episodes.astore(
                user,
                t2,
                Reflection(["moving"], f"{user} moved to Paris", "congratulating", "nothing"),
                "user: I moved to Paris",
                now=T0 + timedelta(days=1),
            )
        )
        seeded.episodes[user] = [e1, e2]
        asyncio.run(
            rules.apropose(
                user,
                [{"instruction": f"Suggest {diet} dishes", "rationale": f"{user} is {diet}"}],
                source_episodes=[e1],
                source_users=[user],
                now=T0,
            )
        )
    write_shared_version(
        store,
        embeddings,
        [{"instruction": "Keep answers short", "rationale": "users liked short answers"}],
        source_episodes=[seeded.episodes["alice"][0], seeded.episodes["bob"][0]],
        source_users=["alice", "bob"],
        now=T0,
    )
    write_shared_version(
        store,
        embeddings,
        [
            {"instruction": "Keep answers short", "rationale": "users liked short answers"},
            {"instruction": "Congratulate on news", "rationale": "alice liked it"},
        ],
        source_episodes=[seeded.episodes["alice"][1]],
        source_users=["alice"],
        now=T0 + timedelta(days=1),
    )
    doc = store.path.parent / "pump.md"
    doc.write_text(
        "# Pump manual\n\nThe pump needs oil every 200 hours.\n\n"
        "Reset the valve by holding the red button for five seconds.\n"
    )
    report = ingest_paths([doc], kb="manuals", store=store, embeddings=embeddings)
    assert report.ok
    seeded.kb_source = str(doc.resolve())
    return seeded


@pytest.fixture
def seeded(store: EmbeddedStore, embeddings: LocalEmbeddings) -> Seeded:
    return seed_memories(store, embeddings)

"""A store that already holds memories of every kind is served without one blocking call.

What ``langgraph dev`` does after a restart: it opens ``AgenticStore`` on existing data, so
every schema and index cache is empty, and awaits ``abatch`` on its event loop under
blockbuster. Forgetting and retention (async use cases over the same kinds) are held to the
same rule. Here the memories (a fact, an episode, a rule version, logged turns, a knowledge
base, generic items) are written once per module through the sync API; each test opens a new
``AgenticStore`` on a copy of them (in the fixture, off the loop), so its call is the first
the store serves, and runs it under blockbuster (``tests/conftest.py``). Before the async core,
a fact search or put failed here with ``BlockingError: sqlite3.Connection.execute``.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from agentic_memory.forget import (
    forget_episode,
    forget_fact,
    forget_subject,
    forget_thread,
    forget_user,
)
from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import root_id
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore

EPISODE = EpisodicMemory.episode_id("alice", "t1", 1)
NAMESPACES = [
    ("facts", "alice"),
    ("episodes", "alice"),
    ("rules", "alice"),
    ("messages", "alice", "t1"),
    ("knowledge", "manual"),
    ("notes", "alice"),
]


def _open(path: Path, embeddings: LocalEmbeddings) -> AgenticStore:
    return AgenticStore(
        EmbeddedStore(path, dims=embeddings.dims),
        embeddings,
        close_store=True,
        ttl={"default_ttl": 60, "refresh_on_read": True},
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, embeddings: LocalEmbeddings) -> Path:
    root = tmp_path_factory.mktemp("cold-kinds")
    manual = root / "manual.md"
    manual.write_text("Rice cooker manual.\n\nUse 1.5 cups of water per cup of white rice.\n")
    path = root / "store"
    with _open(path, embeddings) as s:
        s.put(("facts", "alice"), "diet", {"value": "vegetarian", "category": "preference"})
        s.put(
            ("episodes", "alice"),
            EPISODE,
            {
                "thread_id": "t1",
                "conversation": "user: I am vegetarian\nai: noted",
                "context_tags": ["diet"],
                "conversation_summary": "The user said they are vegetarian.",
                "what_worked": "Short answers",
                "what_to_avoid": "Meat dishes",
                "importance": 0.7,
            },
        )
        s.put(
            ("rules", "alice"),
            "latest",
            {"rules": [{"instruction": "Respect the diet", "rationale": "stated"}]},
        )
        s.put(("messages", "alice", "t1"), "m1", {"role": "user", "content": "my printer jams"})
        s.put(("messages", "alice", "t1"), "m2", {"role": "ai", "content": "clean the rollers"})
        s.put(("notes", "alice"), "n1", {"text": "likes jazz"})
        s.put(("notes", "alice"), "n2", {"text": "short-lived"}, ttl=1)
        report = ingest_paths([manual], kb="manual", store=s.memory_store, embeddings=embeddings)
        assert report.ok
    return path


@pytest.fixture
def cold(written: Path, tmp_path: Path, embeddings: LocalEmbeddings) -> Iterator[AgenticStore]:
    copy = tmp_path / "store"
    shutil.copytree(written, copy)
    store = _open(copy, embeddings)
    assert store.memory_store._specs == {}  # nothing cached: as after a restart
    yield store
    store.close()


def _calls() -> dict[str, Callable[[AgenticStore], Awaitable[Any]]]:
    calls: dict[str, Callable[[AgenticStore], Awaitable[Any]]] = {
        "list_namespaces": lambda s: s.alist_namespaces(),
        "list_namespaces deep under messages": lambda s: s.alist_namespaces(
            prefix=("messages",), max_depth=3
        ),
        "search everything": lambda s: s.asearch((), query="vegetarian rice printer jazz"),
        "search everything, no query": lambda s: s.asearch(()),
        "sweep ttl": lambda s: s.asweep_ttl(),
        "sweep retention": lambda s: s.asweep_retention(),
        "forget a user's generic items": lambda s: s.aforget_user("alice"),
        "forget a generic namespace": lambda s: s.aforget_namespace(("notes",)),
        "a batch of every kind of op": lambda s: s.abatch(
            [
                GetOp(("facts", "alice"), "diet"),
                SearchOp(("episodes", "alice"), query="diet"),
                PutOp(("notes", "bob"), "n", {"text": "x"}),
                ListNamespacesOp(),
            ]
        ),
    }
    for ns in NAMESPACES:
        calls[f"search {ns[0]} by query"] = lambda s, ns=ns: s.asearch(ns, query="rice diet")
        calls[f"search {ns[0]}"] = lambda s, ns=ns: s.asearch(ns, limit=5)
        calls[f"search {ns[0]} by owner prefix"] = lambda s, ns=ns: s.asearch(ns[:1], query="a")
    calls["get facts"] = lambda s: s.aget(("facts", "alice"), "diet")
    calls["get episodes"] = lambda s: s.aget(("episodes", "alice"), EPISODE)
    calls["get rules"] = lambda s: s.aget(("rules", "alice"), "latest")
    calls["get messages"] = lambda s: s.aget(("messages", "alice", "t1"), "m1")
    calls["get notes"] = lambda s: s.aget(("notes", "alice"), "n1")
    calls["get knowledge"] = lambda s: s.aget(("knowledge", "manual"), EPISODE)
    calls["put facts"] = lambda s: s.aput(("facts", "alice"), "diet", {"value": "vegan"})
    calls["delete facts"] = lambda s: s.adelete(("facts", "alice"), "diet")
    calls["put episodes"] = lambda s: s.aput(
        ("episodes", "alice"),
        EPISODE,
        {
            "thread_id": "t1",
            "conversation": "user: hi",
            "context_tags": [],
            "conversation_summary": "A greeting.",
            "what_worked": "",
            "what_to_avoid": "",
            "importance": 0.2,
            "important": True,
        },
    )
    calls["delete episodes"] = lambda s: s.adelete(("episodes", "alice"), EPISODE)
    calls["put rules"] = lambda s: s.aput(
        ("rules", "alice"), "latest", {"rollback_to": 1, "version": 2}
    )
    calls["put messages"] = lambda s: s.aput(
        ("messages", "alice", "t1"), "m3", {"role": "user", "content": "thanks", "important": True}
    )
    calls["delete messages"] = lambda s: s.adelete(("messages", "alice", "t1"), "m1")
    calls["put notes"] = lambda s: s.aput(("notes", "alice"), "n1", {"text": "likes blues"})
    calls["delete notes"] = lambda s: s.adelete(("notes", "alice"), "n1")
    # Forgetting and retention, over the same memories (agentic_memory.forget, Memory).
    calls["forget user"] = lambda s: forget_user(s.memory_store, "alice", embeddings=s.embeddings)
    calls["forget thread"] = lambda s: forget_thread(
        s.memory_store, "alice", "t1", embeddings=s.embeddings
    )
    calls["forget episode"] = lambda s: forget_episode(
        s.memory_store, "alice", EPISODE, embeddings=s.embeddings
    )
    calls["forget fact"] = lambda s: forget_fact(s.memory_store, "alice", root_id("alice", "diet"))
    calls["forget subject"] = lambda s: forget_subject(s.memory_store, "alice", "diet")
    calls["purge"] = lambda s: s.memory.apurge()
    calls["retention status"] = lambda s: s.memory.aretention("alice")
    return calls


CALLS = _calls()


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_the_first_call_on_a_reopened_store_makes_no_blocking_call(
    cold: AgenticStore, name: str
) -> None:
    await CALLS[name](cold)


async def test_what_a_restarted_store_serves_is_what_was_stored(cold: AgenticStore) -> None:
    fact = await cold.aget(("facts", "alice"), "diet")
    assert fact is not None and fact.value["value"] == "vegetarian"
    turns = await cold.asearch(("messages", "alice", "t1"), query="printer")
    assert turns[0].value["content"] == "my printer jams"
    chunks = await cold.asearch(("knowledge", "manual"), query="water rice")
    assert chunks and "1.5 cups" in chunks[0].value["text"]
    listed = await cold.alist_namespaces(max_depth=2)
    assert listed == [
        ("episodes", "alice"),
        ("facts", "alice"),
        ("knowledge", "manual"),
        ("messages", "alice"),
        ("notes", "alice"),
        ("rules", "alice"),
    ]

"""One memory object serves many threads, each with an event loop of its own, at once.

A web app calling the graph from a thread pool, a notebook with threads and the sync edge
of the API (a new loop per call) all use one ``Memory`` / ``AgenticStore`` / compiled graph
from several loops. Nothing a long-lived object holds may be bound to one loop: a caller on
another loop would fail ("bound to a different event loop"), and a waiter woken from another
thread would never be scheduled (a hang). Every worker here is a daemon thread joined with a
deadline, so a hang fails the test instead of hanging CI.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agentic_memory.api import Memory
from agentic_memory.kinds.episodes import EPISODES, EPISODES_V2, EpisodicMemory
from agentic_memory.kinds.messages import MESSAGES, MESSAGES_V1, MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.store import MemoryObject, make_id
from agentic_memory.store.embedded import EmbeddedStore
from tests.integration.concurrency.workers import DIMS, HashEmbeddings

THREADS = 8
DEADLINE = 60.0
"""Seconds a worker may take before it counts as hung (each needs well under one)."""
KEEP = RetentionPolicy(message_days=None, max_messages=None, purge_interval_minutes=None)


def _at_once(work: Callable[[int], Any], n: int = THREADS) -> list[Any]:
    """Run ``work(i)`` in ``n`` daemon threads released together; return their results.

    Fails when a worker raised (with every error) or is still running at the deadline.
    """
    start = threading.Barrier(n, timeout=DEADLINE)
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as exc:  # reported below, with every other worker's
            errors[i] = repr(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    hung = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not hung, f"workers {hung} hung (errors of the others: {errors})"
    assert not errors, errors
    return [results[i] for i in range(n)]


def _old_episodes(path: Path) -> None:
    """A store whose episodes an earlier version wrote (no keyword text): upgraded on first use."""
    emb = HashEmbeddings()
    with EmbeddedStore(path, dims=DIMS) as store:
        store.ensure_collection(EPISODES_V2)
        for user in ("alice", "bob"):
            for n in range(1, 4):
                props = {
                    "conversation": f"user: trip {n}",
                    "context_tags": ["travel"],
                    "conversation_summary": f"{user} planned trip {n}.",
                    "what_worked": "Lists.",
                    "what_to_avoid": "Jargon.",
                    "thread_id": f"t{n}",
                    "created_at": "2026-01-01T00:00:00+00:00",
                    "importance": 0.5,
                    "important": False,
                }
                obj = MemoryObject(
                    make_id("episode", user, f"t{n}", "1"), props, emb.embed_query(f"trip {n}")
                )
                store.upsert(EPISODES_V2.name, [obj], user=user).raise_for_failures()


def _old_log(path: Path) -> None:
    """A message log of the first schema: copied to the current one on first use."""
    emb = HashEmbeddings()
    with EmbeddedStore(path, dims=DIMS) as store:
        store.ensure_collection(MESSAGES_V1)
        objs = [
            MemoryObject(
                make_id("msg", "alice", "t", f"#{turn}"),
                {
                    "content": f"turn {turn}",
                    "role": "human",
                    "thread_id": "t",
                    "turn": turn,
                    "created_at": f"2026-01-01T00:00:{turn:02d}+00:00",
                },
                emb.embed_query(f"turn {turn}"),
            )
            for turn in range(6)
        ]
        store.upsert(MESSAGES_V1.name, objs, user="alice").raise_for_failures()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("round_", range(3))
def test_threads_with_own_loops_first_use_old_episodes_at_once(tmp_path: Path, round_: int) -> None:
    path = tmp_path / f"store{round_}"
    _old_episodes(path)
    with EmbeddedStore(path, dims=DIMS) as store:
        memory = Memory(store, HashEmbeddings(), retention=KEEP)

        def first_use(i: int) -> list[str]:
            user = ("alice", "bob")[i % 2]
            return sorted(e.conversation_summary for e in asyncio.run(memory.episodes.alist(user)))

        found = _at_once(first_use)
        assert found == [
            [f"{('alice', 'bob')[i % 2]} planned trip {n}." for n in (1, 2, 3)]
            for i in range(THREADS)
        ]
        assert store.spec(EPISODES.name).searchable == ("search_text",)
        assert sorted(store.collections()) == [EPISODES.name]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("round_", range(3))
def test_the_sync_store_api_from_many_threads_on_an_old_store(tmp_path: Path, round_: int) -> None:
    path = tmp_path / f"store{round_}"
    _old_episodes(path)
    _old_log(path)
    with EmbeddedStore(path, dims=DIMS) as store:
        agentic = AgenticStore(store, HashEmbeddings())

        def sync_calls(i: int) -> tuple[int, int]:
            # Each sync call runs on a new loop of its own (the sync edge).
            episodes = agentic.search(("episodes", "alice"))
            turns = agentic.search(("messages", "alice", "t"), limit=50)
            return len(episodes), len(turns)

        assert _at_once(sync_calls) == [(3, 6)] * THREADS
        assert MESSAGES.name in store.collections()
        assert MESSAGES_V1.name == MESSAGES.name
        assert store.spec(MESSAGES.name).searchable == MESSAGES.searchable


@pytest.mark.timeout(600)
def test_a_message_log_and_episodes_first_used_from_many_loops_at_once(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _old_episodes(path)
    _old_log(path)
    with EmbeddedStore(path, dims=DIMS) as store:
        emb = HashEmbeddings()
        log = MessageLog(store, emb, retention=KEEP)
        episodes = EpisodicMemory(store, emb)

        def mixed(i: int) -> tuple[int, int]:
            async def both() -> tuple[int, int]:
                ids = await log.aremember(
                    "alice", f"new-{i}", [{"role": "user", "content": f"hello {i}"}]
                )
                found = await episodes.arecall("alice", "trip", k=3)
                return len(ids), len(found)

            return asyncio.run(both())

        assert _at_once(mixed) == [(1, 3)] * THREADS
        assert store.count(MESSAGES.name, user="alice") == 6 + THREADS


@pytest.mark.timeout(600)
def test_a_sweeper_started_on_one_loop_is_stopped_from_another(tmp_path: Path) -> None:
    with EmbeddedStore(tmp_path / "store", dims=DIMS) as store:
        agentic = AgenticStore(store, HashEmbeddings())
        started = threading.Event()
        release = threading.Event()
        errors: list[str] = []

        def owner() -> None:
            async def run() -> None:
                await agentic.start_ttl_sweeper(60)
                started.set()
                await asyncio.to_thread(release.wait, DEADLINE)

            try:
                asyncio.run(run())
            except BaseException as exc:  # reported below
                errors.append(repr(exc))

        thread = threading.Thread(target=owner, daemon=True)
        thread.start()
        assert started.wait(DEADLINE)

        async def stop() -> bool:
            again = await agentic.start_ttl_sweeper(60)
            assert again.done() is False
            return await agentic.stop_ttl_sweeper(timeout=DEADLINE)

        stopped = _at_once(lambda _: asyncio.run(stop()), n=1)
        release.set()
        thread.join(DEADLINE)
        assert not thread.is_alive() and errors == []
        assert stopped == [True]


CONVERSATIONS = 4
TURNS = 3


@pytest.mark.timeout(600)
def test_conversations_on_threads_with_own_loops_through_one_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    from agentic_memory.graph import resources
    from agentic_memory.graph.graph import compile_graph
    from tests.fake_openai import FakeOpenAIServer

    # Models are resolved once per spec per process: this test's point at its own server.
    monkeypatch.setattr(resources, "_RESOLVED", {})
    path = tmp_path / "store"
    _old_episodes(path)
    # keep_alive: the model clients keep connections open between calls, as with OpenAI.
    with (
        FakeOpenAIServer(model="fake-model", keep_alive=True) as server,
        EmbeddedStore(path, dims=DIMS) as store,
    ):
        monkeypatch.setenv("AMEM_BASE_URL", server.base_url)
        agentic = AgenticStore(store, HashEmbeddings())
        app: Any = compile_graph(checkpointer=InMemorySaver(), store=agentic)
        spec = "compatible:fake-model"

        def conversation(k: int) -> list[str]:
            answers = []
            for i in range(TURNS):
                # A new loop per turn, as a web app's worker calling asyncio.run does.
                out = asyncio.run(
                    app.ainvoke(
                        {
                            "messages": [HumanMessage(f"Conversation {k}, turn {i}.")],
                            "end_conversation": i == TURNS - 1,
                        },
                        {"configurable": {"thread_id": f"conv-{k}"}},
                        context={"user_id": "alice", "model": spec, "memory_model": spec},
                    )
                )
                answers.append(str(out["messages"][-1].content))
            return answers

        answered = _at_once(conversation, n=CONVERSATIONS)
        assert all(len(a) == TURNS and all(a) for a in answered)
        # Each loop had its own model client; those of closed loops are let go (12 loops ran).
        assert len(resources._PER_LOOP) <= CONVERSATIONS
        log = MessageLog(store, HashEmbeddings(), retention=KEEP)
        for k in range(CONVERSATIONS):
            logged = asyncio.run(log.alist("alice", thread_id=f"conv-{k}"))
            assert [m.content for m in logged if m.role == "human"] == [
                f"Conversation {k}, turn {i}." for i in range(TURNS)
            ]
        assert asyncio.run(EpisodicMemory(store, HashEmbeddings()).acount("alice")) == 3 + (
            CONVERSATIONS
        )

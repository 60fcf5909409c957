"""Importance and expiry through AgenticStore (LangGraph items) and the graph's Context."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import agentic_memory.store.weaviate as wv
import agentic_memory.store.weaviate.store as wv_store
from agentic_memory.graph.context import Context
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.kinds.retention.conftest import KEEP_ALL, NOW
from tests.unit.store.weaviate.conftest import scripted_client
from tests.unit.store.weaviate.server import FakeWeaviate

POLICY = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=None)


@pytest.fixture(params=["embedded", "weaviate"])
def agentic(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    embeddings: LocalEmbeddings,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[AgenticStore]:
    if request.param == "embedded":
        memory: EmbeddedStore | wv.WeaviateStore = EmbeddedStore(
            tmp_path / "store", dims=embeddings.dims
        )
    else:
        # One object per batch: the client sends at once instead of waiting to fill one.
        monkeypatch.setattr(wv_store, "BATCH_SIZE", 1)
        memory = wv.WeaviateStore(
            scripted_client(FakeWeaviate()), dims=embeddings.dims, lock_dir=tmp_path / "locks"
        )
    store = AgenticStore(memory, embeddings, clock=lambda: NOW, close_store=True, retention=POLICY)
    yield store
    store.close()


def test_a_message_item_shows_its_importance_and_expiry(agentic: AgenticStore) -> None:
    ns = ("messages", "alice", "t1")
    agentic.put(ns, "m1", {"role": "user", "content": "my locker code is 4411"})
    agentic.put(ns, "m2", {"role": "user", "content": "nice weather", "important": False})
    item = agentic.get(ns, "m1")
    assert item is not None
    assert item.value["important"] is False and item.value["important_by"] == ""
    # Logged at NOW, expiring 30 days later under the store's policy.
    assert item.value["expires_at"] == "2026-12-30T12:00:00+00:00"

    # Read, edit, put back (echoing the derived fields): marked, and it no longer expires.
    agentic.put(ns, "m1", {**item.value, "important": True})
    marked = agentic.get(ns, "m1")
    assert marked is not None
    assert marked.value["important"] is True and marked.value["important_by"] == "user"
    assert marked.value["expires_at"] is None
    assert marked.value["content"] == "my locker code is 4411"
    assert marked.value["turn"] == item.value["turn"]

    # A put without "important" keeps the mark; a filter finds the important ones.
    agentic.put(ns, "m1", {"role": "user", "content": "my locker code is 4411"})
    kept = agentic.get(ns, "m1")
    assert kept is not None and kept.value["important"] is True
    found = agentic.search(("messages", "alice"), filter={"important": True})
    assert [i.value["content"] for i in found] == ["my locker code is 4411"]
    listed = agentic.search(ns)
    assert {i.value["content"]: i.value["expires_at"] is None for i in listed} == {
        "my locker code is 4411": True,
        "nice weather": False,
    }
    # Other users see nothing of it.
    assert agentic.search(("messages", "bob")) == []


def test_bad_importance_values_are_refused(agentic: AgenticStore) -> None:
    ns = ("messages", "alice", "t1")
    with pytest.raises(InvalidInputError, match="important"):
        agentic.put(ns, "m1", {"role": "user", "content": "x", "important": "yes"})
    assert agentic.get(ns, "m1") is None


def test_an_episode_item_can_be_marked_important(agentic: AgenticStore) -> None:
    user = "alice"
    key = agentic.episodes.episode_id(user, "t1", 1)
    value = {
        "thread_id": "t1",
        "conversation": "user: plan the move\nassistant: done",
        "context_tags": ["moving"],
        "conversation_summary": "Planned the move to Lyon.",
        "what_worked": "lists",
        "what_to_avoid": "",
        "importance": 0.2,
    }
    agentic.put(("episodes", user), key, value)
    item = agentic.get(("episodes", user), key)
    assert item is not None and item.value["important"] is False
    agentic.put(("episodes", user), key, {**item.value, "important": True})
    marked = agentic.get(("episodes", user), key)
    assert marked is not None and marked.value["important"] is True
    # Storing the reflection again without the field keeps the user's mark.
    agentic.put(("episodes", user), key, value)
    again = agentic.get(("episodes", user), key)
    assert again is not None and again.value["important"] is True
    with pytest.raises(InvalidInputError, match="important"):
        agentic.put(("episodes", user), key, {**value, "important": 1})


# -- the graph's per-run settings over the operator's -----------------------------------------


def test_context_settings_override_the_operator_policy() -> None:
    operator = RetentionPolicy.from_env(
        {"AMEM_MESSAGE_RETENTION_DAYS": "365", "AMEM_MAX_MESSAGES": "1000"}
    )
    assert Context(user_id="a").retention(operator) == operator
    run = Context(user_id="a", message_retention_days=7, max_messages=20).retention(operator)
    assert (run.message_days, run.max_messages) == (7.0, 20)
    assert run.purge_interval_minutes == operator.purge_interval_minutes
    off = Context(user_id="a", message_retention_days=0, max_messages=0).retention(operator)
    assert (off.message_days, off.max_messages) == (None, None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("message_retention_days", -1),
        ("message_retention_days", float("nan")),
        ("message_retention_days", "30"),
        ("max_messages", -5),
        ("max_messages", 2.5),
        ("max_messages", True),
    ],
)
def test_bad_context_settings_fail_clearly(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        Context(user_id="a", **{field: value})  # type: ignore[arg-type]


def test_bad_operator_settings_fail_clearly() -> None:
    for env in (
        {"AMEM_MESSAGE_RETENTION_DAYS": "a month"},
        {"AMEM_MAX_MESSAGES": "-3"},
        {"AMEM_PURGE_INTERVAL_MINUTES": "inf"},
    ):
        name = next(iter(env))
        with pytest.raises(InvalidInputError, match=name):
            RetentionPolicy.from_env(env)


# -- the sweeper purges the logs of users who no longer write -----------------------------------


def _idle_users(agentic: AgenticStore, embeddings: LocalEmbeddings) -> None:
    """Old turns of two users written with automatic purges off, and a fact of each."""
    quiet = MessageLog(agentic.memory.store, embeddings, retention=KEEP_ALL)
    # The sweep runs on the real clock: the turns are dated from it.
    now = datetime.now(UTC)
    for user in ("alice", "bob"):
        for text, days, important in (
            (f"{user}'s old news", 60, None),
            (f"{user}'s locker code", 50, True),
            (f"{user}'s recent news", 1, None),
        ):
            asyncio.run(
                quiet.aremember(
                    user,
                    "t",
                    [
                        {"role": "user", "content": text},
                        {"role": "assistant", "content": f"About {text}."},
                    ],
                    now=now - timedelta(days=days),
                    important=important,
                )
            )
        asyncio.run(agentic.memory.facts.aremember(user, [{"subject": "city", "value": "Lyon"}]))


def _contents(agentic: AgenticStore, user: str) -> set[str]:
    return {m.content for m in asyncio.run(agentic.memory.messages.alist(user))}


def test_the_retention_sweep_purges_every_users_due_log(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    policy = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=0)
    memory = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    with AgenticStore(memory, embeddings, close_store=True, retention=policy) as agentic:
        _idle_users(agentic, embeddings)
        assert agentic.sweep_retention() == 4  # each user's old exchange
        for user in ("alice", "bob"):
            assert _contents(agentic, user) == {
                f"{user}'s locker code",
                f"About {user}'s locker code.",
                f"{user}'s recent news",
                f"About {user}'s recent news.",
            }
            assert [f.value for f in asyncio.run(agentic.memory.facts.acurrent(user))] == ["Lyon"]
        assert agentic.sweep_retention() == 0


def test_no_sweep_purges_when_automatic_purges_are_off(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    policy = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=None)
    memory = EmbeddedStore(tmp_path / "store", dims=embeddings.dims)
    with AgenticStore(memory, embeddings, close_store=True, retention=policy) as agentic:
        assert agentic.sweep_retention() == 0  # no log yet
        _idle_users(agentic, embeddings)
        assert agentic.sweep_retention() == 0
        assert len(_contents(agentic, "alice")) == 6


async def test_the_background_sweeper_purges_too(
    tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    policy = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=0)
    memory = await asyncio.to_thread(EmbeddedStore, tmp_path / "store", dims=embeddings.dims)
    agentic = AgenticStore(memory, embeddings, close_store=True, retention=policy)
    await asyncio.to_thread(_idle_users, agentic, embeddings)
    await agentic.start_ttl_sweeper(sweep_interval_minutes=1 / 60)
    try:
        for _ in range(200):
            if await agentic.messages.acount("bob", "t") == 4:
                break
            await asyncio.sleep(0.05)
        assert await agentic.messages.acount("alice", "t") == 4
        assert await agentic.messages.acount("bob", "t") == 4
    finally:
        await agentic.aclose()

"""Forgetting: one episode, fact, subject, thread, or a whole user — checked store by store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import (
    APIStatusError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    UnprocessableEntityError,
)

from agentic_memory.forget import (
    CHECKPOINTER,
    SERVER,
    forget_episode,
    forget_fact,
    forget_subject,
    forget_thread,
    forget_user,
    user_threads,
)
from agentic_memory.graph.persistence import sqlite_checkpointer
from agentic_memory.kinds import PER_USER_COLLECTIONS
from agentic_memory.kinds.episodes import EPISODES
from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MESSAGES
from agentic_memory.kinds.rules import RULES, RuleBook
from agentic_memory.kinds.rules.shared import SharedRules
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.transfer import export_to_file, import_memories
from tests.unit.cli.conftest import Seeded, add_messages
from tests.unit.cli.helpers import assert_same, checkpoint_count, snapshot, write_checkpoints


def _global_provenance(store: EmbeddedStore) -> list[tuple[list[str], list[str]]]:
    return [
        (list(o.properties["source_episodes"]), list(o.properties["source_users"]))
        for o in store.list_objects(RULES.name, user=GLOBAL_SCOPE, sort_by="version")
    ]


async def test_forget_user_erases_everything_derived_from_them(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path
) -> None:
    bob_before = snapshot(store, users={"bob"})
    kb_before = snapshot(store, users={None})  # type: ignore[arg-type]
    async with sqlite_checkpointer(tmp_path / "cp.sqlite") as cp:
        threads = {t: u for u, ts in seeded.threads.items() for t in ts}
        threads["alice-no-memory-yet"] = "alice"  # found through the run metadata only
        await write_checkpoints(cp, threads)
        report = await forget_user(store, "alice", checkpointer=cp)

        for spec in PER_USER_COLLECTIONS:
            assert store.count(spec.name, user="alice") == 0, spec.name
            assert "alice" not in store.users(spec.name)
        for episodes, users in _global_provenance(store):
            assert not set(episodes) & set(seeded.episodes["alice"])
            assert "alice" not in users
        for thread in [*seeded.threads["alice"], "alice-no-memory-yet"]:
            assert await checkpoint_count(cp, thread) == 0
        for thread in seeded.threads["bob"]:
            assert await checkpoint_count(cp, thread) > 0
    assert_same(snapshot(store, users={"bob"}), bob_before)
    assert_same(snapshot(store, users={None}), kb_before)  # type: ignore[arg-type]

    deleted = {c: n for (s, c), n in report.deleted.items() if s == "embedded"}
    assert deleted == {EPISODES.name: 2, FACTS.name: 3, MESSAGES.name: 6, RULES.name: 2}
    assert report.deleted[(CHECKPOINTER, "checkpoints")] > 0
    # Both global versions named alice's episodes; version 1 (the stored starting set) did not.
    assert report.scrubbed == {("embedded", RULES.name): 2}
    assert sorted(report.threads) == sorted([*seeded.threads["alice"], "alice-no-memory-yet"])
    table_rows = {(s, c) for s, c, _, _ in report.rows()}
    assert (CHECKPOINTER, "checkpoints") in table_rows
    # Provenance of bob survives in the global rules.
    assert any("bob" in users for _, users in _global_provenance(store))


async def test_forget_user_erases_what_other_langgraph_code_kept_for_them(
    store: EmbeddedStore, seeded: Seeded
) -> None:
    from agentic_memory.langgraph_store import AgenticStore
    from agentic_memory.langgraph_store.generic import ITEMS

    items = AgenticStore(store, LocalEmbeddings())
    await items.aput(("memories", "alice"), "m1", {"content": "alice runs marathons"})
    await items.aput(("memories", "alice", "drafts"), "m2", {"content": "a draft"})
    await items.aput(("memories", "bob"), "m1", {"content": "bob likes chess"})
    report = await forget_user(store, "alice")
    assert report.deleted[("embedded", ITEMS.name)] == 2
    assert await items.asearch(("memories", "alice")) == []
    assert [i.value["content"] for i in await items.asearch(("memories", "bob"))] == [
        "bob likes chess"
    ]


async def test_forget_user_twice_deletes_nothing_more(store: EmbeddedStore, seeded: Seeded) -> None:
    await forget_user(store, "alice")
    again = await forget_user(store, "alice")
    assert again.total_deleted == 0
    assert again.scrubbed == {}


async def test_global_scope_cannot_be_forgotten_as_a_user(
    store: EmbeddedStore, seeded: Seeded
) -> None:
    before = snapshot(store, vectors=False)
    with pytest.raises(InvalidInputError, match="global rule scope"):
        await forget_user(store, GLOBAL_SCOPE)
    assert snapshot(store, vectors=False) == before


async def test_forget_thread_removes_its_memories_and_restores_the_older_fact(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    async with sqlite_checkpointer(tmp_path / "cp.sqlite") as cp:
        await write_checkpoints(cp, {"alice-t1": "alice", "alice-t2": "alice"})
        report = await forget_thread(store, "alice", "alice-t2", checkpointer=cp)
        assert await checkpoint_count(cp, "alice-t2") == 0
        assert await checkpoint_count(cp, "alice-t1") > 0
    facts = FactStore(store, embeddings)
    assert {f.subject: f.value for f in await facts.acurrent("alice")} == {
        "home city": "Lyon",
        "diet": "vegetarian",
    }
    history = await facts.ahistory("alice", "home city")
    assert [f.value for f in history] == ["Lyon"]
    assert history[0].superseded_by is None and history[0].valid_to is None
    assert store.count(MESSAGES.name, user="alice") == 4
    assert store.get(EPISODES.name, seeded.episodes["alice"][1], user="alice") is None
    assert store.get(EPISODES.name, seeded.episodes["alice"][0], user="alice") is not None
    # Global version 3 learned only from the forgotten episode: alice is no longer named there.
    assert _global_provenance(store)[-1] == ([], [])
    assert "alice" in _global_provenance(store)[1][1]  # version 2 still has her first episode
    assert report.deleted[("embedded", MESSAGES.name)] == 2
    assert report.deleted[("embedded", FACTS.name)] == 1
    assert report.scrubbed[("embedded", FACTS.name)] == 1
    # Bob is untouched.
    assert store.count(MESSAGES.name, user="bob") == 6


async def test_forget_unknown_thread_is_an_error(store: EmbeddedStore, seeded: Seeded) -> None:
    with pytest.raises(InvalidInputError, match="no thread"):
        await forget_thread(store, "alice", "bob-t1")


async def test_forget_subject_removes_its_whole_history(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    report = await forget_subject(store, "alice", "  Home   City ")
    assert report.deleted[("embedded", FACTS.name)] == 2
    facts = FactStore(store, embeddings)
    assert [f.subject for f in await facts.acurrent("alice")] == ["diet"]
    assert len(await facts.ahistory("bob", "home city")) == 2
    with pytest.raises(InvalidInputError, match="no fact about"):
        await forget_subject(store, "alice", "home city")


async def test_forget_episode_scrubs_rule_provenance(store: EmbeddedStore, seeded: Seeded) -> None:
    first = seeded.episodes["alice"][0]
    report = await forget_episode(store, "alice", first)
    assert store.get(EPISODES.name, first, user="alice") is None
    # Global v2 loses the episode from its provenance; alice's own version 2 held one rule,
    # learned from that episode only: the rule goes, and with it the emptied version.
    assert report.scrubbed[("embedded", RULES.name)] == 1
    assert report.deleted[("embedded", RULES.name)] == 1
    assert [o.properties["version"] for o in store.list_objects(RULES.name, user="alice")] == [1]
    versions = _global_provenance(store)
    assert versions[1] == ([seeded.episodes["bob"][0]], ["bob"])
    assert versions[2] == ([seeded.episodes["alice"][1]], ["alice"])
    with pytest.raises(InvalidInputError, match="no episode"):
        await forget_episode(store, "alice", first)


async def test_forget_current_fact_makes_the_previous_value_current(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    facts = FactStore(store, embeddings)
    paris = next(f for f in await facts.acurrent("alice") if f.subject == "home city")
    await forget_fact(store, "alice", paris.id)
    assert {f.subject: f.value for f in await facts.acurrent("alice")}["home city"] == "Lyon"


async def test_rule_rollback_still_works_after_forgetting(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    await forget_user(store, "alice")
    book = RuleBook(store, embeddings)
    # Version 3 lost the rule learned only from alice: it now equals version 2.
    assert (await book.aget(GLOBAL_SCOPE, 3)).rules == (await book.aget(GLOBAL_SCOPE, 2)).rules
    rolled = await SharedRules(store, embeddings).arollback(1, operator="ops")
    assert rolled.version == 4


async def test_export_forget_import_restores_the_same_memories(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    alice_before = snapshot(store, users={"alice"})
    path = tmp_path / "alice.jsonl"
    export_to_file(
        store,
        path,
        users=["alice"],
        include_shared=False,
        embedding_model="wordllama-l2-supercat-256",
    )
    await forget_user(store, "alice")
    assert snapshot(store, users={"alice"}) == {}
    summary = import_memories(
        store, path, embeddings=embeddings, embedding_model="wordllama-l2-supercat-256"
    )
    assert summary.total == len(alice_before)
    assert_same(snapshot(store, users={"alice"}), alice_before)


async def test_a_thread_id_another_user_owns_keeps_its_checkpoints(
    store: EmbeddedStore, seeded: Seeded, tmp_path: Path, embeddings: LocalEmbeddings
) -> None:
    # Both users talked on a thread called "shared"; its checkpoints carry bob's id.
    await asyncio.to_thread(add_messages, store, embeddings, "alice", "shared", ["hello", "hi"])
    async with sqlite_checkpointer(tmp_path / "cp.sqlite") as cp:
        await write_checkpoints(cp, {"shared": "bob", "alice-t1": "alice"})
        report = await forget_user(store, "alice", checkpointer=cp)
        assert await checkpoint_count(cp, "shared") > 0
        assert await checkpoint_count(cp, "alice-t1") == 0
        assert report.kept_threads == ["shared"]
        assert report.threads == ["alice-t1"]
        with pytest.raises(InvalidInputError, match="no thread"):
            await forget_thread(store, "alice", "shared", checkpointer=cp)
        assert await checkpoint_count(cp, "shared") > 0


def sid(name: str) -> str:
    """A server thread id: a UUID, as ``langgraph dev`` requires (derived from a readable name)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def _status(status: int, method: str, path: str, message: str) -> APIStatusError:
    request = httpx.Request(method, f"http://server{path}")
    response = httpx.Response(status, request=request, json={"detail": message})
    error = {404: NotFoundError, 422: UnprocessableEntityError, 403: PermissionDeniedError}.get(
        status, InternalServerError
    )
    return error(message, response=response, body={"detail": message})


class _FakeThreads:
    """The slice of the LangGraph SDK's threads API that forgetting uses, in memory.

    It answers like ``langgraph dev`` (``langgraph_runtime_inmem`` 0.36): a thread id that is
    not a UUID gets 422 "Invalid thread ID: must be a UUID" on every route; searches filter
    like the server: every given key of ``metadata`` and of ``values`` must equal the
    thread's. ``fail`` makes a thread's routes answer with an error status, and ``down``
    makes every request fail to connect, as a stopped server does.
    """

    def __init__(
        self, threads: dict[str, dict[str, Any]], values: dict[str, dict[str, Any]]
    ) -> None:
        for thread_id in threads:
            uuid.UUID(thread_id)  # a fake holding ids the real server refuses would lie
        self.threads = threads
        self.values = values
        self.dropped = False
        self.fail: dict[str, int] = {}
        self.fail_search: int | None = None
        self.down = False

    def _thread(self, thread_id: str) -> dict[str, Any]:
        return {
            "thread_id": thread_id,
            "metadata": self.threads[thread_id],
            "values": self.values.get(thread_id, {}),  # None: a thread that never ran
        }

    def _check(self, method: str, thread_id: str) -> None:
        path = f"/threads/{thread_id}"
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused")
        try:
            uuid.UUID(thread_id)
        except ValueError:
            raise _status(422, method, path, "Invalid thread ID: must be a UUID") from None
        if thread_id in self.fail:
            raise _status(self.fail[thread_id], method, path, "the server failed")
        if thread_id not in self.threads:
            raise _status(404, method, path, f"Thread with ID {thread_id} not found")

    async def get(self, thread_id: str) -> dict[str, Any]:
        self._check("GET", thread_id)
        return self._thread(thread_id)

    async def delete(self, thread_id: str) -> None:
        self._check("DELETE", thread_id)
        del self.threads[thread_id]

    async def search(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        values: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        request = httpx.Request("POST", "http://server/threads/search")
        if self.down:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if self.fail_search is not None:
            raise _status(self.fail_search, "POST", "/threads/search", "the server failed")
        if self.dropped:
            # After its 500 the server closes the connection: the next request fails once.
            self.dropped = False
            raise httpx.ReadError("", request=request)
        if values and any(self.values.get(t, {}) is None for t in self.threads):
            # langgraph_runtime_inmem 0.36 compares a state-less thread's None values: a 500.
            self.dropped = True
            raise InternalServerError(
                "Internal Server Error",
                response=httpx.Response(500, request=request),
                body=None,
            )
        found = [
            self._thread(t)
            for t in sorted(self.threads)
            if all(self.threads[t].get(k) == v for k, v in (metadata or {}).items())
            and all((self.values.get(t) or {}).get(k) == v for k, v in (values or {}).items())
        ]
        return found[offset : offset + limit]


class _FakeServer:
    def __init__(
        self,
        threads: dict[str, dict[str, Any]],
        values: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.threads = _FakeThreads(threads, values or {})

    async def aclose(self) -> None:
        """Nothing to close (the SDK client closes its HTTP connections here)."""


async def test_forgetting_a_user_deletes_their_threads_on_the_server(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    # Threads held through the server: their memories name them by their UUID.
    await asyncio.to_thread(
        add_messages, store, embeddings, "alice", sid("alice-srv"), ["hello", "hi"]
    )
    await asyncio.to_thread(
        add_messages, store, embeddings, "alice", sid("shared"), ["hello", "hi"]
    )
    server = _FakeServer(
        {
            sid("alice-srv"): {},  # named in her memories, no metadata: hers
            sid("alice-t2"): {"user_id": "alice"},
            sid("alice-untold"): {"user_id": "alice"},  # no memory yet: found by its metadata
            sid("shared"): {"user_id": "bob"},  # the same id used by bob: kept
            sid("bob-t1"): {"user_id": "bob"},
            sid("anonymous"): {},
        }
    )
    client = cast(LangGraphClient, server)
    report = await forget_user(store, "alice", server=client)
    assert sorted(server.threads.threads) == sorted(
        [sid("anonymous"), sid("bob-t1"), sid("shared")]
    )
    assert sorted(report.server_threads) == sorted(
        [sid("alice-srv"), sid("alice-t2"), sid("alice-untold")]
    )
    assert report.kept_threads == [sid("shared")]
    assert report.deleted[(SERVER, "threads")] == 3
    assert report.rows()[-1] == (SERVER, "threads", 3, 0)
    assert report.server_error is None and report.server_failed == []
    # The CLI's own thread ids (alice-t1, alice-t2 in her memories) were refused by the
    # server as ids it cannot hold, and her local memories are gone all the same.
    assert report.deleted[("embedded", MESSAGES.name)] == 10
    assert await user_threads(store, "alice") == []
    # Twice: nothing more.
    again = await forget_user(store, "alice", server=client)
    assert again.deleted[(SERVER, "threads")] == 0


async def test_forgetting_a_thread_deletes_it_on_the_server(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings
) -> None:
    await asyncio.to_thread(
        add_messages, store, embeddings, "alice", sid("alice-srv"), ["hello", "hi"]
    )
    server = _FakeServer({sid("alice-srv"): {"user_id": "alice"}, sid("only-on-server"): {}})
    client = cast(LangGraphClient, server)
    report = await forget_thread(store, "alice", sid("alice-srv"), server=client)
    assert report.server_threads == [sid("alice-srv")]
    # A thread the store does not know but the server does is still forgettable.
    report = await forget_thread(store, "alice", sid("only-on-server"), server=client)
    assert report.server_threads == [sid("only-on-server")]
    assert server.threads.threads == {}
    with pytest.raises(InvalidInputError, match="no thread"):
        await forget_thread(store, "alice", "nowhere", server=client)
    # A CLI thread (an id the server refuses) is forgotten locally; the server is not asked
    # to delete it and no error is reported.
    report = await forget_thread(store, "alice", "alice-t1", server=client)
    assert report.deleted[("embedded", MESSAGES.name)] == 4
    assert report.server_threads == [] and report.server_error is None


@pytest.mark.parametrize(
    ("failure", "retry"),
    [("search-500", True), ("delete-500", True), ("delete-403", False), ("down", True)],
)
async def test_a_failing_server_never_stops_the_local_forgetting(
    store: EmbeddedStore, seeded: Seeded, embeddings: LocalEmbeddings, failure: str, retry: bool
) -> None:
    await asyncio.to_thread(
        add_messages, store, embeddings, "alice", sid("alice-srv"), ["hello", "hi"]
    )
    server = _FakeServer(
        {sid("alice-srv"): {"user_id": "alice"}, sid("alice-2"): {"user_id": "alice"}}
    )
    threads = server.threads
    if failure == "search-500":
        threads.fail_search = 500
    elif failure == "down":
        threads.down = True
    else:
        threads.fail[sid("alice-srv")] = int(failure.rpartition("-")[2])
    bob_before = snapshot(store, users={"bob"}, vectors=False)
    report = await forget_user(store, "alice", server=cast(LangGraphClient, server))
    # The local part is complete whatever the server did.
    assert await user_threads(store, "alice") == []
    assert await FactStore(store, embeddings).acurrent("alice") == []
    assert report.server_error is not None and report.server_retry is retry
    if failure.startswith("delete"):
        assert report.server_failed == [sid("alice-srv")]
        assert report.server_threads == [sid("alice-2")]
        assert "the server failed" in report.server_error
    elif failure == "search-500":
        # Her memories still named the thread: deleted; the one only the search knew stays.
        assert report.server_threads == [sid("alice-srv")]
        assert sorted(threads.threads) == [sid("alice-2")]
    else:
        assert report.server_threads == [] and "Connection refused" in report.server_error
    assert report.to_dict()["server_error"] == report.server_error
    # Bob's memories are untouched.
    assert snapshot(store, users={"bob"}, vectors=False) == bob_before
    # Once the server works, the same call finds and deletes what it kept (by metadata).
    threads.fail.clear()
    threads.fail_search = None
    threads.down = False
    again = await forget_user(store, "alice", server=cast(LangGraphClient, server))
    assert again.server_error is None
    assert threads.threads == {}

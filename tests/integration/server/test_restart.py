"""A restarted ``langgraph dev`` serves a store that already holds memories of every kind.

The first session of a new user: start the server, talk and store memories, stop it, start it
again. The restarted server opens the store on existing data (every cache empty) and serves it
on its event loop under blockbuster. Before the async core, every run and every
``client.store`` call on ``("facts", user)`` then failed with ``BlockingError`` (a 500).
Here the memories are facts, an episode and a rule version (from a conversation and from
SDK puts), logged turns, a knowledge base and a generic namespace; after the restart, turns
run on a new thread and on the old one, and ``client.store`` searches, gets, puts and lists
every namespace: no error, no 500, no ``BlockingError`` in the server's log.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from agentic_memory.ingest import ingest_paths
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store import open_store
from tests.integration.server.conftest import DevServer, run_dev_server
from tests.integration.server.test_langgraph_dev import SCRIPTS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

USER = "alice"
CONTEXT = {"user_id": USER, "knowledge_bases": ["manual"]}


async def _turn(client: LangGraphClient, thread: str, text: str) -> dict[str, Any]:
    out = await client.runs.wait(
        thread,
        "agent",
        input={"messages": [{"role": "user", "content": text}]},
        context=CONTEXT,
        raise_error=True,
    )
    assert isinstance(out, dict) and "__error__" not in out, out
    return out


async def _end(client: LangGraphClient, thread: str) -> dict[str, Any]:
    out = await client.runs.wait(
        thread, "agent", input={"end_conversation": True}, context=CONTEXT, raise_error=True
    )
    assert isinstance(out, dict) and "__error__" not in out, out
    return out


def _seed_knowledge(home: Path) -> None:
    manual = home.parent / "rice-cooker.md"
    manual.write_text("Rice cooker manual.\n\nUse 1.5 cups of water per cup of white rice.\n")
    embeddings = LocalEmbeddings()  # the server's default embeddings (AMEM_EMBEDDINGS unset)
    with open_store(embeddings.dims, backend="embedded", path=home / "store") as store:
        assert ingest_paths([manual], kb="manual", store=store, embeddings=embeddings).ok


async def _first_session(server: DevServer) -> str:
    client = get_client(url=server.url)
    thread = (await client.threads.create(metadata={"user_id": USER}))["thread_id"]
    out = await _turn(client, thread, "Hi! I'm vegetarian. How much water for rice?")
    assert [f["subject"] for f in out["facts_remembered"]] == ["diet"]
    ended = await _end(client, thread)
    assert ended["rules_version_created"] == 2
    await client.store.put_item(["facts", USER], "city", {"value": "Lyon"})
    await client.store.put_item(
        ["messages", USER, "notes-thread"], "m1", {"role": "user", "content": "my printer jams"}
    )
    await client.store.put_item(["notes", USER], "n1", {"text": "likes jazz"})
    return thread


def _server_errors(server: DevServer) -> list[str]:
    log = server.log_text()
    found = [line for line in log.splitlines() if "BlockingError" in line]
    found += re.findall(r".*\b500\b.*(?:Internal Server Error|status_code=500).*", log)
    return found


async def test_a_restarted_server_serves_memories_of_every_kind(tmp_path: Path) -> None:
    home = tmp_path / "amem-home"
    _seed_knowledge(home)
    with run_dev_server(tmp_path, tool_scripts=SCRIPTS, run="first") as first:
        old_thread = await _first_session(first)
        assert _server_errors(first) == []

    with run_dev_server(tmp_path, tool_scripts=SCRIPTS, run="restarted") as server:
        client = get_client(url=server.url)
        episodes = (await client.store.search_items(["episodes", USER]))["items"]
        assert len(episodes) == 1
        episode = episodes[0]["key"]
        assert episode == EpisodicMemory.episode_id(USER, old_thread, 1)
        namespaces: dict[tuple[str, ...], str] = {
            ("facts", USER): "diet",
            ("episodes", USER): episode,
            ("rules", USER): "latest",
            ("messages", USER, "notes-thread"): "m1",
            ("knowledge", "manual"): "",
            ("notes", USER): "n1",
        }
        # Every namespace is searched (by query and not), read and listed on the cold store.
        for ns, key in namespaces.items():
            ranked = await client.store.search_items(list(ns), query="rice water diet printer")
            listed = await client.store.search_items(list(ns), limit=5)
            assert listed["items"], ns
            if ns[0] != "episodes":
                assert ranked["items"], ns
            key = key or listed["items"][0]["key"]
            item = await client.store.get_item(list(ns), key)
            assert item is not None, ns
            below = await client.store.list_namespaces(prefix=list(ns[:1]))
            assert list(ns[:2]) in [n[:2] for n in below["namespaces"]], (ns, below)
        everything = await client.store.list_namespaces()
        assert len(everything["namespaces"]) >= 6
        found = await client.store.search_items([], query="vegetarian rice")
        assert found["items"]
        fact = await client.store.get_item(["facts", USER], "diet")
        assert fact is not None and fact["value"]["value"] == "vegetarian"
        chunk = (await client.store.search_items(["knowledge", "manual"], query="water"))["items"]
        assert "1.5 cups" in chunk[0]["value"]["text"]

        # Writes on every writable kind.
        await client.store.put_item(["facts", USER], "city", {"value": "Paris"})
        await client.store.put_item(
            ["messages", USER, "notes-thread"], "m2", {"role": "ai", "content": "clean it"}
        )
        await client.store.put_item(
            ["rules", USER],
            "latest",
            {"rules": [{"instruction": "Respect the diet", "rationale": "stated"}]},
        )
        await client.store.put_item(["notes", USER], "n2", {"text": "plays cello"})
        episode_item = await client.store.get_item(["episodes", USER], episode)
        assert episode_item is not None
        value = {
            k: v
            for k, v in episode_item["value"].items()
            if k not in ("created_at", "important_by")
        }
        await client.store.put_item(["episodes", USER], episode, {**value, "important": True})
        assert (await client.store.get_item(["facts", USER], "city"))["value"]["value"] == "Paris"

        # Turns: a new thread recalls the old one's facts; the old thread goes on.
        new_thread = (await client.threads.create(metadata={"user_id": USER}))["thread_id"]
        out = await _turn(client, new_thread, "What should I cook tonight?")
        assert {f["subject"] for f in out["facts"]} >= {"diet", "city"}
        assert out["episodes"], "the first conversation is recalled"
        await _end(client, new_thread)
        await _turn(client, old_thread, "And how do I clean the cooker?")

        assert _server_errors(server) == []

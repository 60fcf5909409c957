"""The auth example (``langgraph.auth.json``) under a real ``langgraph dev``: each user alone.

Two users with bearer tokens: a run needs no ``user_id`` (the server's identity is used), a
thread is invisible to anyone but its owner, a run cannot act for someone else, and a store
namespace of another user is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from agentic_memory.graph.auth import load_tokens
from tests.integration.server.conftest import run_dev_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKENS = "tok-alice-7f3a=alice,tok-bob-91c2=bob"
SCRIPTS: dict[str, Any] = {
    "ExtractedFacts": {"facts": []},
    "Summary": {"text": "Earlier turns."},
}


def _client(url: str, token: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return get_client(url=url, headers=headers)


def test_tokens_parse_and_refuse_malformed_settings(tmp_path: Path) -> None:
    assert load_tokens(" a=alice , b = bob ,") == {"a": "alice", "b": "bob"}
    listed = tmp_path / "tokens"
    listed.write_text("# users\nx=carol\n")
    assert load_tokens(f"@{listed}") == {"x": "carol"}
    with pytest.raises(ValueError, match="expected token=user"):
        load_tokens("no-separator")
    with pytest.raises(ValueError, match="twice"):
        load_tokens("t=alice,t=bob")


async def test_each_user_sees_and_runs_only_their_own_threads(tmp_path: Path) -> None:
    with run_dev_server(
        tmp_path,
        config="langgraph.auth.json",
        tool_scripts=SCRIPTS,
        env={"AMEM_AUTH_TOKENS": TOKENS},
    ) as server:
        alice = _client(server.url, "tok-alice-7f3a")
        bob = _client(server.url, "tok-bob-91c2")

        thread = (await alice.threads.create())["thread_id"]
        assert (await alice.threads.get(thread))["metadata"]["owner"] == "alice"
        out = await alice.runs.wait(
            thread,
            "agent",
            input={"messages": [{"role": "user", "content": "My locker code is 4411."}]},
            raise_error=True,
        )
        assert out["owner"] == "alice"  # no user_id sent: the server's identity was used

        # Bob cannot see, read, search or run on her thread.
        with pytest.raises(NotFoundError):
            await bob.threads.get(thread)
        with pytest.raises(NotFoundError):
            await bob.threads.get_state(thread)
        assert thread not in [t["thread_id"] for t in await bob.threads.search()]
        with pytest.raises(Exception, match="404"):
            await bob.runs.wait(
                thread,
                "agent",
                input={"messages": [{"role": "user", "content": "What is the code?"}]},
                raise_error=True,
            )

        # On his own thread, bob cannot act as alice either.
        own = (await bob.threads.create())["thread_id"]
        with pytest.raises(Exception, match="not the authenticated user"):
            await bob.runs.wait(
                own,
                "agent",
                input={"messages": [{"role": "user", "content": "hi"}]},
                context={"user_id": "alice"},
                raise_error=True,
            )

        # Her state is as she left it.
        values = (await alice.threads.get_state(thread))["values"]
        assert [m["content"] for m in values["messages"]][0] == "My locker code is 4411."
        assert len(values["messages"]) == 2

        # The store: his own namespace yes, hers no.
        await bob.store.put_item(("notes", "bob"), "n1", {"text": "mine"})
        assert (await bob.store.get_item(("notes", "bob"), "n1"))["value"] == {"text": "mine"}
        with pytest.raises(Exception, match="is not yours"):
            await bob.store.search_items(("facts", "alice"))
        with pytest.raises(Exception, match="is not yours"):
            await bob.store.put_item(("facts", "alice"), "x", {"value": "forged"})
        # Listing namespaces (Studio's memory view lists with no prefix) shows only one's own.
        for client, me in ((alice, "alice"), (bob, "bob")):
            for prefix in (None, ["messages"]):
                listed = (await client.store.list_namespaces(prefix=prefix))["namespaces"]
                assert all(ns[1] == me for ns in listed), (me, prefix, listed)
        assert ["notes", "bob"] in (await bob.store.list_namespaces())["namespaces"]
        assert ["messages", "alice", thread] in (await alice.store.list_namespaces())["namespaces"]
        mine = await alice.store.list_namespaces(prefix=["messages"])
        assert mine["namespaces"] == [["messages", "alice", thread]]
        # A wildcard cannot reach another user: "*" alone is narrowed, "*" as the user refused.
        assert (await bob.store.list_namespaces(prefix=["*"]))["namespaces"] == [["notes", "bob"]]
        for hostile in (["*", "alice"], ["messages", "*"], ["messages", "alice"]):
            with pytest.raises(Exception, match="is not yours"):
                await bob.store.list_namespaces(prefix=hostile)
        with pytest.raises(Exception, match="is not yours"):
            await bob.store.search_items(["*", "alice"], query="locker")

        # No token, or a wrong one: nothing at all.
        for token, detail in ((None, "a bearer token is required"), ("tok-alice-7f3b", "unknown")):
            with pytest.raises(Exception, match=detail):
                await _client(server.url, token).threads.search()


async def test_a_thread_from_before_auth_is_handed_to_its_user_as_documented(
    tmp_path: Path,
) -> None:
    """docs/deployment.md: such a thread answers 404 once auth is on, until it is handed over."""
    with run_dev_server(tmp_path, tool_scripts=SCRIPTS) as server:
        open_client = _client(server.url, None)
        thread = (await open_client.threads.create())["thread_id"]
        await open_client.runs.wait(
            thread,
            "agent",
            input={"messages": [{"role": "user", "content": "My locker code is 4411."}]},
            context={"user_id": "alice"},
            raise_error=True,
        )
    auth: dict[str, Any] = {"config": "langgraph.auth.json", "env": {"AMEM_AUTH_TOKENS": TOKENS}}
    with run_dev_server(tmp_path, tool_scripts=SCRIPTS, **auth) as server:
        with pytest.raises(NotFoundError):
            await _client(server.url, "tok-alice-7f3a").threads.get(thread)
    with run_dev_server(tmp_path, tool_scripts=SCRIPTS) as server:
        # The recipe of docs/deployment.md, run with the server still open.
        client = _client(server.url, None)
        offset = 0
        while batch := await client.threads.search(limit=100, offset=offset):
            for found in batch:
                owner = (found.get("values") or {}).get("owner")
                if owner and not (found.get("metadata") or {}).get("owner"):
                    await client.threads.update(
                        found["thread_id"], metadata={"owner": owner, "user_id": owner}
                    )
            offset += len(batch)
    with run_dev_server(tmp_path, tool_scripts=SCRIPTS, **auth) as server:
        alice = _client(server.url, "tok-alice-7f3a")
        values = (await alice.threads.get_state(thread))["values"]
        assert values["messages"][0]["content"] == "My locker code is 4411."
        with pytest.raises(NotFoundError):
            await _client(server.url, "tok-bob-91c2").threads.get(thread)

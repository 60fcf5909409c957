"""``langgraph dev`` serves the agent's memory as its long-term store (``client.store.*``).

The repository's ``langgraph.json`` names ``graph/store.py:store``; the server opens it on
the embedded store under its ``AMEM_HOME``. Items written through the SDK are memories the
Python API (``agentic_memory.api.Memory`` on the same ``AMEM_HOME``, another process's
view of the same files) reads back, and the other way round; refused values answer 400
with the store's message and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError

from agentic_memory.api import Memory
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from tests.integration.server.conftest import DevServer, run_dev_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[DevServer]:
    with run_dev_server(tmp_path) as server:
        yield server


@pytest.fixture
def memory(dev_server: DevServer) -> Iterator[Memory]:
    with Memory.open(home=dev_server.home, backend="embedded", embeddings=LocalEmbeddings()) as mem:
        yield mem


async def test_kind_namespaces_through_the_sdk_and_the_python_api(
    dev_server: DevServer, memory: Memory
) -> None:
    client = get_client(url=dev_server.url)
    assert "Using custom store" in dev_server.log_text()

    # A fact put through the SDK is a fact of the memory.
    await client.store.put_item(
        ["facts", "alice"], "Diet", {"value": "vegetarian", "category": "preference"}
    )
    item = await client.store.get_item(["facts", "alice"], "diet")
    assert item is not None
    assert item["key"] == "diet"
    assert item["value"]["value"] == "vegetarian"
    assert {f.subject: f.value for f in await memory.facts.acurrent("alice")} == {
        "diet": "vegetarian"
    }

    # A new value supersedes through FactStore: the history keeps the old one.
    await client.store.put_item(["facts", "alice"], "diet", {"value": "vegan"})
    history = await memory.facts.ahistory("alice", "diet")
    assert [(f.value, f.current) for f in history] == [("vegetarian", False), ("vegan", True)]
    assert history[-1].category == "preference"  # kept from the value it superseded

    # A fact remembered through the Python API is an item for the SDK, found by search.
    await memory.facts.aremember(
        "alice", [{"subject": "allergy", "value": "peanuts", "category": "constraint"}]
    )
    found = await client.store.search_items(["facts", "alice"], query="peanut allergy")
    assert [i["key"] for i in found["items"]][0] == "allergy"
    assert found["items"][0]["score"] is not None
    listed = await client.store.search_items(["facts", "alice"])
    assert [i["key"] for i in listed["items"]] == ["allergy", "diet"]

    # The message log: logged in Python, searched through the SDK, and back.
    await memory.aremember(
        "alice", "t1", [{"role": "user", "content": "My printer is a LaserJet 4", "id": "m1"}]
    )
    hits = await client.store.search_items(["messages", "alice"], query="which printer?")
    assert hits["items"][0]["value"]["content"] == "My printer is a LaserJet 4"
    assert hits["items"][0]["namespace"] == ["messages", "alice", "t1"]
    await client.store.put_item(
        ["messages", "alice", "t1"], "m2", {"role": "ai", "content": "Noted: a LaserJet 4."}
    )
    assert [(m.turn, m.content) for m in await memory.alist("alice", thread_id="t1")] == [
        (0, "My printer is a LaserJet 4"),
        (1, "Noted: a LaserJet 4."),
    ]

    # Rules: a put under "latest" is the next version.
    await client.store.put_item(
        ["rules", "alice"],
        "latest",
        {"rules": [{"instruction": "Answer briefly", "rationale": "she asked for it"}]},
    )
    assert [v.version for v in await memory.rules.aversions("alice")] == [1, 2]
    latest = await client.store.get_item(["rules", "alice"], "latest")
    assert latest["value"]["version"] == 2

    # Namespaces list the kinds' and the generic ones; another user's hold nothing of hers.
    spaces = await client.store.list_namespaces(prefix=["facts"])
    assert spaces["namespaces"] == [["facts", "alice"]]
    assert (await client.store.search_items(["facts", "bob"]))["items"] == []
    assert await client.store.get_item(["facts", "bob"], "diet") is None
    bob_hits = await client.store.search_items(["messages", "bob"], query="printer")
    assert bob_hits["items"] == []

    # Refusals answer 400 with the reason and change nothing.
    with pytest.raises(BadRequestError, match="needs 'value'"):
        await client.store.put_item(["facts", "alice"], "pet", {"category": "other"})
    with pytest.raises(BadRequestError, match="never expire"):
        await client.store.put_item(["facts", "alice"], "pet", {"value": "a cat"}, ttl=5)
    with pytest.raises(BadRequestError, match="at most 10 rules"):
        await client.store.put_item(
            ["rules", "alice"],
            "latest",
            {"rules": [{"instruction": f"rule {i}", "rationale": "x"} for i in range(11)]},
        )
    with pytest.raises(BadRequestError, match="read-only"):
        await client.store.put_item(["knowledge", "manuals"], "x", {"text": "y"})
    # A refusal is an answer, not a crash: no traceback in the server's log for it.
    assert "Traceback" not in dev_server.log_text()
    assert "needs 'value'" not in dev_server.log_text()
    assert {f.subject for f in await memory.facts.acurrent("alice")} == {"diet", "allergy"}
    assert [v.version for v in await memory.rules.aversions("alice")] == [1, 2]

    # A delete through the SDK forgets the subject, history included.
    await client.store.delete_item(["facts", "alice"], "diet")
    assert await memory.facts.ahistory("alice", "diet") == []
    assert await client.store.get_item(["facts", "alice"], "diet") is None


async def test_generic_namespace_through_the_sdk(dev_server: DevServer) -> None:
    client = get_client(url=dev_server.url)
    # This process opens the same store as the server (another process on the same files).
    local = AgenticStore.from_env(
        home=dev_server.home, backend="embedded", embeddings=LocalEmbeddings()
    )
    ns = ["memories", "alice"]
    await client.store.put_item(ns, "m1", {"text": "Alice likes green tea", "kind": "pref"})
    await client.store.put_item(ns, "m2", {"text": "Alice's cat is called Tom", "kind": "pet"})
    await client.store.put_item([*ns, "work"], "m3", {"text": "Alice works at a bakery"})

    item = await client.store.get_item(ns, "m1")
    assert item["value"] == {"text": "Alice likes green tea", "kind": "pref"}
    hits = await client.store.search_items(["memories"], query="what does she drink? tea")
    assert hits["items"][0]["key"] == "m1"
    assert len(hits["items"]) == 3
    filtered = await client.store.search_items(ns, filter={"kind": "pet"})
    assert [i["key"] for i in filtered["items"]] == ["m2"]
    # $alpha travels in the filter: keywords only finds the one item naming the cat.
    keywords = await client.store.search_items(ns, query="Tom", filter={"$alpha": 0.0}, limit=1)
    assert [i["key"] for i in keywords["items"]] == ["m2"]

    spaces = await client.store.list_namespaces(prefix=["memories"])
    assert spaces["namespaces"] == [["memories", "alice"], ["memories", "alice", "work"]]
    shallow = await client.store.list_namespaces(prefix=["memories"], max_depth=2)
    assert shallow["namespaces"] == [["memories", "alice"]]

    await client.store.delete_item(ns, "m1")
    assert await client.store.get_item(ns, "m1") is None

    # Written here, read there, and the other way round.
    try:
        read = await local.aget(("memories", "alice", "work"), "m3")
        assert read is not None and read.value == {"text": "Alice works at a bakery"}
        assert await local.aget(("memories", "alice"), "m1") is None
        await local.aput(("memories", "alice"), "m4", {"text": "Alice plays the cello"})
        hits = await client.store.search_items(ns, query="music instrument cello")
        assert hits["items"][0]["key"] == "m4"
    finally:
        await local.aclose()
    with pytest.raises(BadRequestError, match="positive number of minutes"):
        await client.store.put_item(ns, "m2", {"text": "changed"}, ttl=0)
    assert (await client.store.get_item(ns, "m2"))["value"]["text"] == "Alice's cat is called Tom"

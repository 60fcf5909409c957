"""A real ``langgraph dev`` server runs the agent end to end against the fake model server.

The server runs from a scratch directory holding a copy of the repository's
``langgraph.json`` and a symlink to ``graph/`` (the CLI resolves graph paths against its
working directory and writes ``.langgraph_api/`` there), so the repository stays clean and
the test exercises the exact configuration users run. It uses the embedded store under a
temporary ``AMEM_HOME`` and blockbuster is active, so any blocking call on the event loop
fails the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import NotFoundError

from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.models.embeddings import get_embeddings
from agentic_memory.store import open_store
from tests.fake_openai import last_user_text
from tests.integration.server.conftest import DevServer, run_dev_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

USER = "alice"


def _facts_reply(request: dict[str, Any]) -> dict[str, Any]:
    # The extraction prompt quotes the user's message after this heading; its own
    # instructions mention diets and allergies, so only the quoted message is read.
    text = last_user_text(request).rpartition("Newest user message:")[2].lower()
    facts = []
    if "vegetarian" in text:
        facts.append({"subject": "diet", "value": "vegetarian", "category": "preference"})
    if "peanut" in text:
        facts.append({"subject": "allergy", "value": "peanuts", "category": "constraint"})
    return {"facts": facts}


SCRIPTS: dict[str, Any] = {
    "ExtractedFacts": _facts_reply,
    "Reflection": {
        "context_tags": ["dinner", "vegetarian"],
        "conversation_summary": "Planned a vegetarian dinner without peanuts.",
        "what_worked": "Suggesting concrete recipes.",
        "what_to_avoid": "Proposing dishes with peanuts.",
        "importance": 0.8,
    },
    "RuleSet": {
        "rules": [
            {
                "instruction": "Check the user's diet and allergies before suggesting food.",
                "rationale": "The user is vegetarian and allergic to peanuts.",
            },
            {"instruction": "Answer briefly.", "rationale": "The user prefers short answers."},
        ]
    },
    "Summary": {"text": "The user asked for vegetarian dinner ideas."},
}


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[DevServer]:
    with run_dev_server(tmp_path, tool_scripts=SCRIPTS) as server:
        yield server


def _ai_text(values: dict[str, Any]) -> str:
    last = values["messages"][-1]
    assert last["type"] == "ai", last
    return str(last["content"])


async def test_full_conversation_through_langgraph_dev(dev_server: DevServer) -> None:
    client = get_client(url=dev_server.url)
    context = {"user_id": USER}
    thread = await client.threads.create(metadata={"user_id": USER})
    thread_id = thread["thread_id"]

    # Turn 1: runs.wait returns the final state; the fact is remembered this turn.
    first = await client.runs.wait(
        thread_id,
        "agent",
        input={"messages": [{"role": "user", "content": "Hi! I'm vegetarian. Dinner ideas?"}]},
        context=context,
    )
    assert isinstance(first, dict), first
    assert _ai_text(first).startswith("Reply ")
    assert [(f["subject"], f["value"]) for f in first["facts_remembered"]] == [
        ("diet", "vegetarian")
    ]
    assert first["token_report"], "the turn reports its tokens per layer"
    assert first["model_calls"], "the turn reports its model calls"

    # Turn 2: streamed; the answer streams as message chunks and the facts reach the prompt.
    events: dict[str, int] = {}
    final: dict[str, Any] = {}
    async for part in client.runs.stream(
        thread_id,
        "agent",
        input={"messages": [{"role": "user", "content": "Also, I'm allergic to peanuts."}]},
        context=context,
        stream_mode=["values", "messages-tuple"],
    ):
        events[part.event] = events.get(part.event, 0) + 1
        if part.event == "values":
            final = part.data
        if part.event == "error":
            pytest.fail(f"run failed: {part.data}")
    assert events.get("messages", 0) > 1, events
    assert len(final["messages"]) == 4
    answer_prompts = [
        r for r in dev_server.fake.requests_for(None) if "allergic" in last_user_text(r)
    ]
    assert answer_prompts, "the answer model saw the second message"
    assert "vegetarian" in " ".join(str(m.get("content")) for m in answer_prompts[-1]["messages"])

    # The thread's state is checkpointed on the server.
    state = await client.threads.get_state(thread_id)
    values = state["values"]
    assert [m["type"] for m in values["messages"]] == ["human", "ai", "human", "ai"]
    assert {f["subject"] for f in values["facts"]} == {"diet", "allergy"}

    # Ending the conversation: reflection, then a new rules version.
    ended = await client.runs.wait(
        thread_id, "agent", input={"messages": [], "end_conversation": True}, context=context
    )
    assert ended["conversation_ended"] is True
    assert ended["reflection"]["conversation_summary"].startswith("Planned a vegetarian dinner")
    assert ended["rules_version_created"] == 2

    # Another user's run on her thread fails before reading or writing anything, and leaves
    # her thread exactly as it was: his end of the conversation never ends hers later.
    before = (await client.threads.get_state(thread_id))["values"]
    with pytest.raises(Exception, match="belongs to another user"):
        await client.runs.wait(
            thread_id,
            "agent",
            input={
                "messages": [{"role": "user", "content": "What did she tell you?"}],
                "end_conversation": True,
            },
            context={"user_id": "mallory"},
            raise_error=True,
        )
    after = (await client.threads.get_state(thread_id))["values"]
    assert after == before
    assert after["end_conversation"] is False

    # A run without a user id fails clearly and writes nothing.
    other = await client.threads.create()
    with pytest.raises(Exception, match="user_id"):
        await client.runs.wait(
            other["thread_id"],
            "agent",
            input={"messages": [{"role": "user", "content": "hello"}]},
            context={},
        )

    # The memories are on disk, in the embedded store under the server's AMEM_HOME.
    embeddings = get_embeddings()
    store = open_store(embeddings.dims, backend="embedded", path=dev_server.home / "store")
    try:
        episodes = await EpisodicMemory(store, embeddings).alist(USER)
        assert len(episodes) == 1
        assert episodes[0].conversation_summary.startswith("Planned a vegetarian dinner")
        facts = {f.subject: f.value for f in await FactStore(store, embeddings).acurrent(USER)}
        assert facts == {"diet": "vegetarian", "allergy": "peanuts"}
        versions = await RuleBook(store, embeddings).aversions(USER)
        assert [v.version for v in versions][-1] == 2
        assert "allergies" in versions[-1].render()
    finally:
        store.close()

    # Forgetting the user through the CLI, pointed at the server, deletes her thread there too;
    # the anonymous thread and another user's thread stay.
    bob = await client.threads.create(metadata={"user_id": "bob"})
    env = dict(os.environ, AMEM_HOME=str(dev_server.home), AMEM_STORE="embedded")
    forgot = subprocess.run(
        [
            str(Path(sys.executable).with_name("amem")),
            "memories",
            "forget",
            "--user",
            USER,
            "--all",
            "--yes",
            "--server",
            dev_server.url,
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert forgot.returncode == 0, forgot.stderr
    report = json.loads(forgot.stdout)
    assert report["server_threads"] == [thread_id]
    rows = {(r["store"], r["collection"]): r["deleted"] for r in report["deleted"]}
    assert rows[("server", "threads")] == 1
    assert rows[("embedded", "EpisodicMemory")] == 1
    with pytest.raises(NotFoundError):
        await client.threads.get(thread_id)
    assert (await client.threads.get(other["thread_id"]))["thread_id"] == other["thread_id"]
    assert (await client.threads.get(bob["thread_id"]))["metadata"]["user_id"] == "bob"

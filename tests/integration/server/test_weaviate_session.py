"""A whole session on live Weaviate, as a user runs it: ``make run STORE=weaviate``, the SDK, forget.

The agent is served by the project's serve entry (``python -m agentic_memory.graph.serve``,
what ``make run`` runs) on a free port, with the store on the session's live Weaviate
(``AMEM_STORE=weaviate``, ``WEAVIATE_URL``, ``tests/live_weaviate.py``) and the scripted
model server. Memories go in through the SDK's ``client.store`` and a PDF through the
server's ``ingest`` graph (the user's own knowledge base); the server is restarted; one
thread holds six turns (compacted into a rolling summary) and ends; a new thread recalls
the episode, the facts and the document's passage. Then ``amem memories forget --user …
--all --server …`` forgets the user, and every collection and tenant of the server is read
directly (REST): no tenant of theirs, no object naming them or holding what they said.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from fpdf import FPDF
from langgraph_sdk import get_client

from agentic_memory.store.weaviate.schema import USER_PROPERTY, tenant_name
from tests.fake_openai import FakeOpenAIServer, prompt_text
from tests.integration.server.test_langgraph_dev import SCRIPTS
from tests.integration.server.test_server_data import served
from tests.live_weaviate import LiveWeaviate

pytestmark = [pytest.mark.weaviate, pytest.mark.timeout(900)]

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]
SECRET = "QUOKKA-7315"
"""Said by the user in a turn and kept in a memory: nothing may hold it after forgetting."""
KB = "papers"
TURNS = [
    "Hi, I'm vegetarian.",
    f"My locker code is {SECRET}.",
    "What are the four kinds of memory in CoALA?",
    "I'm allergic to peanuts.",
    "I like sailing on weekends.",
    "Can you suggest a dinner for me tonight?",
]


def _pdf() -> str:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(
        0,
        5,
        "CoALA organises the memory of a language agent in four kinds: working memory, "
        "episodic memory, semantic memory and procedural memory. " * 3,
    )
    return base64.b64encode(bytes(pdf.output())).decode()


def _env(fake: FakeOpenAIServer, home: Path, live: LiveWeaviate) -> dict[str, str]:
    return {
        **os.environ,
        **live.client_env(),
        "PYTHONPATH": str(REPO),
        "AMEM_HOME": str(home),
        "AMEM_STORE": "weaviate",
        "AMEM_BASE_URL": fake.base_url,
        "AMEM_MODEL_NAME": "fake-model",
        # The scripted endpoint plays a capable model (the full prompt, its facts kept).
        "AMEM_MODEL_CLASS": "capable",
        "LANGSMITH_TRACING": "false",
        "PYTHONUNBUFFERED": "1",
    }


async def _seed(url: str, user: str) -> None:
    client = get_client(url=url)
    await client.store.put_item(
        ["facts", user], "allergy", {"value": "peanuts", "category": "constraint"}
    )
    await client.store.put_item(["notes", user], "tea", {"text": f"likes green tea, {SECRET}"})
    upload: dict[str, Any] = {"documents": [{"name": "coala.pdf", "data_base64": _pdf()}]}
    out = await client.runs.wait(
        None,
        "ingest",
        input={**upload, "kb": KB},
        context={"user_id": user},
        raise_error=True,
    )
    assert isinstance(out, dict), out
    report = out["report"]
    assert report["ok"] and report["totals"]["chunks_written"] >= 1, report


async def _run(client: Any, thread: str, user: str, payload: dict[str, Any]) -> dict[str, Any]:
    context = {"user_id": user, "knowledge_bases": [KB], "budget_recent": 60}
    out = await client.runs.wait(thread, "agent", input=payload, context=context, raise_error=True)
    assert isinstance(out, dict) and "__error__" not in out, out
    return out


async def _session(url: str, user: str, fake: FakeOpenAIServer) -> str:
    """Six turns, the end, a new thread that recalls; return the episode's id."""
    client = get_client(url=url)
    item = await client.store.get_item(["facts", user], "allergy")
    assert item is not None and item["value"]["value"] == "peanuts"
    thread = (await client.threads.create(metadata={"user_id": user}))["thread_id"]
    for text in TURNS:
        await _run(client, thread, user, {"messages": [{"role": "user", "content": text}]})
    state: Any = (await client.threads.get_state(thread))["values"]
    assert state["summary"], "six turns past the recent-turns budget leave a rolling summary"
    ended = await _run(client, thread, user, {"messages": [], "end_conversation": True})
    assert ended["conversation_ended"] is True
    episode = ended["reflection"]
    assert episode is not None and episode["thread_id"] == thread

    second = (await client.threads.create(metadata={"user_id": user}))["thread_id"]
    out = await _run(
        client,
        second,
        user,
        {"messages": [{"role": "user", "content": "What do you know about memory in CoALA?"}]},
    )
    assert [e["id"] for e in out["episodes"]][:1] == [episode["id"]]
    assert {("diet", "vegetarian"), ("allergy", "peanuts")} <= {
        (f["subject"], f["value"]) for f in out["facts"]
    }
    assert out["chunks"] and out["chunks"][0]["source"].endswith("coala.pdf")
    prompt = prompt_text(fake.requests_for(None)[-1])
    for expected in (
        "- diet: vegetarian",
        "- allergy: peanuts",
        "episodic memory, semantic memory",
        episode["conversation_summary"][:40],
    ):
        assert expected in prompt, expected
    return str(episode["id"])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.load(reply)


def _remains(base: str, user: str) -> list[str]:
    """Everything of ``user`` left on the server: their tenants, objects naming them or what
    they said, in every collection and every tenant (read over REST, not through the store)."""
    found: list[str] = []
    for cls in _get(f"{base}/v1/schema")["classes"]:
        name = cls["class"]
        tenants: list[str | None] = [None]
        if (cls.get("multiTenancyConfig") or {}).get("enabled"):
            tenants = [t["name"] for t in _get(f"{base}/v1/schema/{name}/tenants")]
            if tenant_name(user) in tenants:
                found.append(f"{name}: tenant {tenant_name(user)}")
        for tenant in tenants:
            after = ""
            while True:
                query = {"class": name, "limit": "500"}
                if tenant is not None:
                    query["tenant"] = tenant
                if after:
                    query["after"] = after
                page = _get(f"{base}/v1/objects?{urllib.parse.urlencode(query)}")["objects"]
                for obj in page:
                    props = obj.get("properties") or {}
                    text = json.dumps(props, ensure_ascii=False)
                    if props.get(USER_PROPERTY) == user or user in text or SECRET in text:
                        found.append(f"{name}/{tenant}: {obj['id']} {text[:120]}")
                if len(page) < 500:
                    break
                after = page[-1]["id"]
    return found


def test_a_whole_session_on_live_weaviate_then_the_user_forgotten(
    own_weaviate: LiveWeaviate, tmp_path: Path
) -> None:
    weaviate_env = own_weaviate
    user = f"alice{uuid.uuid4().hex[:8]}"
    home = tmp_path / "home"
    with FakeOpenAIServer(tool_scripts=SCRIPTS) as fake:
        env = _env(fake, home, weaviate_env)
        with served(tmp_path, env, tmp_path / "serve-1.log") as (url, first_line):
            assert first_line.startswith("WARNING: no authentication")
            asyncio.run(_seed(url, user))
        # Restarted on the same Weaviate and the same AMEM_HOME.
        with served(tmp_path, env, tmp_path / "serve-2.log") as (url, _):
            episode = asyncio.run(_session(url, user, fake))
            assert _remains(weaviate_env.url, user), "the session left nothing to forget"
            forget = subprocess.run(
                [str(BIN / "amem"), "memories", "forget", "--user", user, "--all", "--yes"]
                + ["--server", url, "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert forget.returncode == 0, forget.stdout + forget.stderr
            report = json.loads(forget.stdout)
            print(f"\nforget report: {json.dumps(report)[:600]}")
    assert episode
    assert _remains(weaviate_env.url, user) == []

"""A real llama.cpp server as an OpenAI-compatible endpoint (``AMEM_BASE_URL``), issue 30.

The server is llama-cpp-python's (``llama_cpp.server``, from this venv), serving the bundled
SmolLM2 file, started by ``LocalModelServer`` on a free port and then used as any endpoint
is: ``compatible:<model>``. It compiles every tool schema into a grammar, and a string bound
of 1,500 characters (the compaction summary's) killed such a server with SIGSEGV; and a
server may die in the middle of a turn.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

import agentic_memory.graph.resources as resources
import agentic_memory.models.chat as chat
import agentic_memory.models.local_server as local_server
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.nodes import AnswerFailedError
from agentic_memory.graph.state import Summary
from agentic_memory.models.calls import ainvoke_structured
from agentic_memory.models.local_server import LocalModelServer
from tests.unit.models.conftest import local_model_file, requires_local

pytestmark = [pytest.mark.integration, requires_local, pytest.mark.timeout(900)]

__all__ = ["local_model_file"]  # the fixture, imported for this module

SPEC = "compatible:smollm2"


@pytest.fixture
def endpoint(local_model_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalModelServer]:
    """A llama.cpp server at AMEM_BASE_URL, as a user runs one; the graph resolves anew."""
    server = LocalModelServer(local_model_file, n_ctx=2048, ready_timeout=120).start()
    monkeypatch.setenv("AMEM_BASE_URL", server.base_url)
    monkeypatch.setenv("AMEM_MODEL_NAME", "smollm2")
    monkeypatch.setattr(resources, "_RESOLVED", {})
    monkeypatch.setattr(chat, "_DETECTED", {})
    yield server
    server.stop()


async def test_the_grammar_bound_reaches_a_llama_cpp_endpoint_and_it_survives(
    endpoint: LocalModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = endpoint.pid
    model = await asyncio.to_thread(chat.resolve_chat_model, SPEC, max_tokens=64)
    assert chat.model_class(model) == "small"  # 127.0.0.1
    prompt = [HumanMessage("user: I'm Ana, I live in Lisbon.\nassistant: Hi Ana!\nSummarise.")]
    # Summary.text allows 1,500 characters: its grammar killed llama.cpp servers before.
    summary, calls = await ainvoke_structured(model, Summary, prompt, purpose="summary")
    assert isinstance(summary, Summary) and calls
    assert chat._DETECTED[endpoint.base_url] is True  # found from /v1/models
    assert endpoint.running and endpoint.pid == pid, "the endpoint died on the grammar"
    # Said off, the bound is not sent: the same request kills this server (what users met).
    monkeypatch.setenv("AMEM_GRAMMAR_MAX_LENGTH", "off")
    unbounded = await asyncio.to_thread(chat.resolve_chat_model, SPEC, max_tokens=64)
    payload = unbounded._get_request_payload(  # type: ignore[attr-defined]
        prompt,
        **unbounded.bind_tools([Summary], tool_choice="Summary").kwargs,  # type: ignore[attr-defined]
    )
    assert payload["tools"][0]["function"]["parameters"]["properties"]["text"]["maxLength"] == 1500


def _kill_when_generating(server: LocalModelServer, after: float) -> None:
    time.sleep(after)
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)


async def test_an_endpoint_killed_mid_turn_fails_that_turn_clearly_never_the_thread(
    endpoint: LocalModelServer, agentic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app: Any = await asyncio.to_thread(compile_graph, checkpointer=InMemorySaver(), store=agentic)
    context = {
        "user_id": "alice",
        "model": SPEC,
        "memory_model": SPEC,
        "answer_max_tokens": 400,
        "extract_facts": False,  # the answer is the only model call of a turn
    }
    config = {"configurable": {"thread_id": "t"}}
    first = await app.ainvoke(
        {"messages": [HumanMessage("Hi, my name is Ana.")]}, config, context=context
    )
    before = [m.content for m in first["messages"]]
    port = int(endpoint.base_url.rsplit(":", 1)[1].split("/")[0])
    killer = asyncio.create_task(asyncio.to_thread(_kill_when_generating, endpoint, 1.5))
    with pytest.raises(AnswerFailedError) as failed:
        await app.ainvoke(
            {"messages": [HumanMessage("Write a long story about a lighthouse keeper.")]},
            config,
            context=context,
        )
    await killer
    message = str(failed.value)
    assert "compatible:smollm2" in message and "failed while answering" in message
    assert "thread is as it was" in message
    # The thread is exactly as before the failed turn, and nothing of it was logged.
    state = await app.aget_state(config)
    assert [m.content for m in state.values["messages"]] == before
    logged = await agentic.memory.messages.alist("alice", thread_id="t")
    assert "lighthouse" not in " ".join(m.content for m in logged)
    # The server comes back at the same address: the thread goes on.
    monkeypatch.setattr(local_server, "_free_port", lambda: port)
    endpoint.stop()
    await asyncio.to_thread(endpoint.start)
    again = await app.ainvoke(
        {"messages": [HumanMessage("What is my name?")]},
        config,
        context={**context, "answer_max_tokens": 30},
    )
    assert [m.content for m in again["messages"][: len(before)]] == before
    assert again["messages"][-2].content == "What is my name?"

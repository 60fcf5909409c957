"""The real offline model: llama.cpp server + Gemma 3 270M (needs the [local] extra)."""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.request
from pathlib import Path
from typing import Annotated

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field, StringConstraints

from agentic_memory.models.calls import ainvoke_structured, ainvoke_text
from agentic_memory.models.chat import ModelNotConfiguredError, describe_model, resolve_chat_model
from agentic_memory.models.local_server import LocalModelServer, LocalServerError, get_local_server
from tests.unit.models.conftest import requires_local

pytestmark = [pytest.mark.integration, requires_local]


class UserFact(BaseModel):
    """One fact the user stated about themself."""

    attribute: str = Field(max_length=30, description="what the fact is about, e.g. city")
    value: str = Field(max_length=40, description="the fact's value, e.g. Lisbon")


class Topics(BaseModel):
    """Topics of a conversation."""

    topics: list[Annotated[str, StringConstraints(max_length=20)]] = Field(max_length=3)


def _process_gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


async def test_local_model_text_and_structured(local_model_file: Path) -> None:
    server = get_local_server()
    server.model_path = local_model_file
    model = resolve_chat_model("local", max_tokens=40)
    assert describe_model(model) == "local:smollm2-135m"
    assert not server.running  # resolving started nothing
    try:
        reply, call = await ainvoke_text(
            model, [HumanMessage("Write one sentence about the sea.")], purpose="answer"
        )
        assert server.running
        pid = server.pid
        assert pid is not None
        assert isinstance(reply.content, str) and reply.content.strip()
        assert call.model == "local:smollm2-135m"
        assert call.input_tokens > 0 and 0 < call.output_tokens <= 40
        assert call.estimated is False

        prompt = [
            SystemMessage("Extract one fact the user stated about themself."),
            HumanMessage("Hi, I'm Ana and I live in Lisbon."),
        ]
        fact, calls = await ainvoke_structured(model, UserFact, prompt, purpose="facts")
        assert isinstance(fact, UserFact)
        assert len(fact.attribute) <= 30 and len(fact.value) <= 40
        assert 1 <= len(calls) <= 2
        assert all(c.input_tokens > 0 and c.output_tokens > 0 for c in calls)

        topics, calls = await ainvoke_structured(
            model,
            Topics,
            [HumanMessage("We talked about sailing, tides and knots.")],
            purpose="reflection",
        )
        assert len(topics.topics) <= 3
        assert all(len(t) <= 20 for t in topics.topics)
        assert all(c.output_tokens > 0 for c in calls)
    finally:
        server.stop()
    assert not server.running
    assert _process_gone(pid)


def test_server_context_manager_stops_the_process(local_model_file: Path) -> None:
    with LocalModelServer(local_model_file, n_ctx=512) as server:
        pid = server.pid
        assert pid is not None
        assert server.base_url.startswith("http://127.0.0.1:")
    assert _process_gone(pid)
    with pytest.raises(LocalServerError, match="not running"):
        _ = server.base_url


def test_inherited_port_and_host_do_not_move_the_server(
    local_model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make run PORT=…` exports PORT, and llama_cpp.server reads its settings from the
    # environment: the server must still bind where we told it to.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("PORT", str(taken.getsockname()[1]))
        monkeypatch.setenv("HOST", "0.0.0.0")
        with LocalModelServer(local_model_file, n_ctx=512) as server:
            assert server.base_url != f"http://127.0.0.1:{taken.getsockname()[1]}/v1"
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as response:
                assert response.status == 200


def test_server_that_cannot_load_its_model_fails_clearly(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf at all")
    server = LocalModelServer(bogus, ready_timeout=60)
    with pytest.raises(LocalServerError, match="exited during start"):
        server.start()
    assert not server.running


def test_missing_model_file_is_a_configuration_error(tmp_path: Path) -> None:
    server = LocalModelServer(tmp_path / "absent.gguf")
    with pytest.raises(ModelNotConfiguredError, match="absent.gguf"):
        server.start()


def test_bad_server_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="n_ctx"):
        LocalModelServer(n_ctx=10)
    with pytest.raises(ValueError, match="n_threads"):
        LocalModelServer(n_threads=0)
    with pytest.raises(ValueError, match="ready_timeout"):
        LocalModelServer(ready_timeout=0)


def test_shared_server_fixture_runs(local_server: LocalModelServer) -> None:
    assert local_server is get_local_server()
    assert local_server.running
    assert os.environ.get("AMEM_HOME")  # the root conftest isolated the data folder


def test_llama_cpp_without_server_extra_is_a_configuration_error(
    local_model_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentic_memory.models.local_server as local_server

    real = local_server.importlib.util.find_spec

    def no_uvicorn(name: str, *args: object) -> object:
        return None if name == "uvicorn" else real(name)

    monkeypatch.setattr(local_server.importlib.util, "find_spec", no_uvicorn)
    server = LocalModelServer(local_model_file)
    with pytest.raises(ModelNotConfiguredError, match=r"\[server\] extra.*uvicorn"):
        server.start()
    assert not server.running


async def test_system_layers_reach_the_real_model(local_server: LocalModelServer) -> None:
    # A chat format may drop system messages (Gemma's did: such a prompt counted as many
    # tokens as the bare question). SmolLM2's template keeps them, in place of its own
    # default system prompt (which the bare question gets: ~30 tokens).
    model = await asyncio.to_thread(resolve_chat_model, "local", max_tokens=1)
    system = "You are a careful assistant. Known facts: the user is vegetarian. " * 10
    _, bare = await ainvoke_text(model, [HumanMessage("Hello there")], purpose="answer")
    _, full = await ainvoke_text(
        model, [SystemMessage(system), HumanMessage("Hello there")], purpose="answer"
    )
    assert bare.input_tokens < 40
    assert full.input_tokens > bare.input_tokens + 100


async def test_every_memory_schema_runs_on_the_real_server_without_killing_it(
    local_server: LocalModelServer,
) -> None:
    from agentic_memory.graph.state import Summary
    from agentic_memory.kinds.episodes import Reflection
    from agentic_memory.kinds.facts import ExtractedFacts
    from agentic_memory.kinds.rules import RuleSet

    # Summary.text allows 1500 characters: sent as such, its grammar killed the server
    # (SIGSEGV) on every compaction.
    model = await asyncio.to_thread(resolve_chat_model, "local", max_tokens=1024)
    pid = local_server.pid
    prompt = [
        HumanMessage("user: I'm Ana, I live in Lisbon and I like sailing.\nassistant: Hi Ana!")
    ]
    for schema in (Summary, Reflection, ExtractedFacts, RuleSet):
        value, calls = await ainvoke_structured(model, schema, prompt, purpose="memory")
        assert isinstance(value, schema)
        assert all(c.input_tokens > 0 for c in calls)
        assert local_server.pid == pid, f"the server died on {schema.__name__}"

"""What a request to the local model carries: the whole prompt, grammars llama.cpp compiles.

SmolLM2 (the default) is served with its own ChatML template, which keeps system messages.
llama-cpp-python's ``gemma`` chat format (``AMEM_LOCAL_MODEL=gemma3-270m``) keeps only user
and model turns, so there the system layers must reach the model inside the user turns; and a JSON schema's ``maxLength`` becomes
nested grammar rules that llama.cpp refuses past about a thousand (the server then dies).
These tests look at the request body as it leaves the client, and at what the stand-in
server receives.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from agentic_memory.graph.state import Summary
from agentic_memory.kinds.episodes import Reflection
from agentic_memory.kinds.facts import ExtractedFacts
from agentic_memory.kinds.rules import RuleSet
from agentic_memory.models.calls import ainvoke_text
from agentic_memory.models.chat import (
    LOCAL_GRAMMAR_MAX_LENGTH,
    LocalChatOpenAI,
    grammar_safe_schema,
    limit_answer_tokens,
    merge_system_messages,
    resolve_chat_model,
)
from tests.integration.local_model.test_local_server_lifecycle import standin

__all__ = ["standin"]  # the fixture, imported for this module


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch) -> LocalChatOpenAI:
    """The offline model served with Gemma's chat format, which has no system role."""
    import agentic_memory.models.chat as chat

    monkeypatch.setenv("AMEM_LOCAL_MODEL", "gemma3-270m")
    monkeypatch.setattr(chat, "local_model_available", lambda: True)
    model = resolve_chat_model("local", max_tokens=1024)
    assert isinstance(model, LocalChatOpenAI)
    return model


@pytest.fixture
def smol(monkeypatch: pytest.MonkeyPatch) -> LocalChatOpenAI:
    """The default offline model, SmolLM2, served with its own chat template."""
    import agentic_memory.models.chat as chat

    monkeypatch.delenv("AMEM_LOCAL_MODEL", raising=False)
    monkeypatch.setattr(chat, "local_model_available", lambda: True)
    model = resolve_chat_model("local", max_tokens=1024)
    assert isinstance(model, LocalChatOpenAI)
    return model


def test_smollm2_keeps_the_system_role_and_stops_at_its_turn_markers(
    smol: LocalChatOpenAI,
) -> None:
    payload = smol._get_request_payload(
        [SystemMessage("SYSTEM"), SystemMessage("FACTS"), HumanMessage("question")]
    )
    assert [m["role"] for m in payload["messages"]] == ["system", "system", "user"]
    assert "<|im_end|>" in payload["stop"] and "<|im_start|>" in payload["stop"]
    # Free text gets the repeat penalty (without it SmolLM2 loops); a grammar does not.
    assert payload["extra_body"] == {"max_tokens": 1024, "repeat_penalty": 1.2}
    bound: Any = smol.bind_tools([Summary], tool_choice="Summary")
    tools = smol._get_request_payload([HumanMessage("x")], **bound.kwargs)
    assert tools["extra_body"] == {"max_tokens": 1024}


@pytest.fixture
def recorded(standin: Path) -> Path:
    """The file the stand-in server appends each request body to."""
    requests = standin.with_name("requests.jsonl")
    data = json.loads(standin.read_text())
    standin.write_text(json.dumps({**data, "requests_file": str(requests)}))
    return requests


def test_system_layers_go_in_front_of_the_user_turn_they_precede() -> None:
    messages = [
        {"role": "system", "content": "SYSTEM and RULES"},
        {"role": "system", "content": "FACTS"},
        {"role": "system", "content": "SUMMARY"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "system", "content": "EPISODES and PASSAGES"},
        {"role": "user", "content": "new question"},
    ]
    merged = merge_system_messages(messages)
    assert [m["role"] for m in merged] == ["user", "assistant", "user"]
    # Gemma's own template: the system text, a blank line, then the user's text.
    assert merged[0]["content"] == "SYSTEM and RULES\n\nFACTS\n\nSUMMARY\n\nfirst question"
    assert merged[2]["content"] == "EPISODES and PASSAGES\n\nnew question"
    assert messages[0] == {"role": "system", "content": "SYSTEM and RULES"}  # not changed


def test_system_text_with_no_user_turn_after_it_becomes_one() -> None:
    merged = merge_system_messages(
        [
            {"role": "system", "content": "S"},
            {"role": "assistant", "content": "hello"},
            {"role": "system", "content": "LATE"},
        ]
    )
    assert merged == [
        {"role": "user", "content": "S"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "LATE"},
    ]


def test_consecutive_user_turns_are_joined_so_turns_alternate() -> None:
    # A structured call's retry adds a second user message after the first.
    merged = merge_system_messages(
        [
            {"role": "user", "content": "prompt"},
            {"role": "developer", "content": "D"},
            {"role": "user", "content": "your reply was invalid"},
        ]
    )
    assert merged == [{"role": "user", "content": "prompt\n\nD\n\nyour reply was invalid"}]


def test_content_parts_keep_their_images_and_gain_the_system_text() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    merged = merge_system_messages(
        [
            {"role": "system", "content": [{"type": "text", "text": "S"}]},
            {"role": "user", "content": [{"type": "text", "text": "look"}, image]},
        ]
    )
    assert merged == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "S\n\n"}, {"type": "text", "text": "look"}, image],
        }
    ]


def test_blank_system_messages_add_nothing() -> None:
    merged = merge_system_messages(
        [{"role": "system", "content": "  "}, {"role": "user", "content": "hi"}]
    )
    assert merged == [{"role": "user", "content": "hi"}]


def test_local_request_carries_every_layer_and_the_stop_markers(local: LocalChatOpenAI) -> None:
    payload = local._get_request_payload(
        [
            SystemMessage("You are a helpful assistant. Rules: cite passages."),
            SystemMessage("Known facts: diet vegetarian"),
            HumanMessage("hi"),
            AIMessage("hello"),
            SystemMessage("Passages: [coala.pdf p.3] four kinds of memory"),
            HumanMessage("What are the kinds of memory?"),
        ]
    )
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["user", "assistant", "user"]
    text = json.dumps(payload["messages"])
    for layer in ("helpful assistant", "cite passages", "diet vegetarian", "coala.pdf p.3"):
        assert layer in text
    assert "<end_of_turn>" in payload["stop"] and "<start_of_turn>" in payload["stop"]
    # The token limit every server reads.
    assert payload["extra_body"]["max_tokens"] == 1024


def test_a_caller_stop_sequence_is_kept(local: LocalChatOpenAI) -> None:
    payload = local._get_request_payload([HumanMessage("hi")], stop=["\n\n"])
    assert payload["stop"] == ["\n\n", "<end_of_turn>", "<start_of_turn>"]


@pytest.mark.parametrize("schema", [Summary, Reflection, RuleSet, ExtractedFacts])
def test_tool_schemas_sent_to_the_local_server_are_grammar_safe(
    local: LocalChatOpenAI, schema: type[BaseModel]
) -> None:
    bound: Any = local.bind_tools([schema], tool_choice=schema.__name__)
    payload = local._get_request_payload([HumanMessage("x")], **bound.kwargs)
    lengths: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "maxLength" in node:
                lengths.append(node["maxLength"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(payload["tools"])
    assert lengths and max(lengths) <= LOCAL_GRAMMAR_MAX_LENGTH
    # What the schema itself says is unchanged: replies are still checked against it.
    assert schema.model_json_schema() == schema.model_json_schema()


def test_grammar_safe_schema_lowers_only_long_bounds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "short": {"type": "string", "maxLength": 20},
            "long": {"type": "string", "minLength": 700, "maxLength": 1500},
            "items": {
                "type": "array",
                "maxItems": 3,
                "items": {"type": "string", "maxLength": 900},
            },
        },
    }
    safe = grammar_safe_schema(schema, max_length=500)
    assert safe["properties"]["short"]["maxLength"] == 20
    assert safe["properties"]["long"] == {"type": "string", "minLength": 500, "maxLength": 500}
    assert safe["properties"]["items"]["items"]["maxLength"] == 500
    assert safe["properties"]["items"]["maxItems"] == 3
    assert schema["properties"]["long"]["maxLength"] == 1500  # the input is not changed


class _Long(BaseModel):
    text: str = Field(max_length=1500)


def test_limit_answer_tokens_lowers_both_limits(local: LocalChatOpenAI) -> None:
    smaller = limit_answer_tokens(local, 64)
    assert isinstance(smaller, LocalChatOpenAI)
    assert smaller.max_tokens == 64 and smaller.extra_body == {"max_tokens": 64}
    payload = smaller._get_request_payload([HumanMessage("x")])
    assert payload["extra_body"]["max_tokens"] == 64
    assert local.max_tokens == 1024  # the original is untouched
    assert limit_answer_tokens(local, None) is local
    assert limit_answer_tokens(local, 4096) is local  # never raised above the model's own
    with pytest.raises(ValueError, match="max_tokens"):
        limit_answer_tokens(local, 0)


async def test_the_local_server_receives_the_system_layers_in_the_user_turn(
    recorded: Path, local: LocalChatOpenAI
) -> None:
    await ainvoke_text(
        local,
        [SystemMessage("SYSTEM PROMPT"), SystemMessage("FACTS"), HumanMessage("question")],
        purpose="answer",
    )
    lines = (await asyncio.to_thread(recorded.read_text)).splitlines()
    [body] = [json.loads(line) for line in lines]
    assert body["messages"] == [{"role": "user", "content": "SYSTEM PROMPT\n\nFACTS\n\nquestion"}]
    assert body["max_tokens"] == 1024

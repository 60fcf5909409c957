"""What a request to the local model carries: the whole prompt, grammars llama.cpp compiles.

A free-text request keeps its system messages: the server's ``amem-transcript`` format
renders them as paragraphs of a plain transcript (``models/llama_server.py``). A request
with tools is formatted in llama-cpp-python's ``gemma`` format, which keeps only user and
model turns, so there the system layers must reach the model inside the user turns; and a
JSON schema's ``maxLength`` becomes nested grammar rules that llama.cpp refuses past about a
thousand (the server then dies). These tests look at the request body as it leaves the
client, at what the stand-in server receives, and at the transcript the server renders.
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
from agentic_memory.models.llama_server import render_transcript
from tests.integration.local_model.test_local_server_lifecycle import standin

__all__ = ["standin"]  # the fixture, imported for this module


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch) -> LocalChatOpenAI:
    import agentic_memory.models.chat as chat

    monkeypatch.setattr(chat, "local_model_available", lambda: True)
    model = resolve_chat_model("local", max_tokens=1024)
    assert isinstance(model, LocalChatOpenAI)
    return model


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


LAYERED = [
    SystemMessage("You are a helpful assistant. Rules: cite passages."),
    SystemMessage("Known facts: diet vegetarian"),
    HumanMessage("hi"),
    AIMessage("hello"),
    SystemMessage("Passages: [coala.pdf p.3] four kinds of memory"),
    HumanMessage("What are the kinds of memory?"),
]


def test_a_free_text_request_keeps_its_layers_and_ends_at_a_paragraph(
    local: LocalChatOpenAI,
) -> None:
    payload = local._get_request_payload(LAYERED)
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["system", "system", "user", "assistant", "system", "user"]
    # The base model's answer is one paragraph; past it, it recites the prompt.
    assert payload["stop"] == ["<end_of_turn>", "<start_of_turn>", "\n\n"]
    # The token limit every server reads.
    assert payload["extra_body"] == {"max_tokens": 1024}


def test_another_gguf_may_answer_in_paragraphs(
    local: LocalChatOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "local_label", "my-instruct-model")
    payload = local._get_request_payload(LAYERED)
    assert payload["stop"] == ["<end_of_turn>", "<start_of_turn>"]


def test_the_server_renders_a_free_text_request_as_a_transcript(local: LocalChatOpenAI) -> None:
    payload = local._get_request_payload(LAYERED)
    assert render_transcript(payload["messages"]) == (
        "You are a helpful assistant. Rules: cite passages.\n\n"
        "Known facts: diet vegetarian\n\n"
        "User: hi\nAssistant: hello\n\n"
        "Passages: [coala.pdf p.3] four kinds of memory\n\n"
        "User: What are the kinds of memory?\nAssistant:"
    )


def test_the_transcript_keeps_text_parts_and_skips_empty_turns() -> None:
    messages = [
        {"role": "system", "content": "  "},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "42"},
        {"role": "user", "content": "and?"},
    ]
    assert render_transcript(messages) == ("User: look\nTool result: 42\nUser: and?\nAssistant:")
    assert render_transcript([]) == "Assistant:"


def test_a_tool_request_carries_every_layer_in_its_user_turns(local: LocalChatOpenAI) -> None:
    bound: Any = local.bind_tools([Summary], tool_choice="Summary")
    payload = local._get_request_payload(LAYERED, **bound.kwargs)
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["user", "assistant", "user"]
    text = json.dumps(payload["messages"])
    for layer in ("helpful assistant", "cite passages", "diet vegetarian", "coala.pdf p.3"):
        assert layer in text
    # A blank line may sit inside JSON text: no paragraph stop under a grammar.
    assert payload["stop"] == ["<end_of_turn>", "<start_of_turn>"]


def test_a_caller_stop_sequence_is_kept(local: LocalChatOpenAI) -> None:
    payload = local._get_request_payload([HumanMessage("hi")], stop=["###"])
    assert payload["stop"] == ["###", "<end_of_turn>", "<start_of_turn>", "\n\n"]


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
    assert payload["extra_body"] == {"max_tokens": 64}
    assert local.max_tokens == 1024  # the original is untouched
    assert limit_answer_tokens(local, None) is local
    assert limit_answer_tokens(local, 4096) is local  # never raised above the model's own
    with pytest.raises(ValueError, match="max_tokens"):
        limit_answer_tokens(local, 0)


async def test_the_local_server_receives_the_system_layers_of_a_free_text_request(
    recorded: Path, local: LocalChatOpenAI
) -> None:
    await ainvoke_text(
        local,
        [SystemMessage("SYSTEM PROMPT"), SystemMessage("FACTS"), HumanMessage("question")],
        purpose="answer",
    )
    lines = (await asyncio.to_thread(recorded.read_text)).splitlines()
    [body] = [json.loads(line) for line in lines]
    assert render_transcript(body["messages"]) == (
        "SYSTEM PROMPT\n\nFACTS\n\nUser: question\nAssistant:"
    )
    assert body["max_tokens"] == 1024


def test_the_servers_chat_format_is_gemmas_for_tools_and_a_transcript_otherwise() -> None:
    pytest.importorskip("llama_cpp", reason="the [local] extra (llama-cpp-python) is not installed")
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    from agentic_memory.models.llama_server import (
        TRANSCRIPT_FORMAT,
        TRANSCRIPT_STOP,
        format_transcript,
        register,
    )

    messages = [{"role": "user", "content": "hi"}]
    plain = format_transcript(messages)
    assert plain.prompt == "User: hi\nAssistant:" and plain.stop == list(TRANSCRIPT_STOP)
    tool = {"type": "function", "function": {"name": "Summary", "parameters": {}}}
    gemma = format_transcript(messages, tools=[tool])
    assert gemma.prompt == "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    register()
    handler = LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(
        TRANSCRIPT_FORMAT
    )
    assert callable(handler)

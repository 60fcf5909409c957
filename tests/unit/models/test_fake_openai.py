"""The fake OpenAI-compatible server speaks the protocol langchain-openai expects."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.fake_openai import FakeOpenAIServer, fill_schema


class Fact(BaseModel):
    subject: str = Field(max_length=80)
    value: str = Field(max_length=200)
    category: str = Field(max_length=40)


class ExtractedFacts(BaseModel):
    facts: list[Fact] = Field(default_factory=list, max_length=5)


class Reflection(BaseModel):
    context_tags: list[str] = Field(min_length=1, max_length=5)
    conversation_summary: str = Field(min_length=3, max_length=500)
    importance: float = Field(ge=0.0, le=1.0)


def _model(server: FakeOpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="fake-model", base_url=server.base_url, api_key="x", max_retries=0)  # type: ignore[arg-type]


async def test_plain_and_streamed_text(fake_openai: FakeOpenAIServer) -> None:
    model = _model(fake_openai)
    reply = await model.ainvoke([SystemMessage("be brief"), HumanMessage("hello there")])
    assert reply.content == "Reply 1: hello there"
    assert reply.usage_metadata is not None and reply.usage_metadata["input_tokens"] > 0
    chunks = [c async for c in model.astream([HumanMessage("stream me please")])]
    assert len(chunks) > 3
    assert "".join(str(c.content) for c in chunks) == "Reply 2: stream me please"
    assert [r["messages"][-1]["content"] for r in fake_openai.requests_for(None)] == [
        "hello there",
        "stream me please",
    ]


async def test_text_script_list_repeats_its_last_reply() -> None:
    with FakeOpenAIServer(text_script=["one", "two"]) as server:
        model = _model(server)
        replies = [(await model.ainvoke("x")).content for _ in range(3)]
    assert replies == ["one", "two", "two"]


async def test_structured_output_from_a_script_and_from_the_schema() -> None:
    script = {"facts": [{"subject": "diet", "value": "vegetarian", "category": "preference"}]}
    with FakeOpenAIServer(tool_scripts={"ExtractedFacts": script}) as server:
        model = _model(server)
        facts = await model.with_structured_output(
            ExtractedFacts, method="function_calling"
        ).ainvoke("I am vegetarian")
        assert isinstance(facts, ExtractedFacts)
        assert facts.facts[0].value == "vegetarian"
        reflection = await model.with_structured_output(
            Reflection, method="function_calling"
        ).ainvoke("reflect")
        assert isinstance(reflection, Reflection)
        assert 0.0 <= reflection.importance <= 1.0
        assert len(reflection.context_tags) == 1
        # The streamed tool call assembles into the same structured value.
        streamed = [
            c
            async for c in model.with_structured_output(
                ExtractedFacts, method="function_calling"
            ).astream("again")
        ]
        assert streamed[-1] == facts
        assert len(server.requests_for("ExtractedFacts")) == 2


def test_fill_schema_respects_bounds_and_refs() -> None:
    filled = fill_schema(Reflection.model_json_schema())
    Reflection.model_validate(filled)
    ExtractedFacts.model_validate(fill_schema(ExtractedFacts.model_json_schema()))


def test_models_route_and_errors(fake_openai: FakeOpenAIServer) -> None:
    with urllib.request.urlopen(f"{fake_openai.base_url}/models", timeout=5) as response:
        listing = json.load(response)
    assert listing["data"][0]["id"] == "fake-model"
    bad = urllib.request.Request(
        f"{fake_openai.base_url}/chat/completions", data=b"{not json", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bad, timeout=5)
    assert info.value.code == 400
    assert "bad request" in json.load(info.value)["error"]["message"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{fake_openai.base_url}/nothing", timeout=5)
    assert missing.value.code == 404

"""Cost records, and structured output: repair, one retry, then a clear error."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, Field, StringConstraints

from agentic_memory.models.calls import (
    ModelCall,
    StructuredOutputError,
    ainvoke_structured,
    ainvoke_text,
    summarize_calls,
)
from tests.fakes import ScriptedChatModel
from tests.unit.models.conftest import broken_tool_reply, tool_reply

Short = Annotated[str, StringConstraints(max_length=10)]


class Fact(BaseModel):
    """One fact about the user."""

    subject: str = Field(max_length=20)
    value: str = Field(max_length=30)


class Facts(BaseModel):
    """Facts about the user."""

    items: list[Short] = Field(default_factory=list, max_length=3)
    confidence: int = Field(ge=0, le=10)
    kind: Literal["personal", "work"] = "personal"


class Nested(BaseModel):
    """A list of bounded objects."""

    facts: list[Fact] = Field(max_length=2)


class Unbounded(BaseModel):
    """A free-text field: not allowed."""

    text: str


PROMPT = [SystemMessage("Extract."), HumanMessage("I am Ana from Lisbon.")]


# --- ainvoke_text ----------------------------------------------------------------------


async def test_text_call_uses_reported_usage(script: Any) -> None:
    reply = AIMessage(content="Hello Ana.")
    reply.usage_metadata = {"input_tokens": 31, "output_tokens": 4, "total_tokens": 35}
    model = script(reply)
    message, call = await ainvoke_text(model, PROMPT, purpose="answer")
    assert message.content == "Hello Ana."
    assert call.purpose == "answer"
    assert call.model == "message-script:message-script"
    assert (call.input_tokens, call.output_tokens, call.estimated) == (31, 4, False)
    assert call.seconds >= 0


async def test_text_call_estimates_tokens_without_usage(script: Any) -> None:
    model = script(AIMessage(content="x" * 9))
    _, call = await ainvoke_text(model, PROMPT, purpose="answer")
    prompt_chars = len("Extract.") + len("I am Ana from Lisbon.")
    assert call.estimated is True
    assert call.input_tokens == math.ceil(prompt_chars / 4)
    assert call.output_tokens == 3


@pytest.mark.parametrize(
    ("messages", "purpose", "error"),
    [
        ([], "answer", ValueError),
        ("hello", "answer", TypeError),
        ([HumanMessage("hi"), "raw"], "answer", TypeError),
        ([HumanMessage("hi")], "", ValueError),
        ([HumanMessage("hi")], "   ", ValueError),
    ],
)
async def test_text_call_rejects_bad_input(
    script: Any, messages: Any, purpose: str, error: type[Exception]
) -> None:
    model = script()
    with pytest.raises(error):
        await ainvoke_text(model, messages, purpose=purpose)
    assert model.prompts == []


# --- structured: valid and repaired on the first call ------------------------------------


async def test_structured_valid_first_time(script: Any) -> None:
    model = script(tool_reply("Fact", {"subject": "user", "value": "lives in Lisbon"}))
    fact, calls = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact == Fact(subject="user", value="lives in Lisbon")
    assert [c.purpose for c in calls] == ["facts"]
    assert (calls[0].input_tokens, calls[0].output_tokens) == (10, 5)
    # Asked for a forced tool call of the schema.
    assert model.bound_kwargs[0]["tools"][0]["function"]["name"] == "Fact"


async def test_repairs_json_in_prose(script: Any) -> None:
    prose = (
        "Sure! Here is the fact you asked for:\n```json\n"
        '{"subject": "user", "value": "lives in Lisbon"}\n```\nHope that helps.'
    )
    model = script(AIMessage(content=prose))
    fact, calls = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact.value == "lives in Lisbon"
    assert len(calls) == 1
    assert calls[0].estimated is True


async def test_repairs_json_in_broken_tool_arguments(script: Any) -> None:
    model = script(broken_tool_reply("Fact", 'Arguments: {"subject": "user", "value": "Ana"} ok'))
    fact, calls = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact == Fact(subject="user", value="Ana")
    assert len(calls) == 1


async def test_repairs_reply_cut_off_by_token_limit(script: Any) -> None:
    # What the 270M model sends when max_tokens ends it inside a string (raw newline too).
    cut = '{ "subject": "user\nname" ,"value": "1000000000000000000000000000000000000000'
    model = script(broken_tool_reply("Fact", cut))
    fact, calls = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact.subject == "user\nname"
    assert fact.value == "1" + "0" * 29
    assert len(calls) == 1


async def test_repairs_legacy_function_call_field(script: Any) -> None:
    raw = AIMessage(
        content="",
        additional_kwargs={
            "function_call": {"name": "Fact", "arguments": '{"subject": "a", "value": "b"'}
        },
    )
    fact, _ = await ainvoke_structured(script(raw), Fact, PROMPT, purpose="facts")
    assert fact == Fact(subject="a", value="b")


async def test_cuts_overlong_strings_to_their_bound(script: Any) -> None:
    model = script(tool_reply("Fact", {"subject": "s" * 50, "value": "v" * 31}))
    fact, calls = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact == Fact(subject="s" * 20, value="v" * 30)
    assert len(calls) == 1


async def test_cuts_too_many_items_and_long_items(script: Any) -> None:
    args = {"items": ["one", "two", "a-very-long-item", "four", "five"], "confidence": 7}
    model = script(tool_reply("Facts", args))
    facts, calls = await ainvoke_structured(model, Facts, PROMPT, purpose="facts")
    assert facts.items == ["one", "two", "a-very-lon"]
    assert facts.confidence == 7
    assert len(calls) == 1


async def test_sets_numbers_past_an_inclusive_bound_to_it(script: Any) -> None:
    # llama.cpp's grammar constrains a number's form, not its range (measured: the offline
    # model wrote importance 8 for a field bounded to 0..1).
    high = script(tool_reply("Facts", {"items": [], "confidence": 80}))
    facts, calls = await ainvoke_structured(high, Facts, PROMPT, purpose="facts")
    assert facts.confidence == 10 and len(calls) == 1
    low = script(tool_reply("Facts", {"items": ["a"], "confidence": -3}))
    facts, _ = await ainvoke_structured(low, Facts, PROMPT, purpose="facts")
    assert facts.confidence == 0
    # A value that is no number is not made one.
    bad = script(
        tool_reply("Facts", {"items": [], "confidence": "lots"}),
        tool_reply("Facts", {"items": [], "confidence": "lots"}),
    )
    with pytest.raises(StructuredOutputError):
        await ainvoke_structured(bad, Facts, PROMPT, purpose="facts")


async def test_cuts_nested_objects(script: Any) -> None:
    args = {
        "facts": [
            {"subject": "x" * 25, "value": "ok"},
            {"subject": "b", "value": "c"},
            {"subject": "dropped", "value": "dropped"},
        ]
    }
    result, _ = await ainvoke_structured(
        script(tool_reply("Nested", args)), Nested, PROMPT, purpose="facts"
    )
    assert result.facts == [Fact(subject="x" * 20, value="ok"), Fact(subject="b", value="c")]


async def test_drops_a_trailing_item_cut_off_by_the_token_limit(script: Any) -> None:
    # Closed at its last complete value, a cut reply can end in an item missing a field.
    cut = '{"facts": [{"subject": "diet", "value": "vegan"}, {"subject": "pet", "va'
    model = script(broken_tool_reply("Nested", cut))
    result, calls = await ainvoke_structured(model, Nested, PROMPT, purpose="facts")
    assert result.facts == [Fact(subject="diet", value="vegan")]
    assert len(calls) == 1


async def test_a_middle_item_missing_a_field_is_not_dropped(script: Any) -> None:
    incomplete = {"facts": [{"subject": "diet"}, {"subject": "pet", "value": "cat"}]}
    model = script(tool_reply("Nested", incomplete), tool_reply("Nested", incomplete))
    with pytest.raises(StructuredOutputError, match="value"):
        await ainvoke_structured(model, Nested, PROMPT, purpose="facts")


async def test_unwraps_a_wrapper_key(script: Any) -> None:
    model = script(tool_reply("Fact", {"Fact": {"subject": "a", "value": "b"}}))
    fact, _ = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact == Fact(subject="a", value="b")


async def test_model_without_tools_gets_a_json_instruction(script: Any) -> None:
    model = script(AIMessage(content='{"subject": "a", "value": "b"}'), text_only=True)
    fact, calls = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert fact == Fact(subject="a", value="b")
    assert len(calls) == 1
    instruction = model.prompts[0][-1]
    assert isinstance(instruction, SystemMessage)
    assert '"maxLength": 20' in str(instruction.content)


# --- structured: retry, then error -------------------------------------------------------


async def test_wrong_types_get_one_retry_with_the_errors(script: Any) -> None:
    model = script(
        tool_reply("Facts", {"items": ["a"], "confidence": "very"}, usage=(40, 8)),
        tool_reply("Facts", {"items": ["a"], "confidence": 9}, usage=(60, 6)),
    )
    facts, calls = await ainvoke_structured(model, Facts, PROMPT, purpose="facts")
    assert facts.confidence == 9
    assert [(c.input_tokens, c.output_tokens) for c in calls] == [(40, 8), (60, 6)]
    retry_prompt = model.prompts[1]
    assert retry_prompt[: len(PROMPT)] == PROMPT
    feedback = str(retry_prompt[-1].content)
    assert "confidence" in feedback
    assert "very" in feedback  # the bad reply is quoted back


async def test_missing_field_is_not_invented(script: Any) -> None:
    model = script(
        tool_reply("Fact", {"subject": "user"}),
        tool_reply("Fact", {"value": "Lisbon"}),
    )
    with pytest.raises(StructuredOutputError) as info:
        await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert "subject" in str(info.value)
    assert "facts" in str(info.value)
    assert len(info.value.calls) == 2
    assert all(c.purpose == "facts" for c in info.value.calls)


async def test_no_json_at_all_fails_after_retry(script: Any) -> None:
    model = script(AIMessage(content="I cannot."), AIMessage(content="Still no."))
    with pytest.raises(StructuredOutputError, match="no JSON object"):
        await ainvoke_structured(model, Fact, PROMPT, purpose="reflection")
    assert len(model.prompts) == 2


async def test_unbounded_schema_is_refused_before_any_call(script: Any) -> None:
    model = script(tool_reply("Unbounded", {"text": "x"}))
    with pytest.raises(ValueError, match=r"Unbounded.*text"):
        await ainvoke_structured(model, Unbounded, PROMPT, purpose="facts")
    assert model.prompts == []


async def test_schema_must_be_a_pydantic_model(script: Any) -> None:
    with pytest.raises(TypeError, match="BaseModel"):
        await ainvoke_structured(script(), dict, PROMPT, purpose="facts")  # type: ignore[type-var]


async def test_works_with_the_shared_scripted_fake() -> None:
    model = ScriptedChatModel(
        structured={
            "Fact": ['{"subject": "ab", "value": "cd"', {"subject": "x" * 99, "value": "y"}]
        }
    )
    first, calls_1 = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    second, calls_2 = await ainvoke_structured(model, Fact, PROMPT, purpose="facts")
    assert first == Fact(subject="ab", value="cd")
    assert second == Fact(subject="x" * 20, value="y")
    assert len(calls_1) == len(calls_2) == 1
    assert calls_1[0].estimated is False


# --- cost records -------------------------------------------------------------------------


def test_model_call_round_trips_through_json() -> None:
    call = ModelCall("answer", "openai:gpt-4o-mini", 120, 30, 1.25, estimated=True)
    data = json.loads(json.dumps(call.to_dict()))
    assert ModelCall.from_dict(data) == call
    assert call.total_tokens == 150


def test_model_call_from_bad_dict() -> None:
    with pytest.raises(ValueError, match="model call"):
        ModelCall.from_dict({"purpose": "answer"})
    with pytest.raises(ValueError, match="model call"):
        ModelCall.from_dict(
            {"purpose": "a", "model": "m", "input_tokens": "x", "output_tokens": 1, "seconds": 0}
        )


def test_summarize_calls_sums_by_purpose() -> None:
    calls = [
        ModelCall("answer", "m", 100, 20, 1.0),
        ModelCall("facts", "m", 50, 10, 0.5, estimated=True),
        ModelCall("answer", "m", 110, 25, 1.5).to_dict(),
    ]
    total = summarize_calls(calls)
    assert total["calls"] == 3
    assert (total["input_tokens"], total["output_tokens"], total["total_tokens"]) == (260, 55, 315)
    assert total["seconds"] == pytest.approx(3.0)
    assert total["estimated"] is True
    answer = total["by_purpose"]["answer"]
    assert (answer["calls"], answer["input_tokens"], answer["output_tokens"]) == (2, 210, 45)
    assert answer["estimated"] is False
    assert total["by_purpose"]["facts"]["estimated"] is True


def test_summarize_no_calls() -> None:
    total = summarize_calls([])
    assert total["calls"] == 0 and total["by_purpose"] == {} and total["estimated"] is False

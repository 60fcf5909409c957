from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field

from tests.fakes import ScriptedChatModel, ScriptExhaustedError


class Pet(BaseModel):
    """A pet."""

    name: str = Field(max_length=20)


async def test_text_replies_in_order_then_default_and_prompts_recorded() -> None:
    model = ScriptedChatModel(text_replies=["one", lambda msgs: f"echo {msgs[-1].content}"])
    assert (await model.ainvoke([HumanMessage("a")])).content == "one"
    assert (await model.ainvoke([HumanMessage("b")])).content == "echo b"
    assert (await model.ainvoke([HumanMessage("c")])).content == "OK."
    assert [c.text for c in model.calls_for(None)] == ["a", "b", "c"]
    other = ScriptedChatModel(default_text=None)
    assert other.calls == []  # lists are per instance
    with pytest.raises(ScriptExhaustedError):
        await other.ainvoke([HumanMessage("x")])


async def test_structured_output_and_bound_tools() -> None:
    model = ScriptedChatModel(structured={"Pet": [{"name": "Rex"}, "{broken"]})
    runnable = model.with_structured_output(Pet, method="function_calling", include_raw=True)
    first = await runnable.ainvoke([HumanMessage("name a dog")])
    assert first["parsed"] == Pet(name="Rex")
    second = await runnable.ainvoke([HumanMessage("again")])
    assert second["parsed"] is None and second["raw"].invalid_tool_calls
    with pytest.raises(ScriptExhaustedError, match="Pet"):
        await runnable.ainvoke([HumanMessage("third")])
    bound = model.bind_tools([Pet], tool_choice="Pet")
    model.structured["Pet"] = [{"name": "Tom"}]
    message = await bound.ainvoke([HumanMessage("cat")])
    assert message.tool_calls[0]["args"] == {"name": "Tom"}
    assert [c.kind for c in model.calls] == ["structured"] * 4

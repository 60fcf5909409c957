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
    ``local``: the offline model bundled with the ``[local]`` extra (SmolLM2-135M-Instruct;
    ``AMEM_LOCAL_MODEL`` names another bundled one, ``AMEM_LOCAL_MODEL_PATH`` any GGUF file).

Every model also has a **class** (:func:`model_class`): ``bundled`` (the offline model),
``small`` (an endpoint serving a small model: by default one at a loopback or private
address) or ``capable`` (OpenAI, any other endpoint). The class, never the model's name,
chooses the prompt profile and the safety nets its output needs; ``AMEM_MODEL_CLASS``
says what an endpoint is when the address says wrong.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import ipaddress
import logging
import os
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast, get_args

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableBinding
from langchain_openai import ChatOpenAI
from openai import APIConnectionError
from pydantic import PrivateAttr, SecretStr

# The server is reached through its module, so a test that replaces it is seen here.
from agentic_memory.models import local_server
from agentic_memory.models.local_server import (
    DEFAULT_LOCAL_MODEL,
    SMOLLM2,
    bundled_model,
    local_setup,
)
from agentic_memory.models.local_server import (
    ModelNotConfiguredError as ModelNotConfiguredError,  # raised here, caught by callers
)

logger = logging.getLogger(__name__)

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"

ModelClass = Literal["bundled", "small", "capable"]
"""What a model is, for the prompt and the checks its output needs (never its name)."""
MODEL_CLASSES: tuple[str, ...] = get_args(ModelClass)
MODEL_CLASS_ENV = "AMEM_MODEL_CLASS"
"""Operator setting: the class of the endpoint at ``AMEM_BASE_URL`` (``small`` or ``capable``)."""
GRAMMAR_BOUND_ENV = "AMEM_GRAMMAR_MAX_LENGTH"
"""Operator setting: the longest string bound sent to the endpoint at ``AMEM_BASE_URL``
(``auto``, the default: 500 when the endpoint is a llama.cpp server, none otherwise; a
number; ``off``)."""


# An address that is never contacted: the local model's real URL is set once its server runs.
_UNSTARTED_URL = "http://127.0.0.1:9/v1"
# Compatible servers usually ignore the key but the OpenAI client refuses to run without one.
_PLACEHOLDER_KEY = "not-needed"
# A small model on 2 shared cores may need minutes for a long answer; OpenAI needs far less.
_LOCAL_TIMEOUT_S = 600.0
# How long a failed request waits for the server's exit to show: the kernel closes the
# server's sockets as it dies, so the connection error can arrive just before the exit.
_DEATH_GRACE_S = 1.0
LOCAL_GRAMMAR_MAX_LENGTH = 500
"""The longest string a llama.cpp server is asked to constrain (JSON schema ``maxLength``).

llama-cpp-python turns ``maxLength: n`` into n nested grammar rules, and llama.cpp refuses
a grammar past about a thousand of them ("number of rules ... exceeds sane defaults"),
after which the server dies with SIGSEGV (measured here: 1000 compiles, 1100 crashes). A
longer bound is sent as this one; the reply is still validated against the real bound."""
REPEAT_PENALTY = 1.2
"""llama.cpp's repeat penalty for the offline model's free text: at temperature 0 without
it, SmolLM2 loops on one sentence until its token limit (measured)."""


def local_model_available() -> bool:
    """Tell whether the ``[local]`` extra is installed, without importing it.

    Returns:
        True when ``llama_cpp`` is importable and either ``AMEM_LOCAL_MODEL_PATH`` names a
        file or the chosen bundled model's package is installed.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        return False
    custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
    if custom:
        return Path(custom).is_file()
    try:
        model = bundled_model()
    except ModelNotConfiguredError:
        return False
    return importlib.util.find_spec(model.package) is not None


class LocalChatOpenAI(ChatOpenAI):
    """A ChatOpenAI bound to the process-wide local llama.cpp server, started on first call.

    The server is started (or restarted, if it was stopped) before every request needs it;
    when its address changes the OpenAI clients are rebuilt for the new address.
    """

    local_label: str = DEFAULT_LOCAL_MODEL
    system_role: bool = True
    """Whether the served chat format keeps system messages (else they are folded in)."""
    local_stop: tuple[str, ...] = SMOLLM2.stop
    _server_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _ensure_server(self) -> None:
        with self._server_lock:
            server = local_server.get_local_server()
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
        lost = exc is None or isinstance(exc, APIConnectionError)
        return local_server.get_local_server().died(wait=_DEATH_GRACE_S if lost else 0.0)

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Shape the request for llama.cpp's server and the served chat format.

        System messages are merged into the user turns when the format drops them
        (``gemma``), string bounds are capped to what llama.cpp's grammar compiles, the
        format's turn markers are stop sequences, and free text gets the repeat penalty.
        """
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if not self.system_role:
            payload["messages"] = merge_system_messages(payload.get("messages", []))
        if payload.get("tools"):
            payload["tools"] = [_grammar_safe_tool(t) for t in payload["tools"]]
        else:
            payload["extra_body"] = {
                "repeat_penalty": REPEAT_PENALTY,
                **(payload.get("extra_body") or {}),
            }
        stops = payload.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        payload["stop"] = stops + [s for s in self.local_stop if s not in stops]
        return payload

    def _again(self, exc: BaseException | None, died: Exception | None, last: bool) -> None:
        """Return when the request can be sent again on a new server, else raise.

        ``exc`` is raised as it was when the server did not die; on the last attempt (or once
        output reached the caller) the death is raised instead.
        """
        if died is None:
            if exc is not None:
                raise exc
            return
        if last:
            raise died from exc
        logger.warning("%s; retrying the request once on a new server", died)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        for attempt in (1, 2):
            self._ensure_server()
            try:
                return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            except Exception as exc:
                self._again(exc, self._server_death(exc), attempt == 2)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        for attempt in (1, 2):
            # Starting the server blocks for up to its readiness timeout: keep the loop free.
            await asyncio.to_thread(self._ensure_server)
            try:
                return await super()._agenerate(
                    messages, stop=stop, run_manager=run_manager, **kwargs
                )
            except Exception as exc:
                self._again(exc, await asyncio.to_thread(self._server_death, exc), attempt == 2)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        for attempt in (1, 2):
            self._ensure_server()
            finished = sent = False
            try:
                for chunk in super()._stream(
                    messages, stop=stop, run_manager=run_manager, **kwargs
                ):
                    finished = finished or _finished(chunk)
                    sent = True
                    yield chunk
            except Exception as exc:
                self._again(exc, self._server_death(exc), sent or attempt == 2)
                continue
            # A stream that ends without a finish reason may be a server that died mid-way.
            died = None if finished else self._server_death(None)
            if died is None:
                return
            self._again(None, died, sent or attempt == 2)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for attempt in (1, 2):
            await asyncio.to_thread(self._ensure_server)
            finished = sent = False
            try:
                async for chunk in super()._astream(
                    messages, stop=stop, run_manager=run_manager, **kwargs
                ):
                    finished = finished or _finished(chunk)
                    sent = True
                    yield chunk
            except Exception as exc:
                died = await asyncio.to_thread(self._server_death, exc)
                self._again(exc, died, sent or attempt == 2)
                continue
            died = None if finished else await asyncio.to_thread(self._server_death, None)
            if died is None:
                return
            self._again(None, died, sent or attempt == 2)


def merge_system_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Fold system messages into user turns, for chat formats without a system role.

    Gemma's own chat template puts a leading system message in front of the first user
    turn, separated by a blank line; llama-cpp-python's ``gemma`` format instead drops every
    system message. This does what the template does, for every system message: each run of
    system messages is put in front of the next user message (a blank line between), or
    becomes a user message of its own when no user message follows it. Consecutive user
    messages are then joined, because the format expects user and model turns to alternate.

    Args:
        messages: OpenAI chat messages (``role``, ``content``, ...).

    Returns:
        New messages without a ``system`` or ``developer`` role; the input is not changed.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = _content_text(message.get("content"))
            if text.strip():
                pending.append(text)
            continue
        item = dict(message)
        if role == "user":
            if pending:
                item["content"] = _prepend(pending, item.get("content"))
                pending = []
            if out and out[-1].get("role") == "user":
                previous = out.pop()
                item["content"] = _prepend(
                    [_content_text(previous.get("content"))], item["content"]
                )
        elif pending:
            out.append({"role": "user", "content": "\n\n".join(pending)})
            pending = []
        out.append(item)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _prepend(texts: list[str], content: Any) -> Any:
    prefix = "\n\n".join(texts)
    if isinstance(content, list):
        return [{"type": "text", "text": prefix + "\n\n"}, *content]
    body = content if isinstance(content, str) else ""
    return f"{prefix}\n\n{body}" if body else prefix


def grammar_safe_schema(schema: Any, max_length: int = LOCAL_GRAMMAR_MAX_LENGTH) -> Any:
    """Return a copy of a JSON schema whose string bounds llama.cpp's grammar can compile.

    Args:
        schema: A JSON schema (dicts and lists).
        max_length: The largest ``maxLength`` kept; larger ones are lowered to it.

    Returns:
        The copy; the input is not changed.
    """
    copied = copy.deepcopy(schema)

    def cap(node: Any) -> None:
        if isinstance(node, dict):
            bound = node.get("maxLength")
            if isinstance(bound, int) and bound > max_length:
                node["maxLength"] = max_length
                low = node.get("minLength")
                if isinstance(low, int) and low > max_length:
                    node["minLength"] = max_length
            for value in node.values():
                cap(value)
        elif isinstance(node, list):
            for value in node:
                cap(value)

    cap(copied)
    return copied


def _grammar_safe_tool(tool: Any, max_length: int = LOCAL_GRAMMAR_MAX_LENGTH) -> Any:
    if not isinstance(tool, Mapping) or not isinstance(tool.get("function"), Mapping):
        return tool
    function = dict(tool["function"])
    if "parameters" in function:
        function["parameters"] = grammar_safe_schema(function["parameters"], max_length)
    return {**tool, "function": function}


def limit_answer_tokens(model: BaseChatModel, max_tokens: int | None) -> BaseChatModel:
    """Return the model with a smaller answer-length limit, or the model itself.

    Both fields every server reads are lowered (``max_completion_tokens``, and ``max_tokens``
    in the body for compatible and local servers); a limit above the model's own is ignored.

    Args:
        model: A chat model; models that are not ``ChatOpenAI`` are returned unchanged.
        max_tokens: The limit, or None for the model's own.

    Raises:
        ValueError: ``max_tokens`` is not a positive integer.
    """
    if max_tokens is None:
        return model
    _check_limits(max_tokens, 0.0)
    if not isinstance(model, ChatOpenAI):
        return model
    current = model.max_tokens
    if current is not None and current <= max_tokens:
        return model
    update: dict[str, Any] = {"max_tokens": max_tokens}
    if model.extra_body and "max_tokens" in model.extra_body:
        update["extra_body"] = {**model.extra_body, "max_tokens": max_tokens}
    return model.model_copy(update=update)


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
        metadata={"amem_model": f"openai:{model}", "amem_class": "capable"},
    )


def endpoint_class(base_url: str) -> ModelClass:
    """Return the class of the endpoint at ``base_url``: ``AMEM_MODEL_CLASS``, else by address.

    An endpoint at a loopback, private or link-local address (or ``localhost``, a ``.local``
    name) is taken for a small model on the user's own machine; any other for a capable one.

    Raises:
        ModelNotConfiguredError: ``AMEM_MODEL_CLASS`` is set to something else than
            ``small`` or ``capable``.
    """
    given = os.environ.get(MODEL_CLASS_ENV, "").strip().lower()
    if given:
        if given not in ("small", "capable"):
            raise ModelNotConfiguredError(
                f"{MODEL_CLASS_ENV}={given!r}: say 'small' (a small model: the compact prompt "
                "and every check of its output) or 'capable'."
            )
        return cast(ModelClass, given)
    host = (urllib.parse.urlsplit(base_url).hostname or "").lower()
    if host == "localhost" or host.endswith((".local", ".localhost")):
        return "small"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "capable"
    return (
        "small" if address.is_loopback or address.is_private or address.is_link_local else "capable"
    )


def grammar_bound_setting() -> int | None | Literal["auto"]:
    """Read ``AMEM_GRAMMAR_MAX_LENGTH``: "auto", a bound, or None (``off``: no bound).

    Raises:
        ModelNotConfiguredError: the value is none of these.
    """
    raw = os.environ.get(GRAMMAR_BOUND_ENV, "").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw in ("off", "none", "0"):
        return None
    if raw.isdigit():
        return int(raw)
    raise ModelNotConfiguredError(
        f"{GRAMMAR_BOUND_ENV}={raw!r}: say 'auto', 'off' or the longest string bound (e.g. 500)."
    )


_LLAMA_CPP_OWNERS = frozenset({"me", "llamacpp"})
"""``owned_by`` of the models llama-cpp-python's server ("me") and llama.cpp's own
``llama-server`` ("llamacpp") list at ``/v1/models``."""
_DETECTED: dict[str, bool] = {}
_DETECT_LOCK = threading.Lock()


def _is_llama_cpp(listing: Any) -> bool:
    data = listing.get("data") if isinstance(listing, Mapping) else None
    if not isinstance(data, list):
        return False
    return any(
        isinstance(m, Mapping) and (m.get("owned_by") in _LLAMA_CPP_OWNERS or "meta" in m)
        for m in data
    )


class EndpointChatOpenAI(ChatOpenAI):
    """A ChatOpenAI for an OpenAI-compatible endpoint that may compile grammars.

    llama.cpp's servers (llama-cpp-python's and ``llama-server``) turn a tool's JSON schema
    into a grammar and die on a long string bound (see ``LOCAL_GRAMMAR_MAX_LENGTH``). Before
    its first structured request the endpoint's ``/models`` listing says whether it is one;
    its string bounds are then capped (``AMEM_GRAMMAR_MAX_LENGTH`` sets the bound or turns
    detection off).
    """

    grammar_bound: int | None | Literal["auto"] = "auto"

    def _bound(self) -> int | None:
        if self.grammar_bound != "auto":
            return self.grammar_bound
        detected = _DETECTED.get(str(self.openai_api_base))
        return LOCAL_GRAMMAR_MAX_LENGTH if detected else None

    def _listing_url(self) -> str:
        return f"{str(self.openai_api_base).rstrip('/')}/models"

    def _headers(self) -> dict[str, str]:
        secret = self.openai_api_key
        key = secret.get_secret_value() if isinstance(secret, SecretStr) else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _undetected(self) -> bool:
        return self.grammar_bound == "auto" and str(self.openai_api_base) not in _DETECTED

    def _record(self, response: Any) -> None:
        try:
            found = response.status_code == 200 and _is_llama_cpp(response.json())
        except ValueError:
            return  # asked again next time: the endpoint may not be up yet
        with _DETECT_LOCK:
            _DETECTED[str(self.openai_api_base)] = found

    def _detect(self) -> None:
        import httpx  # noqa: PLC0415  (only endpoints that answer structured calls need it)

        try:
            response = httpx.get(self._listing_url(), headers=self._headers(), timeout=5.0)
        except httpx.HTTPError:
            return
        self._record(response)

    async def _adetect(self) -> None:
        import httpx  # noqa: PLC0415  (only endpoints that answer structured calls need it)

        try:
            async with httpx.AsyncClient(timeout=5.0) as client:
                response = await client.get(self._listing_url(), headers=self._headers())
        except httpx.HTTPError:
            return
        self._record(response)

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Cap the tools' string bounds when the endpoint compiles grammars."""
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        bound = self._bound()
        if payload.get("tools") and bound is not None:
            payload["tools"] = [_grammar_safe_tool(t, bound) for t in payload["tools"]]
        return payload

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tools") and self._undetected():
            self._detect()
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if kwargs.get("tools") and self._undetected():
            await self._adetect()
        return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _build_compatible(model: str, max_tokens: int, temperature: float) -> ChatOpenAI:
    base_url = os.environ.get("AMEM_BASE_URL")
    if not base_url:
        raise ModelNotConfiguredError(f"The spec 'compatible:{model}' needs AMEM_BASE_URL.")
    return EndpointChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=os.environ.get("AMEM_API_KEY") or _PLACEHOLDER_KEY,  # type: ignore[arg-type]
        max_completion_tokens=max_tokens,
        # Many compatible servers ignore max_completion_tokens and would generate until the
        # context is full; max_tokens in the body is the field they all read.
        extra_body={"max_tokens": max_tokens},
        temperature=temperature,
        grammar_bound=grammar_bound_setting(),
        metadata={"amem_model": f"compatible:{model}", "amem_class": endpoint_class(base_url)},
    )


def _build_local(max_tokens: int, temperature: float) -> ChatOpenAI:
    if not local_model_available():
        custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
        if custom and importlib.util.find_spec("llama_cpp") is not None:
            reason = f"AMEM_LOCAL_MODEL_PATH={custom!r} is not a file."
        else:
            reason = "The spec 'local' needs the [local] extra, which is not installed."
        raise ModelNotConfiguredError(reason)
    setup = local_setup()
    label = setup.label
    return LocalChatOpenAI(
        model=label,
        local_label=label,
        system_role=setup.system_role,
        local_stop=setup.stop,
        base_url=_UNSTARTED_URL,
        api_key=_PLACEHOLDER_KEY,  # type: ignore[arg-type]
        max_completion_tokens=max_tokens,
        extra_body={"max_tokens": max_tokens},
        temperature=temperature,
        timeout=_LOCAL_TIMEOUT_S,
        max_retries=1,
        metadata={"amem_model": f"local:{label}", "amem_class": "bundled"},
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


def model_class(model: BaseChatModel | RunnableBinding[Any, Any]) -> ModelClass:
    """Return a model's class: ``bundled``, ``small`` or ``capable`` (see the module's doc).

    Models built here carry it (``metadata["amem_class"]``); a model named ``local:...``
    is the bundled one; any other model given by the caller counts as capable.
    """
    inner: Any = model
    while isinstance(inner, RunnableBinding):
        inner = inner.bound
    metadata = getattr(inner, "metadata", None)
    given = metadata.get("amem_class") if isinstance(metadata, dict) else None
    if given in MODEL_CLASSES:
        return cast(ModelClass, given)
    if isinstance(inner, LocalChatOpenAI) or describe_model(inner).startswith("local:"):
        return "bundled"
    return "capable"


def describe_default_model() -> str:
    """Say in one line which chat model the spec ``auto`` will use, without building it."""
    if os.environ.get("OPENAI_API_KEY"):
        name = os.environ.get("AMEM_OPENAI_MODEL") or DEFAULT_OPENAI_MODEL
        return f"Chat model: OpenAI {name} (OPENAI_API_KEY is set)."
    base_url = os.environ.get("AMEM_BASE_URL")
    if base_url:
        name = os.environ.get("AMEM_MODEL_NAME") or "(AMEM_MODEL_NAME is not set: runs will fail)"
        try:
            kind = endpoint_class(base_url)
        except ModelNotConfiguredError as exc:
            return f"Chat model: the endpoint at {base_url}, {name}; {exc}"
        return f"Chat model: {name} at the endpoint {base_url} (AMEM_BASE_URL; a {kind} model)."
    if local_model_available():
        custom = os.environ.get("AMEM_LOCAL_MODEL_PATH")
        if custom:
            what = f"the GGUF file {custom} (AMEM_LOCAL_MODEL_PATH)"
        else:
            what = bundled_model().title
        return (
            f"Chat model: offline, {what}, on a llama.cpp server started at the first call; "
            "set OPENAI_API_KEY or AMEM_BASE_URL for a stronger model."
        )
    try:
        bundled_model()
    except ModelNotConfiguredError as exc:
        return f"Chat model: none: {exc}"
    return (
        "Chat model: none configured: runs will fail until OPENAI_API_KEY, AMEM_BASE_URL or "
        "the [local] extra is there."
    )

"""The models the nodes use: the answering model and the memory model of a run.

(The memory behind ``runtime.store`` is :mod:`agentic_memory.graph.memory`'s.) The models
come through one seam. A run's context names them by spec (``Context.model``,
``Context.memory_model``), resolved once per spec and reused, with an HTTP client of their
own per event loop (see :func:`_for_this_loop`). ``compile_graph(chat_model=...,
memory_model=...)`` binds given objects instead (tests, notebooks), through the compiled
graph's own config: nothing is registered process-wide, so a graph and its models are
freed together.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, cast

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from langgraph.config import get_config

from agentic_memory.graph.context import Context
from agentic_memory.models.chat import LocalChatOpenAI, limit_answer_tokens, resolve_chat_model

__all__ = [
    "MODELS_KEY",
    "BoundModels",
    "answer_model",
    "background_model",
    "run_config",
]

MODELS_KEY = "__amem_models"
"""The ``configurable`` key under which ``compile_graph`` binds given models (the ``__``
prefix keeps it out of checkpoint metadata)."""

# One limit for both roles: the largest bounded memory schema (10 rules of two
# 200-character fields) serialises to ~1000 tokens, and a smaller limit cuts such replies.
_MAX_TOKENS = 1024
# The offline model is a base model: it rarely emits its end-of-turn token, so its answers
# would run to the limit (about 40 s at 25 tokens/s). Its memory calls keep the full limit.
_LOCAL_ANSWER_TOKENS = 256

_RESOLVED: dict[tuple[str, str], BaseChatModel] = {}


@dataclass
class _LoopModels:
    """The models of one event loop, and the async HTTP client they share there."""

    http: dict[str | None, openai.DefaultAsyncHttpxClient] = field(default_factory=dict)
    """By proxy (``None``: none): one connection pool per loop, as one per process before."""
    models: dict[tuple[str, str], tuple[BaseChatModel, BaseChatModel]] = field(default_factory=dict)
    """By role and spec: (the model resolved for the spec, its copy for this loop)."""
    closer: AsyncGenerator[None] | None = None
    """Started on the loop (see :func:`_close_at_shutdown`); kept here, so that only the
    loop's shutdown finalises it."""


_PER_LOOP: dict[asyncio.AbstractEventLoop, _LoopModels] = {}
"""Not weakly keyed: pooled connections refer to their loop, so a weak key would never go.
A loop's entry goes, its clients closed, when the loop shuts down (``asyncio.run`` does);
one closed without that goes when another loop resolves a model."""
_LOCK = threading.Lock()


@dataclass(frozen=True)
class BoundModels:
    """Models bound to a compiled graph; ``None`` means "resolve from the run's context"."""

    answer: BaseChatModel | None = None
    memory: BaseChatModel | None = None


def run_config() -> RunnableConfig:
    """Return the current run's config (empty outside a run)."""
    try:
        return get_config()
    except RuntimeError:
        # Called outside a graph run (a direct call): no thread, default resources.
        return {}


def _bound() -> BoundModels:
    bound = (run_config().get("configurable") or {}).get(MODELS_KEY)
    return bound if isinstance(bound, BoundModels) else BoundModels()


async def answer_model(context: Context) -> BaseChatModel:
    """Return the model that answers the user in this run."""
    return _bound().answer or await _resolved("answer", context.model)


async def background_model(context: Context) -> BaseChatModel:
    """Return the model for facts, summaries, reflections and rules in this run."""
    return _bound().memory or await _resolved("memory", context.memory_model)


async def _resolved(role: str, spec: str) -> BaseChatModel:
    loop = asyncio.get_running_loop()
    base = _RESOLVED.get((role, spec))
    mine = _PER_LOOP.get(loop)
    entry = None if mine is None else mine.models.get((role, spec))
    if base is not None and entry is not None and entry[0] is base:
        return entry[1]
    # Building a client may read certificates: off the event loop.
    model = await asyncio.to_thread(_resolve, role, spec, loop)
    mine = _PER_LOOP.get(loop)
    if mine is not None and mine.closer is None:
        mine.closer = _close_at_shutdown(loop, mine)
        await anext(mine.closer)  # registers it with the loop, whose shutdown closes it
    return model


async def _close_at_shutdown(
    loop: asyncio.AbstractEventLoop, mine: _LoopModels
) -> AsyncGenerator[None]:
    """Wait for the loop's shutdown, then close its HTTP clients and let its models go.

    An event loop has no close hook, but its shutdown (``loop.shutdown_asyncgens()``, which
    ``asyncio.run`` and ``asyncio.Runner`` call before closing it) finalises, on the loop,
    the async generators that are still open: this one stays open until then.
    """
    try:
        yield
    finally:
        with _LOCK:
            if _PER_LOOP.get(loop) is mine:
                del _PER_LOOP[loop]
        for http in mine.http.values():
            await http.aclose()


def _resolve(role: str, spec: str, loop: asyncio.AbstractEventLoop) -> BaseChatModel:
    with _LOCK:
        model = _RESOLVED.get((role, spec))
        if model is None:
            model = resolve_chat_model(spec, max_tokens=_MAX_TOKENS)
            if role == "answer" and isinstance(model, LocalChatOpenAI):
                model = limit_answer_tokens(model, _LOCAL_ANSWER_TOKENS)
            _RESOLVED[(role, spec)] = model
        for closed in [other for other in _PER_LOOP if other.is_closed()]:
            del _PER_LOOP[closed]
        mine = _PER_LOOP.setdefault(loop, _LoopModels())
        entry = mine.models.get((role, spec))
        if entry is None or entry[0] is not model:
            entry = mine.models[(role, spec)] = (model, _for_this_loop(model, mine))
        return entry[1]


def _for_this_loop(model: BaseChatModel, mine: _LoopModels) -> BaseChatModel:
    """Return a copy of an OpenAI-client model whose async calls use this loop's HTTP client.

    An async HTTP client pools its connections on the event loop that opened them, and
    ``langchain_openai`` shares one such client among all its models: a graph run on a second
    loop (a thread pool, each ``asyncio.run``) would reuse a connection of the first and fail
    ("Event loop is closed", "bound to a different event loop"). Each loop gets its client,
    shared by its models, closed and let go when the loop shuts down; the sync client
    (thread-safe) stays shared by all.
    """
    if not isinstance(model, ChatOpenAI):
        return model
    proxy = model.openai_proxy
    http = mine.http.get(proxy)
    if http is None:
        http = mine.http[proxy] = openai.DefaultAsyncHttpxClient(proxy=proxy)
    copy = model.model_copy(
        update={
            "http_async_client": http,
            "openai_proxy": None,  # carried by the client above
            "async_client": None,
            "root_async_client": None,
        }
    )
    cast(Any, copy).validate_environment()  # builds the async client on ``http``
    return copy

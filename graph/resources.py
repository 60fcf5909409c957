"""What the nodes work with but a run cannot carry: the store, embeddings and models.

The LangGraph context must stay JSON (Studio edits it), so live objects are looked up
here. :func:`graph.graph.compile_graph` registers a :class:`Resources` object and binds
its token into the graph's config (``configurable.__amem_resources``). The served graph has
no token: it uses a process-wide default opened lazily from the environment on first
use (``AMEM_STORE``/``AMEM_HOME``, ``AMEM_EMBEDDINGS``), with models resolved from the
run's context (``model``, ``memory_model``) and cached per spec.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig

from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.models.chat import resolve_chat_model
from agentic_memory.models.embeddings import embedding_dims, get_embeddings
from agentic_memory.store import MemoryStore, open_store
from graph.context import Context

__all__ = [
    "RESOURCES_KEY",
    "Resources",
    "aget_resources",
    "close_default_resources",
    "get_resources",
    "register",
    "unregister",
]

# A "__" prefix keeps the token out of checkpoint metadata (langgraph skips such keys).
RESOURCES_KEY = "__amem_resources"
"""The ``configurable`` key that names a registered :class:`Resources` object."""

_REGISTRY: dict[str, Resources] = {}
_DEFAULT: Resources | None = None
_MODELS: dict[tuple[str, str], BaseChatModel] = {}
_LOCK = threading.Lock()


@dataclass
class Resources:
    """Live objects the nodes use.

    ``answer_model`` / ``memory_model`` set to ``None`` mean "resolve from the run's
    context" (``Context.model`` / ``Context.memory_model``).
    """

    memory_store: MemoryStore
    embeddings: Embeddings
    answer_model: BaseChatModel | None = None
    memory_model: BaseChatModel | None = None

    def __post_init__(self) -> None:
        dims = embedding_dims(self.embeddings)
        if dims != self.memory_store.dims:
            raise ValueError(
                f"the embeddings make {dims}-d vectors but the store holds "
                f"{self.memory_store.dims}-d vectors: open the store with dims={dims}"
            )

    @cached_property
    def episodes(self) -> EpisodicMemory:
        """Episodic memory on this store."""
        return EpisodicMemory(self.memory_store, self.embeddings)

    @cached_property
    def facts(self) -> FactStore:
        """User facts on this store."""
        return FactStore(self.memory_store, self.embeddings)

    @cached_property
    def rules(self) -> RuleBook:
        """Procedural rules on this store."""
        return RuleBook(self.memory_store, self.embeddings)

    @cached_property
    def messages(self) -> MessageLog:
        """The message log on this store."""
        return MessageLog(self.memory_store, self.embeddings)

    async def achat_model(self, context: Context) -> BaseChatModel:
        """Return the model that answers the user in this run.

        Building a client may read certificates, so a first resolution runs in a worker
        thread.
        """
        if self.answer_model is not None:
            return self.answer_model
        return await _aresolved("answer", context.model)

    async def abackground_model(self, context: Context) -> BaseChatModel:
        """Return the model for facts, summaries, reflections and rules in this run."""
        if self.memory_model is not None:
            return self.memory_model
        return await _aresolved("memory", context.memory_model)


def register(resources: Resources) -> str:
    """Register resources for graphs to use; return the token to put in the config."""
    if not isinstance(resources, Resources):
        raise TypeError(f"expected Resources, got {type(resources).__name__}")
    token = uuid.uuid4().hex
    with _LOCK:
        _REGISTRY[token] = resources
    return token


def unregister(token: str) -> None:
    """Forget registered resources (the caller still owns and closes the store)."""
    with _LOCK:
        _REGISTRY.pop(token, None)


def get_resources(config: RunnableConfig | None, context: Context | None = None) -> Resources:
    """Return the resources of a run: the registered ones it names, else the default.

    Blocking on first use (the default store and embeddings are opened); async code
    calls :func:`aget_resources`.

    Raises:
        LookupError: the config names resources that are not registered in this process.
    """
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    token = configurable.get(RESOURCES_KEY)
    if token is not None:
        found = _REGISTRY.get(str(token))
        if found is None:
            raise LookupError(
                f"resources {token!r} are not registered in this process: build the graph "
                "with compile_graph() in the process that runs it"
            )
        return found
    return _default_resources()


async def aget_resources(
    config: RunnableConfig | None, context: Context | None = None
) -> Resources:
    """Async :func:`get_resources`: opening the default store runs in a worker thread."""
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    if configurable.get(RESOURCES_KEY) is not None or _DEFAULT is not None:
        return get_resources(config, context)
    return await asyncio.to_thread(get_resources, config, context)


def close_default_resources() -> None:
    """Close the process-wide default store (it reopens on next use) and forget models."""
    global _DEFAULT
    with _LOCK:
        if _DEFAULT is not None:
            _DEFAULT.memory_store.close()
        _DEFAULT = None
        _MODELS.clear()


def _default_resources() -> Resources:
    global _DEFAULT
    if _DEFAULT is None:
        with _LOCK:
            if _DEFAULT is None:
                embeddings = get_embeddings()
                store = open_store(embedding_dims(embeddings))
                _DEFAULT = Resources(memory_store=store, embeddings=embeddings)
    return _DEFAULT


async def _aresolved(role: str, spec: str) -> BaseChatModel:
    model = _MODELS.get((role, spec))
    if model is not None:
        return model
    return await asyncio.to_thread(_resolved, role, spec)


def _resolved(role: str, spec: str) -> BaseChatModel:
    key = (role, spec)
    model = _MODELS.get(key)
    if model is None:
        with _LOCK:
            model = _MODELS.get(key)
            if model is None:
                # One limit for both roles: the largest bounded memory schema (10 rules of
                # two 200-character fields) serialises to ~1000 tokens, and a smaller limit
                # cuts such replies short.
                model = resolve_chat_model(spec, max_tokens=1024)
                _MODELS[key] = model
    return model

"""Memory tools for any LangGraph agent: search and save through the graph's store.

The tools use the store of the run they are called in (``langgraph.config.get_store``), so
they work with any LangGraph ``BaseStore``; with :class:`~agentic_memory.langgraph_store.
AgenticStore` their search is agentic memory's hybrid search, and its memory-kind
namespaces (``("facts", user)``, ``("episodes", user)``, ...) are searchable as well::

    from langgraph.prebuilt import create_react_agent
    from agentic_memory.langgraph_store import AgenticStore
    from agentic_memory.tools import memory_tools

    store = AgenticStore.from_env()
    agent = create_react_agent(model, memory_tools(), store=store)
    agent.invoke({"messages": [...]}, {"configurable": {"user_id": "alice"}})

A namespace template's ``{user_id}`` is filled from the run: ``configurable.user_id``, else
the context's ``user_id``, else the server-authenticated user; a run without one is refused
(a tool never guesses whose memory it touches).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config, get_store
from langgraph.runtime import get_runtime

__all__ = ["memory_tools", "resolve_namespace"]

DEFAULT_NAMESPACE = ("memories", "{user_id}")
"""Where ``save_memory`` writes and ``search_memory`` looks by default (as LangMem does)."""


def _run_user(config: RunnableConfig) -> str:
    configurable = config.get("configurable") or {}
    for key in ("user_id", "langgraph_auth_user_id"):
        value = configurable.get(key)
        if isinstance(value, str) and value.strip():
            return value
    try:
        context = get_runtime().context
    except RuntimeError:
        context = None  # called outside a run
    value = getattr(context, "user_id", None)
    if value is None and isinstance(context, dict):
        value = context.get("user_id")
    if isinstance(value, str) and value.strip():
        return value
    raise ValueError(
        "the memory tools need the run's user: pass configurable.user_id (or a context with "
        "user_id); they never guess whose memory to use"
    )


def resolve_namespace(template: Sequence[str], config: RunnableConfig) -> tuple[str, ...]:
    """Fill ``{user_id}`` in a namespace template from the run."""
    if not any("{user_id}" in part for part in template):
        return tuple(template)
    user = _run_user(config)
    return tuple(part.replace("{user_id}", user) for part in template)


def memory_tools(
    namespace: Sequence[str] = DEFAULT_NAMESPACE,
    *,
    search_namespaces: Sequence[Sequence[str]] = (("facts", "{user_id}"),),
    limit: int = 5,
) -> list[BaseTool]:
    """Return ``search_memory`` and ``save_memory`` tools bound to namespace templates.

    Args:
        namespace: Where memories are saved (and searched first).
        search_namespaces: More namespaces ``search_memory`` also searches, e.g. the
            agent's facts about the user.
        limit: How many results per namespace a search returns.
    """
    save_to = tuple(namespace)
    search_in = [save_to, *(tuple(ns) for ns in search_namespaces)]

    async def search_memory(query: str) -> list[dict[str, Any]]:
        """Search what is remembered about the user; returns the best matches."""
        config = get_config()
        store = get_store()
        found: list[dict[str, Any]] = []
        for template in search_in:
            ns = resolve_namespace(template, config)
            for item in await store.asearch(ns, query=query, limit=limit):
                found.append(
                    {
                        "namespace": list(ns),
                        "key": item.key,
                        "value": item.value,
                        "score": item.score,
                    }
                )
        found.sort(key=lambda hit: -(hit["score"] or 0.0))
        return found

    async def save_memory(content: str) -> str:
        """Save a short note about the user for later conversations; returns its key."""
        if not isinstance(content, str) or not content.strip():
            raise ValueError("content must be non-empty text")
        ns = resolve_namespace(save_to, get_config())
        key = uuid.uuid4().hex
        await get_store().aput(ns, key, {"content": content.strip()})
        return key

    return [
        StructuredTool.from_function(coroutine=search_memory, name="search_memory"),
        StructuredTool.from_function(coroutine=save_memory, name="save_memory"),
    ]

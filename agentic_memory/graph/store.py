"""The long-term store of ``langgraph dev`` / LangGraph Platform: the agent's memory.

``langgraph.json`` names it (``"store": {"path": "agentic_memory.graph.store.store"}``). The server
enters :func:`store` once at start-up and leaves it at shutdown; the same
:class:`~agentic_memory.langgraph_store.AgenticStore` is ``runtime.store`` in graph runs and
answers ``/store/*`` (``client.store.*`` in the SDK, Studio's memory view), so both show
and edit the facts, episodes, rules, messages and knowledge the agent works with.

It opens the configured memory store and embeddings (``docs/storage.md``). A ``"ttl"`` next
to ``"path"`` in ``langgraph.json`` applies to items of other namespaces; the server skips its
own sweeper for custom stores, so this one sweeps itself. It acts for operators (the shared
rules, :mod:`agentic_memory.operators`) only when the server can tell them apart: see
:func:`server_operator`; otherwise operators use ``amem memories rules`` where the store lives.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from langgraph.config import get_config
from langgraph.store.base import Op, Result, TTLConfig

from agentic_memory.langgraph_store import (
    AgenticStore,
    OperatorRequiredError,
    RuleVersionConflictError,
)
from agentic_memory.operators import EVERYONE, configured_operators
from agentic_memory.store import InvalidInputError

__all__ = [
    "AUTH_ENV",
    "ServedStore",
    "STORE_ENV",
    "SWEEP_MINUTES",
    "server_operator",
    "server_ttl_config",
    "store",
]

SWEEP_MINUTES = 5.0
"""How often expired items are swept when the configuration does not say."""

STORE_ENV = "LANGGRAPH_STORE"
"""Where the server passes ``langgraph.json``'s ``store`` entry (as JSON)."""

AUTH_ENV = "LANGGRAPH_AUTH"
"""Where the server passes ``langgraph.json``'s ``auth`` entry (as JSON) when it has one."""


class ServedStore(AgenticStore):
    """The store a server serves: a refused ``/store`` request answers as an HTTP error.

    The server logs every ``ValueError`` a route raises with its whole traceback (25 lines
    per refused put, for a request it answers 400 anyway). Outside a graph run a refusal is
    raised as its ``HTTPException`` (400, 403 for an operator's right, 409 for a stale rules
    version); in a run it stays what it is (nodes catch ``InvalidInputError``).
    """

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations; a refusal outside a run is an ``HTTPException``."""
        try:
            return await super().abatch(ops)
        except (InvalidInputError, RuleVersionConflictError) as exc:
            if _in_run():
                raise
            from starlette.exceptions import HTTPException  # noqa: PLC0415  (the server's)

            status = 403 if isinstance(exc, OperatorRequiredError) else 400
            if isinstance(exc, RuleVersionConflictError):
                status = 409
            raise HTTPException(status_code=status, detail=str(exc)) from exc


def _in_run() -> bool:
    try:
        get_config()
    except RuntimeError:
        return False
    return True


@asynccontextmanager
async def store() -> AsyncIterator[AgenticStore]:
    """Open the memory store as a LangGraph store, sweeping expired items until closed."""
    ttl = server_ttl_config()
    opened = await asyncio.to_thread(ServedStore.from_env, ttl=ttl, operator=server_operator())
    try:
        # Items put with an explicit ttl expire even without a TTLConfig: sweep them too.
        interval = (ttl or {}).get("sweep_interval_minutes") or SWEEP_MINUTES
        await opened.start_ttl_sweeper(interval)
        yield opened
    finally:
        await opened.aclose()


def server_operator() -> str | None:
    """Return the name the server's store records for operators' decisions, or ``None``.

    ``None`` (no operator's) unless ``AMEM_OPERATORS`` is ``*``, or names identities on a
    server with an authentication (``LANGGRAPH_AUTH``, which lets only them reach the shared
    namespaces; each decision then records the caller's identity instead of this name).
    """
    operators = configured_operators()
    if EVERYONE in operators:
        return f"any caller ({EVERYONE})"
    if not operators or os.environ.get(AUTH_ENV, "").strip() in ("", "null"):
        return None
    return "an operator (AMEM_OPERATORS)"


def server_ttl_config(settings: Mapping[str, Any] | None = None) -> TTLConfig | None:
    """Return the ``ttl`` of ``langgraph.json``'s ``store`` entry, if there is one.

    ``settings`` defaults to the running server's entry, which ``langgraph dev`` and
    LangGraph's images pass in ``LANGGRAPH_STORE`` (JSON).
    """
    if settings is None:
        raw = os.environ.get(STORE_ENV, "").strip()
        if not raw:
            return None
        loaded = json.loads(raw)
        if not isinstance(loaded, dict):
            raise ValueError(f"{STORE_ENV} must be a JSON object, got {raw[:80]!r}")
        settings = loaded
    ttl = settings.get("ttl")
    if not ttl:
        return None
    chosen: TTLConfig = {}
    chosen.update(ttl)
    return chosen

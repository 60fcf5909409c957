"""Authentication for ``langgraph dev`` / LangGraph Platform: each user sees only their own.

An example to adapt, served by ``langgraph dev --config langgraph.auth.json``: it maps bearer
tokens to users from ``AMEM_AUTH_TOKENS`` (``"token1=alice,token2=bob"``, or ``@path`` to a
file of such lines). Replace :func:`authenticate` with your identity provider (JWT, OAuth,
an API gateway header) and keep the rest:

* **threads** are created with ``metadata.owner`` (and ``user_id``) set to the caller, and
  every read, update, delete, search and run on a thread is filtered by that owner, so
  another user's thread answers 404 before any run starts;
* **runs** act for the authenticated user: the graph takes the user from the server's
  authentication when ``context.user_id`` is empty, and refuses a run whose
  ``context.user_id`` names someone else (``graph.nodes.admit``);
* **the store** (``client.store``, Studio's memory view): a namespace's second element is
  the user it belongs to (``("facts", "alice")``, ``("episodes", "alice")``); only the user
  reads or writes it. Namespaces shared by everyone (``("knowledge", kb)``, ``("rules",
  "_global")``) can be read by every user and written by none through the API;
* **assistants** can be read and searched (to find the ``agent`` graph), not changed;
  **crons** are refused.

The server imports this file; nothing here runs at import time beyond building the handlers.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Any

from langgraph_sdk import Auth

__all__ = ["auth", "load_tokens"]

TOKENS_ENV = "AMEM_AUTH_TOKENS"

_SHARED_OWNERS = frozenset({"_global"})

auth = Auth()


def load_tokens(spec: str | None = None) -> dict[str, str]:
    """Parse ``token=user`` pairs (comma- or newline-separated, or ``@file``).

    Args:
        spec: The setting; default ``AMEM_AUTH_TOKENS``.

    Returns:
        Token to user id.

    Raises:
        ValueError: a pair is malformed or a token appears twice.
    """
    raw = os.environ.get(TOKENS_ENV, "") if spec is None else spec
    if raw.startswith("@"):
        raw = Path(raw[1:]).expanduser().read_text()
    tokens: dict[str, str] = {}
    for part in raw.replace("\n", ",").split(","):
        part = part.strip()
        if not part or part.startswith("#"):
            continue
        token, sep, user = part.partition("=")
        token, user = token.strip(), user.strip()
        if not sep or not token or not user:
            raise ValueError(f"{TOKENS_ENV}: expected token=user, got {part[:20]!r}...")
        if token in tokens:
            raise ValueError(f"{TOKENS_ENV}: a token appears twice")
        tokens[token] = user
    return tokens


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """Map ``Authorization: Bearer <token>`` to a user; anything else is 401."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Auth.exceptions.HTTPException(status_code=401, detail="a bearer token is required")
    found = None
    for known, user in load_tokens().items():
        # Compare every token in constant time, so timing tells nothing about them.
        if hmac.compare_digest(known.encode(), token.strip().encode()):
            found = user
    if found is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown token")
    return {"identity": found, "permissions": []}


@auth.on
async def deny_by_default(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Refuse every resource and action that no handler below allows."""
    return False


@auth.on.threads.create
async def create_own_thread(ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate) -> None:
    """Record the caller as the thread's owner (and its ``user_id``, which forget uses)."""
    metadata = value.setdefault("metadata", {})
    metadata["owner"] = ctx.user.identity
    metadata["user_id"] = ctx.user.identity


@auth.on.threads.create_run
async def run_on_own_thread(
    ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate
) -> Auth.types.FilterType:
    """Let a run start only on the caller's threads; tag the run with its user."""
    metadata = value.setdefault("metadata", {})
    metadata["owner"] = ctx.user.identity
    metadata["user_id"] = ctx.user.identity
    return {"owner": ctx.user.identity}


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """See and change only the caller's threads (read, update, delete, search, ...)."""
    return {"owner": ctx.user.identity}


@auth.on.assistants
async def read_assistants(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Every user may find and use the graphs; nobody changes them through the API."""
    return ctx.action in ("read", "search")


@auth.on.store
async def own_namespaces(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Allow a store call only on the caller's namespaces (and reads of shared ones).

    Listing namespaces is narrowed to the caller's own: under one kind (``("facts",)``) to
    ``("facts", <user>)``, and with no prefix (what Studio's memory view asks for) to
    ``("*", <user>)``, every kind's namespaces of the caller.
    """
    namespace = tuple(value.get("namespace") or ())
    user = ctx.user.identity
    if len(namespace) >= 2 and namespace[1] == user:
        return True
    if ctx.action == "list_namespaces" and len(namespace) <= 1:
        value["namespace"] = (namespace[0] if namespace else "*", user)
        return True
    shared = len(namespace) >= 2 and (
        namespace[0] == "knowledge" or (namespace[0] == "rules" and namespace[1] in _SHARED_OWNERS)
    )
    if shared and ctx.action in ("get", "search", "list_namespaces"):
        return True
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"the namespace {namespace!r} is not yours"
    )

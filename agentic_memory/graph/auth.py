"""Authentication for ``langgraph dev`` / LangGraph Platform: each user sees only their own.

An example to adapt, served by ``langgraph dev --config langgraph.auth.json``: it maps bearer
tokens to users from ``AMEM_AUTH_TOKENS`` (``"token1=alice,token2=bob"``, or ``@path`` to a
file of such lines). Replace :func:`authenticate` with your identity provider (JWT, OAuth,
an API gateway header) and keep the rest:

* **threads** are created with ``metadata.owner`` (and ``user_id``) set to the caller, and
  every read, update, delete, search and run on a thread is filtered by that owner, so
  another user's thread answers 404 before any run starts. A thread id the caller chooses
  is accepted only for their own existing thread (:func:`_check_chosen_id`);
* **runs** act for the authenticated user: the graph takes the user from the server's
  authentication when ``context.user_id`` is empty, and refuses a run whose
  ``context.user_id`` names someone else (``graph.nodes.admit``);
* **the store** (``client.store``, Studio's memory view): a namespace's second element is
  the user it belongs to; only the user reads or writes it. Shared namespaces
  (``("knowledge", kb)``, ``("rules", "_global")``) can be read by every user; the shared
  rules and their proposals are written and decided by operators only;
* **operators** are the identities named in ``AMEM_OPERATORS`` (comma-separated; see
  :mod:`agentic_memory.operators`): their requests carry the ``operator`` permission, which
  the graphs read (the ``ingest`` graph writes shared knowledge bases only for them);
* **assistants** can be read and searched (to find the ``agent`` graph), not changed;
  **crons** are refused.

``langgraph.auth.json`` also sets ``"disable_studio_auth": true``: under ``langgraph dev``
the server otherwise admits any request carrying ``x-auth-scheme: langsmith`` as Studio's
user, without a credential. With it, every request needs a token; use Studio with the plain
``langgraph.json`` on a machine only you can reach.

The server imports this file; nothing here runs at import time beyond building the handlers.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import os
import time
import uuid
from pathlib import Path
from typing import Any

from langgraph_sdk import Auth

from agentic_memory.operators import OPERATOR_PERMISSION, is_operator
from agentic_memory.store import GLOBAL_SCOPE, InvalidInputError
from agentic_memory.store.base import check_user_id

__all__ = ["SERVER_MADE_SECONDS", "auth", "load_tokens", "server_made"]

TOKENS_ENV = "AMEM_AUTH_TOKENS"

SERVER_MADE_SECONDS = 5.0
"""How old a version-7 thread id may be and still count as one the server just made.

The server makes the id of a new thread (a UUIDv7, whose first 48 bits are the time in
milliseconds) in the same request that creates it, milliseconds before the handler sees it;
an id a client chose is older, or not version 7, unless the client made a fresh UUIDv7
itself, which no one else can know yet."""

_CHOSEN_ID_REFUSED = (
    "a thread id chosen by the client is accepted only for your own existing thread: create "
    "a new thread without thread_id (or run with thread_id=None) and use the id the server "
    "returns"
)

auth = Auth()


def load_tokens(spec: str | None = None) -> dict[str, str]:
    """Map tokens to user ids from ``token=user`` pairs (``AMEM_AUTH_TOKENS`` by default).

    Pairs are comma- or newline-separated, or in ``@file``. A malformed pair, a token given
    twice or a user id that is not one (empty, reserved such as ``_global``, control
    characters) raises ``ValueError``.
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
        try:
            # A user named like a reserved scope ("_global") would own the shared rules.
            if check_user_id(user) == GLOBAL_SCOPE:
                raise InvalidInputError(f"{GLOBAL_SCOPE!r} is reserved")
        except InvalidInputError as exc:
            raise ValueError(f"{TOKENS_ENV}: {user[:20]!r} is not a user id: {exc}") from None
        tokens[token] = user
    return tokens


def server_made(thread_id: object, *, now: float | None = None) -> bool:
    """Whether a thread id is one the server made for this request (a fresh UUIDv7)."""
    try:
        parsed = uuid.UUID(str(thread_id))
    except ValueError:
        return False
    if parsed.version != 7:
        return False
    made = (parsed.int >> 80) / 1000.0
    age = (time.time() if now is None else now) - made
    return -SERVER_MADE_SECONDS <= age <= SERVER_MADE_SECONDS


async def _owner_of(thread_id: str) -> str | None:
    """Return the owner of an existing thread ("" when it has none), or None when none exists.

    Read through the server's in-process client, which the server does not authenticate,
    in a context of its own: the request's context carries the caller's authentication,
    whose filters would hide another user's thread, which is what is asked about.
    """
    task = asyncio.create_task(_read_owner(thread_id), context=contextvars.Context())
    return await task


async def _read_owner(thread_id: str) -> str | None:
    from langgraph_sdk import get_client  # noqa: PLC0415  (the server is running by now)
    from langgraph_sdk.errors import NotFoundError  # noqa: PLC0415

    async with get_client() as client:
        try:
            thread = await client.threads.get(thread_id)
        except NotFoundError:
            return None
    owner = (thread.get("metadata") or {}).get("owner")
    return str(owner) if owner is not None else ""


async def _check_chosen_id(ctx: Auth.types.AuthContext, thread_id: object) -> None:
    """Refuse a thread id unless it is the caller's own thread or a new one the server made.

    The server's create routes fill in a fresh id when the client gives none, so the
    handler sees an id either way: one that names no thread yet and was made moments ago
    is the server's. Every other case (an older id naming no thread, another user's thread,
    a thread without owner) gets the same answer, so it says nothing about threads that are
    not the caller's, and nobody takes an id before the thread's owner uses it.
    """
    if thread_id is None:
        return
    owner = await _owner_of(str(thread_id))
    if owner == ctx.user.identity or (owner is None and server_made(thread_id)):
        return
    raise Auth.exceptions.HTTPException(status_code=403, detail=_CHOSEN_ID_REFUSED)


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
    permissions = [OPERATOR_PERMISSION] if is_operator(found) else []
    return {"identity": found, "permissions": permissions}


@auth.on
async def deny_by_default(ctx: Auth.types.AuthContext, value: Any) -> bool:
    """Refuse every resource and action that no handler below allows."""
    return False


@auth.on.threads.create
async def create_own_thread(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate
) -> Auth.types.FilterType:
    """Record the caller as the thread's owner; refuse an id that is not theirs to use."""
    await _check_chosen_id(ctx, value.get("thread_id"))
    return _owned_by_caller(ctx, value)


@auth.on.threads.create_run
async def run_on_own_thread(
    ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate
) -> Auth.types.FilterType:
    """Let a run start only on the caller's threads; tag the run with its user."""
    if value.get("if_not_exists") == "create":
        await _check_chosen_id(ctx, value.get("thread_id"))
    return _owned_by_caller(ctx, value)


def _owned_by_caller(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """Tag what is created with the caller as owner and user; filter on that owner."""
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
    ``("*", <user>)``, every kind's namespaces of the caller. The shared rules are read by
    everyone; writing them and reviewing their proposals is for operators, whose name is
    recorded with each decision.
    """
    namespace = tuple(value.get("namespace") or ())
    user = ctx.user.identity
    if len(namespace) >= 2 and namespace[1] == user:
        return True
    if ctx.action == "list_namespaces" and len(namespace) <= 1:
        value["namespace"] = (namespace[0] if namespace else "*", user)
        return True
    shared_rules = namespace[:2] == ("rules", GLOBAL_SCOPE)
    if shared_rules and OPERATOR_PERMISSION in set(ctx.permissions):
        if ctx.action == "put" and isinstance(value.get("value"), dict):
            # Recorded as who decided; whatever the client wrote there is replaced.
            value["value"] = {**value["value"], "operator": user}
        return True
    shared = (len(namespace) == 2 and namespace[0] == "knowledge") or namespace == (
        "rules",
        GLOBAL_SCOPE,
    )
    if shared and ctx.action in ("get", "search", "list_namespaces"):
        return True
    raise Auth.exceptions.HTTPException(
        status_code=403, detail=f"the namespace {namespace!r} is not yours"
    )

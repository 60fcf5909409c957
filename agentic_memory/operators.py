"""Who is an operator: the people allowed to change what every user shares.

Operators decide the rules shared by every user (they approve or reject what conversations
propose, :mod:`agentic_memory.kinds.rules.shared`) and write the shared knowledge bases.
Everyone else changes only their own memories and their own knowledge bases.

How an operator is recognised depends on how they reach the memory:

* **in-process** (the ``amem`` CLI, a script holding the store): whoever opens the store is
  its operator; the library takes the operator's name where it records a decision
  (``SharedRules.aapprove(..., operator=...)``, ``AgenticStore(..., operator=...)``);
* **on a server** (``langgraph dev``, LangGraph Platform): by the server's authentication.
  ``AMEM_OPERATORS`` names the identities that are operators (comma-separated, as the
  authentication returns them); ``graph/auth.py`` gives them the ``operator`` permission,
  and the graphs and the store read that permission. ``*`` makes every caller an operator,
  which is only right for a server nobody else can reach. A server without authentication
  has no identities: only ``*`` gives it operators, and without it nobody changes shared
  memory through it (operators use the CLI where the store lives).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "EVERYONE",
    "OPERATORS_ENV",
    "OPERATOR_PERMISSION",
    "configured_operators",
    "is_operator",
    "run_identity",
]

OPERATORS_ENV = "AMEM_OPERATORS"
"""The setting that names the operators' identities (comma-separated), or ``*``."""

OPERATOR_PERMISSION = "operator"
"""The permission the authentication gives an operator's requests."""

EVERYONE = "*"
"""In ``AMEM_OPERATORS``: every caller is an operator (a server only you can reach)."""


def configured_operators(spec: str | None = None) -> frozenset[str]:
    """Return the operators' identities (``{"*"}`` for everyone; empty: none).

    Args:
        spec: The setting; default ``AMEM_OPERATORS``.
    """
    raw = os.environ.get(OPERATORS_ENV, "") if spec is None else spec
    return frozenset(part.strip() for part in raw.replace("\n", ",").split(",") if part.strip())


def is_operator(
    identity: str | None, *, permissions: Iterable[str] = (), spec: str | None = None
) -> bool:
    """Whether a caller is an operator: by the permission, or by name in ``AMEM_OPERATORS``.

    Args:
        identity: The caller's authenticated identity (``None`` when nobody authenticated).
        permissions: The permissions the authentication gave the request.
        spec: The operators' setting; default ``AMEM_OPERATORS``.
    """
    if OPERATOR_PERMISSION in set(permissions):
        return True
    operators = configured_operators(spec)
    return EVERYONE in operators or (bool(identity) and identity in operators)


def run_identity(configurable: Mapping[str, Any]) -> tuple[str | None, bool]:
    """Return a graph run's authenticated identity and whether it is an operator.

    A run on a LangGraph server carries the authentication in its ``configurable``
    (``langgraph_auth_user_id`` and ``langgraph_auth_permissions``); a run elsewhere has
    neither, and is an operator only when ``AMEM_OPERATORS`` is ``*``.
    """
    identity = configurable.get("langgraph_auth_user_id")
    permissions = configurable.get("langgraph_auth_permissions") or ()
    if not isinstance(permissions, list | tuple | set | frozenset):
        permissions = ()
    who = str(identity) if identity else None
    return who, is_operator(who, permissions=[str(p) for p in permissions])

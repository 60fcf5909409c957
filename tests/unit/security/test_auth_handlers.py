"""The authentication example's decisions, offline (the real server is in tests/integration/server).

Who is an operator, which thread ids count as the server's own, and what each user may do
with the store's namespaces, including the shared rules and their proposals.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph_sdk import Auth
from langgraph_sdk.auth.types import AuthContext

from agentic_memory.graph import auth as example
from agentic_memory.graph.store import server_operator
from agentic_memory.operators import configured_operators, is_operator, run_identity


def ctx(user: str, action: str, *, operator: bool = False) -> AuthContext:
    return AuthContext(
        permissions=["operator"] if operator else [],
        user=SimpleNamespace(identity=user),  # type: ignore[arg-type]
        resource="store",
        action=action,  # type: ignore[arg-type]
    )


def uuid7(ms: int) -> uuid.UUID:
    """A version-7 UUID made at ``ms`` milliseconds since the epoch."""
    value = (ms << 80) | (0x7 << 76) | (0x2 << 62) | (uuid.uuid4().int & ((1 << 62) - 1))
    return uuid.UUID(int=value)


def test_a_token_cannot_name_a_reserved_or_malformed_user() -> None:
    for bad in ("t=_global", "t=_admin", "t=a\x01b"):
        with pytest.raises(ValueError, match="not a user id"):
            example.load_tokens(bad)


async def test_operators_get_the_operator_permission(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_AUTH_TOKENS", "ta=alice,to=olga")
    monkeypatch.setenv("AMEM_OPERATORS", "olga, omar")
    assert await example.authenticate("Bearer to") == {
        "identity": "olga",
        "permissions": ["operator"],
    }
    assert await example.authenticate("Bearer ta") == {"identity": "alice", "permissions": []}
    assert configured_operators() == {"olga", "omar"}
    assert is_operator("olga") and not is_operator("alice") and not is_operator(None)
    assert run_identity(
        {"langgraph_auth_user_id": "alice", "langgraph_auth_permissions": ["operator"]}
    ) == ("alice", True)
    assert run_identity({}) == (None, False)
    assert is_operator(None, spec="*")


def test_only_fresh_version_7_ids_count_as_the_servers() -> None:
    now = time.time()
    assert example.server_made(uuid7(int(now * 1000)), now=now)
    assert not example.server_made(uuid7(int((now - 60) * 1000)), now=now)
    assert not example.server_made(uuid7(int((now + 60) * 1000)), now=now)
    assert not example.server_made(uuid.uuid4(), now=now)
    assert not example.server_made("not-a-uuid", now=now)


async def test_a_chosen_thread_id_is_refused_the_same_way_whatever_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owners = {"hers": "alice", "mine": "bob", "ownerless": ""}

    async def owner_of(thread_id: str) -> str | None:
        return owners.get(thread_id)

    monkeypatch.setattr(example, "_owner_of", owner_of)
    bob = AuthContext(
        permissions=[], user=SimpleNamespace(identity="bob"), resource="threads", action="create"
    )  # type: ignore[arg-type]
    refusals = []
    for thread_id in (
        "hers",
        "ownerless",
        str(uuid.uuid4()),
        str(uuid7(int((time.time() - 600) * 1000))),
    ):
        value: dict[str, Any] = {"thread_id": thread_id, "if_exists": "do_nothing"}
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            await example.create_own_thread(bob, value)  # type: ignore[arg-type]
        refusals.append((refused.value.status_code, refused.value.detail))
    assert len(set(refusals)) == 1 and refusals[0][0] == 403
    value = {"thread_id": "mine", "if_exists": "do_nothing"}
    assert await example.create_own_thread(bob, value) == {"owner": "bob"}  # type: ignore[arg-type]
    fresh = {"thread_id": str(uuid7(int(time.time() * 1000)))}
    assert await example.create_own_thread(bob, fresh) == {"owner": "bob"}  # type: ignore[arg-type]
    # A run that would create a thread under a chosen id: the same rule.
    run = {"thread_id": "hers", "if_not_exists": "create"}
    with pytest.raises(Auth.exceptions.HTTPException):
        await example.run_on_own_thread(bob, run)  # type: ignore[arg-type]
    assert await example.run_on_own_thread(bob, {"thread_id": "hers"}) == {"owner": "bob"}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("user", "action", "namespace", "operator", "allowed"),
    [
        ("bob", "get", ("rules", "_global"), False, True),
        ("bob", "search", ("rules", "_global"), False, True),
        ("bob", "put", ("rules", "_global"), False, False),
        ("bob", "search", ("rules", "_global", "proposals"), False, False),
        ("bob", "put", ("rules", "_global", "proposals"), False, False),
        ("olga", "put", ("rules", "_global"), True, True),
        ("olga", "search", ("rules", "_global", "proposals"), True, True),
        ("bob", "search", ("knowledge", "default"), False, True),
        ("bob", "put", ("knowledge", "default"), False, False),
        ("bob", "search", ("user_knowledge", "alice", "default"), False, False),
        ("alice", "search", ("user_knowledge", "alice", "default"), False, True),
        ("olga", "search", ("user_knowledge", "alice", "default"), True, False),
        ("olga", "search", ("facts", "alice"), True, False),
    ],
)
async def test_store_namespaces(
    user: str, action: str, namespace: tuple[str, ...], operator: bool, allowed: bool
) -> None:
    value: dict[str, Any] = {
        "namespace": namespace,
        "value": {"decision": "approve", "operator": "x"},
    }
    if allowed:
        assert await example.own_namespaces(ctx(user, action, operator=operator), value) is True
    else:
        with pytest.raises(Auth.exceptions.HTTPException, match="is not yours"):
            await example.own_namespaces(ctx(user, action, operator=operator), value)


async def test_an_operators_decision_records_who_made_it() -> None:
    value: dict[str, Any] = {
        "namespace": ("rules", "_global", "proposals"),
        "value": {"decision": "approve", "operator": "somebody-else"},
    }
    await example.own_namespaces(ctx("olga", "put", operator=True), value)
    assert value["value"] == {"decision": "approve", "operator": "olga"}


def test_the_servers_store_acts_for_operators_only_when_they_can_be_told_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert server_operator() is None
    monkeypatch.setenv("AMEM_OPERATORS", "olga")
    assert server_operator() is None  # no authentication: nobody can be told apart
    monkeypatch.setenv("LANGGRAPH_AUTH", '{"path": "agentic_memory.graph.auth:auth"}')
    assert server_operator() is not None
    monkeypatch.delenv("LANGGRAPH_AUTH")
    monkeypatch.setenv("AMEM_OPERATORS", "*")
    assert server_operator() is not None

"""The poisoning payloads of issue 18 never reach another user's prompt, with ``learn`` on or off.

A model that obeys the user writes each payload into its rules rewrite at the end of
mallory's conversation on the shared rules. With ``AMEM_GLOBAL_RULES`` off nothing is even
proposed; with ``learn`` the rewrite is only a proposal, so bob's prompt never shows it, and
even after an operator approves the proposal it holds only what passed the screen.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agentic_memory.kinds.model_output import similar_rule
from agentic_memory.kinds.rules import starting_rules
from agentic_memory.store import GLOBAL_SCOPE
from tests.unit.security.payloads import INNOCENT, PAYLOADS, Payload

SHARED = {"rules_scope": "global"}


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def conversation(app: Any, thread: str, user: str, text: str) -> dict[str, Any]:
    context = {"user_id": user, **SHARED}
    await app.ainvoke({"messages": [HumanMessage(text)]}, cfg(thread), context=context)
    out: dict[str, Any] = await app.ainvoke(
        {"end_conversation": True}, cfg(thread), context=context
    )
    return out


def bob_prompt(app: Any, model: Any) -> Any:
    async def ask(thread: str) -> str:
        await app.ainvoke(
            {"messages": [HumanMessage("What are the rules?")]},
            cfg(thread),
            context={"user_id": "bob", **SHARED},
        )
        return str(model.calls_for(None)[-1].text)

    return ask


@pytest.mark.parametrize("learn", [False, True], ids=["learn-off", "learn-on"])
@pytest.mark.parametrize("payload", PAYLOADS, ids=[p.category for p in PAYLOADS])
async def test_a_payload_never_reaches_another_users_prompt(
    app: Any,
    model: Any,
    resources: Any,
    monkeypatch: pytest.MonkeyPatch,
    payload: Payload,
    learn: bool,
) -> None:
    if learn:
        monkeypatch.setenv("AMEM_GLOBAL_RULES", "learn")
    else:
        monkeypatch.delenv("AMEM_GLOBAL_RULES", raising=False)
    res, _ = resources
    rules = [{"instruction": i, "rationale": r} for i, r in payload.rules]
    model.structured["RuleSet"] = [
        {"rules": [*rules, {"instruction": INNOCENT[0], "rationale": INNOCENT[1]}]}
    ]
    end = await conversation(app, "m1", "mallory", f"Add this rule for everyone: {payload.rules}")
    assert end["rules_version_created"] is None
    ask = bob_prompt(app, model)
    assert payload.marker not in await ask("b1")

    proposal = end["rules_proposal"]
    if not learn:
        assert proposal is None and await res.shared_rules.alist() == []
        return
    assert proposal is not None and proposal["status"] == "pending"
    # Whatever an operator approves holds only what passed the screen.
    await res.shared_rules.aapprove(proposal["id"], operator="ops")
    prompt = await ask("b2")
    assert payload.marker not in prompt
    assert f"{INNOCENT[0]} – {INNOCENT[1]}" in prompt
    latest = await res.rules.alatest(GLOBAL_SCOPE)
    # The starting rules the rewrite left out were put back (they are protected).
    seeds = [
        r.instruction for r in starting_rules() if not similar_rule(r.instruction, INNOCENT[0])
    ]
    assert [r.instruction for r in latest.rules] == [INNOCENT[0], *seeds]

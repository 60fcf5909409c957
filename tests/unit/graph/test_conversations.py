"""Whole runs through the compiled graph: two conversations, two users, failures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agentic_memory.graph.nodes import MissingUserIdError
from agentic_memory.kinds import PER_USER_COLLECTIONS
from agentic_memory.store import InvalidInputError
from tests.unit.graph.conftest import REFLECTION, RULES


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def fact(subject: str, value: str, category: str) -> dict[str, Any]:
    return {"facts": [{"subject": subject, "value": value, "category": category}]}


async def turn(app, thread: str, user: str, text: str, **extra: Any) -> dict[str, Any]:
    return await app.ainvoke(
        {"messages": [HumanMessage(text)], **extra}, cfg(thread), context={"user_id": user}
    )


async def test_two_conversations_and_a_second_user(app, model, resources) -> None:
    res, _ = resources
    model.structured["ExtractedFacts"] = [
        fact("name", "Alice", "identity"),
        fact("diet", "vegetarian", "preference"),
        fact("allergy", "peanuts", "constraint"),
    ]
    first = await turn(app, "t1", "alice", "Hi, I'm Alice.")
    assert [f["value"] for f in first["facts_remembered"]] == ["Alice"]
    await turn(app, "t1", "alice", "I'm vegetarian.")
    last = await turn(
        app, "t1", "alice", "I'm allergic to peanuts. Dinner ideas?", end_conversation=True
    )

    # Conversation 1 ended: episode, facts and rules version 2 with provenance.
    episode = last["reflection"]
    assert episode["thread_id"] == "t1" and episode["what_to_avoid"] == REFLECTION["what_to_avoid"]
    assert last["conversation_ended"] is True and last["rules_version_created"] == 2
    assert [c["purpose"] for c in last["model_calls"]] == ["facts", "answer", "reflection", "rules"]
    stored = await res.episodes.aget("alice", episode["id"])
    assert stored is not None and "I'm vegetarian." in stored.conversation
    assert {(f.subject, f.value) for f in await res.facts.acurrent("alice")} == {
        ("name", "Alice"),
        ("diet", "vegetarian"),
        ("allergy", "peanuts"),
    }
    rules = await res.rules.alatest("alice")
    assert rules.version == 2
    assert rules.source_episodes == (episode["id"],) and rules.source_users == ("alice",)
    assert rules.rules[0].instruction == RULES["rules"][0]["instruction"]

    # Conversation 2, new thread: the prompt carries the facts, the episode and the rules.
    second = await turn(app, "t2", "alice", "What should I cook for dinner tonight?")
    assert second["conversation_ended"] is False and second["reflection"] is None
    assert [m.content for m in second["messages"]][0] == "What should I cook for dinner tonight?"
    prompt = model.calls_for(None)[-1].text
    for expected in (
        "- name: Alice (identity)",
        "- diet: vegetarian (preference)",
        "- allergy: peanuts (constraint)",
        "Critical constraints (never violate): allergy: peanuts",
        f"What worked: {REFLECTION['what_worked']}",
        f"What to avoid: {REFLECTION['what_to_avoid']}",
        "Behaviour rules (version 2):",
        RULES["rules"][0]["instruction"],
        "I'm allergic to peanuts. Dinner ideas?",  # a past turn of thread t1
    ):
        assert expected in prompt, expected

    # Bob shares the store and the model but sees none of Alice's memory.
    await turn(app, "t3", "bob", "What should I cook for dinner tonight?")
    bob_prompt = model.calls_for(None)[-1].text
    for leaked in ("Alice", "vegetarian", "peanuts", "satay", RULES["rules"][0]["instruction"]):
        assert leaked not in bob_prompt, leaked
    assert "Behaviour rules (version 1):" in bob_prompt
    bob_facts_prompt = model.calls_for("ExtractedFacts")[-1].text
    assert "Known facts:\n(none)" in bob_facts_prompt


async def test_a_contradiction_supersedes_the_fact(app, model, resources) -> None:
    res, _ = resources
    model.structured["ExtractedFacts"] = [
        fact("diet", "vegetarian", "preference"),
        fact("Diet", "vegan", "preference"),
    ]
    first = await turn(app, "t1", "alice", "I'm vegetarian.")
    assert first["facts_remembered"] == [
        {
            "subject": "diet",
            "value": "vegetarian",
            "category": "preference",
            "action": "added",
            "previous_value": None,
            "id": first["facts_remembered"][0]["id"],
        }
    ]
    second = await turn(app, "t1", "alice", "Actually I'm vegan now.")
    (change,) = second["facts_remembered"]
    assert (change["value"], change["action"], change["previous_value"]) == (
        "vegan",
        "superseded",
        "vegetarian",
    )
    assert [(f["subject"], f["value"]) for f in second["facts"]] == [("diet", "vegan")]
    facts_layer = model.calls_for(None)[-1].messages[1].content
    assert "- diet: vegan" in facts_layer and "vegetarian" not in facts_layer
    old, new = await res.facts.ahistory("alice", "diet")
    assert (old.current, old.superseded_by, new.current) == (False, new.id, True)
    # A turn without new facts reports none.
    third = await turn(app, "t1", "alice", "Thanks!")
    assert third["facts_remembered"] == []


async def test_a_malformed_reflection_still_ends_the_conversation(app, model, resources) -> None:
    res, _ = resources
    await turn(app, "t1", "alice", "Hello there.")
    model.structured["Reflection"] = ["{'broken': ", {"importance": "very"}]
    end = await app.ainvoke({"end_conversation": True}, cfg("t1"), context={"user_id": "alice"})
    # The conversation ends and is remembered, with what the user said and no lesson; the
    # rules are not rewritten from it.
    assert end["conversation_ended"] is True
    episode = end["reflection"]
    assert episode["fallback"].startswith("the model's reflection failed (StructuredOutputError")
    assert episode["conversation_summary"] == "The user said: Hello there."
    assert episode["what_worked"].startswith("No lesson recorded")
    [stored] = await res.episodes.alist("alice")
    assert stored.id == episode["id"] and "Hello there." in stored.conversation
    assert [v.stored for v in await res.rules.aversions("alice")] == [False]
    assert model.calls_for("RuleSet") == []
    assert end["rules_note"] == "no lesson to learn from: the episode has no reflection"
    assert [c["purpose"] for c in end["model_calls"]] == ["reflection", "reflection"]

    # The thread goes on: a new turn and a second end work, and learn from the new episode.
    await turn(app, "t1", "alice", "One more thing.")
    again = await app.ainvoke({"end_conversation": True}, cfg("t1"), context={"user_id": "alice"})
    assert again["reflection"]["conversation"] == 2 and "fallback" not in again["reflection"]
    assert again["rules_version_created"] == 2
    assert len(await res.episodes.alist("alice")) == 2


async def test_missing_user_id_fails_before_anything_is_written(app, model, store) -> None:
    with pytest.raises(MissingUserIdError, match="context.user_id is required"):
        await app.ainvoke({"messages": [HumanMessage("I'm Alice")]}, cfg("t1"))
    with pytest.raises(MissingUserIdError):
        await app.ainvoke(
            {"messages": [HumanMessage("I'm Alice")]}, cfg("t1"), context={"user_id": " "}
        )
    with pytest.raises(InvalidInputError, match="reserved"):
        await app.ainvoke(
            {"messages": [HumanMessage("hi")]}, cfg("t1"), context={"user_id": "_global"}
        )
    assert model.calls == []
    for spec in PER_USER_COLLECTIONS:
        if spec.name in await store.acollections():
            assert await store.ausers(spec.name) == []


async def test_bad_context_is_rejected(app) -> None:
    with pytest.raises(ValueError, match="episodic_alpha must be a number in"):
        await app.ainvoke(
            {"messages": [HumanMessage("hi")]},
            cfg("t1"),
            context={"user_id": "alice", "episodic_alpha": 2},
        )
    with pytest.raises(ValueError, match="rules_scope"):
        await app.ainvoke(
            {"messages": [HumanMessage("hi")]},
            cfg("t1"),
            context={"user_id": "alice", "rules_scope": "team"},
        )


async def test_an_input_with_nothing_to_do_is_refused(app, model) -> None:
    with pytest.raises(InvalidInputError, match="nothing to do"):
        await app.ainvoke({"messages": []}, cfg("t1"), context={"user_id": "alice"})
    assert model.calls == []


async def test_state_is_checkpointed_and_json_serialisable(app) -> None:
    await turn(app, "t1", "alice", "Hello.")
    await turn(app, "t1", "alice", "Again.")
    snapshot = await app.aget_state(cfg("t1"))
    values = snapshot.values
    assert [m.content for m in values["messages"]] == ["Hello.", "Noted.", "Again.", "Noted."]
    assert values["settled_messages"] == values["messages"]  # the copy a rollback restores
    plain = {k: v for k, v in values.items() if k not in ("messages", "settled_messages")}
    assert json.loads(json.dumps(plain)) == plain
    assert app.get_state(cfg("t1")).values["token_report"] == values["token_report"]
    assert (await app.aget_state(cfg("other"))).values == {}

    chunks = [
        chunk
        async for chunk in app.astream(
            {"messages": [HumanMessage("Streamed.")]},
            cfg("t1"),
            context={"user_id": "alice"},
            stream_mode="updates",
        )
    ]
    nodes = [name for chunk in chunks for name in chunk]
    assert set(nodes) == {
        "admit",
        "recall_episodic",
        "recall_semantic",
        "load_procedural",
        "remember_facts",
        "compact",
        "generate",
        "log_turn",
    }
    assert nodes[-3:] == ["compact", "generate", "log_turn"]


async def test_global_rules_are_shared_and_record_their_source_users(
    app, model, resources, monkeypatch
) -> None:
    # Conversations only propose; an operator approves what becomes the shared rules.
    monkeypatch.setenv("AMEM_GLOBAL_RULES", "learn")
    res, _ = resources
    shared = {"user_id": "alice", "rules_scope": "global"}
    await app.ainvoke({"messages": [HumanMessage("Hello.")]}, cfg("t1"), context=shared)
    out = await app.ainvoke({"end_conversation": True}, cfg("t1"), context=shared)
    assert out["rules_version_created"] is None
    assert (await res.rules.alatest("_global")).version == 1
    approved = await res.shared_rules.aapprove(out["rules_proposal"]["id"], operator="ops")
    assert approved.version == 2
    latest = await res.rules.alatest("_global")
    assert latest.source_users == ("alice",) and latest.source_episodes == (
        out["reflection"]["id"],
    )
    assert (await res.rules.alatest("alice")).version == 1  # the user scope is untouched

    await app.ainvoke(
        {"messages": [HumanMessage("Hi.")]}, cfg("t2"), context={**shared, "user_id": "bob"}
    )
    assert "Behaviour rules (version 2):" in model.calls_for(None)[-1].text

"""Retention in graph runs: the model flags important turns, a run's settings purge the log."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentic_memory.graph.graph import compile_graph
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.kinds.rules import rules_scope
from agentic_memory.langgraph_store import AgenticStore
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel


def _flag_locker(messages: list[BaseMessage]) -> dict[str, Any]:
    # The memory model flags only the message that records something to keep exactly.
    return {"facts": [], "important": "locker code" in str(messages[-1].content)}


@pytest.fixture
def flagging_model(model: ScriptedChatModel) -> ScriptedChatModel:
    model.structured_defaults["ExtractedFacts"] = _flag_locker
    return model


def _app(store: EmbeddedStore, embeddings: LocalEmbeddings, model: ScriptedChatModel) -> Any:
    # Purge after every write, so a run's settings act at once; no cap from the operator.
    operator = RetentionPolicy(message_days=None, max_messages=None, purge_interval_minutes=0)
    agentic = AgenticStore(store, embeddings, retention=operator)
    return compile_graph(checkpointer=InMemorySaver(), store=agentic, chat_model=model), agentic


async def _turn(app: Any, thread: str, user: str, text: str, **context: Any) -> None:
    await app.ainvoke(
        {"messages": [HumanMessage(text)]},
        {"configurable": {"thread_id": thread}},
        context={"user_id": user, **context},
    )


async def test_the_model_flags_a_turn_important_and_a_runs_cap_keeps_it(
    store: EmbeddedStore, embeddings: LocalEmbeddings, flagging_model: ScriptedChatModel
) -> None:
    app, agentic = _app(store, embeddings, flagging_model)
    log = agentic.memory.messages
    await _turn(app, "t1", "alice", "my locker code is 4411")
    first = await log.alist("alice", thread_id="t1")
    assert [(m.role, m.important, m.important_by) for m in first] == [
        ("human", True, "model"),
        ("ai", False, ""),
    ]
    # bob's turns are another user's: a run of alice's never purges them.
    for i in range(3):
        await _turn(app, "b1", "bob", f"bob's note {i}")
    # The run caps alice's log at 3 turns: the oldest unimportant go, the flagged one stays.
    for i in range(3):
        await _turn(app, "t1", "alice", f"chat {i}", max_messages=3)
    left = await log.alist("alice", thread_id="t1")
    assert len(left) == 3
    assert [m.content for m in left if m.important] == ["my locker code is 4411"]
    assert left[-1].content == "Noted." and left[-2].content == "chat 2"
    assert await log.acount("bob", "b1") == 6
    # Without the run's setting the operator's policy (no cap) applies again.
    await _turn(app, "t1", "alice", "one more")
    assert await log.acount("alice", "t1") == 5


async def test_a_runs_settings_never_purge_facts_or_rules(
    store: EmbeddedStore, embeddings: LocalEmbeddings, model: ScriptedChatModel
) -> None:
    model.structured_defaults["ExtractedFacts"] = {
        "facts": [{"subject": "diet", "value": "vegetarian", "category": "preference"}]
    }
    app, agentic = _app(store, embeddings, model)
    await _turn(app, "t1", "alice", "I am vegetarian")
    scope = rules_scope("alice", shared=False)
    proposed = await agentic.memory.rules.apropose(
        scope, [{"instruction": "Be brief", "rationale": "asked for"}]
    )
    assert proposed is not None
    for i in range(4):
        await _turn(app, "t1", "alice", f"chat {i}", max_messages=1, message_retention_days=0.0001)
    assert [f.value for f in await agentic.memory.facts.acurrent("alice")] == ["vegetarian"]
    assert (await agentic.memory.rules.alatest(scope)).version == proposed.version
    assert await agentic.memory.messages.acount("alice", "t1") == 1

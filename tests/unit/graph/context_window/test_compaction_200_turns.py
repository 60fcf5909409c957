"""A 200-turn conversation through the real graph: compaction keeps the prompt flat.

The scripted model answers every turn; the summary it returns is scripted too. Every tenth
turn a tool exchange (AI tool call + tool results) is written into the thread, the way a
tool-using client or a future tool node would, so compaction meets tool-call pairs. Token
counts are read from the prompts the fake model actually received.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agentic_memory.graph.context import Context
from agentic_memory.graph.context_window import count_message_tokens
from agentic_memory.graph.graph import compile_graph
from agentic_memory.graph.persistence import sqlite_checkpointer
from agentic_memory.models.embeddings import LocalEmbeddings
from agentic_memory.store.embedded import EmbeddedStore
from tests.fakes import ScriptedChatModel

pytestmark = pytest.mark.timeout(900)

TURNS = 200
BUDGET_RECENT = 600
THRESHOLD = 0.65
FACT_TURN = 2
TOOL_EVERY = 10

_WORDS = (
    "train ticket budget museum hotel breakfast weather itinerary booking paris lyon "
    "schedule receipt reminder meeting flight luggage restaurant review station"
).split()


def _filler(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))


def _user_text(turn: int, rng: random.Random) -> str:
    if turn == FACT_TURN:
        return "Important: I am vegetarian, please keep that in mind for every suggestion."
    return f"Turn {turn}: {_filler(rng, 8, 30)}?"


def _answer(messages: list[BaseMessage]) -> str:
    last = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
    return f"Answer about {str(last.content)[:60]} - here is a short plan with two steps."


def _facts(messages: list[BaseMessage]) -> dict[str, Any]:
    text = str(messages[-1].content).rpartition("Newest user message:")[2].lower()
    if "vegetarian" in text:
        return {"facts": [{"subject": "diet", "value": "vegetarian", "category": "preference"}]}
    return {"facts": []}


def _summary(messages: list[BaseMessage]) -> dict[str, str]:
    # The scripted summary carries the early fact forward, as a good summariser would, and
    # stays the same size however many turns it has absorbed.
    prompt = str(messages[-1].content)
    folded = prompt.count("\nuser: ") + prompt.count("\nUser: ")
    return {
        "text": (
            "The user is planning a trip and asked many practical questions; they said "
            f"early on that they are vegetarian. ({folded} user turns folded in this round.)"
        )
    }


def _tool_exchange(turn: int) -> list[BaseMessage]:
    calls = [
        {"name": "search_bookings", "args": {"query": f"bookings {turn}"}, "id": f"call_{turn}_a"},
        {"name": "weather", "args": {"city": "Lyon"}, "id": f"call_{turn}_b"},
    ]
    return [
        HumanMessage(f"Turn {turn}t: check my bookings and the weather"),
        AIMessage("", tool_calls=calls),
        ToolMessage(f"TOOLRESULT-{turn}-a: two bookings found", tool_call_id=f"call_{turn}_a"),
        ToolMessage(f"TOOLRESULT-{turn}-b: sunny, 21 degrees", tool_call_id=f"call_{turn}_b"),
        AIMessage(f"You have two bookings and it will be sunny (turn {turn})."),
    ]


def _pairs_intact(messages: list[BaseMessage]) -> bool:
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    return calls == results


async def test_two_hundred_turns_stay_flat_and_keep_the_early_fact(tmp_path: Path) -> None:
    embeddings = LocalEmbeddings()
    # Opening a store reads its folder: off the loop, as a server opens it at start-up.
    store = await asyncio.to_thread(EmbeddedStore, tmp_path / "store", dims=embeddings.dims)
    model = ScriptedChatModel(
        default_text=_answer,
        structured_defaults={"ExtractedFacts": _facts, "Summary": _summary},
    )
    context = Context(
        user_id="traveller", budget_recent=BUDGET_RECENT, compaction_threshold=THRESHOLD
    )
    config = {"configurable": {"thread_id": "long-trip"}}
    rng = random.Random(200)
    prompt_tokens: dict[int, int] = {}
    recent_tokens: dict[int, int] = {}
    try:
        async with sqlite_checkpointer(tmp_path / "checkpoints.sqlite") as saver:
            app = compile_graph(
                checkpointer=saver, store=store, embeddings=embeddings, chat_model=model
            )
            for turn in range(1, TURNS + 1):
                if turn % TOOL_EVERY == 0:
                    await app.aupdate_state(
                        config, {"messages": _tool_exchange(turn)}, as_node="log_turn"
                    )
                answers_before = len(model.calls_for(None))
                out = await app.ainvoke(
                    {"messages": [HumanMessage(_user_text(turn, rng))]}, config, context=context
                )
                answer_calls = model.calls_for(None)
                assert len(answer_calls) == answers_before + 1
                prompt = answer_calls[-1].messages
                prompt_tokens[turn] = count_message_tokens(prompt)
                recent_tokens[turn] = out["token_report"]["layers"]["recent"]
                assert _pairs_intact(prompt), f"turn {turn}: a prompt split a tool-call pair"
                assert _pairs_intact(out["messages"]), f"turn {turn}: the state split a pair"
            final = await app.aget_state(config)
    finally:
        store.close()

    # The stable prefix (system prompt + rules) is byte-identical in all 200 prompts.
    prefixes = {str(call.messages[0].content) for call in model.calls_for(None)}
    assert len(prefixes) == 1

    summaries = model.calls_for("Summary")
    # Compaction ran many times, but not on every turn (hysteresis).
    assert 10 <= len(summaries) <= TURNS // 3, len(summaries)
    # Compaction folded tool exchanges whole into the summary at least once.
    assert any("TOOLRESULT-" in call.text for call in summaries)

    # The recent layer never passes the threshold of its budget.
    assert max(recent_tokens.values()) <= THRESHOLD * BUDGET_RECENT

    # Flat prompt: bounded over turns 50-200 and turn 200 close to turn 50. Without
    # compaction turn 200 would carry ~200 exchanges (well over 10,000 tokens).
    later = [prompt_tokens[t] for t in range(50, TURNS + 1)]
    fixed_layers = max(prompt_tokens[t] - recent_tokens[t] for t in range(50, TURNS + 1))
    assert max(later) <= fixed_layers + THRESHOLD * BUDGET_RECENT
    assert max(later) <= 1.75 * min(later)
    assert abs(prompt_tokens[TURNS] - prompt_tokens[50]) <= 0.35 * prompt_tokens[50]

    # The turn-2 fact is in the turn-200 prompt (facts layer and summary), although the
    # turn-2 message itself was compacted away long ago.
    last_prompt = model.calls_for(None)[-1].text
    assert "vegetarian" in last_prompt
    assert "Important: I am vegetarian" not in last_prompt
    assert "diet: vegetarian" in last_prompt
    assert "they said early on that they are vegetarian" in last_prompt
    assert final.values["facts"][0]["value"] == "vegetarian"
    assert len(final.values["messages"]) < 40

    print(
        f"\nprompt tokens: turn 1={prompt_tokens[1]} turn 50={prompt_tokens[50]} "
        f"turn 200={prompt_tokens[TURNS]} max 50-200={max(later)} min 50-200={min(later)}; "
        f"compactions={len(summaries)}; max recent={max(recent_tokens.values())}"
    )

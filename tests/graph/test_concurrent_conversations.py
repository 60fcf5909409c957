"""Concurrent conversations of one user through the compiled graph: nothing is lost.

Four conversations run at once on one store. Their first fact extractions and their first
rule rewrites are held at a barrier, so every conversation reads the same fact and the same
rules before any of them writes: the worst interleaving, every time.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import RuleBook
from agentic_memory.store import Where

CONVERSATIONS = 4
TURNS = 3
_CITY = re.compile(r"my city is (\w+)")


def _held(first: int) -> tuple[threading.Barrier, Any]:
    """A barrier for the first ``first`` calls of a scripted reply (run in executor threads)."""
    barrier = threading.Barrier(first, timeout=30)
    counter = itertools.count()

    def wait() -> None:
        if next(counter) < first:
            barrier.wait()

    return barrier, wait


async def test_concurrent_conversations_of_one_user_lose_nothing(
    app, model, store, embeddings
) -> None:
    _, hold_facts = _held(CONVERSATIONS)
    _, hold_rules = _held(CONVERSATIONS)
    rewrites: list[tuple[str, list[dict[str, str]]]] = []
    numbers = itertools.count(1)

    def extract(messages: list[BaseMessage]) -> dict[str, Any]:
        hold_facts()
        cities = _CITY.findall(str(messages[-1].content).split("Newest user message:")[-1])
        return {"facts": [{"subject": "city", "value": c, "category": "other"} for c in cities]}

    def rewrite(messages: list[BaseMessage]) -> dict[str, Any]:
        hold_rules()
        prompt = str(messages[-1].content)
        rules = [{"instruction": f"Follow lesson {next(numbers)}", "rationale": "it helped"}]
        rewrites.append((prompt, rules))
        return {"rules": rules}

    model.structured_defaults["ExtractedFacts"] = extract
    model.structured_defaults["RuleSet"] = rewrite

    async def conversation(k: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in range(TURNS):
            out = await app.ainvoke(
                {
                    "messages": [HumanMessage(f"Hello, my city is c{k}x{i} now.")],
                    "end_conversation": i == TURNS - 1,
                },
                {"configurable": {"thread_id": f"conv-{k}"}},
                context={"user_id": "alice"},
            )
        return out

    ends = await asyncio.gather(*(conversation(k) for k in range(CONVERSATIONS)))

    # Facts: every stated value is in the history once, and exactly one is current.
    facts = FactStore(store, embeddings)
    history = facts.history("alice", "city")
    stated = {f"c{k}x{i}" for k in range(CONVERSATIONS) for i in range(TURNS)}
    assert sorted(f.value for f in history) == sorted(stated)
    assert [f.value for f in facts.current("alice")] == [history[-1].value]
    flagged = store.count(
        FACTS.name,
        user="alice",
        where=[Where("subject", "eq", "city"), Where("current", "eq", True)],
    )
    assert flagged == 1
    for k in range(CONVERSATIONS):
        mine = [f.value for f in history if f.value.startswith(f"c{k}x")]
        assert mine == [f"c{k}x{i}" for i in range(TURNS)]

    # Rules: each end created its own version, each rewritten from the version before it.
    book = RuleBook(store, embeddings)
    versions = book.versions("alice")
    assert [v.version for v in versions] == list(range(1, CONVERSATIONS + 2))
    assert sorted(e["rules_version_created"] for e in ends) == list(range(2, CONVERSATIONS + 2))
    for parent, version in zip(versions, versions[1:], strict=False):
        assert version.parent_version == parent.version
        # A version holds its rewrite, then the starting rules the rewrite dropped.
        stored = [r.__dict__ for r in version.rules]
        produced = [p for p, rules in rewrites if rules == stored[: len(rules)]]
        assert len(produced) == 1 and parent.render() in produced[0], (
            f"version {version.version} was not rewritten from version {parent.version}"
        )
    assert len(rewrites) > CONVERSATIONS  # the losers of the first round rewrote again

    # Messages: every turn of every thread, numbered without gaps.
    log = MessageLog(store, embeddings)
    for k in range(CONVERSATIONS):
        logged = log.list("alice", thread_id=f"conv-{k}")
        assert [m.turn for m in logged] == list(range(2 * TURNS))
        assert [m.content for m in logged if m.role == "human"] == [
            f"Hello, my city is c{k}x{i} now." for i in range(TURNS)
        ]

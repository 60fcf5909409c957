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
from collections.abc import Iterator
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from agentic_memory.kinds.facts import FACTS, FactStore
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.model_output import keep_protected
from agentic_memory.kinds.rules import (
    MAX_RULES,
    RuleBook,
    RuleVersion,
    rebase_rules,
    starting_rules,
)
from agentic_memory.kinds.rules.shared import SharedRules
from agentic_memory.store import GLOBAL_SCOPE, Where

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
    history = await facts.ahistory("alice", "city")
    stated = {f"c{k}x{i}" for k in range(CONVERSATIONS) for i in range(TURNS)}
    assert sorted(f.value for f in history) == sorted(stated)
    assert [f.value for f in await facts.acurrent("alice")] == [history[-1].value]
    flagged = await store.acount(
        FACTS.name,
        user="alice",
        where=[Where("subject", "eq", "city"), Where("current", "eq", True)],
    )
    assert flagged == 1
    for k in range(CONVERSATIONS):
        mine = [f.value for f in history if f.value.startswith(f"c{k}x")]
        assert mine == [f"c{k}x{i}" for i in range(TURNS)]

    # Rules: each end created its own version, each on top of the version before it: the
    # model rewrote it from that version, or a rewrite of an older one was rebased on it
    # (its changes replayed, none of the newer version's lost).
    book = RuleBook(store, embeddings)
    versions = await book.aversions("alice")
    assert [v.version for v in versions] == list(range(1, CONVERSATIONS + 2))
    assert sorted(e["rules_version_created"] for e in ends) == list(range(2, CONVERSATIONS + 2))
    starting = [r.__dict__ for r in versions[0].rules]

    def submitted(rules: list[dict[str, str]], base: RuleVersion) -> list[dict[str, str]]:
        based_on = [r.__dict__ for r in base.rules]
        return keep_protected(rules, based_on, starting, max_rules=MAX_RULES).rules

    for parent, version in zip(versions, versions[1:], strict=False):
        assert version.parent_version == parent.version
        # What an end proposes: its rewrite, then the starting rules the rewrite dropped.
        stored = [r.__dict__ for r in version.rules]
        rewritten = any(
            submitted(r, parent) == stored and parent.render() in p for p, r in rewrites
        )
        rebased = any(
            rebase_rules(base.rules, submitted(r, base), parent.rules) == list(version.rules)
            for p, r in rewrites
            for base in versions
            if base.version < parent.version and base.render() in p
        )
        assert rewritten or rebased, f"version {version.version} lost version {parent.version}"
    # The losers of the first round were rebased without asking the model again.
    assert len(rewrites) == CONVERSATIONS
    conflicts = [c for e in ends for c in e["rules_conflicts"]]
    assert len(conflicts) >= CONVERSATIONS - 1
    assert {c["resolution"] for c in conflicts} == {"rebased"}

    # Messages: every turn of every thread, numbered without gaps.
    log = MessageLog(store, embeddings)
    for k in range(CONVERSATIONS):
        logged = await log.alist("alice", thread_id=f"conv-{k}")
        assert [m.turn for m in logged] == list(range(2 * TURNS))
        assert [m.content for m in logged if m.role == "human"] == [
            f"Hello, my city is c{k}x{i} now." for i in range(TURNS)
        ]


ENDING_AT_ONCE = 20
WAVES = 6
_LESSON = re.compile(r"lesson (\d+)")
_RULE_LINE = re.compile(r"^\d+\. (.+?) – (.+)$", re.MULTILINE)


def _lesson_reflection(messages: list[BaseMessage]) -> dict[str, Any]:
    (number,) = _LESSON.findall(str(messages[-1].content))[-1:]
    return {
        "context_tags": ["planning"],
        "conversation_summary": "The user planned something.",
        "what_worked": f"Following lesson {number}.",
        "what_to_avoid": "Long lists.",
        "importance": 0.5,
    }


def _keep_and_add(rewrites: Iterator[int]) -> Any:
    """A rewrite that keeps the rules it was shown and adds the lessons.

    Past ten rules the oldest lessons give way; the starting rules stay (a rewrite that
    dropped one would get it back, or be refused when there is no room for it).
    """
    seeds = {r.instruction for r in starting_rules()}

    def rewrite(messages: list[BaseMessage]) -> dict[str, Any]:
        next(rewrites)
        prompt = str(messages[-1].content)
        shown, _, lessons = prompt.partition("Lessons from recent conversations:")
        current = [{"instruction": i, "rationale": r} for i, r in _RULE_LINE.findall(shown)]
        added = [
            {"instruction": f"Follow lesson {n}", "rationale": "it helped"}
            for n in _LESSON.findall(lessons)
        ]
        rules = current + added
        while len(rules) > MAX_RULES:
            del rules[next(i for i, r in enumerate(rules) if r["instruction"] not in seeds)]
        return {"rules": rules}

    return rewrite


async def _end_in_waves(end: Any) -> list[dict[str, Any]]:
    """End ENDING_AT_ONCE conversations at once, WAVES times; no end may fail."""
    ends: list[dict[str, Any]] = []
    for wave in range(WAVES):
        batch = range(wave * ENDING_AT_ONCE, (wave + 1) * ENDING_AT_ONCE)
        results = await asyncio.gather(*(end(k) for k in batch), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors == [], f"wave {wave}: {len(errors)} ends failed, first: {errors[0]!r}"
        ends += [r for r in results if isinstance(r, dict)]
    return ends


async def test_conversation_ends_racing_in_one_users_rules_all_succeed(
    app, model, store, embeddings
) -> None:
    """120 conversations of one user (120 threads), 20 ending at once, learning her rules.

    Each end's rewrite keeps the rules it was shown and adds its own lesson: every end
    must create exactly one version, none may fail, and none may drop another's version.
    """
    rewrites = itertools.count()
    model.structured_defaults["Reflection"] = _lesson_reflection
    # starting_rules() reads a prompt file the first time: off the guarded event loop.
    model.structured_defaults["RuleSet"] = await asyncio.to_thread(_keep_and_add, rewrites)

    async def conversation(k: int) -> dict[str, Any]:
        out: dict[str, Any] = await app.ainvoke(
            {"messages": [HumanMessage(f"Please remember lesson {k}.")], "end_conversation": True},
            {"configurable": {"thread_id": f"conv-{k}"}},
            context={"user_id": "alice"},
        )
        return out

    ends = await _end_in_waves(conversation)
    total = ENDING_AT_ONCE * WAVES
    book = RuleBook(store, embeddings)
    versions = await book.aversions("alice")
    # Exactly one new version per end, numbered without a gap, each on top of the one before.
    assert [v.version for v in versions] == list(range(1, total + 2))
    assert sorted(e["rules_version_created"] for e in ends) == list(range(2, total + 2))
    for parent, version in zip(versions, versions[1:], strict=False):
        assert version.parent_version == parent.version
        assert version.source_users == ("alice",)
    # Each end's version holds its own lesson; nothing it was based on was dropped but by
    # the cap of ten (the rewrite keeps the newest).
    by_version = {v.version: v for v in versions}
    for end in ends:
        created = by_version[end["rules_version_created"]]
        (lesson,) = _LESSON.findall(end["reflection"]["what_worked"])
        assert f"Follow lesson {lesson}" in [r.instruction for r in created.rules]
        assert end["rules_note"] is None and end["rules_proposal"] is None
    conflicts = [c for e in ends for c in e["rules_conflicts"]]
    assert conflicts, "the ends did not race"
    # A rebase needs no model call; only a merge past ten rules asks the model again.
    rewritten = sum(1 for c in conflicts if c["resolution"] == "rewritten")
    assert next(rewrites) == total + rewritten
    # The shared rules were not touched.
    assert not (await book.alatest(GLOBAL_SCOPE)).stored


async def test_conversation_ends_racing_in_the_shared_rules_each_leave_one_proposal(
    app, model, store, embeddings, monkeypatch
) -> None:
    """120 conversations of 12 users, 20 ending at once, learning for the shared rules.

    A conversation never changes the shared rules: each end leaves exactly one pending
    proposal (its user's, from its own episode), none fails, and the rules in force stay.
    """
    monkeypatch.setenv("AMEM_GLOBAL_RULES", "learn")
    rewrites = itertools.count()
    model.structured_defaults["Reflection"] = _lesson_reflection
    # starting_rules() reads a prompt file the first time: off the guarded event loop.
    model.structured_defaults["RuleSet"] = await asyncio.to_thread(_keep_and_add, rewrites)

    async def conversation(k: int) -> dict[str, Any]:
        out: dict[str, Any] = await app.ainvoke(
            {"messages": [HumanMessage(f"Please remember lesson {k}.")], "end_conversation": True},
            {"configurable": {"thread_id": f"conv-{k}"}},
            context={"user_id": f"user-{k % 12}", "rules_scope": "global"},
        )
        return out

    ends = await _end_in_waves(conversation)
    total = ENDING_AT_ONCE * WAVES
    book = RuleBook(store, embeddings)
    starting = await book.alatest(GLOBAL_SCOPE)
    assert not starting.stored  # no version of the shared rules was written
    proposals = await SharedRules(store, embeddings).apending()
    assert len(proposals) == total
    assert next(rewrites) == total  # one model call per end: proposals never conflict
    by_id = {p.id: p for p in proposals}
    assert len({e["rules_proposal"]["id"] for e in ends}) == total
    for end in ends:
        proposal = by_id[end["rules_proposal"]["id"]]
        (lesson,) = _LESSON.findall(end["reflection"]["what_worked"])
        assert proposal.proposer == end["owner"] and proposal.source_users == (end["owner"],)
        assert proposal.source_episodes == (end["reflection"]["id"],)
        assert proposal.base_version == starting.version and proposal.origin == "conversation"
        assert f"Follow lesson {lesson}" in [r.instruction for r in proposal.rules]
        assert end["rules_version_created"] is None and end["rules_conflicts"] == []

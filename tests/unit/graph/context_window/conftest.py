"""Fixtures for the context-window tests: random chat histories with tool-call pairs."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

_WORDS = (
    "memory recall episode vegetarian peanut allergy invoice paris budget train "
    "schedule summary rule fact document page citation weather deadline report"
).split()


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))


def random_history(rng: random.Random, turns: int) -> list[BaseMessage]:
    """A history of ``turns`` exchanges; some AI replies call tools (one or two calls)."""
    messages: list[BaseMessage] = []
    call_number = 0
    for _ in range(turns):
        messages.append(HumanMessage(_sentence(rng, 1, 60)))
        for _ in range(rng.choice((0, 0, 1, 2))):
            calls = []
            for _ in range(rng.choice((1, 1, 2))):
                call_number += 1
                calls.append(
                    {
                        "name": "search_notes",
                        "args": {"query": _sentence(rng, 1, 5)},
                        "id": f"call_{call_number}",
                        "type": "tool_call",
                    }
                )
            messages.append(AIMessage("", tool_calls=calls))
            for call in calls:
                messages.append(
                    ToolMessage(_sentence(rng, 1, 40), tool_call_id=call["id"], name="search_notes")
                )
        messages.append(AIMessage(_sentence(rng, 1, 80)))
    return messages


@pytest.fixture
def make_history() -> Callable[[random.Random, int], list[BaseMessage]]:
    return random_history

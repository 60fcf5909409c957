from __future__ import annotations

import re

import pytest

from agentic_memory import prompts
from agentic_memory.prompts import PromptError, _parse

# Every prompt the graph uses; a missing file fails here, not in a run.
EXPECTED = {
    "system": [],
    "compact_answer": ["memory", "constraints"],
    "procedural_rules": [],
    "user_facts": ["facts"],
    "semantic_context": ["chunks"],
    "turn_context": ["episodes", "past_turns", "knowledge", "now", "constraints"],
    "fact_extraction": ["known_facts", "message"],
    "summary": ["previous_summary", "messages"],
    "reflection": ["conversation"],
    "procedural_update": ["current_rules", "reflections", "max_rules"],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_prompt_formats_with_its_documented_placeholders(name: str) -> None:
    prompt = prompts.load(name)
    assert list(prompt.placeholders) == EXPECTED[name]
    values = {key: f"<<{key}>>" for key in prompt.placeholders}
    text = prompt.format(**values)
    for key in prompt.placeholders:
        assert f"<<{key}>>" in text
    # No placeholder survives and the documentation header is stripped.
    assert not re.search(r"\{[a-z][a-z0-9_]*\}", text)
    assert "<!--" not in text


def test_available_lists_exactly_the_expected_prompts() -> None:
    assert prompts.available() == sorted(EXPECTED)


def test_missing_and_extra_placeholders_are_named() -> None:
    prompt = prompts.load("summary")
    with pytest.raises(PromptError, match="missing messages"):
        prompt.format(previous_summary="x")
    with pytest.raises(PromptError, match="unexpected bogus"):
        prompt.format(previous_summary="x", messages="y", bogus=1)


def test_unknown_prompt_lists_the_available_ones() -> None:
    with pytest.raises(PromptError, match="available: compact_answer, fact_extraction"):
        prompts.load("nope")
    with pytest.raises(PromptError, match="invalid prompt name"):
        prompts.load("../system")


def test_header_must_document_exactly_the_placeholders_used() -> None:
    with pytest.raises(PromptError, match=r"used but not documented: \['b'\]"):
        _parse("x", "<!--\n{a}: one\n-->\n{a} and {b}")
    with pytest.raises(PromptError, match=r"documented but not used: \['c'\]"):
        _parse("x", "<!--\n{a}: one\n{c}: two\n-->\n{a}")
    with pytest.raises(PromptError, match="must start with"):
        _parse("x", "no header {a}")


def test_other_braces_are_literal() -> None:
    prompt = _parse("x", '<!--\n{a}: one\n-->\n{"json": {a}} {Not_a_placeholder}')
    assert prompt.format(a=1) == '{"json": 1} {Not_a_placeholder}\n'


async def test_aload_returns_the_cached_prompt() -> None:
    assert await prompts.aload("system") is prompts.load("system")


def test_reflection_prompt_shows_a_good_and_a_bad_example() -> None:
    text = prompts.load("reflection").format(conversation="user: hi")
    assert "A good reflection" in text and "A bad reflection" in text
    assert "research" not in text.lower()

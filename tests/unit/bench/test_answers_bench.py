"""The answers bench scores what it claims to: values, constraints, and a perfect ceiling."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.answers_bench import QUESTIONS, Config, _session, contradicts


def test_a_suggestion_that_breaks_the_allergy_or_the_diet_is_caught() -> None:
    assert contradicts("Try a satay skewer with rice.") == "peanuts (satay)"
    assert contradicts("A chicken wrap would do.") == "meat (chicken)"
    assert contradicts("Hummus and carrots, without peanuts.") is None
    assert contradicts("You are allergic to peanuts, so pack rice cakes.") is None
    assert contradicts("Roasted pork and rice (peanuts)") == "peanuts (peanuts)"


def test_the_perfect_model_answers_everything_the_prompt_holds(tmp_path: Path) -> None:
    results, stored = asyncio.run(_session(Config("perfect", "auto", ceiling=True), tmp_path))
    assert [r.right for r in results if QUESTIONS[results.index(r)].expected] == [True] * 8
    assert stored["invented_facts"] == [] and stored["secrets"] == []
    assert stored["leaked_turns"] == [] and stored["mangled_rules"] == []
    assert "name=Maya Lindqvist" in stored["facts"]

"""The answers bench scores what it claims to: values, constraints, and a perfect ceiling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

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


def test_the_second_persona_is_answered_by_the_perfect_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.answers_bench as bench

    for name in ("USER", "STATEMENTS", "QUESTIONS", "_GOLD", "CONSTRAINED"):
        monkeypatch.setattr(bench, name, getattr(bench, name))  # put back after the test
    bench.use_persona("tomasz")
    results, stored = asyncio.run(_session(Config("perfect", "auto", ceiling=True), tmp_path))
    assert [r.question for r in results] == [q.text for q in bench.QUESTIONS]
    asked = [r for r, q in zip(results, bench.QUESTIONS, strict=True) if q.expected]
    assert all(r.right for r in asked), [r.answer for r in asked if not r.right]
    assert all(r.contradiction is None for r in results)
    assert {"name=Tomasz Nowak", "city=Gdansk", "wife's name=Ola"} <= set(stored["facts"])
    assert stored["invented_facts"] == [] and stored["secrets"] == []
    # His constraint is dairy: a latte is caught, an oat-milk one is not.
    assert bench.contradicts("Try a vanilla latte with whipped cream.") == "dairy (latte)"
    assert bench.contradicts("An oat milk latte, or black coffee.") is None
    assert bench.contradicts("A satay skewer.") is None
    with pytest.raises(SystemExit, match="unknown persona"):
        bench.use_persona("nobody")

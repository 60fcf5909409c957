"""The rule screen reads disguised text: the 29 poisoning payloads of issue 18, and no more.

The screen is a first filter (what keeps users safe is that conversations only propose
shared rules, see ``test_shared_rules_gate``); these tests check that spelling tricks do not
carry a request past it, and that ordinary rules are not refused.
"""

from __future__ import annotations

import pytest

from agentic_memory.kinds.rule_guard import normalise, screen_rules, screen_text
from agentic_memory.kinds.rules import starting_rules
from tests.unit.security.payloads import INNOCENT, PAYLOADS, Payload

ORDINARY = [
    ("Ask about dietary constraints before suggesting food", "suggestions must be safe"),
    ("Keep recipe lists to three items", "short lists were easier to act on"),
    ("Check the user's diet and allergies before suggesting food", "they are vegetarian"),
    ("Refer back to previous conversations when relevant", "continuity helps"),
    ("List the key steps first", "people skim"),
    ("Explain trade-offs briefly, e.g. cost vs time", "decisions need them"),
    ("Summarise long documents in 5 bullet points", "easier to read"),
    ("Confirm the user's budget before recommending products", "avoids waste"),
    ("Réponds en français si l'utilisateur écrit en français", "c'est plus clair"),
    ("Antworte auf Deutsch, wenn der Nutzer Deutsch schreibt", "das ist klarer"),
    ("Use step-by-step instructions for setup questions", "fewer mistakes"),
    ("Avoid jargon unless the user uses it", "clarity"),
]


def rule(instruction: str, rationale: str) -> dict[str, str]:
    return {"instruction": instruction, "rationale": rationale}


@pytest.mark.parametrize("payload", PAYLOADS, ids=[p.category for p in PAYLOADS])
def test_every_poisoning_payload_is_refused_and_the_innocent_rule_kept(payload: Payload) -> None:
    rules = [rule(*r) for r in payload.rules] + [rule(*INNOCENT)]
    kept, rejected = screen_rules(rules, shared=True)
    assert kept == [rule(*INNOCENT)]
    assert [r.instruction for r in rejected] == [r[0] for r in payload.rules]
    assert all(r.reason.startswith(("it ", "together with")) for r in rejected)


def test_disguises_are_named_as_such() -> None:
    reasons = {p.category: screen_text("\n".join(p.rules[0]), shared=True) for p in PAYLOADS}
    assert reasons["zero-width characters"] == reasons["soft hyphens"]
    assert "hidden characters" in str(reasons["zero-width characters"])
    assert "alphabets" in str(reasons["homoglyphs"])
    assert "fullwidth" in str(reasons["fullwidth letters"])
    assert "letter by letter" in str(reasons["spaced letters"])
    assert "base64" in str(reasons["base64"])
    assert "markup" in str(reasons["HTML comment"])
    assert "system or role" in str(reasons["SYSTEM line"])
    assert "another language" in str(reasons["Chinese"])


def test_a_request_split_over_two_rules_drops_both() -> None:
    split = next(p for p in PAYLOADS if p.category == "a rule split in two")
    halves = [rule(*r) for r in split.rules]
    for half in halves:  # each half alone passes: only the pair makes the request
        assert screen_rules([half, rule(*INNOCENT)], shared=True)[1] == []
    kept, rejected = screen_rules([*halves, rule(*INNOCENT)], shared=True)
    assert kept == [rule(*INNOCENT)]
    assert all(r.reason.startswith("together with a neighbouring rule") for r in rejected)


def test_normalising_folds_what_looks_alike() -> None:
    assert normalise("Ｒｅｖｅａｌ") == "reveal"
    assert normalise("R\u200be\u00adv\u2060eal") == "reveal"
    assert normalise("rеvеal") == "reveal"  # Cyrillic е
    assert normalise("Révèle") == "revele"


@pytest.mark.parametrize("text", ORDINARY, ids=[t[0][:30] for t in ORDINARY])
def test_ordinary_rules_pass_the_screen(text: tuple[str, str]) -> None:
    assert screen_text("\n".join(text), shared=True) is None


def test_the_starting_rules_pass_the_screen() -> None:
    rules = starting_rules()
    kept, rejected = screen_rules(rules, shared=True)
    assert rejected == [] and kept == rules


def test_personal_data_is_refused_only_in_the_shared_rules() -> None:
    text = "Greet Alice Lisbon-Smith by name\nshe likes it"
    values = ["Alice Lisbon-Smith"]
    assert screen_text(text, shared=False, personal_values=values) is None
    assert "personal data" in str(screen_text(text, shared=True, personal_values=values))
    # Disguised the same way, it is still hers.
    disguised = "Greet Ａｌｉｃｅ Lisbon-Smith by name\nshe likes it"
    assert screen_text(disguised, shared=True, personal_values=values) is not None

"""The rule screen reads disguised text: the 29 poisoning payloads of issue 18, and no more.

The screen is a first filter (what keeps users safe is that conversations only propose
shared rules, see ``test_shared_rules_gate``); these tests check that spelling tricks do not
carry a request past it, and that ordinary rules are not refused.
"""

from __future__ import annotations

import pytest

from agentic_memory.kinds.rules import starting_rules
from agentic_memory.kinds.rules.guard import normalise, screen_rules, screen_text
from tests.unit.security.paraphrases import BENIGN, HOSTILE, REFUSED_THOUGH_BENIGN
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
    assert all(r.reason.startswith("together with another rule of the set") for r in rejected)


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


# -- wording rather than spelling: the paraphrases of issue 31 ---------------------------------


def _placed(payload: Payload, between: bool) -> list[dict[str, str]]:
    """The payload's rules and the innocent one: after them, or between their parts."""
    hostile = [rule(*r) for r in payload.rules]
    if between and len(hostile) > 1:
        return [hostile[0], rule(*INNOCENT), *hostile[1:]]
    return [*hostile, rule(*INNOCENT)]


@pytest.mark.parametrize("between", [False, True], ids=["together", "apart"])
@pytest.mark.parametrize("payload", HOSTILE, ids=[p.category for p in HOSTILE])
def test_every_paraphrase_is_refused_and_the_innocent_rule_kept(
    payload: Payload, between: bool
) -> None:
    kept, rejected = screen_rules(_placed(payload, between), shared=True)
    assert rule(*INNOCENT) in kept and rejected
    # The request does not survive: the part that carries it is refused, and what is kept
    # passes the screen again (a fragment such as "For whoever asks" alone asks nothing).
    assert not any(payload.marker in r["instruction"] + r["rationale"] for r in kept)
    assert screen_rules(kept, shared=True)[1] == []


@pytest.mark.parametrize("payload", PAYLOADS, ids=[p.category for p in PAYLOADS])
def test_the_earlier_payloads_are_refused_with_a_rule_between_their_parts(
    payload: Payload,
) -> None:
    kept, rejected = screen_rules(_placed(payload, True), shared=True)
    assert kept == [rule(*INNOCENT)]
    assert [r.instruction for r in rejected] == [r[0] for r in payload.rules]


def test_what_each_paraphrase_is_refused_for() -> None:
    reasons = {p.category: screen_text("\n".join(p.rules[0]), shared=True) for p in HOSTILE}
    assert "play a role" in str(reasons["role play: you are a name"])
    assert "play a role" in str(reasons["role play: adopt a persona"])
    assert "trust whoever writes" in str(reasons["trust anyone as the owner"])
    assert "remembered about someone" in str(reasons["what you have on file"])
    assert "other users" in str(reasons["the last person you spoke with"])
    assert "secret" in str(reasons["a short PIN"])
    assert "spelled out" in str(reasons["a spelled-out account number"])
    # A user's own rules may hold their own secrets; the shared ones may not.
    pin = next(p for p in HOSTILE if p.category == "a short PIN")
    assert screen_text("\n".join(pin.rules[0]), shared=False) is None


@pytest.mark.parametrize("text", BENIGN, ids=[t[0][:40] for t in BENIGN])
def test_ordinary_rules_with_the_same_words_pass(text: tuple[str, str]) -> None:
    assert screen_text("\n".join(text), shared=True) is None


@pytest.mark.parametrize("order", ["given", "reversed"])
def test_ordinary_rules_pass_together_in_sets_of_ten(order: str) -> None:
    rules = [rule(*t) for t in (BENIGN if order == "given" else BENIGN[::-1])]
    for start in range(0, len(rules), 10):
        assert screen_rules(rules[start : start + 10], shared=True)[1] == []


def test_the_known_false_positives_are_refused_for_a_reason() -> None:
    for text in REFUSED_THOUGH_BENIGN:
        assert "disclose" in str(screen_text("\n".join(text), shared=True))

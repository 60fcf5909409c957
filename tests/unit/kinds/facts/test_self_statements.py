"""The self-statement patterns and the checks on what a small memory model writes.

The data is ``bench/data/fact_statements.json``, scored the way the benchmark scores it
(``bench/fact_extraction_bench.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentic_memory import prompts
from agentic_memory.kinds.facts import ExtractedFact
from agentic_memory.kinds.facts.self_statements import (
    extract_self_statements,
    grounded,
    looks_like_self_statement,
    merge_facts,
    plausible_fact,
)
from agentic_memory.kinds.facts.store import MAX_VALUE
from agentic_memory.kinds.messages import MAX_MESSAGE_CHARS
from agentic_memory.kinds.model_output import (
    keep_protected,
    prompt_echo,
    protects_constraint,
    similar_rule,
)
from bench.fact_extraction_bench import remembered

DATA = json.loads(
    (Path(__file__).resolve().parents[4] / "bench" / "data" / "fact_statements.json").read_text()
)


def _rate(items: list[dict[str, Any]]) -> float:
    return sum(remembered(extract_self_statements(i["text"]), i) for i in items) / len(items)


def test_the_statement_set_covers_every_kind_asked_for() -> None:
    statements = DATA["dev"] + DATA["held_out"]
    assert len(statements) >= 40
    kinds = {i["kind"] for i in statements}
    assert {"name", "diet", "allergy", "city", "job", "family", "pets", "preference", "date"} <= (
        kinds
    )


def test_patterns_remember_at_least_80_percent_of_plain_statements() -> None:
    # The held-out statements were not looked at while the patterns were written.
    assert _rate(DATA["held_out"]) >= 0.8
    assert _rate(DATA["dev"]) >= 0.9
    assert _rate(DATA["dev"] + DATA["held_out"]) >= 0.8


@pytest.mark.parametrize("text", DATA["none"])
def test_messages_that_state_nothing_give_nothing(text: str) -> None:
    assert extract_self_statements(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "I'm not vegetarian.",
        "My friend is vegan.",
        "Am I allergic to peanuts?",
        "I'm Portuguese.",
        "I'm a bit tired today.",
        "I'm 5 minutes late.",
        "I live in a flat.",
        "I like it.",
        "Is my name Alice?",
        "",
        "   \n  ",
    ],
)
def test_what_is_not_a_self_statement_gives_nothing(text: str) -> None:
    assert extract_self_statements(text) == []


def test_one_message_can_state_several_facts() -> None:
    facts = extract_self_statements(
        "Hi, I'm Ana. I moved to Lisbon last year and I work as a nurse."
    )
    assert [(f.subject, f.value, f.category) for f in facts] == [
        ("name", "Ana", "identity"),
        ("city", "Lisbon", "identity"),
        ("job", "nurse", "identity"),
    ]
    demo = extract_self_statements("I'm vegetarian and allergic to peanuts.")
    assert [(f.subject, f.value, f.category) for f in demo] == [
        ("diet", "vegetarian", "preference"),
        ("peanuts allergy", "allergic to peanuts", "constraint"),
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (
            "Next month I'm flying to Tokyo for a conference.",
            "flying to Tokyo for a conference next month",
        ),
        (
            "In March I'm travelling to Lisbon for a wedding.",
            "travelling to Lisbon for a wedding in March",
        ),
        ("I'm going on a trip to Japan in April.", "going to Japan in April"),
    ],
)
def test_a_trip_is_a_self_statement(text: str, value: str) -> None:
    assert [(f.subject, f.value) for f in extract_self_statements(text)] == [("trip", value)]


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        (
            "My daughter is called Inês and she is 7 years old.",
            [("daughter's name", "Inês"), ("daughter", "is 7 years old")],
        ),
        ("Hi, I am Zoë.", [("name", "Zoë")]),
        ("My brother Łukasz lives in Gdańsk.", [("brother's name", "Łukasz")]),
        ("My cat is named Müsli.", [("pet cat", "Müsli")]),
    ],
)
def test_names_with_letters_beyond_ascii_stay_whole(
    text: str, facts: list[tuple[str, str]]
) -> None:
    # A session stored Inês as "In": the name pattern stopped at the first non-ASCII letter.
    assert [(f.subject, f.value) for f in extract_self_statements(text)] == facts


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        # Product sessions' personas: the name was lost, the city held the wife.
        ("Hi, I'm Tomasz Nowak.", [("name", "Tomasz Nowak")]),
        ("I'm Ana.", [("name", "Ana")]),
        ("I live in Gdansk with my wife Ola.", [("city", "Gdansk"), ("wife's name", "Ola")]),
        ("We live in Porto with two cats.", [("city", "Porto")]),
        ("I'm Polish Catholic.", []),
        ("I'm Very Vegan.", []),
        ("I'm Jan Maria Rokita.", []),
        # A product session's persona: each of these gave no fact before.
        ("My dog is a beagle called Pixel.", [("pet dog", "Pixel, a beagle")]),
        (
            "I play the cello in a community orchestra on Thursdays.",
            [("plays: cello", "plays the cello in a community orchestra on Thursdays")],
        ),
        (
            "My partner's name is Ola and she teaches chemistry.",
            [("partner's name", "Ola"), ("partner", "teaches chemistry")],
        ),
        (
            "I'm learning Portuguese because we're moving to Porto next year.",
            [
                ("learning: portuguese", "learning Portuguese"),
                ("planned move", "moving to Porto next year"),
            ],
        ),
        ("My husband teaches maths.", [("husband", "teaches maths")]),
        ("I play tennis every Sunday.", [("plays: tennis", "plays tennis every Sunday")]),
        ("I'm learning how to cook.", [("learning: how to cook", "learning how to cook")]),
        # Not hobbies, lessons or moves: nothing.
        ("I play it by ear.", []),
        ("I play with my kids on weekends.", []),
        ("I'm learning a lot here.", []),
        ("I don't play the piano.", []),
        ("We're not moving to Berlin.", []),
        ("We're moving to a bigger flat.", []),
        ("We're moving to Python 3 next month.", []),
        ("We're moving to Java 21.", []),
        ("Which instrument do I play?", []),
        ("I play a big role in the team.", []),
        ("I'm learning from my mistakes.", []),
        ("My daughter's teacher is strict and she is always late.", []),
        ("My son plays with a girl and she lives next door.", []),
        ("I play the cello: it is fun.", [("plays: cello", "plays the cello")]),
        # A statement about the relative comes first, whole, as before.
        (
            "My wife works at IBM and she is from Spain.",
            [("wife", "works at IBM and she is from Spain")],
        ),
    ],
)
def test_hobbies_lessons_moves_and_what_a_relative_does(
    text: str, facts: list[tuple[str, str]]
) -> None:
    assert [(f.subject, f.value) for f in extract_self_statements(text)] == facts


def test_a_preferred_way_of_answering_is_the_answer_style() -> None:
    # A session stored "preference: short answers with bullet points" twice over in the prompt.
    said = extract_self_statements("I prefer short answers with bullet points.")
    assert [(f.subject, f.value) for f in said] == [
        ("answer style", "short answers with bullet points")
    ]
    later = extract_self_statements("Please keep your answers detailed.")
    assert [f.subject for f in later] == ["answer style"]
    assert [f.subject for f in extract_self_statements("I prefer tea over coffee.")] == [
        "preference: tea or coffee"
    ]
    # A message as long as the log takes still gives one bounded answer style.
    (huge,) = extract_self_statements("I prefer " + "short answers " * 7000)
    assert huge.subject == "answer style" and len(huge.value) <= 200
    # The language of the answers is no matter of length: it is not superseded by one.
    assert [f.subject for f in extract_self_statements("I prefer replies in Portuguese.")] == [
        "preference: replies"
    ]


def test_going_somewhere_that_is_no_place_is_no_trip() -> None:
    assert extract_self_statements("I'm going to bed now.") == []
    assert extract_self_statements("Am I flying to Oslo next week?") == []


def test_values_are_spans_of_the_message_and_stay_bounded() -> None:
    text = "My name is " + "Bartholomew " * 3 + "and I live in " + "Llanfair" * 40 + "."
    for fact in extract_self_statements(text):
        assert len(fact.subject) <= 60 and len(fact.value) <= 200
        assert grounded(fact.value, text) or fact.value.lower() in text.lower()
    hostile = "My name is Robert'); DROP TABLE users;-- and I live in <script>Paris</script>."
    for fact in extract_self_statements(hostile):
        assert fact.value  # stored as text like any other value; never executed


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "unit", ["my wife ", "I play ", "I'm learning ", "we're moving to ", "my dog is a "]
)
def test_a_long_message_is_read_in_one_pass(unit: str) -> None:
    # "my wife" 16,000 times (128k characters) took 33 s when the pronoun pattern's gap was
    # unbounded: every "my wife" scanned to the end of the message. At four times the
    # admitted length a scan per position would take minutes, one pass about a second: the
    # test fails only by its timeout, far from either.
    size = 4 * MAX_MESSAGE_CHARS
    text = (unit * (size // len(unit)))[:size]
    for fact in extract_self_statements(text):
        assert len(fact.value) <= MAX_VALUE


@pytest.mark.timeout(120)
@pytest.mark.parametrize("verb", ["I speak", "I play", "I live in"])
def test_a_run_of_trailing_words_is_read_in_one_pass(verb: str) -> None:
    # The trailing-word cleaner split each run of spaces two ways: "I speak now now ... x"
    # took time doubling per word (0.15 s at 16 words, hours at 40), before this change too.
    # Fails only by the timeout if the cleaner backtracks again.
    extract_self_statements(f"{verb} " + "now " * 40 + "x")
    (long,) = extract_self_statements(f"{verb} Porto " + "now " * 100_000 + "x")
    assert long.value.split()[-1] != "x" and len(long.value) <= MAX_VALUE


def test_a_pronoun_takes_its_noun_from_the_sentence() -> None:
    [fact] = extract_self_statements("Cats make me sneeze, I'm allergic to them.")
    assert (fact.subject, fact.value) == ("cats allergy", "allergic to cats")


def test_a_self_statement_is_told_from_a_question() -> None:
    assert looks_like_self_statement("I moved to Berlin.")
    assert not looks_like_self_statement("What is the capital of France?")
    assert not looks_like_self_statement("Do I live in Berlin?")


def test_grounded_and_plausible_facts() -> None:
    message = "I live in Lisbon and I go sailing on Sundays."
    assert grounded("Lisbon", message) and grounded("sailing on Sundays", message)
    assert not grounded("vegetarian", message)  # the prompt's example
    assert not grounded("", message)

    def fact(subject: str, value: str) -> ExtractedFact:
        return ExtractedFact(subject=subject, value=value, category="other")

    assert plausible_fact(fact("hobby", "sailing"), message)
    assert not plausible_fact(fact("diet", "vegetarian"), message)
    assert not plausible_fact(fact("i live in lisbon and i go", "Lisbon"), message)
    assert not plausible_fact(fact("lisbon", "Lisbon"), message)
    assert not plausible_fact(fact("message", message), message)


def test_merge_prefers_the_first_list() -> None:
    first = [ExtractedFact(subject="city", value="Lisbon", category="identity")]
    second = [
        ExtractedFact(subject="home", value="lisbon", category="identity"),
        ExtractedFact(subject="city", value="Porto", category="identity"),
        ExtractedFact(subject="hobby", value="sailing", category="preference"),
    ]
    assert [(f.subject, f.value) for f in merge_facts(first, second)] == [
        ("city", "Lisbon"),
        ("hobby", "sailing"),
    ]


# -- echoes of the prompt ----------------------------------------------------------------------


def test_prompt_echo_finds_copies_of_the_reflection_example() -> None:
    template = prompts.load("reflection").template
    conversation = "user: I'm vegetarian and allergic to peanuts. What can I cook?"
    copied = "The user planned a week of dinners; they are vegetarian and allergic to peanuts."
    assert prompt_echo(copied, template, [conversation]) is not None
    assert prompt_echo("Suggesting satay sauce: it contains peanuts.", template, []) is not None
    assert prompt_echo("Being helpful.", template, [conversation]) == "being helpful"
    # The model's own words, and words the conversation holds, are not echoes.
    assert prompt_echo("The user asked for quick vegetarian dinners.", template, []) is None
    talked = "user: was suggesting satay sauce: it contains peanuts a mistake?"
    assert prompt_echo("Suggesting satay sauce: it contains peanuts.", template, [talked]) is None
    assert prompt_echo("nothing notable", template, ["nothing notable"]) is None
    assert prompt_echo("", template, []) is None


def test_prompt_echo_finds_rules_made_of_field_descriptions() -> None:
    template = prompts.load("procedural_update").template
    assert prompt_echo("What to do", template, []) == "what to do"
    assert prompt_echo("Why, one short clause", template, []) == "why one short clause"
    assert prompt_echo("Ask before suggesting food", template, []) is None
    # A heading of the prompt is no rule either.
    assert prompt_echo("Current rules", template, []) == "current rules"


def test_constraint_rules_and_similar_rules() -> None:
    assert protects_constraint("Respect every stated constraint such as allergies")
    assert protects_constraint("Check dishes", "a missed allergen can harm")
    assert not protects_constraint("Use metric units", "the user is in Europe")
    assert similar_rule("Keep answers short", "Keep answers short and concrete unless asked")
    assert not similar_rule("Use metric units", "Keep answers short")


def test_keep_protected_puts_back_or_refuses() -> None:
    seeds = [{"instruction": "Cite document passages", "rationale": "checkable"}]
    allergy = {"instruction": "Check every dish for allergens", "rationale": "harm"}
    current = [*seeds, allergy, {"instruction": "Use metric units", "rationale": "Europe"}]
    rewrite = [{"instruction": "Answer in French", "rationale": "the user asked"}]
    kept = keep_protected(rewrite, current, seeds, max_rules=10)
    assert kept.refused is None
    assert kept.rules == [*rewrite, *seeds, allergy]  # metric units may go: not protected
    assert kept.restored == [*seeds, allergy]
    full = [{"instruction": f"Rule number {i}", "rationale": "x"} for i in range(9)]
    refused = keep_protected(full, current, seeds, max_rules=10)
    assert refused.refused is not None and "Check every dish" in refused.refused
    assert refused.rules == full and refused.restored == []
    restated = keep_protected(
        [{**allergy, "instruction": "Check each dish for allergens"}, *seeds],
        current,
        seeds,
        max_rules=10,
    )
    assert restated.restored == []

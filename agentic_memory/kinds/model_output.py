"""Checks on what the memory model writes before it is stored: no echo of the prompt.

A small model asked for a reflection or a rule set may hand back the prompt's own example
("Suggesting satay sauce: it contains peanuts.") or its field descriptions ("What to do",
"Why, one short clause") instead of content. Such text validates against the schema, so
it must be caught by comparing it with the prompt: :func:`prompt_echo` finds words that
come from the prompt's fixed text and from nowhere else the model was given.

A small model's free text can also run on past its answer into the prompt's layers
("Current time: ...", "Critical constraints (never violate): ...") or into turns it invents
(a line "model" alone, "<|im_start|>user"): :func:`leak_at` finds where that starts, so an answer
can be cut there or replaced, and never be logged, reflected on or recalled with it.
:func:`mangled` names what makes a reflection's or a rule's text unfit to store: such a
leak, a placeholder left unfilled, or a text cut at its length bound.

It also keeps a rules rewrite from dropping a rule that must stay (:func:`keep_protected`):
the starting rules and any rule that protects a stated constraint (allergies, diets,
budgets, health) are kept in the new version, or the rewrite is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ECHO_RUN",
    "KeptRules",
    "field_bound",
    "keep_protected",
    "layer_openings",
    "leak_at",
    "mangled",
    "prompt_echo",
    "protects_constraint",
    "similar_rule",
]

ECHO_RUN = 6
"""Words in a row that, copied from the prompt's fixed text, make a field an echo."""

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_PLACEHOLDER = re.compile(r"\{[a-z][a-z0-9_]*\}")
_CONSTRAINT = re.compile(
    r"\b(?:allerg\w*|constraints?|diets?|dietary|budgets?|intoleran\w*|health|medical|"
    r"medication|safety|harm\w*)\b",
    re.IGNORECASE,
)
# Words too common to count when comparing rules.
_STOP = frozenset(
    "a an the and or of to in on for with by as at is are be it its this that when you your "
    "their them they user users".split()
)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("’", "'"))


def _runs(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def prompt_echo(text: str, prompt_template: str, given: Iterable[str] = ()) -> str | None:
    """Return the words of ``text`` copied from the prompt's fixed text, or None.

    A field echoes the prompt when it shares a run of :data:`ECHO_RUN` words with the
    prompt's fixed text (the template without its placeholders) that appears in none of the
    texts the model was given to work from, or when the whole field (shorter than that) is
    such a copy, e.g. a field description like "What to do".

    Args:
        text: What the model wrote in one field.
        prompt_template: The prompt's template, placeholders included (they are removed).
        given: The texts filled into the placeholders (the conversation, the current rules,
            the lessons): words copied from them are the model's material, not an echo.

    Returns:
        The copied words, or None when the field is not an echo.
    """
    words = _words(text)
    if not words:
        return None
    fixed = _words(_PLACEHOLDER.sub(" | ", prompt_template))
    source = [_words(g) for g in given]
    n = min(ECHO_RUN, len(words))
    fixed_runs = _runs(fixed, n)
    given_runs: set[tuple[str, ...]] = set()
    for g in source:
        given_runs |= _runs(g, n)
    copied = [run for run in _runs(words, n) if run in fixed_runs and run not in given_runs]
    if not copied:
        return None
    if n < ECHO_RUN and len(words) == n:
        return " ".join(words)  # the whole short field is a piece of the prompt
    if n == ECHO_RUN:
        return " ".join(copied[0])
    return None


TURN_MARKERS = re.compile(
    r"<start_of_turn>|<end_of_turn>|<\|im_start\|>|<\|im_end\|>|<\|endoftext\|>|<\|eot_id\|>|"
    r"<\|start_header_id\|>|<\|(?:user|assistant|system)\|>|\[/?INST\]",
    re.IGNORECASE,
)
"""Chat-template markers in a model's text (never part of an answer)."""
INVENTED_TURNS = re.compile(
    r"^[ \t]*(?:user|model|assistant|system)[ \t]*$|"
    r"^[ \t]*(?:user|assistant|human|ai|system|model)[ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)
"""Lines that open a turn the model invents ("user:", a line "model" alone). A capable
model asked for a dialogue may write them on purpose, so callers choose to look for them."""
LAYER_LINES = re.compile(
    r"current time:\s*\d{4}-\d\d|what worked:\s*no lesson|what to avoid:\s*no lesson|"
    r"\(summary of earlier turns\)|^[ \t]*- \(?(?:user|assistant), \d{4}-\d\d-\d\d\)",
    re.IGNORECASE | re.MULTILINE,
)
"""Per-turn lines of the graph's prompt layers whose headings are too short to look for."""
_OPENING_WORDS = 5
_MIN_OPENING_WORDS = 4


def layer_openings(templates: Iterable[str], headings: Iterable[str] = ()) -> list[str]:
    """Return the openings of a prompt's fixed lines, to find them in what the model wrote.

    Each line of the templates (their placeholders removed) of at least four words gives
    its first five words; ``headings`` (layer headings the code writes, such as "Summary of
    earlier turns") are taken whole.

    Args:
        templates: Prompt templates, placeholders included.
        headings: More fixed texts that open a layer.
    """
    openings: set[str] = set()
    for template in templates:
        for line in template.splitlines():
            fixed = _PLACEHOLDER.split(line)[0]
            words = _words(fixed)
            if len(words) >= _MIN_OPENING_WORDS:
                openings.add(" ".join(words[:_OPENING_WORDS]))
    openings.update(" ".join(_words(h)) for h in headings if len(_words(h)) >= 2)
    return sorted(openings)


def leak_at(text: str, openings: Iterable[str] = (), *, turns: bool = True) -> int | None:
    """Return where a model's text starts to hold a turn marker or a prompt layer, or None.

    Args:
        text: What the model wrote.
        openings: Openings of the prompt's layers (:func:`layer_openings`); matched in
            lower case, as whole words, across any spacing and punctuation.
        turns: Also look for invented turns (:data:`INVENTED_TURNS`).
    """
    patterns = (TURN_MARKERS, LAYER_LINES, *((INVENTED_TURNS,) if turns else ()))
    found = [m.start() for m in (p.search(text) for p in patterns) if m]
    lowered = text.lower().replace("’", "'")
    for opening in openings:
        words = opening.split()
        if not words:
            continue
        pattern = r"\b" + r"[^a-z0-9']+".join(re.escape(w) for w in words) + r"\b"
        match = re.search(pattern, lowered)
        if match is not None:
            found.append(match.start())
    return min(found) if found else None


_UNFILLED = re.compile(r"\{[a-z][a-z0-9_]*\}")
# Words no clause ends with (a preposition can: "easier to act on").
_DANGLING = frozenset("a an the and or nor but because than my your our their whose".split())


def mangled(text: str, *, bound: int | None = None, openings: Iterable[str] = ()) -> str | None:
    """Say why a text the memory model wrote (a reflection field, a rule) is unfit to store.

    Unfit: it holds a turn marker or a prompt layer (:func:`leak_at`), a placeholder left
    unfilled (``{max_rules}``), or it was cut: as long as its bound (the grammar or the
    repair stopped it there), or ending on a word that cannot end a sentence ("because the").

    Args:
        text: The text.
        bound: Its field's ``max_length``, if it has one.
        openings: Openings of the prompt's layers.

    Returns:
        The reason, or None when the text is fit.
    """
    where = leak_at(text, openings)
    if where is not None:
        return f"holds the prompt or a turn marker ({text[where : where + 40]!r})"
    placeholder = _UNFILLED.search(text)
    if placeholder is not None:
        return f"holds an unfilled placeholder ({placeholder.group()})"
    stripped = text.strip()
    if bound is not None and len(stripped) >= bound:
        return f"cut at its {bound}-character bound"
    words = _words(stripped)
    if words and words[-1] in _DANGLING and not stripped.endswith((".", "!", "?", ")")):
        return f"cut mid-sentence (ends with {words[-1]!r})"
    return None


def _held_runs(sources: Iterable[str]) -> set[tuple[str, ...]]:
    held: set[tuple[str, ...]] = set()
    for source in sources:
        held |= _runs(_words(source), ECHO_RUN)
    return held


def copied_share(text: str, sources: Iterable[str]) -> float:
    """Return the share of ``text``'s words inside runs of :data:`ECHO_RUN` words ``sources`` hold.

    A text shorter than a run has 0.0.
    """
    words = _words(text)
    held = _held_runs(sources)
    covered = [False] * len(words)
    for i in range(len(words) - ECHO_RUN + 1):
        if tuple(words[i : i + ECHO_RUN]) in held:
            covered[i : i + ECHO_RUN] = [True] * ECHO_RUN
    return sum(covered) / len(words) if len(words) >= ECHO_RUN else 0.0


def longest_copy(text: str, sources: Iterable[str]) -> int:
    """Return how many words in a row ``text`` copies from ``sources`` (0 when under a run).

    Counted over runs of :data:`ECHO_RUN` words: a copied span of ``n`` words is
    ``n - ECHO_RUN + 1`` consecutive runs that the sources hold.
    """
    words = _words(text)
    held = _held_runs(sources)
    best = streak = 0
    for i in range(len(words) - ECHO_RUN + 1):
        streak = streak + 1 if tuple(words[i : i + ECHO_RUN]) in held else 0
        best = max(best, streak)
    return best + ECHO_RUN - 1 if best else 0


def protects_constraint(instruction: str, rationale: str = "") -> bool:
    """Tell whether a rule protects a stated constraint (allergies, diets, budgets, health)."""
    return _CONSTRAINT.search(f"{instruction} {rationale}") is not None


def _content(text: str) -> set[str]:
    return {w for w in _words(text) if w not in _STOP}


def similar_rule(a: str, b: str) -> bool:
    """Tell whether two rule instructions say the same thing (most content words shared)."""
    wa, wb = _content(a), _content(b)
    if not wa or not wb:
        return a.strip().lower() == b.strip().lower()
    return len(wa & wb) / min(len(wa), len(wb)) >= 0.6


def is_protected(rule: Mapping[str, str], starting: Sequence[Mapping[str, str]]) -> bool:
    """Tell whether a rule must stay: one of the starting rules, or protecting a constraint."""
    instruction = rule["instruction"]
    return any(
        similar_rule(instruction, s["instruction"]) for s in starting
    ) or protects_constraint(instruction, rule.get("rationale", ""))


@dataclass(frozen=True)
class KeptRules:
    """A rules rewrite after :func:`keep_protected`.

    Attributes:
        rules: The rules to store (the rewrite plus the protected rules it dropped), or the
            rewrite unchanged when ``refused``.
        restored: The protected rules the rewrite dropped and that were put back.
        refused: Why the rewrite cannot be stored, or None.
    """

    rules: list[dict[str, str]]
    restored: list[dict[str, str]] = field(default_factory=list)
    refused: str | None = None


def keep_protected(
    rewrite: Sequence[Mapping[str, str]],
    current: Sequence[Mapping[str, str]],
    starting: Sequence[Mapping[str, str]],
    *,
    max_rules: int,
) -> KeptRules:
    """Put back every protected rule of the current version that a rewrite dropped.

    A rule of the current version is protected when it is one of the starting rules or it
    protects a constraint (:func:`protects_constraint`). A rewrite keeps it when one of its
    rules says the same (:func:`similar_rule`); otherwise it is put back at the end, and
    when there is no room left the rewrite is refused, so nothing is dropped in silence.

    Args:
        rewrite: The rules the model wrote (after screening), instruction and rationale.
        current: The rules in force.
        starting: The starting rules (version 1).
        max_rules: The most rules a version may hold.

    Returns:
        The rules to store, what was put back, or why the rewrite is refused.
    """
    rules = [{"instruction": r["instruction"], "rationale": r["rationale"]} for r in rewrite]
    restored: list[dict[str, str]] = []
    for rule in current:
        instruction = rule["instruction"]
        if not is_protected(rule, starting) or any(
            similar_rule(instruction, r["instruction"]) for r in rules
        ):
            continue
        restored.append({"instruction": instruction, "rationale": rule["rationale"]})
    if len(rules) + len(restored) > max_rules:
        dropped = "; ".join(r["instruction"] for r in restored)
        return KeptRules(
            rules=rules,
            restored=[],
            refused=(
                f"the rewrite dropped protected rules ({dropped}) and has no room to keep "
                f"them within {max_rules} rules"
            ),
        )
    return KeptRules(rules=rules + restored, restored=restored)


def field_bound(schema: Any, name: str) -> int | None:
    """Return a pydantic schema field's ``max_length``, if it has one."""
    for item in schema.model_fields[name].metadata:
        bound = getattr(item, "max_length", None)
        if isinstance(bound, int):
            return bound
    return None

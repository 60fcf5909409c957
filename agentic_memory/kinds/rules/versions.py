"""Rule sets and their versions: the schema, parsing, checks, diffs and rebasing.

The rule book that stores them is :mod:`agentic_memory.kinds.rules.book`.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentic_memory import prompts
from agentic_memory.kinds.rules.guard import RejectedRule, screen_rules
from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    Property,
    StoredObject,
    check_text,
    make_id,
)

MAX_RULES = 10
"""The procedural rule set never holds more rules than this."""
MAX_TEXT = 200
"""The longest instruction or rationale, in characters."""
FORGOTTEN_NOTE = "learned from a conversation that was forgotten"
"""The note of a rule version whose source was forgotten (its old note named the thread)."""
_SEPARATORS = (" – ", " — ", " - ")
_SPACES = re.compile(r"\s+")
_MAX_ATTEMPTS = 200

RULES = CollectionSpec(
    name="ProceduralRules",
    per_user=True,
    description=(
        "Versions of the behaviour rule set; the scope is a user, or agentic_memory.store.GLOBAL_SCOPE "
        "for the rules shared by everyone."
    ),
    properties=(
        Property("version", "int"),
        Property("rules_json", "text", filterable=False, description="JSON list of rules"),
        Property("rules_text", "text", searchable=True, filterable=False),
        Property("source_episodes", "text[]", description="ids of the episodes it came from"),
        Property("source_users", "text[]", description="users whose episodes fed this version"),
        Property("parent_version", "int"),
        Property("note", "text", filterable=False),
        Property("created_at", "date"),
    ),
)
"""The collection of rule versions, partitioned by scope (a user, or the shared scope)."""


class Rule(BaseModel):
    """One behaviour rule the memory model writes: an instruction and why."""

    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1, max_length=MAX_TEXT, description="What to do.")
    rationale: str = Field(min_length=1, max_length=MAX_TEXT, description="Why.")


class RuleSet(BaseModel):
    """The rewritten procedural rules (what the memory model writes at a conversation end)."""

    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(min_length=1, max_length=MAX_RULES)


def rules_scope(user: str, shared: bool) -> str:
    """Return the scope a run uses: the user's own rules, or the ones shared by everyone."""
    return GLOBAL_SCOPE if shared else user


def render_rules(rules: Sequence[Mapping[str, str]], version: int) -> str:
    """Render rules for the prompt: a heading with the version, then one numbered line each."""
    if not rules:
        return ""
    lines = [f"Behaviour rules (version {version}):"]
    lines += [f"{i}. {r['instruction']} – {r['rationale']}" for i, r in enumerate(rules, 1)]
    return "\n".join(lines)


def embedding_text(properties: Mapping[str, Any]) -> str:
    """Return the text a rule version is embedded from: its rendered rules."""
    return str(properties.get("rules_text") or "")


@dataclass(frozen=True)
class RuleItem:
    """One rule: what to do and why."""

    instruction: str
    rationale: str

    def render(self) -> str:
        """Return the rule as one line, "instruction – rationale"."""
        return f"{self.instruction} – {self.rationale}"

    def to_dict(self) -> dict[str, str]:
        """Return ``{"instruction": ..., "rationale": ...}``, as a version's JSON holds it."""
        return {"instruction": self.instruction, "rationale": self.rationale}


class NumberedRules:
    """A rule set shown as a numbered list: a version's, or a proposal's."""

    rules: tuple[RuleItem, ...]

    def render(self) -> str:
        """Return the rules as a numbered list, one "instruction – rationale" per line."""
        return "\n".join(f"{i}. {rule.render()}" for i, rule in enumerate(self.rules, 1))


@dataclass(frozen=True)
class RuleVersion(NumberedRules):
    """One version of a scope's rule set."""

    scope: str
    version: int
    rules: tuple[RuleItem, ...]
    source_episodes: tuple[str, ...] = ()
    source_users: tuple[str, ...] = ()
    parent_version: int | None = None
    note: str = ""
    created_at: str = ""
    stored: bool = True
    """False for the starting set of a scope that has never been rewritten."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "scope": self.scope,
            "version": self.version,
            "rules": [r.to_dict() for r in self.rules],
            "source_episodes": list(self.source_episodes),
            "source_users": list(self.source_users),
            "parent_version": self.parent_version,
            "note": self.note,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class RuleDiff:
    """What changed between two versions; ``str()`` gives a readable report."""

    scope: str
    a: int
    b: int
    added: list[RuleItem] = field(default_factory=list)
    removed: list[RuleItem] = field(default_factory=list)
    changed: list[tuple[RuleItem, RuleItem]] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        """Whether the two versions hold the same rules."""
        return not (self.added or self.removed or self.changed)

    def __str__(self) -> str:
        lines = [f"rules of {self.scope!r}: version {self.a} -> {self.b}"]
        lines += [f"+ {r.render()}" for r in self.added]
        lines += [f"- {r.render()}" for r in self.removed]
        for old, new in self.changed:
            lines += [f"~ {old.render()}", f"  -> {new.render()}"]
        if self.unchanged:
            lines.append("  (no changes)")
        return "\n".join(lines)


def parse_rules(text: str) -> list[RuleItem]:
    """Parse "instruction – rationale" lines (blank lines and ``#`` comments are skipped).

    Raises:
        InvalidInputError: a line has no separator, or there are more than 10 rules.
    """
    rules: list[RuleItem] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for sep in _SEPARATORS:
            if sep in line:
                instruction, rationale = line.split(sep, 1)
                break
        else:
            raise InvalidInputError(
                f"rule line {number} has no ' – ' between instruction and rationale: {line!r}"
            )
        rules.append(_item(instruction, rationale))
    return _check_rules(rules)


def parse_rule_list(raw: Sequence[Any]) -> list[RuleItem]:
    """Check rules given as objects (``{"instruction", "rationale"}``), as stored versions hold.

    Raises:
        InvalidInputError: a rule is malformed, or there are none or more than 10.
    """
    return _check_rules([_coerce(r) for r in raw])


def starting_rules() -> list[RuleItem]:
    """Return the starting rules in ``prompts/procedural_rules.md`` (every scope's version 1)."""
    return parse_rules(prompts.load("procedural_rules").format())


_GATE_MESSAGE = (
    "the rules shared by every user change only through an operator's approval: propose "
    "them with agentic_memory.kinds.rules.shared.SharedRules.apropose and approve the "
    "proposal (amem memories rules review / approve); nothing was written"
)


class SharedRulesGateError(InvalidInputError):
    """A write to the shared rules that did not go through the operator's gate."""


class RuleScreenError(InvalidInputError):
    """Rules the screen refuses (:mod:`agentic_memory.kinds.rules.guard`); nothing was written."""

    def __init__(self, what: str, rejected: Sequence[RejectedRule]) -> None:
        self.rejected = list(rejected)
        reasons = "; ".join(f"{r.instruction[:60]!r}: {r.reason}" for r in self.rejected)
        super().__init__(f"{what} refused by the screen, nothing was written: {reasons}")


def screened(
    rules: Sequence[RuleItem], what: str, *, shared: bool, personal_values: Iterable[str] = ()
) -> None:
    """Raise :class:`RuleScreenError` unless every rule, alone and with the others, passes.

    The screen reads the whole set as it would stand in force: a request split over two or
    three of its rules refuses them too.
    """
    _kept, rejected = screen_rules(rules, shared=shared, personal_values=personal_values)
    if rejected:
        raise RuleScreenError(what, rejected)


async def ascreened(
    rules: Sequence[RuleItem], what: str, *, shared: bool, personal_values: Iterable[str] = ()
) -> None:
    """:func:`screened` in a worker thread.

    Reading every two and three rules of a set together costs tens of milliseconds (10
    rules), which would stall every other task of the event loop.
    """
    await asyncio.to_thread(
        screened, rules, what, shared=shared, personal_values=list(personal_values)
    )


async def ascreen_rules(
    rules: Sequence[Any], *, shared: bool, personal_values: Iterable[str] = ()
) -> tuple[list[Any], list[RejectedRule]]:
    """Run :func:`~agentic_memory.kinds.rules.guard.screen_rules` in a worker thread.

    See :func:`ascreened`: the screen would stall the event loop.
    """
    return await asyncio.to_thread(
        screen_rules, rules, shared=shared, personal_values=list(personal_values)
    )


class RuleConflictError(ConflictError):
    """Another writer created a rule version after the one a proposal was based on."""

    def __init__(self, scope: str, base_version: int | None, latest_version: int) -> None:
        self.scope = scope
        self.base_version = base_version
        self.latest_version = latest_version
        if base_version is None:
            message = (
                f"rules of {scope!r} kept changing during {_MAX_ATTEMPTS} attempts to write "
                f"a new version (latest: {latest_version})"
            )
        else:
            message = (
                f"rules of {scope!r} are at version {latest_version}, not {base_version}: "
                "another writer changed them; rewrite from the latest version and propose again"
            )
        super().__init__(message)


def rebase_rules(
    base: Sequence[Any],
    mine: Sequence[Any],
    theirs: Sequence[Any],
    *,
    protected: Callable[[RuleItem], bool] | None = None,
) -> list[RuleItem] | None:
    """Replay a rewrite of ``base`` (giving ``mine``) on top of a newer version ``theirs``.

    The rules the rewrite removed from ``base`` are removed from ``theirs`` and the ones it
    added are appended, so neither the other writer's changes nor this one's are lost; the
    same rule reworded by both is kept in both wordings, for the next rewrite to merge.
    Over :data:`MAX_RULES`, the oldest rules that both versions only carried over from
    ``base`` give way (the front of the list: rewrites append what they add), except those
    ``protected`` says must stay. Returns ``None`` when that is not enough: then only a new
    rewrite can choose what to keep.
    """
    old = [_coerce(r) for r in base]
    new = [_coerce(r) for r in mine]
    removed = [r for r in old if r not in new]
    added = [r for r in new if r not in old]
    result = [r for r in dict.fromkeys(_coerce(r) for r in theirs) if r not in removed]
    result += [r for r in dict.fromkeys(added) if r not in result]
    over = len(result) - MAX_RULES
    if over > 0:
        carried = [r for r in result if r in old and not (protected and protected(r))][:over]
        if len(carried) < over:
            return None
        result = [r for r in result if r not in carried]
    return result or None


def rebase_backoff(attempt: int) -> float:
    """Return how long a writer waits before rebasing again (jittered, a few ms)."""
    return _backoff(attempt)


def _backoff(attempt: int) -> float:
    # Writers that collided retry at slightly different moments instead of in lockstep.
    return random.uniform(0, 0.002 * min(attempt, 10))


def _clean(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise InvalidInputError(f"rule {what} must be a string, got {type(text).__name__}")
    check_text(text, f"rule {what}")
    cleaned = _SPACES.sub(" ", text).strip()
    if not cleaned:
        raise InvalidInputError(f"rule {what} is empty")
    if len(cleaned) > MAX_TEXT:
        raise InvalidInputError(f"rule {what} is longer than {MAX_TEXT} characters")
    return cleaned


def _item(instruction: object, rationale: object) -> RuleItem:
    return RuleItem(_clean(instruction, "instruction"), _clean(rationale, "rationale"))


def _coerce(raw: Any) -> RuleItem:
    if isinstance(raw, RuleItem):
        return _item(raw.instruction, raw.rationale)
    if isinstance(raw, dict):
        return _item(raw.get("instruction"), raw.get("rationale"))
    return _item(getattr(raw, "instruction", None), getattr(raw, "rationale", None))


def check_rule_items(rules: Sequence[Any]) -> list[RuleItem]:
    """Return rules (objects or dicts with ``instruction`` and ``rationale``) as checked items.

    Raises:
        InvalidInputError: a rule is malformed, or there are none or more than 10.
    """
    if isinstance(rules, str | dict) or not isinstance(rules, Sequence):
        raise InvalidInputError("rules must be a list of rules")
    return _check_rules([_coerce(r) for r in rules])


def _check_rules(rules: list[RuleItem]) -> list[RuleItem]:
    if not rules:
        raise InvalidInputError("a rule set needs at least one rule")
    if len(rules) > MAX_RULES:
        raise InvalidInputError(f"a rule set holds at most {MAX_RULES} rules, got {len(rules)}")
    # Duplicates would waste slots of the ten.
    return list(dict.fromkeys(rules))


def _version_id(scope: str, version: int) -> str:
    return make_id("rules", scope, str(version))


def _properties(version: RuleVersion, text: str) -> dict[str, Any]:
    return {
        "version": version.version,
        "rules_json": json.dumps(version.to_dict()["rules"], ensure_ascii=False),
        "rules_text": text,
        "source_episodes": list(version.source_episodes),
        "source_users": list(version.source_users),
        "parent_version": version.parent_version,
        "note": version.note,
        "created_at": version.created_at,
    }


_Rule = tuple[str, str]


def _version_rules(props: Mapping[str, Any]) -> list[_Rule]:
    """Return a stored version's rules as (instruction, rationale) pairs, in order."""
    try:
        raw = json.loads(str(props.get("rules_json") or "[]"))
        return [(str(r["instruction"]), str(r["rationale"])) for r in raw]
    except (ValueError, TypeError, KeyError):
        return []


def _rules_only_from(
    versions: Sequence[StoredObject], episodes: set[str], user: str | None
) -> set[_Rule]:
    """Return the rules every introduction of which came from what is being forgotten.

    A rule is introduced by a version that holds it when the version before does not (a
    rollback re-introduces it with the provenance of the version it restores). An
    introduction comes from what is forgotten when ``user`` is its version's only source
    user, or when all of its source episodes (at least one) are forgotten. A rule that was
    also learned from someone else, or that the starting set or an operator introduced,
    stays (its provenance no longer names what is forgotten).
    """
    introductions: dict[_Rule, list[bool]] = {}
    previous: set[_Rule] = set()
    for version in versions:
        props = version.properties
        rules = _version_rules(props)
        sources = set(props.get("source_episodes") or [])
        users = set(props.get("source_users") or [])
        from_forgotten = (user is not None and bool(users) and users <= {user}) or (
            bool(sources) and sources <= episodes
        )
        for rule in rules:
            if rule not in previous:
                introductions.setdefault(rule, []).append(from_forgotten)
        previous = set(rules)
    return {rule for rule, flags in introductions.items() if all(flags)}


def _from_stored(scope: str, obj: StoredObject) -> RuleVersion:
    p = obj.properties
    raw = json.loads(p["rules_json"])
    return RuleVersion(
        scope=scope,
        version=int(p["version"]),
        rules=tuple(RuleItem(r["instruction"], r["rationale"]) for r in raw),
        source_episodes=tuple(p.get("source_episodes") or ()),
        source_users=tuple(p.get("source_users") or ()),
        parent_version=p.get("parent_version"),
        note=str(p.get("note") or ""),
        created_at=str(p.get("created_at") or ""),
    )

"""Procedural memory: versioned behaviour rules, at most ten, each "instruction – rationale".

A rule set lives in a *scope*: a user id (rules learned from that user's conversations)
or :data:`memstore.GLOBAL_SCOPE` (rules shared by everyone). Version 1 of every scope is
the starting set in ``prompts/procedural_rules.md``; it is written to the store together
with the first rewrite, so an unused scope stores nothing. Every change is a new version
that records where it came from (episode ids, users, a note); old versions are never
modified, so any version can be listed, compared (:meth:`RuleBook.diff`) or restored
(:meth:`RuleBook.rollback`, which writes a new version equal to the old one).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langchain_core.embeddings import Embeddings

import prompts
from agentic_memory.kinds._bound import CollectionBound
from agentic_memory.kinds.collections import RULES
from agentic_memory.store import (
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    check_text,
    make_id,
)
from agentic_memory.store.base import check_user_id

__all__ = [
    "MAX_RULES",
    "RuleBook",
    "RuleConflictError",
    "RuleDiff",
    "RuleItem",
    "RuleVersion",
    "parse_rules",
    "starting_rules",
]

MAX_RULES = 10
_SEPARATORS = (" – ", " — ", " - ")
_SPACES = re.compile(r"\s+")
_MAX_TEXT = 200
_PAGE = 100
_MAX_ATTEMPTS = 200


@dataclass(frozen=True)
class RuleItem:
    """One rule: what to do and why."""

    instruction: str
    rationale: str

    def render(self) -> str:
        """Return the rule as one line, "instruction – rationale"."""
        return f"{self.instruction} – {self.rationale}"


@dataclass(frozen=True)
class RuleVersion:
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

    def render(self) -> str:
        """Return the rules as a numbered list, one "instruction – rationale" per line."""
        return "\n".join(f"{i}. {rule.render()}" for i, rule in enumerate(self.rules, 1))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "scope": self.scope,
            "version": self.version,
            "rules": [{"instruction": r.instruction, "rationale": r.rationale} for r in self.rules],
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


def starting_rules() -> list[RuleItem]:
    """Return the starting rules in ``prompts/procedural_rules.md`` (every scope's version 1)."""
    return parse_rules(prompts.load("procedural_rules").format())


class RuleBook(CollectionBound):
    """Versioned rule sets on a :class:`~memstore.MemoryStore` (collection ``ProceduralRules``)."""

    spec = RULES

    def __init__(
        self,
        store: MemoryStore,
        embeddings: Embeddings,
        *,
        initial_rules: Sequence[RuleItem] | None = None,
    ) -> None:
        super().__init__(store, embeddings)
        self._initial = tuple(_check_rules(list(initial_rules))) if initial_rules else None

    def _starting(self, scope: str) -> RuleVersion:
        rules = self._initial if self._initial is not None else tuple(starting_rules())
        return RuleVersion(scope=scope, version=1, rules=rules, note="starting rules", stored=False)

    # -- reads ----------------------------------------------------------------------------

    def versions(self, scope: str) -> list[RuleVersion]:
        """Every version of a scope, oldest first (just the starting set if never rewritten)."""
        check_user_id(scope)
        self._ensure()
        # Every version, then ordered like list_objects(sort_by="version"): version, then id.
        objs = sorted(
            self.store.iterate(RULES.name, user=scope, page_size=_PAGE),
            key=lambda o: (
                o.properties.get("version") is not None,
                o.properties.get("version"),
                o.id,
            ),
        )
        if not objs:
            return [self._starting(scope)]
        return [_from_stored(scope, o) for o in objs]

    def latest(self, scope: str) -> RuleVersion:
        """Return the current rule set of a scope."""
        check_user_id(scope)
        self._ensure()
        top = self.store.list_objects(
            RULES.name, user=scope, limit=1, sort_by="version", descending=True
        )
        return _from_stored(scope, top[0]) if top else self._starting(scope)

    def get(self, scope: str, version: int) -> RuleVersion:
        """One version of a scope.

        Raises:
            InvalidInputError: the version does not exist.
        """
        for candidate in self.versions(scope):
            if candidate.version == version:
                return candidate
        raise InvalidInputError(f"rules of {scope!r} have no version {version!r}")

    def diff(self, scope: str, a: int, b: int) -> RuleDiff:
        """Compare two versions: rules added, removed and reworded (matched by similarity)."""
        old = list(self.get(scope, a).rules)
        new = list(self.get(scope, b).rules)
        removed = [r for r in old if r not in new]
        added = [r for r in new if r not in old]
        changed: list[tuple[RuleItem, RuleItem]] = []
        for before in list(removed):
            best, best_ratio = None, 0.0
            for after in added:
                ratio = difflib.SequenceMatcher(
                    None, before.instruction.lower(), after.instruction.lower()
                ).ratio()
                if ratio > best_ratio:
                    best, best_ratio = after, ratio
            if best is not None and best_ratio >= 0.6:
                changed.append((before, best))
                removed.remove(before)
                added.remove(best)
        return RuleDiff(scope, a, b, added=added, removed=removed, changed=changed)

    # -- writes ---------------------------------------------------------------------------

    def propose(
        self,
        scope: str,
        rules: Sequence[Any],
        *,
        base_version: int | None = None,
        source_episodes: Sequence[str] = (),
        source_users: Sequence[str] = (),
        note: str = "",
        now: datetime | None = None,
    ) -> RuleVersion | None:
        """Store ``rules`` as the scope's next version; ``None`` when they equal the latest.

        Every call that returns a version created that version itself: a version number is
        created with the store's create-only ``insert``, so when several writers propose at
        once each gets its own number (the losers of a race read the latest again and take
        the next one).

        Args:
            scope: A user id or ``memstore.GLOBAL_SCOPE``.
            rules: 1 to 10 objects with ``instruction`` and ``rationale`` (attributes or keys).
            base_version: The version these rules were rewritten from. When given, the new
                version is stored only if that version is still the latest; otherwise
                ``RuleConflictError`` says which version another writer created meanwhile,
                so that a rewrite never silently drops another writer's rules.
            source_episodes: Ids of the episodes the rewrite learned from.
            source_users: Users whose episodes those are.
            note: Why this version exists.
            now: Creation time (default: now, UTC).

        Raises:
            InvalidInputError: the rules are malformed or more than 10; nothing is written.
            RuleConflictError: ``base_version`` is no longer the latest version; nothing is
                written.
        """
        check_user_id(scope)
        items = _check_rules([_coerce(r) for r in rules])
        for name, values in (("source_episodes", source_episodes), ("source_users", source_users)):
            if isinstance(values, str) or not all(isinstance(v, str) for v in values):
                raise InvalidInputError(f"{name} must be a list of strings")
        if base_version is not None and (
            isinstance(base_version, bool) or not isinstance(base_version, int) or base_version < 1
        ):
            raise InvalidInputError(
                f"base_version must be a positive integer, got {base_version!r}"
            )
        _rfc3339(now)  # a naive ``now`` is refused before anything is read
        for attempt in range(_MAX_ATTEMPTS):
            if attempt:
                _backoff(attempt)
            latest = self.latest(scope)
            if base_version is not None and latest.version != base_version:
                raise RuleConflictError(scope, base_version, latest.version)
            if tuple(items) == latest.rules:
                return None
            stamp = _rfc3339(now)
            pending: list[RuleVersion] = []
            if not latest.stored:
                # The starting set is stored with the first rewrite so every version is listed.
                latest = RuleVersion(
                    scope, 1, latest.rules, note=latest.note, created_at=stamp, stored=True
                )
                pending.append(latest)
            new = RuleVersion(
                scope=scope,
                version=latest.version + 1,
                rules=tuple(items),
                source_episodes=tuple(source_episodes),
                source_users=tuple(dict.fromkeys(source_users)),
                parent_version=latest.version,
                note=note,
                created_at=stamp,
            )
            pending.append(new)
            try:
                self._write(scope, pending)
            except ConflictError:
                continue  # another writer took this number: read the latest again
            return new
        raise RuleConflictError(scope, base_version, self.latest(scope).version)

    def rollback(self, scope: str, version: int, *, note: str = "") -> RuleVersion:
        """Write a new version equal to ``version``; return it.

        Raises:
            InvalidInputError: the version does not exist or is already the latest.
            RuleConflictError: another writer created a version while this one rolled back.
        """
        target = self.get(scope, version)
        latest = self.latest(scope)
        if target.rules == latest.rules:
            raise InvalidInputError(
                f"version {version} of {scope!r} already equals the latest ({latest.version})"
            )
        created = self.propose(
            scope,
            target.rules,
            base_version=latest.version,
            source_episodes=target.source_episodes,
            source_users=target.source_users,
            note=note or f"rollback to version {version}",
        )
        assert created is not None
        return created

    def forget_scope(self, scope: str) -> int:
        """Delete every stored version of a scope; return how many."""
        check_user_id(scope)
        self._ensure()
        return self.store.delete_user(RULES.name, scope)

    def _write(self, scope: str, versions: list[RuleVersion]) -> None:
        texts = [v.render() for v in versions]
        vectors = self.embeddings.embed_documents(texts)
        objects = [
            MemoryObject(
                make_id("rules", scope, str(v.version)),
                {
                    "version": v.version,
                    "rules_json": json.dumps(v.to_dict()["rules"], ensure_ascii=False),
                    "rules_text": text,
                    "source_episodes": list(v.source_episodes),
                    "source_users": list(v.source_users),
                    "parent_version": v.parent_version,
                    "note": v.note,
                    "created_at": v.created_at,
                },
                vector,
            )
            for v, text, vector in zip(versions, texts, vectors, strict=True)
        ]
        self._ensure()
        # Create-only: a version number is never overwritten, whoever else is writing.
        self.store.insert(RULES.name, objects, user=scope).raise_for_failures()

    # -- async twins ----------------------------------------------------------------------

    async def alatest(self, scope: str) -> RuleVersion:
        """Async :meth:`latest`."""
        return await asyncio.to_thread(self.latest, scope)

    async def aversions(self, scope: str) -> list[RuleVersion]:
        """Async :meth:`versions`."""
        return await asyncio.to_thread(self.versions, scope)

    async def apropose(
        self,
        scope: str,
        rules: Sequence[Any],
        *,
        base_version: int | None = None,
        source_episodes: Sequence[str] = (),
        source_users: Sequence[str] = (),
        note: str = "",
        now: datetime | None = None,
    ) -> RuleVersion | None:
        """Async :meth:`propose`."""
        return await asyncio.to_thread(
            lambda: self.propose(
                scope,
                rules,
                base_version=base_version,
                source_episodes=source_episodes,
                source_users=source_users,
                note=note,
                now=now,
            )
        )

    async def arollback(self, scope: str, version: int, *, note: str = "") -> RuleVersion:
        """Async :meth:`rollback`."""
        return await asyncio.to_thread(lambda: self.rollback(scope, version, note=note))


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


def _backoff(attempt: int) -> None:
    # Writers that collided retry at slightly different moments instead of in lockstep.
    time.sleep(random.uniform(0, 0.002 * min(attempt, 10)))


def _clean(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise InvalidInputError(f"rule {what} must be a string, got {type(text).__name__}")
    check_text(text, f"rule {what}")
    cleaned = _SPACES.sub(" ", text).strip()
    if not cleaned:
        raise InvalidInputError(f"rule {what} is empty")
    if len(cleaned) > _MAX_TEXT:
        raise InvalidInputError(f"rule {what} is longer than {_MAX_TEXT} characters")
    return cleaned


def _item(instruction: object, rationale: object) -> RuleItem:
    return RuleItem(_clean(instruction, "instruction"), _clean(rationale, "rationale"))


def _coerce(raw: Any) -> RuleItem:
    if isinstance(raw, RuleItem):
        return _item(raw.instruction, raw.rationale)
    if isinstance(raw, dict):
        return _item(raw.get("instruction"), raw.get("rationale"))
    return _item(getattr(raw, "instruction", None), getattr(raw, "rationale", None))


def _check_rules(rules: list[RuleItem]) -> list[RuleItem]:
    if not rules:
        raise InvalidInputError("a rule set needs at least one rule")
    if len(rules) > MAX_RULES:
        raise InvalidInputError(f"a rule set holds at most {MAX_RULES} rules, got {len(rules)}")
    # Duplicates would waste slots of the ten.
    return list(dict.fromkeys(rules))


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


def _rfc3339(now: datetime | None) -> str:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise InvalidInputError("now must carry a timezone")
    return moment.astimezone(UTC).isoformat()

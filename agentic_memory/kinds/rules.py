"""Procedural memory: versioned behaviour rules, at most ten, each "instruction – rationale".

A rule set lives in a *scope*: a user id (rules learned from that user's conversations)
or :data:`agentic_memory.store.GLOBAL_SCOPE` (rules shared by everyone). Version 1 of every scope is
the starting set in ``prompts/procedural_rules.md``; it is written to the store together
with the first rewrite, so an unused scope stores nothing. Every change is a new version
that records where it came from (episode ids, users, a note); old versions are never
modified, so any version can be listed, compared (:meth:`RuleBook.adiff`) or restored
(:meth:`RuleBook.arollback`, which writes a new version equal to the old one). Forgetting is
the one exception: rule text learned only from what is forgotten is removed from every
version (:meth:`RuleBook.ascrub`).

Everything about rules lives here: the collection schema (:data:`RULES`), the limit of ten
(:data:`MAX_RULES`), what the memory model writes (:class:`RuleSet`), which scope a run uses
(:func:`rules_scope`), how rules are shown in the prompt (:func:`render_rules`), and how
versions are proposed, rolled back and forgotten (:class:`RuleBook`). Every rule set written
to a user's scope (a conversation's rewrite, ``AgenticStore.put``, a rollback) passes the
screen of :mod:`agentic_memory.kinds.rule_guard` first, or nothing is written
(:class:`RuleScreenError`); the shared rules pass it in their gate.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langchain_core.embeddings import Embeddings
from pydantic import BaseModel, ConfigDict, Field

from agentic_memory import prompts
from agentic_memory.kinds._bound import CollectionBound, Forgotten
from agentic_memory.kinds.rule_guard import RejectedRule, screen_rules
from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    Property,
    StoredObject,
    check_text,
    make_id,
)
from agentic_memory.store.base import check_user_id

__all__ = [
    "FORGOTTEN_NOTE",
    "MAX_RULES",
    "RULES",
    "Rule",
    "RuleBook",
    "RuleConflictError",
    "RuleDiff",
    "RuleItem",
    "RuleScreenError",
    "RuleSet",
    "RuleVersion",
    "SharedRulesGateError",
    "check_rule_items",
    "embedding_text",
    "parse_rule_list",
    "parse_rules",
    "rebase_rules",
    "render_rules",
    "rules_scope",
    "screened",
    "starting_rules",
]

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


def parse_rule_list(raw: Sequence[Any]) -> list[RuleItem]:
    """Check rules given as objects (``{"instruction", "rationale"}``), as stored versions hold.

    Raises:
        InvalidInputError: a rule is malformed, or there are none or more than 10.
    """
    return _check_rules([_coerce(r) for r in raw])


def starting_rules() -> list[RuleItem]:
    """Return the starting rules in ``prompts/procedural_rules.md`` (every scope's version 1)."""
    return parse_rules(prompts.load("procedural_rules").format())


class RuleBook(CollectionBound):
    """Versioned rule sets on a :class:`~agentic_memory.store.MemoryStore` (``ProceduralRules``)."""

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

    async def _astarting(self, scope: str) -> RuleVersion:
        if self._initial is not None:
            rules = self._initial
        else:
            # The prompt file is read off the event loop.
            rules = tuple(parse_rules((await prompts.aload("procedural_rules")).format()))
        return RuleVersion(scope=scope, version=1, rules=rules, note="starting rules", stored=False)

    # -- reads ----------------------------------------------------------------------------

    async def aversions(self, scope: str) -> list[RuleVersion]:
        """Every version of a scope, oldest first (just the starting set if never rewritten)."""
        check_user_id(scope)
        # Every version, then ordered like list_objects(sort_by="version"): version, then id.
        objs = sorted(
            await self._aall(scope),
            key=lambda o: (
                o.properties.get("version") is not None,
                o.properties.get("version"),
                o.id,
            ),
        )
        if not objs:
            return [await self._astarting(scope)]
        return [_from_stored(scope, o) for o in objs]

    async def asearch(
        self, scope: str, query: str, *, alpha: float = 0.5, limit: int = 10
    ) -> list[tuple[RuleVersion, float]]:
        """Rank a scope's stored versions by hybrid search over their rules' text.

        Returns:
            Up to ``limit`` (version, fused score) pairs, best first; the starting rules,
            never stored, are not searched.
        """
        check_user_id(scope)
        hits = await self._ahybrid(scope, query, alpha=alpha, limit=limit)
        return [
            (_from_stored(scope, StoredObject(h.id, h.properties)), h.score)
            for h in hits
            if h.properties.get("version") is not None
        ]

    async def alatest(self, scope: str) -> RuleVersion:
        """Return the current rule set of a scope."""
        check_user_id(scope)
        if not await self._aexists():
            return await self._astarting(scope)
        top = await self.store.alist_objects(
            RULES.name, user=scope, limit=1, sort_by="version", descending=True
        )
        return _from_stored(scope, top[0]) if top else await self._astarting(scope)

    async def aget(self, scope: str, version: int) -> RuleVersion:
        """One version of a scope.

        Raises:
            InvalidInputError: the version does not exist.
        """
        for candidate in await self.aversions(scope):
            if candidate.version == version:
                return candidate
        raise InvalidInputError(f"rules of {scope!r} have no version {version!r}")

    async def adiff(self, scope: str, a: int, b: int) -> RuleDiff:
        """Compare two versions: rules added, removed and reworded (matched by similarity)."""
        old = list((await self.aget(scope, a)).rules)
        new = list((await self.aget(scope, b)).rules)
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

    async def ascopes(self) -> list[str]:
        """Return the scopes that have stored versions (users, and the shared scope)."""
        if not await self._aexists():
            return []
        return sorted(await self.store.ausers(RULES.name))

    # -- writes ---------------------------------------------------------------------------

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
        """Store ``rules`` as the next version of a user's rules; ``None`` when they equal the latest.

        The rules shared by every user are refused here: they change only through an
        operator's approval (:class:`agentic_memory.kinds.shared_rules.SharedRules`). A
        user's rules are learned from that user only, so ``source_users`` may name no one
        else. See :meth:`_apropose_version` for the arguments.

        Every rule is screened (:func:`screened`, as the user's own rules): a rule the
        screen refuses, alone or with others of the set, refuses the whole write.

        Raises:
            SharedRulesGateError: ``scope`` is the shared scope; nothing is written.
            RuleScreenError: the screen refuses a rule (the reasons are listed); nothing is
                written.
            InvalidInputError: the rules are malformed or more than 10, or ``source_users``
                names another user; nothing is written.
            RuleConflictError: ``base_version`` is no longer the latest version.
        """
        if scope == GLOBAL_SCOPE:
            raise SharedRulesGateError(_GATE_MESSAGE)
        if not isinstance(source_users, str) and any(
            isinstance(u, str) and u != scope for u in source_users
        ):
            raise InvalidInputError(
                f"the rules of {scope!r} are learned from {scope!r} only: source_users may "
                "name no other user"
            )
        screened(check_rule_items(rules), f"rules of {scope!r}", shared=False)
        return await self._apropose_version(
            scope,
            rules,
            base_version=base_version,
            source_episodes=source_episodes,
            source_users=source_users,
            note=note,
            now=now,
        )

    async def _apropose_version(
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

        The write behind :meth:`apropose` and the shared rules' gate, for any scope.

        Every call that returns a version created that version itself: a version number is
        created with the store's create-only ``insert``, so when several writers propose at
        once each gets its own number (the losers of a race read the latest again and take
        the next one).

        Args:
            scope: A user id or :data:`agentic_memory.store.GLOBAL_SCOPE`.
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
                await asyncio.sleep(_backoff(attempt))
            latest = await self.alatest(scope)
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
                await self._awrite(scope, pending)
            except ConflictError:
                continue  # another writer took this number: read the latest again
            return new
        raise RuleConflictError(scope, base_version, (await self.alatest(scope)).version)

    async def arollback(self, scope: str, version: int, *, note: str = "") -> RuleVersion:
        """Write a new version of a user's rules equal to ``version``; return it.

        The shared rules are rolled back by an operator
        (:meth:`agentic_memory.kinds.shared_rules.SharedRules.arollback`).

        The old version is screened as any new rule set is: one written before a rule of it
        was refused by the screen is not brought back.

        Raises:
            SharedRulesGateError: ``scope`` is the shared scope; nothing is written.
            RuleScreenError: the screen refuses a rule of that version; nothing is written.
            InvalidInputError: the version does not exist or is already the latest.
            RuleConflictError: another writer created a version while this one rolled back.
        """
        if scope == GLOBAL_SCOPE:
            raise SharedRulesGateError(_GATE_MESSAGE)
        target = await self.aget(scope, version)
        screened(target.rules, f"version {version} of {scope!r}", shared=False)
        return await self._arollback(scope, version, note=note)

    async def _arollback(self, scope: str, version: int, *, note: str = "") -> RuleVersion:
        """Write a new version equal to ``version`` in any scope (see :meth:`arollback`)."""
        target = await self.aget(scope, version)
        latest = await self.alatest(scope)
        if target.rules == latest.rules:
            raise InvalidInputError(
                f"version {version} of {scope!r} already equals the latest ({latest.version})"
            )
        created = await self._apropose_version(
            scope,
            target.rules,
            base_version=latest.version,
            source_episodes=target.source_episodes,
            source_users=target.source_users,
            note=note or f"rollback to version {version}",
        )
        assert created is not None
        return created

    async def aforget_scope(self, scope: str) -> int:
        """Delete every stored version of a scope; return how many."""
        return await self.aforget_user(scope)

    async def _awrite(self, scope: str, versions: list[RuleVersion]) -> None:
        texts = [v.render() for v in versions]
        vectors = await self.embeddings.aembed_documents(texts)
        objects = [
            MemoryObject(_version_id(scope, v.version), _properties(v, text), vector)
            for v, text, vector in zip(versions, texts, vectors, strict=True)
        ]
        await self._aensure()
        # Create-only: a version number is never overwritten, whoever else is writing.
        result = await self.store.ainsert(RULES.name, objects, user=scope)
        result.raise_for_failures()

    # -- forgetting -----------------------------------------------------------------------

    async def ascrub(
        self,
        scope: str,
        *,
        episode_ids: Iterable[str],
        user: str,
        drop_user: bool,
        remaining_episodes: set[str],
    ) -> Forgotten:
        """Rewrite a scope's versions so they no longer name or hold what is forgotten.

        ``source_users`` loses ``user`` when ``drop_user`` is set, or when none of the
        version's remaining source episodes is among ``remaining_episodes`` (the user's
        episodes that still exist). Rules that came only from the forgotten episodes (or,
        with ``drop_user``, only from versions naming ``user``) are removed from every
        version, whose text is then embedded again; a version left without rules is
        deleted, and the note of a version whose source was forgotten (it named the thread)
        is replaced by :data:`FORGOTTEN_NOTE`.

        Returns:
            Versions deleted, and versions rewritten.
        """
        check_user_id(scope)
        removed = set(episode_ids)
        versions = sorted(
            await self._aall(scope), key=lambda v: int(v.properties.get("version") or 0)
        )
        tainted = _rules_only_from(versions, removed, user if drop_user else None)
        deleted = rewritten = 0
        for version in versions:
            props = dict(version.properties)
            episodes = list(props.get("source_episodes") or [])
            users = list(props.get("source_users") or [])
            kept = [e for e in episodes if e not in removed]
            new_users = users
            if user in users and (
                drop_user
                or (len(kept) != len(episodes) and not any(e in remaining_episodes for e in kept))
            ):
                new_users = [u for u in users if u != user]
            rules = _version_rules(props)
            new_rules = [r for r in rules if r not in tainted]
            forgotten_source = len(kept) != len(episodes) or (drop_user and user in users)
            if kept == episodes and new_users == users and new_rules == rules:
                continue
            if not new_rules:
                deleted += await self.store.adelete(RULES.name, [version.id], user=scope)
                continue
            props["source_episodes"] = kept
            props["source_users"] = new_users
            if forgotten_source:
                props["note"] = FORGOTTEN_NOTE
            if new_rules == rules:
                rewritten += await self._arewrite(scope, version.id, props)
                continue
            text = RuleVersion(scope, 0, tuple(RuleItem(i, r) for i, r in new_rules)).render()
            props["rules_json"] = json.dumps(
                [{"instruction": i, "rationale": r} for i, r in new_rules], ensure_ascii=False
            )
            props["rules_text"] = text
            vector = await self.embeddings.aembed_query(text)
            if len(vector) != self.store.dims:
                raise InvalidInputError(
                    f"the embeddings make {len(vector)}-d vectors but the store holds "
                    f"{self.store.dims}-d ones: forget with the store's embedding model"
                )
            result = await self.store.aupsert(
                RULES.name, [MemoryObject(version.id, props, vector)], user=scope
            )
            result.raise_for_failures()
            rewritten += 1
        return Forgotten(deleted, rewritten)


_GATE_MESSAGE = (
    "the rules shared by every user change only through an operator's approval: propose "
    "them with agentic_memory.kinds.shared_rules.SharedRules.apropose and approve the "
    "proposal (amem memories rules review / approve); nothing was written"
)


class SharedRulesGateError(InvalidInputError):
    """A write to the shared rules that did not go through the operator's gate."""


class RuleScreenError(InvalidInputError):
    """Rules the screen refuses (:mod:`agentic_memory.kinds.rule_guard`); nothing was written."""

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


def _rfc3339(now: datetime | None) -> str:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise InvalidInputError("now must carry a timezone")
    return moment.astimezone(UTC).isoformat()

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
screen of :mod:`agentic_memory.kinds.rules.guard` first, or nothing is written
(:class:`RuleScreenError`); the shared rules pass it in their gate.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, TypedDict, Unpack

from langchain_core.embeddings import Embeddings

from agentic_memory import prompts
from agentic_memory.kinds._bound import CollectionBound, Forgotten, checked_now, rfc3339
from agentic_memory.kinds.rules.versions import (
    _GATE_MESSAGE,
    _MAX_ATTEMPTS,
    FORGOTTEN_NOTE,
    RULES,
    RuleConflictError,
    RuleDiff,
    RuleItem,
    RuleVersion,
    SharedRulesGateError,
    _backoff,
    _check_rules,
    _coerce,
    _from_stored,
    _properties,
    _rules_only_from,
    _version_id,
    _version_rules,
    ascreened,
    check_rule_items,
    parse_rules,
)
from agentic_memory.store import (
    GLOBAL_SCOPE,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
)
from agentic_memory.store.base import check_user_id


class Provenance(TypedDict, total=False):
    """Where a new version comes from (see :meth:`RuleBook._apropose_version`)."""

    base_version: int | None
    source_episodes: Sequence[str]
    source_users: Sequence[str]
    note: str
    now: datetime | None


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

    # -- writes ---------------------------------------------------------------------------

    async def apropose(
        self, scope: str, rules: Sequence[Any], **provenance: Unpack[Provenance]
    ) -> RuleVersion | None:
        """Store ``rules`` as the next version of a user's rules; ``None`` when they equal the latest.

        The rules shared by every user are refused here: they change only through an
        operator's approval (:class:`agentic_memory.kinds.rules.shared.SharedRules`). A
        user's rules are learned from that user only, so ``source_users`` may name no one
        else. See :meth:`_apropose_version` for the arguments.

        Every rule is screened (:func:`ascreened`, in a worker thread, as the user's own rules): a rule the
        screen refuses, alone or with others of the set, refuses the whole write.

        Raises:
            SharedRulesGateError: ``scope`` is the shared scope; nothing is written.
            RuleScreenError: the screen refuses a rule (the reasons are listed); nothing is
                written.
            InvalidInputError: the rules are malformed or more than 10, or ``source_users``
                names another user; nothing is written.
            RuleConflictError: ``base_version`` is no longer the latest version.
        """
        unknown = sorted(set(provenance) - set(Provenance.__annotations__))
        if unknown:
            raise TypeError(f"apropose() got unexpected keyword arguments {unknown}")
        if scope == GLOBAL_SCOPE:
            raise SharedRulesGateError(_GATE_MESSAGE)
        source_users = provenance.get("source_users", ())
        if not isinstance(source_users, str) and any(
            isinstance(u, str) and u != scope for u in source_users
        ):
            raise InvalidInputError(
                f"the rules of {scope!r} are learned from {scope!r} only: source_users may "
                "name no other user"
            )
        await ascreened(check_rule_items(rules), f"rules of {scope!r}", shared=False)
        return await self._apropose_version(scope, rules, **provenance)

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
        checked_now(now)  # a bad ``now`` is refused before anything is read
        for attempt in range(_MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(_backoff(attempt))
            latest = await self.alatest(scope)
            if base_version is not None and latest.version != base_version:
                raise RuleConflictError(scope, base_version, latest.version)
            if tuple(items) == latest.rules:
                return None
            stamp = rfc3339(now)
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
        (:meth:`agentic_memory.kinds.rules.shared.SharedRules.arollback`).

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
        await ascreened(target.rules, f"version {version} of {scope!r}", shared=False)
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
            items = tuple(RuleItem(i, r) for i, r in new_rules)
            text = RuleVersion(scope, 0, items).render()
            props["rules_json"] = json.dumps([r.to_dict() for r in items], ensure_ascii=False)
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

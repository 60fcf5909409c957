"""The gate of the rules shared by every user: proposals that an operator approves or rejects.

The shared rules (scope :data:`agentic_memory.store.GLOBAL_SCOPE`) reach the system prompt of
every user who runs with ``rules_scope="global"``, so no conversation changes them directly.
Every write path goes through :class:`SharedRules`:

* a conversation end with ``AMEM_GLOBAL_RULES=learn`` (``graph.nodes.update_procedural``)
  calls :meth:`SharedRules.apropose`: the rewrite is screened
  (:func:`agentic_memory.kinds.rules.guard.screen_rules`) and what passes is stored as a
  *pending proposal*, which no prompt ever shows;
* an operator lists the pending proposals (:meth:`SharedRules.apending`, ``amem memories
  rules review``) and approves one (:meth:`SharedRules.aapprove`, which writes the next
  version) or rejects it (:meth:`SharedRules.areject`);
* an operator may also write a rule set directly (:meth:`SharedRules.aput`, ``AgenticStore``
  for operators) or restore an old version (:meth:`SharedRules.arollback`); both are
  screened and recorded like an approved proposal;
* every operator write is screened again as it is written: an approval reads the proposal
  with the screen of the day (a proposal stored under an older, weaker screen is refused,
  :class:`~agentic_memory.kinds.rules.RuleScreenError`), as the whole set that will be in
  force, so a rule that only with another rule of that set makes a request is refused too;
  a rollback screens the version it restores;
* imports call :meth:`SharedRules.apropose` with ``origin="import"``.

:meth:`agentic_memory.kinds.rules.RuleBook.apropose` and ``arollback`` refuse the shared
scope (:class:`~agentic_memory.kinds.rules.SharedRulesGateError`). ``source_users`` is set
here, never by a caller: the user whose conversation wrote the proposal (none for an
operator's own rules). Proposals live in ``SharedRuleProposals``, partitioned by that user
(operators' and imports' under the shared scope), so forgetting a user deletes their
proposals with the rest of their memories; forgetting an episode deletes the proposals
learned from it.

Who is an operator is decided by whoever calls these methods: the CLI (which holds the store
itself), a program given ``AgenticStore(..., operator=True)``, or on the server an identity
that ``graph/auth.py`` lets through (``AMEM_OPERATORS``). See ``docs/langgraph-store.md``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds._bound import CollectionBound, rfc3339
from agentic_memory.kinds.rules.book import RuleBook
from agentic_memory.kinds.rules.guard import RejectedRule, screen_rules
from agentic_memory.kinds.rules.versions import (
    NumberedRules,
    RuleConflictError,
    RuleItem,
    RuleVersion,
    ascreened,
    check_rule_items,
)
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
    check_user_id,
    make_id,
)

__all__ = [
    "PROPOSALS",
    "Origin",
    "Proposed",
    "ProposalDecidedError",
    "RuleProposal",
    "SharedRules",
    "StaleProposalError",
    "UnknownProposalError",
]

Origin = Literal["conversation", "operator", "import"]
Status = Literal["pending", "approved", "rejected"]
_ORIGINS: frozenset[str] = frozenset({"conversation", "operator", "import"})
_PROPOSAL = "proposal"
_DECISION = "decision"
_MAX_NOTE = 500

PROPOSALS = CollectionSpec(
    name="SharedRuleProposals",
    per_user=True,
    description=(
        "Proposed versions of the rules shared by every user and the operators' decisions; "
        "partitioned by the user whose conversation proposed them (operators' under the "
        "shared scope)."
    ),
    properties=(
        Property("entry", "text", description="'proposal' or 'decision'"),
        Property("rules_json", "text", filterable=False, description="JSON list of rules"),
        Property("base_version", "int", description="the shared version it was written from"),
        Property("origin", "text", description="conversation, operator or import"),
        Property("source_episodes", "text[]"),
        Property("source_users", "text[]", description="set by the system, never the caller"),
        Property("screened_out_json", "text", filterable=False),
        Property("note", "text", filterable=False),
        Property("created_at", "date"),
        Property("proposal_id", "text", description="of a decision: the proposal decided"),
        Property("decision", "text", description="of a decision: approved or rejected"),
        Property("decided_by", "text"),
        Property("reason", "text", filterable=False),
        Property("version", "int", description="of an approval: the version written"),
    ),
)
"""Proposals of the shared rules, and one decision per decided proposal."""


class UnknownProposalError(InvalidInputError):
    """No proposal has that id."""


class ProposalDecidedError(InvalidInputError):
    """The proposal was approved or rejected already."""


class StaleProposalError(RuleConflictError):
    """The shared rules changed after the proposal was written; it would drop those changes."""

    def __init__(self, proposal: str, base_version: int, latest_version: int) -> None:
        self.proposal = proposal
        super().__init__(GLOBAL_SCOPE, base_version, latest_version)
        self.args = (
            f"proposal {proposal} was written from version {base_version} of the shared "
            f"rules, which are at version {latest_version} now: approving it would drop what "
            "changed since; reject it (the next conversation proposes from the latest)",
        )


@dataclass(frozen=True)
class RuleProposal(NumberedRules):
    """A proposed version of the shared rules, and what became of it."""

    id: str
    proposer: str
    """The user whose conversation wrote it; the shared scope for operators and imports."""
    origin: str
    rules: tuple[RuleItem, ...]
    base_version: int
    source_episodes: tuple[str, ...] = ()
    source_users: tuple[str, ...] = ()
    screened_out: tuple[RejectedRule, ...] = ()
    """Rules of the rewrite the screen dropped before it was proposed, with the reasons."""
    note: str = ""
    created_at: str = ""
    status: Status = "pending"
    decided_by: str = ""
    decided_at: str = ""
    reason: str = ""
    version: int | None = None
    """The shared version an approval wrote."""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return {
            "id": self.id,
            "proposer": self.proposer,
            "origin": self.origin,
            "status": self.status,
            "rules": [r.to_dict() for r in self.rules],
            "base_version": self.base_version,
            "source_episodes": list(self.source_episodes),
            "source_users": list(self.source_users),
            "screened_out": [r.to_dict() for r in self.screened_out],
            "note": self.note,
            "created_at": self.created_at,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "reason": self.reason,
            "version": self.version,
        }


@dataclass(frozen=True)
class Proposed:
    """What :meth:`SharedRules.apropose` did with a rewrite."""

    proposal: RuleProposal | None
    """The pending proposal; ``None`` when nothing passed the screen or nothing changed."""
    rejected: list[RejectedRule] = field(default_factory=list)
    """The rules the screen dropped, with the reasons."""


class SharedRules(CollectionBound):
    """The one way to change the shared rules: proposals, and an operator's decisions.

    Args:
        store: The memory store.
        embeddings: The embeddings of the store (for the rule versions an approval writes).
        rules: The rule book to write versions with (default: one over the same store).
    """

    spec = PROPOSALS

    def __init__(
        self, store: MemoryStore, embeddings: Embeddings, *, rules: RuleBook | None = None
    ) -> None:
        super().__init__(store, embeddings)
        self.rules = rules if rules is not None else RuleBook(store, embeddings)

    # -- proposing --------------------------------------------------------------------------

    async def apropose(
        self,
        rules: Sequence[Any],
        *,
        proposer: str,
        origin: Origin = "conversation",
        base_version: int | None = None,
        source_episodes: Sequence[str] = (),
        personal_values: Iterable[str] = (),
        note: str = "",
        now: datetime | None = None,
    ) -> Proposed:
        """Screen a rewrite of the shared rules and store what passes as a pending proposal.

        Nothing here changes the rules in force: an operator approves or rejects the
        proposal. Proposing the same rules from the same version and episodes twice (a
        retried conversation end) gives the same proposal.

        Args:
            rules: 1 to 10 objects with ``instruction`` and ``rationale``.
            proposer: The user whose conversation wrote the rewrite (recorded as its only
                source user), or :data:`GLOBAL_SCOPE` for an operator or an import.
            origin: ``conversation``, ``operator`` or ``import``.
            base_version: The shared version the rewrite was written from (default: the
                latest).
            source_episodes: The episodes it learned from.
            personal_values: The proposer's personal data (their facts), which shared rules
                may not carry.
            note: Why it was proposed.
            now: Creation time (default: now, UTC).

        Returns:
            The proposal (``None`` when no rule passed the screen or the rules equal the
            latest version) and the rules the screen dropped.

        Raises:
            InvalidInputError: malformed rules or arguments; nothing is written.
        """
        proposer = check_user_id(proposer)
        if origin not in _ORIGINS:
            raise InvalidInputError(f"origin must be one of {sorted(_ORIGINS)}, got {origin!r}")
        if (proposer == GLOBAL_SCOPE) != (origin != "conversation"):
            raise InvalidInputError(
                "a conversation's proposal names its user as the proposer; operators' and "
                f"imports' proposals are made under {GLOBAL_SCOPE!r}"
            )
        episodes = _strings(source_episodes, "source_episodes")
        note = _note(note)
        items = check_rule_items(rules)
        # In a worker thread: the screen would stall the event loop (see ascreened).
        kept, rejected = await asyncio.to_thread(
            screen_rules,
            items,
            shared=True,
            personal_values=[*personal_values, *([proposer] if origin == "conversation" else [])],
        )
        return await self._arecord(
            kept,
            rejected,
            proposer=proposer,
            origin=origin,
            base_version=base_version,
            episodes=episodes,
            note=note,
            now=now,
        )

    async def _arecord(
        self,
        kept: Sequence[RuleItem],
        rejected: list[RejectedRule],
        *,
        proposer: str,
        origin: Origin,
        base_version: int | None,
        episodes: tuple[str, ...],
        note: str,
        now: datetime | None,
    ) -> Proposed:
        """Store the screened rules ``kept`` as a pending proposal (see :meth:`apropose`)."""
        latest = await self.rules.alatest(GLOBAL_SCOPE)
        base = latest.version if base_version is None else _version_number(base_version)
        if not kept or (base == latest.version and tuple(kept) == latest.rules):
            return Proposed(None, rejected)
        stamp = rfc3339(now)
        users = (proposer,) if origin == "conversation" else ()
        rules_json = json.dumps([r.to_dict() for r in kept], ensure_ascii=False)
        pid = make_id("shared-rule-proposal", proposer, str(base), rules_json, *episodes)
        proposal = RuleProposal(
            id=pid,
            proposer=proposer,
            origin=origin,
            rules=tuple(kept),
            base_version=base,
            source_episodes=episodes,
            source_users=users,
            screened_out=tuple(rejected),
            note=note,
            created_at=stamp,
        )
        props = {
            "entry": _PROPOSAL,
            "rules_json": rules_json,
            "base_version": base,
            "origin": origin,
            "source_episodes": list(episodes),
            "source_users": list(users),
            "screened_out_json": json.dumps([r.to_dict() for r in rejected], ensure_ascii=False),
            "note": note,
            "created_at": stamp,
        }
        await self._aensure()
        try:
            result = await self.store.ainsert(
                PROPOSALS.name, [MemoryObject(pid, props, self._marker())], user=proposer
            )
            result.raise_for_failures()
        except ConflictError:
            # Proposed before (a retried conversation end): the stored one stands.
            return Proposed(await self.aget(pid), rejected)
        return Proposed(proposal, rejected)

    # -- reading ----------------------------------------------------------------------------

    async def alist(self, status: Status | None = None) -> list[RuleProposal]:
        """Return every proposal (or those with ``status``), oldest first."""
        if status is not None and status not in ("pending", "approved", "rejected"):
            raise InvalidInputError(f"status must be pending, approved or rejected: {status!r}")
        if not await self._aexists():
            return []
        found: list[RuleProposal] = []
        for proposer in await self.store.ausers(PROPOSALS.name):
            found += await self._aof(proposer)
        found.sort(key=lambda p: (p.created_at, p.id))
        return [p for p in found if status is None or p.status == status]

    async def apending(self) -> list[RuleProposal]:
        """Return the proposals waiting for an operator, oldest first."""
        return await self.alist("pending")

    async def aget(self, proposal_id: str) -> RuleProposal:
        """Return one proposal by id.

        Raises:
            UnknownProposalError: there is no such proposal.
        """
        found = await self._afind(proposal_id)
        if found is None:
            raise UnknownProposalError(
                f"no proposal of the shared rules has the id {proposal_id!r}"
            )
        return found

    # -- an operator's decisions ------------------------------------------------------------

    async def aapprove(self, proposal_id: str, *, operator: str, note: str = "") -> RuleVersion:
        """Write a pending proposal as the next version of the shared rules; return it.

        Only one decision is ever recorded per proposal (create-only), so two operators
        approving and rejecting at once cannot both win; an approval interrupted after its
        decision is completed by approving again.

        The proposal is screened again first, as the rule set it will put in force (every
        rule alone and with the others): a proposal stored before a stronger screen, or one
        whose rules only together make a request, is refused and stays pending, for the
        operator to reject.

        Raises:
            UnknownProposalError: there is no such proposal.
            ProposalDecidedError: it was rejected, or approved already.
            RuleScreenError: the screen refuses a rule of it (the reasons are listed);
                nothing is written.
            StaleProposalError: the shared rules changed since it was written; nothing is
                written.
        """
        operator, note = _operator(operator), _note(note)
        proposal = await self.aget(proposal_id)
        if proposal.status == "approved" and proposal.version is not None:
            raise ProposalDecidedError(
                f"proposal {proposal.id} was approved already (version {proposal.version})"
            )
        if proposal.status == "rejected":
            raise ProposalDecidedError(
                f"proposal {proposal.id} was rejected by {proposal.decided_by}"
            )
        marker = _marker_note(proposal.id)
        latest = await self.rules.alatest(GLOBAL_SCOPE)
        if marker in latest.note:
            # Written before an interruption: record the decision and stop.
            await self._adecide(proposal, "approved", operator, note, latest.version, upsert=True)
            return latest
        if proposal.base_version != latest.version:
            if proposal.status == "approved":
                await self._aundecide(proposal)
            raise StaleProposalError(proposal.id, proposal.base_version, latest.version)
        try:
            await ascreened(
                proposal.rules,
                f"proposal {proposal.id}",
                shared=True,
                personal_values=proposal.source_users,
            )
        except InvalidInputError:
            if proposal.status == "approved":
                await self._aundecide(proposal)
            raise
        if proposal.status == "pending":
            await self._adecide(proposal, "approved", operator, note, None, upsert=False)
        written = f"{proposal.note} " if proposal.note else ""
        try:
            created = await self.rules._apropose_version(
                GLOBAL_SCOPE,
                proposal.rules,
                base_version=proposal.base_version,
                source_episodes=proposal.source_episodes,
                source_users=proposal.source_users,
                note=f"{written}approved by {operator}{': ' + note if note else ''} {marker}",
            )
        except RuleConflictError:
            await self._aundecide(proposal)
            raise StaleProposalError(
                proposal.id, proposal.base_version, (await self.rules.alatest(GLOBAL_SCOPE)).version
            ) from None
        except BaseException:
            await self._aundecide(proposal)
            raise
        if created is None:  # equal to the latest: nothing to write, the decision stands
            created = await self.rules.alatest(GLOBAL_SCOPE)
        await self._adecide(proposal, "approved", operator, note, created.version, upsert=True)
        return created

    async def areject(self, proposal_id: str, *, operator: str, reason: str = "") -> RuleProposal:
        """Reject a pending proposal; it stays listed, with the reason.

        Raises:
            UnknownProposalError: there is no such proposal.
            ProposalDecidedError: it was decided already.
        """
        operator, reason = _operator(operator), _note(reason)
        proposal = await self.aget(proposal_id)
        if proposal.status != "pending":
            raise ProposalDecidedError(f"proposal {proposal.id} was {proposal.status} already")
        await self._adecide(proposal, "rejected", operator, reason, None, upsert=False)
        return await self.aget(proposal_id)

    async def aput(
        self,
        rules: Sequence[Any],
        *,
        operator: str,
        base_version: int | None = None,
        note: str = "",
    ) -> RuleVersion | None:
        """Write an operator's own rule set: screened, recorded as a proposal, approved at once.

        Returns:
            The new version; ``None`` when the rules equal the latest version.

        Raises:
            RuleScreenError: a rule does not pass the screen (the reasons are listed);
                nothing is written.
            InvalidInputError: the rules are malformed; nothing is written.
            StaleProposalError: ``base_version`` is no longer the latest.
        """
        operator = _operator(operator)
        items = check_rule_items(rules)
        # Screened once before anything is recorded: a refused put leaves no proposal behind.
        await ascreened(items, f"rules of {operator}", shared=True)
        proposed = await self._arecord(
            items,
            [],
            proposer=GLOBAL_SCOPE,
            origin="operator",
            base_version=base_version,
            episodes=(),
            note=_note(note or f"written by {operator}"),
            now=None,
        )
        if proposed.proposal is None:
            latest = await self.rules.alatest(GLOBAL_SCOPE)
            if base_version is not None and base_version != latest.version:
                raise StaleProposalError("(operator put)", base_version, latest.version)
            return None
        return await self.aapprove(proposed.proposal.id, operator=operator)

    async def arollback(self, version: int, *, operator: str, note: str = "") -> RuleVersion:
        """Restore an old version of the shared rules as the newest (an operator's action).

        The version is screened as a new rule set is: one that holds a rule the screen
        refuses now (written before the gate, or before a stronger screen) is not restored.

        Raises:
            RuleScreenError: the screen refuses a rule of that version; nothing is written.
            InvalidInputError: the version does not exist or already equals the latest.
        """
        operator = _operator(operator)
        target = await self.rules.aget(GLOBAL_SCOPE, version)
        await ascreened(target.rules, f"version {version} of the shared rules", shared=True)
        return await self.rules._arollback(
            GLOBAL_SCOPE, version, note=note or f"rollback to version {version} by {operator}"
        )

    # -- forgetting -------------------------------------------------------------------------

    async def aforget_episodes(self, user: str, episode_ids: Iterable[str]) -> int:
        """Delete the user's proposals learned from any of ``episode_ids``; return how many."""
        removed = set(episode_ids)
        check_user_id(user)
        if not removed or not await self._aexists():
            return 0
        doomed = [p.id for p in await self._aof(user) if set(p.source_episodes) & removed]
        if not doomed:
            return 0
        ids = doomed + [_decision_id(pid) for pid in doomed]
        await self.store.adelete(PROPOSALS.name, ids, user=user)
        return len(doomed)

    # -- internals --------------------------------------------------------------------------

    def _marker(self) -> list[float]:
        # Proposals are never searched by vector; a unit vector of the store's size.
        return [1.0] + [0.0] * (self.store.dims - 1)

    async def _aof(self, proposer: str) -> list[RuleProposal]:
        objects = await self._aall(proposer)
        decisions = {
            str(o.properties.get("proposal_id")): o
            for o in objects
            if o.properties.get("entry") == _DECISION
        }
        return [
            _proposal(proposer, o, decisions.get(o.id))
            for o in objects
            if o.properties.get("entry") == _PROPOSAL
        ]

    async def _afind(self, proposal_id: str) -> RuleProposal | None:
        if not isinstance(proposal_id, str) or not proposal_id.strip():
            raise InvalidInputError("a proposal id is a non-empty string")
        check_text(proposal_id, "the proposal id")
        if not await self._aexists():
            return None
        wanted = proposal_id.strip().lower()
        for proposer in await self.store.ausers(PROPOSALS.name):
            for found in await self._aof(proposer):
                if found.id.lower() == wanted:
                    return found
        return None

    async def _adecide(
        self,
        proposal: RuleProposal,
        decision: Literal["approved", "rejected"],
        operator: str,
        reason: str,
        version: int | None,
        *,
        upsert: bool,
    ) -> None:
        props = {
            "entry": _DECISION,
            "proposal_id": proposal.id,
            "decision": decision,
            "decided_by": operator,
            "reason": reason,
            "version": version,
            "created_at": rfc3339(None),
        }
        obj = MemoryObject(_decision_id(proposal.id), props, self._marker())
        await self._aensure()
        if upsert:
            result = await self.store.aupsert(PROPOSALS.name, [obj], user=proposal.proposer)
        else:
            try:
                result = await self.store.ainsert(PROPOSALS.name, [obj], user=proposal.proposer)
            except ConflictError:
                decided = await self.aget(proposal.id)
                raise ProposalDecidedError(
                    f"proposal {proposal.id} was {decided.status} meanwhile by {decided.decided_by}"
                ) from None
        result.raise_for_failures()

    async def _aundecide(self, proposal: RuleProposal) -> None:
        await self.store.adelete(
            PROPOSALS.name, [_decision_id(proposal.id)], user=proposal.proposer
        )


def _decision_id(proposal_id: str) -> str:
    return make_id("shared-rule-decision", proposal_id.lower())


def _marker_note(proposal_id: str) -> str:
    return f"[proposal {proposal_id}]"


def _proposal(proposer: str, obj: StoredObject, decision: StoredObject | None) -> RuleProposal:
    p = obj.properties
    d = decision.properties if decision is not None else {}
    status: Status = "pending"
    if d.get("decision") in ("approved", "rejected"):
        status = d["decision"]
    screened = json.loads(str(p.get("screened_out_json") or "[]"))
    version = d.get("version")
    return RuleProposal(
        id=obj.id,
        proposer=proposer,
        origin=str(p.get("origin") or ""),
        rules=tuple(
            RuleItem(r["instruction"], r["rationale"]) for r in json.loads(p["rules_json"])
        ),
        base_version=int(p.get("base_version") or 1),
        source_episodes=tuple(p.get("source_episodes") or ()),
        source_users=tuple(p.get("source_users") or ()),
        screened_out=tuple(
            RejectedRule(r["instruction"], r["rationale"], r["reason"]) for r in screened
        ),
        note=str(p.get("note") or ""),
        created_at=str(p.get("created_at") or ""),
        status=status,
        decided_by=str(d.get("decided_by") or ""),
        decided_at=str(d.get("created_at") or ""),
        reason=str(d.get("reason") or ""),
        version=int(version) if version is not None else None,
    )


def _strings(values: Sequence[str], name: str) -> tuple[str, ...]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidInputError(f"{name} must be a list of strings")
    for value in values:
        check_text(value, name)
    return tuple(values)


def _note(note: object) -> str:
    if not isinstance(note, str):
        raise InvalidInputError(f"a note must be a string, got {type(note).__name__}")
    check_text(note, "the note")
    if len(note) > _MAX_NOTE:
        raise InvalidInputError(f"a note has at most {_MAX_NOTE} characters")
    return " ".join(note.split())


def _operator(operator: object) -> str:
    if not isinstance(operator, str) or not operator.strip():
        raise InvalidInputError("name the operator who decides (a non-empty string)")
    check_text(operator, "the operator")
    if len(operator) > 256:
        raise InvalidInputError("an operator's name has at most 256 characters")
    return operator.strip()


def _version_number(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"a version is a positive integer, got {value!r}")
    return value

"""The LangGraph namespaces of the rules kind: items read and written through its classes.

The mapping is in ``docs/langgraph-store.md``; the base is :mod:`agentic_memory.namespaces.family`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import Item, SearchItem

from agentic_memory.kinds.rules.book import RuleBook
from agentic_memory.kinds.rules.shared import RuleProposal, SharedRules, UnknownProposalError
from agentic_memory.kinds.rules.versions import MAX_RULES, RuleConflictError, RuleVersion
from agentic_memory.namespaces.family import (
    KindSpace,
    SpaceContext,
    Write,
    check_fields,
    plain_item,
)
from agentic_memory.namespaces.search import Found, SpaceSearch, parse_time
from agentic_memory.store import (
    GLOBAL_SCOPE,
    InvalidInputError,
    check_user_id,
)
from agentic_memory.store.base import PAGE_LIMIT


class RuleVersionConflictError(RuleConflictError, ValueError):
    """A rules put named a base ``version`` that is no longer the latest.

    Also a ``ValueError``, so that LangGraph's server answers 400 with the message.
    """


_RULE_FIELDS = frozenset({"rules", "version", "note", "source_episodes", "rollback_to", "operator"})
_RULE_ECHO = frozenset({"parent_version", "created_at", "source_users"})
_DECISION_FIELDS = frozenset({"decision", "reason", "operator"})
LATEST = "latest"
PROPOSALS = "proposals"
PROPOSALS_NAMESPACE = ("rules", GLOBAL_SCOPE, PROPOSALS)
"""Where an operator reviews the proposals of the shared rules (``SharedRules``)."""


class OperatorRequiredError(InvalidInputError):
    """Changing the shared rules (or reviewing their proposals) is an operator's right."""


class RulesSpace(KindSpace):
    """``("rules", scope)``: key = a version number, or ``"latest"``; versions are immutable.

    The shared scope is written only by an operator store (``AgenticStore(operator=...)``),
    through :class:`~agentic_memory.kinds.rules.shared.SharedRules`: a put is screened and
    recorded as an approved proposal. ``("rules", "_global", "proposals")`` lists the
    pending proposals (key = proposal id); a put ``{"decision": "approve"}`` or
    ``{"decision": "reject", "reason": ...}`` decides one. A user's rules put here are
    screened like a conversation's (:class:`~agentic_memory.kinds.rules.RuleScreenError`:
    nothing written). ``source_users`` is never the caller's to set, and a put names no one:
    only a conversation's rewrite records the user it learned from (a store that credited
    the scope's user would make a caller's rules look learned from that user).
    """

    root = "rules"

    collection = RuleBook.spec.name

    def __init__(self, ctx: SpaceContext) -> None:
        super().__init__(ctx)
        self.rules = ctx.kind(RuleBook)
        self.shared_rules = ctx.kind(SharedRules)

    @property
    def shape(self) -> str:
        """The namespace form."""
        return f"('rules', user or {GLOBAL_SCOPE!r})"

    def check_owner(self, owner: str) -> str:
        """Check a scope: a user id or the global scope."""
        return check_user_id(owner)

    def check_item_namespace(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """Check a version's namespace, or the proposals' (operators only)."""
        if namespace == PROPOSALS_NAMESPACE:
            self._require_operator("review the proposals of the shared rules")
            return namespace
        return super().check_item_namespace(namespace)

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Return a scope's versions; the proposals only when searched by their own namespace."""
        if prefix == PROPOSALS_NAMESPACE:
            self._require_operator("review the proposals of the shared rules")
            return [PROPOSALS_NAMESPACE]
        return await super().partitions(prefix)

    async def namespaces(self, fixed: tuple[str, ...], deep: bool) -> set[tuple[str, ...]]:
        """Return the scopes with versions, and for an operator the proposals if there are some."""
        found = await super().namespaces(fixed, deep)
        if (
            deep
            and self.ctx.operator is not None
            and PROPOSALS_NAMESPACE[: len(fixed)] == fixed[:3]
            and len(fixed) <= 3
            and self.shared_rules.spec.name in await self.ctx.store.acollections()
            and await self.ctx.store.ausers(self.shared_rules.spec.name)
        ):
            found.add(PROPOSALS_NAMESPACE)
        return found

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One stored version; ``"latest"`` is the newest (none while nothing is stored)."""
        scope = self.check_item_namespace(namespace)[1]
        if namespace == PROPOSALS_NAMESPACE:
            try:
                proposal = await self.shared_rules.aget(key)
            except UnknownProposalError:
                return None
            return plain_item(_proposal_item(proposal, None))
        if key == LATEST:
            latest = await self.rules.alatest(scope)
            return (
                plain_item(self._item(scope, latest, None, key=LATEST)) if latest.stored else None
            )
        number = _version_number(key)
        if number is None:
            return None
        for version in await self._stored(scope):
            if version.version == number:
                return plain_item(self._item(scope, version, None))
        return None

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Propose the next version (or roll back to one) with a put under ``"latest"``."""
        scope = self.check_item_namespace(namespace)[1]
        if namespace == PROPOSALS_NAMESPACE:
            return self._prepare_decision(key, value)
        if value is None:
            raise InvalidInputError(
                "rule versions are immutable and cannot be deleted one by one: put a new "
                f"version under the key {LATEST!r} (or {{'rollback_to': n}}); forgetting a "
                "user removes their rules"
            )
        if key != LATEST:
            raise InvalidInputError(
                f"rule versions are immutable: put the new rule set under the key {LATEST!r}, "
                f"not {key!r}"
            )
        shared = scope == GLOBAL_SCOPE
        if shared:
            self._require_operator("change the rules shared by every user")
        fields = check_fields(value, _RULE_FIELDS, _RULE_ECHO, "a rule set", required=())
        rollback = fields.get("rollback_to")
        if ("rules" in fields) == (rollback is not None):
            raise InvalidInputError("a rules put needs exactly one of 'rules' or 'rollback_to'")
        base = fields.get("version")
        for name in ("version", "rollback_to"):
            number = fields.get(name)
            if number is not None and (
                isinstance(number, bool) or not isinstance(number, int) or number < 1
            ):
                raise InvalidInputError(f"{name} is a version number (1, 2, ...), got {number!r}")
        rules = _rule_list(fields["rules"]) if "rules" in fields else []
        note = fields.get("note", "")
        if not isinstance(note, str):
            raise InvalidInputError(f"note must be a string, got {note!r}")
        episodes = fields.get("source_episodes", [])
        if not isinstance(episodes, list) or not all(isinstance(v, str) for v in episodes):
            raise InvalidInputError("source_episodes must be a list of strings")
        if shared and episodes:
            raise InvalidInputError(
                "an operator's rules for everyone are learned from no episode: leave "
                "source_episodes out"
            )
        operator = self._operator(fields)
        book, gate, now = self.rules, self.shared_rules, self.ctx.now

        async def write() -> None:
            latest = await book.alatest(scope)
            if base is not None and base != latest.version:
                raise RuleVersionConflictError(scope, base, latest.version)
            for name in sorted(_RULE_ECHO & fields.keys()):
                # A value read back and edited still holds these; they must be unchanged.
                if not latest.stored or _echoed(fields[name]) != _echoed(getattr(latest, name)):
                    raise InvalidInputError(
                        f"{name} is set by the store when a version is created; leave it "
                        f"out (version {latest.version} has {getattr(latest, name)!r})"
                    )
            try:
                if shared and rollback is not None:
                    await gate.arollback(rollback, operator=operator, note=note)
                elif shared:
                    await gate.aput(
                        rules,
                        operator=operator,
                        base_version=latest.version,
                        note=note or f"put through the LangGraph store by {operator}",
                    )
                elif rollback is not None:
                    await book.arollback(scope, rollback, note=note)
                else:
                    await book.apropose(
                        scope,
                        rules,
                        base_version=base,
                        source_episodes=episodes,
                        note=note or "put through the LangGraph store",
                        now=now(),
                    )
            except RuleVersionConflictError:
                raise
            except RuleConflictError as exc:
                raise RuleVersionConflictError(
                    exc.scope, exc.base_version, exc.latest_version
                ) from exc

        return write

    def _prepare_decision(self, key: str, value: Mapping[str, Any] | None) -> Write:
        if value is None:
            raise InvalidInputError(
                "proposals are not deleted: reject one with {'decision': 'reject', 'reason': ...}"
            )
        fields = check_fields(value, _DECISION_FIELDS, frozenset(), "a decision", required=())
        decision = fields.get("decision")
        if decision not in ("approve", "reject"):
            raise InvalidInputError(
                f"a decision is {{'decision': 'approve' or 'reject', 'reason': ...}}, got "
                f"{decision!r}"
            )
        reason = fields.get("reason", "")
        if not isinstance(reason, str):
            raise InvalidInputError(f"reason must be a string, got {reason!r}")
        operator = self._operator(fields)
        gate = self.shared_rules

        async def write() -> None:
            if decision == "approve":
                try:
                    await gate.aapprove(key, operator=operator, note=reason)
                except RuleConflictError as exc:
                    raise RuleVersionConflictError(
                        GLOBAL_SCOPE, exc.base_version, exc.latest_version
                    ) from exc
            else:
                await gate.areject(key, operator=operator, reason=reason)

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """List stored versions newest first, or rank them by hybrid search over their text."""
        if request.partition == PROPOSALS_NAMESPACE:
            listed = await self.shared_rules.alist()
            found = [Found(_proposal_item(p, None)) for p in reversed(listed)]
            return [f for f in found if request.keeps(f)][: request.need]
        scope = request.owner
        stored = await self._stored(scope)
        ranked: list[tuple[RuleVersion, float | None]]
        if request.query and stored:
            limit = min(PAGE_LIMIT, len(stored))
            hits = await self.rules.asearch(scope, request.query, alpha=request.alpha, limit=limit)
            ranked = [(version, score) for version, score in hits]
        else:
            ranked = [(v, None) for v in reversed(stored)]
        out = [Found(self._item(scope, v, s)) for v, s in ranked]
        return [f for f in out if request.keeps(f)][: request.need]

    def _require_operator(self, what: str) -> None:
        if self.ctx.operator is None:
            raise OperatorRequiredError(
                f"only an operator may {what}: open the store with AgenticStore(..., "
                "operator='name'), or use `amem memories rules review` where the store lives"
            )

    def _operator(self, fields: Mapping[str, Any]) -> str:
        given = fields.get("operator")
        if given is not None and (not isinstance(given, str) or not given.strip()):
            raise InvalidInputError(f"operator names who decides (a string), got {given!r}")
        return str(given or self.ctx.operator or "")

    async def _stored(self, scope: str) -> list[RuleVersion]:
        return [v for v in await self.rules.aversions(scope) if v.stored]

    def _item(
        self, scope: str, version: RuleVersion, score: float | None, *, key: str | None = None
    ) -> SearchItem:
        value = version.to_dict()
        value.pop("scope", None)
        stamp = parse_time(version.created_at)
        return SearchItem(
            namespace=(self.root, scope),
            key=key or str(version.version),
            value=value,
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )


def _proposal_item(proposal: RuleProposal, score: float | None) -> SearchItem:
    value = proposal.to_dict()
    value.pop("id", None)
    created = parse_time(proposal.created_at)
    return SearchItem(
        namespace=PROPOSALS_NAMESPACE,
        key=proposal.id,
        value=value,
        created_at=created,
        updated_at=parse_time(proposal.decided_at) if proposal.decided_at else created,
        score=score,
    )


def _echoed(value: object) -> object:
    return list(value) if isinstance(value, tuple | list) else value


def _version_number(key: str) -> int | None:
    if not key.isascii() or not key.isdigit():
        return None
    return int(key)


def _rule_list(raw: object) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise InvalidInputError(
            "rules is a non-empty list of {'instruction': ..., 'rationale': ...} objects"
        )
    if len(raw) > MAX_RULES:
        raise InvalidInputError(f"a rule set holds at most {MAX_RULES} rules, got {len(raw)}")
    for rule in raw:
        if (
            not isinstance(rule, dict)
            or set(rule) != {"instruction", "rationale"}
            or not all(isinstance(v, str) for v in rule.values())
        ):
            raise InvalidInputError(
                f"each rule is {{'instruction': str, 'rationale': str}}, got {rule!r:.100}"
            )
    return list(raw)

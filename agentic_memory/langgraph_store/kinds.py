"""Namespaces that are memory kinds: items read and written through the kind classes.

Each family maps LangGraph items onto one memory kind and goes through that kind's public
methods, so its rules hold for store writes as for the agent's: facts supersede (history
kept), rule versions are immutable and numbered by ``RuleBook.apropose``, messages are
numbered by ``MessageLog.aremember``, knowledge is written only by ingestion. The mapping,
namespace by namespace, is in ``docs/langgraph-store.md``.

A put is checked in two steps: :meth:`KindSpace.prepare` checks what it can without reading
the store (shape, types, unknown fields) and returns the write, which checks what needs the
stored state (an edited field that only the store sets, a rule base version) before it
changes anything. Everything that reads or writes is a coroutine over the kinds' async
methods (``AgenticStore.abatch`` awaits it on the caller's loop; the storage work itself runs
in worker threads); knowledge bases, whose functions are synchronous storage code, are read
through their ``a…`` functions, which run them whole in a worker thread.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from langchain_core.embeddings import Embeddings
from langgraph.store.base import Item, SearchItem

from agentic_memory.kinds.episodes import Episode, EpisodicMemory
from agentic_memory.kinds.facts import Fact, FactStore, normalise_subject
from agentic_memory.kinds.knowledge import (
    USER_MANIFEST_PREFIX,
    KnowledgeHit,
    afind_knowledge_base,
    aget_source,
    alist_chunks,
    alist_knowledge_bases,
    alist_sources,
    asearch_knowledge,
    knowledge_collection,
)
from agentic_memory.kinds.messages import MessageLog
from agentic_memory.kinds.rules import MAX_RULES, RuleBook, RuleConflictError, RuleVersion
from agentic_memory.kinds.shared_rules import RuleProposal, SharedRules, UnknownProposalError
from agentic_memory.langgraph_store.common import Found, SpaceSearch, parse_time
from agentic_memory.langgraph_store.namespaces import SEPARATOR, thread_label, thread_of_label
from agentic_memory.store import (
    GLOBAL_SCOPE,
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    check_text,
    check_user_id,
    make_id,
)
from agentic_memory.store.base import PAGE_LIMIT

__all__ = [
    "EpisodesSpace",
    "FactsSpace",
    "KindSpace",
    "KnowledgeSpace",
    "MessagesSpace",
    "OperatorRequiredError",
    "RecordSpace",
    "RuleVersionConflictError",
    "RulesSpace",
    "UserKnowledgeSpace",
]

Write = Callable[[], Awaitable[None]]
_PAGE = 100
_RECALL_CAP = 1000
"""The largest recall a search asks a kind for while a filter drops candidates."""
_MAX_CONVERSATIONS = 100_000
"""How far an episode key is looked for among a thread's conversation numbers."""


class RuleVersionConflictError(RuleConflictError, ValueError):
    """A rules put named a base ``version`` that is no longer the latest.

    Also a ``ValueError``, so that LangGraph's server answers 400 with the message.
    """


@dataclass(frozen=True)
class KindContext:
    """What every family needs: the store, the embeddings, the kinds, the clock."""

    store: MemoryStore
    embeddings: Embeddings
    facts: FactStore
    episodes: EpisodicMemory
    rules: RuleBook
    messages: MessageLog
    now: Callable[[], datetime | None]
    """The time a kind should stamp, or ``None`` for the kind's own clock."""
    shared_rules: SharedRules
    operator: str | None = None
    """Who decides for the shared rules through this store; ``None``: nobody (not an
    operator's store)."""


class KindSpace(ABC):
    """The namespaces of one memory kind, ``(root, owner, ...)``."""

    root: ClassVar[str]
    collection: ClassVar[str] = ""
    """The kind's collection in the memory store."""
    depth: ClassVar[int] = 2
    """Labels of an item's namespace."""

    def __init__(self, ctx: KindContext) -> None:
        self.ctx = ctx

    # -- namespaces -----------------------------------------------------------------------

    def check_item_namespace(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """Check the namespace of a get, put or delete; raise ``InvalidInputError``."""
        if len(namespace) != self.depth:
            raise InvalidInputError(
                f"namespaces under {self.root!r} are reserved for that memory kind and have "
                f"the form {self.shape}; got {namespace}"
            )
        self.check_owner(namespace[1])
        return namespace

    @property
    def shape(self) -> str:
        """The namespace form, for messages."""
        return f"({self.root!r}, user)"

    def check_owner(self, owner: str) -> str:
        """Check the second label: a person's user id (rules and knowledge differ)."""
        check_user_id(owner)
        if owner == GLOBAL_SCOPE:
            raise InvalidInputError(
                f"{GLOBAL_SCOPE!r} holds only the shared rules, not {self.root}: use a user id"
            )
        return owner

    async def owners(self) -> list[str]:
        """Owners with something stored, addressable as a namespace label, sorted."""
        name = self.collection
        if name not in await self.ctx.store.acollections():
            return []
        return sorted(u for u in await self.ctx.store.ausers(name) if _addressable(u))

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Return the namespaces a search under ``prefix`` reads, one query each, in order."""
        if len(prefix) <= 1:
            return [(self.root, owner) for owner in await self.owners()]
        if len(prefix) == 2:
            return [(self.root, self.check_owner(prefix[1]))]
        return []

    async def namespaces(self, fixed: tuple[str, ...], deep: bool) -> set[tuple[str, ...]]:
        """Return the kind's namespaces that hold something, under the labels ``fixed``."""
        del deep
        return {ns for ns in await self._listed(fixed) if ns[: len(fixed)] == fixed}

    async def _listed(self, fixed: tuple[str, ...]) -> list[tuple[str, ...]]:
        try:
            named = await self.partitions(fixed[:2])
        except InvalidInputError:
            return []  # a listing under a label that cannot be an owner lists nothing
        if len(fixed) < 2:
            return named  # every owner with something stored
        existing = set(await self.owners())
        return [ns for ns in named if ns[1] in existing]

    # -- items ----------------------------------------------------------------------------

    @abstractmethod
    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Return one item, or ``None``."""

    @abstractmethod
    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Check a put (``value`` None: a delete) and return the write."""

    @abstractmethod
    async def search(self, request: SpaceSearch) -> list[Found]:
        """Return the first ``need`` matching items of one partition (ranked with a query)."""


# -- facts ------------------------------------------------------------------------------------


_FACT_FIELDS = frozenset({"subject", "value", "category", "source_thread"})
_FACT_ECHO = frozenset({"valid_from"})


class FactsSpace(KindSpace):
    """``("facts", user)``: key = the normalised subject, value = the current fact."""

    root = "facts"

    collection = FactStore.spec.name

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Return the current value of a subject, dated from its first value."""
        user = self.check_item_namespace(namespace)[1]
        subject = normalise_subject(key)
        history = await self.ctx.facts.ahistory(user, subject)
        if not history:
            return None
        return _plain(self._item(user, _current(history), history, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Supersede the subject's value through ``FactStore`` (a delete forgets the subject)."""
        user = self.check_item_namespace(namespace)[1]
        subject = normalise_subject(key)
        facts, now = self.ctx.facts, self.ctx.now
        if value is None:

            async def forget() -> None:
                await facts.aforget(user, subject)

            return forget
        fields = _check_fields(value, _FACT_FIELDS, _FACT_ECHO, "a fact", required=("value",))
        if not isinstance(fields["value"], str):
            raise InvalidInputError(
                f"a fact's value must be a string, got {type(fields['value']).__name__}"
            )
        if "subject" in fields and normalise_subject(fields["subject"]) != subject:
            raise InvalidInputError(
                f"the value names the subject {fields['subject']!r} but the key is {key!r}: "
                "a fact's key is its subject"
            )
        category = _optional(fields, "category", str, "a fact's category must be a string")
        source = _optional(fields, "source_thread", str, "source_thread must be a string or None")

        async def write() -> None:
            history = await facts.ahistory(user, subject)
            current = _current(history) if history else None
            if "valid_from" in fields and (
                current is None or fields["valid_from"] != current.valid_from
            ):
                raise InvalidInputError(
                    "valid_from is set by the store when a value is stored; leave it out "
                    f"(the current value of {subject!r} is from "
                    f"{current.valid_from if current else 'nowhere: there is none'})"
                )
            chosen = category or (current.category if current else "other")
            if (
                current is not None
                and _same_text(current.value, fields["value"])
                and chosen != current.category
            ):
                raise InvalidInputError(
                    f"{subject!r} already has the value {current.value!r} (category "
                    f"{current.category!r}): restating a value changes nothing, so its "
                    "category changes only together with a new value"
                )
            incoming = {"subject": subject, "value": fields["value"], "category": chosen}
            await facts.aremember(user, [incoming], source_thread=source, now=now())

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """List current facts by subject, or rank them by hybrid search over subject and value."""
        user = request.owner
        current = await self.ctx.facts.acurrent(user)
        if request.query:
            ranked = await self._rank(user, request.query, current, request.alpha)
        else:
            ranked = [(fact, None) for fact in current]
        chosen = [(f, s) for f, s in ranked if request.flt.matches(_fact_value(f))][: request.need]
        return [
            Found(self._item(user, f, await self.ctx.facts.ahistory(user, f.subject), s))
            for f, s in chosen
        ]

    async def _rank(
        self, user: str, query: str, current: list[Fact], alpha: float
    ) -> list[tuple[Fact, float | None]]:
        if not current:
            return []
        found = await self.ctx.facts.asearch(
            user, query, alpha=alpha, limit=min(PAGE_LIMIT, len(current))
        )
        return [(fact, score) for fact, score in found]

    def _item(self, user: str, fact: Fact, history: list[Fact], score: float | None) -> SearchItem:
        first = history[0].valid_from if history else fact.valid_from
        return SearchItem(
            namespace=(self.root, user),
            key=fact.subject,
            value=_fact_value(fact),
            created_at=parse_time(first),
            updated_at=parse_time(fact.valid_from),
            score=score,
        )


def _fact_value(fact: Fact) -> dict[str, Any]:
    return {
        "subject": fact.subject,
        "value": fact.value,
        "category": fact.category,
        "valid_from": fact.valid_from,
        "source_thread": fact.source_thread,
    }


def _current(history: list[Fact]) -> Fact:
    flagged = [f for f in history if f.current]
    return flagged[-1] if flagged else history[-1]


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


# -- episodes ---------------------------------------------------------------------------------


_EPISODE_FIELDS = frozenset(
    {
        "thread_id",
        "conversation",
        "context_tags",
        "conversation_summary",
        "what_worked",
        "what_to_avoid",
        "importance",
        "important",
    }
)
_EPISODE_ECHO = frozenset({"created_at"})
_EPISODE_REQUIRED = tuple(sorted(_EPISODE_FIELDS - {"important"}))


@dataclass
class _Reflection:
    context_tags: list[str]
    conversation_summary: str
    what_worked: str
    what_to_avoid: str
    importance: float


class EpisodesSpace(KindSpace):
    """``("episodes", user)``: key = the episode id, value = the reflection and conversation."""

    root = "episodes"

    collection = EpisodicMemory.spec.name

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One episode by id."""
        user = self.check_item_namespace(namespace)[1]
        if not _is_uuid(key):
            return None
        episode = await self.ctx.episodes.aget(user, key)
        return None if episode is None else _plain(self._item(user, episode, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Store (or replace) an episode through ``EpisodicMemory.astore``."""
        user = self.check_item_namespace(namespace)[1]
        episodes, now = self.ctx.episodes, self.ctx.now
        if value is None:

            async def forget() -> None:
                if _is_uuid(key):
                    await episodes.aforget(user, [key])

            return forget
        fields = _check_fields(
            value, _EPISODE_FIELDS, _EPISODE_ECHO, "an episode", required=_EPISODE_REQUIRED
        )
        # The user's mark (kept for good, recalled first): absent keeps the stored one.
        important = fields.get("important")
        if important is not None and not isinstance(important, bool):
            raise InvalidInputError(
                f"an episode's important is true, false or absent, got {important!r}"
            )
        for name in ("thread_id", "conversation", "conversation_summary"):
            if not isinstance(fields[name], str) or not fields[name].strip():
                raise InvalidInputError(f"an episode's {name} must be a non-empty string")
        for name in ("what_worked", "what_to_avoid"):
            if not isinstance(fields[name], str):
                raise InvalidInputError(f"an episode's {name} must be a string")
        tags = fields["context_tags"]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidInputError("an episode's context_tags must be a list of strings")
        importance = fields["importance"]
        if (
            isinstance(importance, bool)
            or not isinstance(importance, int | float)
            or not 0 <= importance <= 1
        ):
            raise InvalidInputError(
                f"an episode's importance is a number in [0, 1], got {importance!r}"
            )
        thread = fields["thread_id"]
        check_text(thread, "thread_id")
        reflection = _Reflection(
            context_tags=list(tags),
            conversation_summary=fields["conversation_summary"],
            what_worked=fields["what_worked"],
            what_to_avoid=fields["what_to_avoid"],
            importance=float(importance),
        )

        async def write() -> None:
            existing = await episodes.aget(user, key) if _is_uuid(key) else None
            if existing is not None:
                if existing.thread_id != thread:
                    raise InvalidInputError(
                        f"episode {key} belongs to thread {existing.thread_id!r}, not {thread!r}: "
                        "an episode's id derives from its thread, so it cannot move"
                    )
                if "created_at" in fields and fields["created_at"] != existing.created_at:
                    raise InvalidInputError("created_at is set by the store; leave it out")
                number = _conversation_number(user, thread, key, _MAX_CONVERSATIONS)
                stamp: datetime | None = parse_time(existing.created_at)
            else:
                if "created_at" in fields:
                    raise InvalidInputError("created_at is set by the store; leave it out")
                known = sum(
                    [1 async for e in _all_episodes(episodes, user) if e.thread_id == thread]
                )
                number = _conversation_number(user, thread, key, known + 1)
                if number is None:
                    expected = EpisodicMemory.episode_id(user, thread, known + 1)
                    raise InvalidInputError(
                        f"no episode {key!r} of {user!r}: an episode's key is its id, derived "
                        f"from its thread and conversation number; the next episode of thread "
                        f"{thread!r} has the key {expected!r}"
                    )
                stamp = now()
            assert number is not None
            stored = await episodes.astore(
                user, thread, reflection, fields["conversation"], conversation=number, now=stamp
            )
            if important is not None:
                await episodes.amark_important(user, [stored], important=important)

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Episodes newest first, or by ``EpisodicMemory.arecall`` (relevance, recency, importance)."""
        user, query = request.owner, request.query
        episodes = self.ctx.episodes
        if query:
            moment = self.ctx.now()

            async def recall(k: int) -> list[SearchItem]:
                recalled = await episodes.arecall(user, query, k=k, alpha=request.alpha, now=moment)
                return [self._item(user, r.episode, r.score) for r in recalled]

            return await request.ranked(recall, _RECALL_CAP)

        async def page(offset: int) -> list[SearchItem]:
            listed = await episodes.alist(user, limit=_PAGE, offset=offset)
            return [self._item(user, episode, None) for episode in listed]

        return await request.paged(page, _PAGE)

    def _item(self, user: str, episode: Episode, score: float | None) -> SearchItem:
        value = episode.to_dict(with_conversation=True)
        value.pop("id", None)
        stamp = parse_time(episode.created_at)
        return SearchItem(
            namespace=(self.root, user),
            key=episode.id,
            value=value,
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )


async def _all_episodes(episodes: EpisodicMemory, user: str) -> AsyncIterator[Episode]:
    offset = 0
    while True:
        page = await episodes.alist(user, limit=_PAGE, offset=offset)
        for episode in page:
            yield episode
        if len(page) < _PAGE:
            return
        offset += _PAGE


def _conversation_number(user: str, thread: str, key: str, upto: int) -> int | None:
    # Ids are hashes of (user, thread, number): the number is found by trying them.
    wanted = key.lower()
    for number in range(1, upto + 1):
        if EpisodicMemory.episode_id(user, thread, number) == wanted:
            return number
    return None


# -- rules ------------------------------------------------------------------------------------


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
    through :class:`~agentic_memory.kinds.shared_rules.SharedRules`: a put is screened and
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
            and self.ctx.shared_rules.spec.name in await self.ctx.store.acollections()
            and await self.ctx.store.ausers(self.ctx.shared_rules.spec.name)
        ):
            found.add(PROPOSALS_NAMESPACE)
        return found

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One stored version; ``"latest"`` is the newest (none while nothing is stored)."""
        scope = self.check_item_namespace(namespace)[1]
        if namespace == PROPOSALS_NAMESPACE:
            try:
                proposal = await self.ctx.shared_rules.aget(key)
            except UnknownProposalError:
                return None
            return _plain(_proposal_item(proposal, None))
        if key == LATEST:
            latest = await self.ctx.rules.alatest(scope)
            return _plain(self._item(scope, latest, None, key=LATEST)) if latest.stored else None
        number = _version_number(key)
        if number is None:
            return None
        for version in await self._stored(scope):
            if version.version == number:
                return _plain(self._item(scope, version, None))
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
        fields = _check_fields(value, _RULE_FIELDS, _RULE_ECHO, "a rule set", required=())
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
        book, gate, now = self.ctx.rules, self.ctx.shared_rules, self.ctx.now

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
        fields = _check_fields(value, _DECISION_FIELDS, frozenset(), "a decision", required=())
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
        gate = self.ctx.shared_rules

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
            listed = await self.ctx.shared_rules.alist()
            found = [Found(_proposal_item(p, None)) for p in reversed(listed)]
            return [f for f in found if request.keeps(f)][: request.need]
        scope = request.owner
        stored = await self._stored(scope)
        ranked: list[tuple[RuleVersion, float | None]]
        if request.query and stored:
            limit = min(PAGE_LIMIT, len(stored))
            hits = await self.ctx.rules.asearch(
                scope, request.query, alpha=request.alpha, limit=limit
            )
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
        return [v for v in await self.ctx.rules.aversions(scope) if v.stored]

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


# -- messages ---------------------------------------------------------------------------------


_MESSAGE_FIELDS = frozenset({"role", "content", "speaker", "metadata", "important"})
_MESSAGE_ECHO = frozenset({"turn", "created_at"})
_MESSAGE_DERIVED = frozenset({"important_by", "expires_at"})
"""Read-only fields a put may echo back and that it ignores: they follow from ``important``
and the retention policy, so a value read, edited and put back is accepted."""
_ROLES = frozenset({"human", "user", "ai", "assistant"})


class MessagesSpace(KindSpace):
    """``("messages", user, thread)``: key = the message id; the message log."""

    root = "messages"
    depth = 3

    collection = MessageLog.spec.name

    @property
    def shape(self) -> str:
        """The namespace form."""
        return "('messages', user, thread_id)"

    def check_item_namespace(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """Check a message namespace; its third label is an escaped thread id."""
        checked = super().check_item_namespace(namespace)
        thread_of_label(checked[2])
        return checked

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Return a user's whole log, or one thread of it."""
        if len(prefix) == 3:
            self.check_owner(prefix[1])
            thread_of_label(prefix[2])
            return [prefix]
        return await super().partitions(prefix)

    async def namespaces(self, fixed: tuple[str, ...], deep: bool) -> set[tuple[str, ...]]:
        """One namespace per thread (``deep``), or per user when the caller truncates anyway.

        A thread's label is its id with ``%``, ``.`` and NUL escaped (``thread_label``), so
        every thread is listed and addressable, whatever its id holds.
        """
        users = [p[1] for p in await self._listed(fixed[:2])]
        found: set[tuple[str, ...]] = set()
        for user in users:
            if not deep:
                found.add((self.root, user))
                continue
            for thread in await self.ctx.messages.athreads(user):
                found.add((self.root, user, thread_label(thread)))
        return {ns for ns in found if ns[: len(fixed)] == fixed}

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One logged message, by its stored id or by the message's own id."""
        user, label = self.check_item_namespace(namespace)[1:]
        thread = thread_of_label(label)
        obj = await self._resolve(user, thread, key)
        if obj is None:
            return None
        return _plain(self._item(user, obj, None, key=key))

    async def _resolve(self, user: str, thread: str, key: str) -> StoredObject | None:
        direct = await self._read(user, key) if _is_uuid(key) else None
        if direct is not None and direct.properties.get("thread_id") == thread:
            return direct
        return await self._read(user, MessageLog.message_id(user, thread, key))

    async def _read(self, user: str, oid: str) -> StoredObject | None:
        # MessageLog has no read by id yet (see docs/langgraph-store.md): read its collection.
        if self.collection not in await self.ctx.store.acollections():
            return None
        return await self.ctx.store.aget(self.collection, oid, user=user)

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Log a message under its own id through ``MessageLog.aremember``; delete forgets it."""
        user, label = self.check_item_namespace(namespace)[1:]
        thread = thread_of_label(label)
        log, now = self.ctx.messages, self.ctx.now
        if value is None:

            async def delete() -> None:
                found = await self._resolve(user, thread, key)
                if found is not None:
                    await log.aforget(user, ids=[found.id])

            return delete
        fields = _check_fields(
            value,
            _MESSAGE_FIELDS,
            _MESSAGE_ECHO | _MESSAGE_DERIVED,
            "a message",
            required=("role", "content"),
        )
        important = fields.get("important")
        if important is not None and not isinstance(important, bool):
            raise InvalidInputError(
                f"a message's important is true, false or absent, got {important!r}"
            )
        if fields["role"] not in _ROLES:
            raise InvalidInputError(
                f"a logged message's role is one of {', '.join(sorted(_ROLES))}, got "
                f"{fields['role']!r} (system and tool messages are not logged)"
            )
        if not isinstance(fields["content"], str) or not fields["content"].strip():
            raise InvalidInputError("a logged message's content must be a non-empty string")
        speaker = _optional(fields, "speaker", str, "speaker must be a string or None")
        metadata = _optional(fields, "metadata", dict, "metadata must be an object or None")
        message = {"role": fields["role"], "content": fields["content"], "id": key}
        if speaker:
            message["name"] = speaker

        async def write() -> None:
            alias = await self._read(user, MessageLog.message_id(user, thread, key))
            if alias is None and _is_uuid(key):
                stored = await self._read(user, key)
                if stored is not None:
                    raise InvalidInputError(
                        f"{key} is the stored id of a logged message: a message is written "
                        "under its own message id, and a logged message cannot be rewritten "
                        "by its stored id (delete it and log a new one)"
                    )
            for name in sorted(_MESSAGE_ECHO & fields.keys()):
                if alias is None or fields[name] != _message_value(alias, log)[name]:
                    raise InvalidInputError(
                        f"{name} is set by the message log; leave it out of the value"
                    )
            # important absent: a new message is not important, a logged one keeps its mark.
            await log.aremember(
                user, thread, [message], metadata=metadata, now=now(), important=important
            )

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """List turns by thread and turn number, or find them with ``MessageLog.arecall``."""
        user, query, partition = request.owner, request.query, request.partition
        thread = thread_of_label(partition[2]) if len(partition) == 3 else None
        log = self.ctx.messages
        if query:

            async def recall(k: int) -> list[SearchItem]:
                recalled = await log.arecall(
                    user, query, k=k, alpha=request.alpha, thread_id=thread
                )
                return [self._logged(user, r, r.score) for r in recalled]

            return await request.ranked(recall, _RECALL_CAP)

        async def page(offset: int) -> list[SearchItem]:
            listed = await log.alist(user, thread_id=thread, limit=_PAGE, offset=offset)
            return [self._logged(user, message, None) for message in listed]

        return await request.paged(page, _PAGE)

    def _logged(self, user: str, message: Any, score: float | None) -> SearchItem:
        value = {
            "role": message.role,
            "content": message.content,
            "speaker": message.speaker,
            "turn": message.turn,
            "created_at": message.created_at,
            "metadata": message.metadata,
            "important": message.important,
            "important_by": message.important_by,
            "expires_at": message.expires_at,
        }
        stamp = parse_time(message.created_at)
        return SearchItem(
            namespace=(self.root, user, thread_label(message.thread_id)),
            key=message.id,
            value=value,
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )

    def _item(self, user: str, obj: StoredObject, score: float | None, *, key: str) -> SearchItem:
        value = _message_value(obj, self.ctx.messages)
        stamp = parse_time(value["created_at"])
        return SearchItem(
            namespace=(self.root, user, thread_label(str(obj.properties.get("thread_id", "")))),
            key=key,
            value=value,
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )


def _message_value(obj: StoredObject, log: MessageLog) -> dict[str, Any]:
    p = obj.properties
    raw = p.get("metadata_json")
    created = str(p.get("created_at", ""))
    important = bool(p.get("important"))
    return {
        "role": p.get("role", "human"),
        "content": p.get("content", ""),
        "speaker": p.get("speaker") or "",
        "turn": int(p.get("turn", 0)),
        "created_at": created,
        "metadata": json.loads(raw) if raw else {},
        "important": important,
        "important_by": str(p.get("important_by") or "") if important else "",
        # When the retention policy lets it expire; None: not by age.
        "expires_at": log.retention.message_expiry(created, important),
    }


# -- knowledge --------------------------------------------------------------------------------


class KnowledgeSpace(KindSpace):
    """``("knowledge", kb)``: key = a chunk id; read-only (ingestion writes knowledge)."""

    root = "knowledge"

    @property
    def shape(self) -> str:
        """The namespace form."""
        return "('knowledge', knowledge_base)"

    def check_owner(self, owner: str) -> str:
        """Check a knowledge base name."""
        knowledge_collection(owner)
        return owner

    async def owners(self) -> list[str]:
        """Return the knowledge bases."""
        return sorted(kb for kb in await alist_knowledge_bases(self.ctx.store) if _addressable(kb))

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Every knowledge base, or the one named (in any case), if it exists."""
        if len(prefix) == 2:
            self.check_owner(prefix[1])
            kept = await afind_knowledge_base(self.ctx.store, prefix[1])
            return [] if kept is None else [(self.root, kept)]
        return await super().partitions(prefix)

    def base_of(self, namespace: tuple[str, ...]) -> tuple[str, str | None]:
        """Return the knowledge base name and its owner (``None``: shared) of a namespace."""
        return namespace[1], None

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One visible chunk by id."""
        self.check_item_namespace(namespace)
        name, owner = self.base_of(namespace)
        kb = await afind_knowledge_base(self.ctx.store, name, owner)
        if kb is None or not _is_uuid(key):
            return None
        obj = await self.ctx.store.aget(knowledge_collection(kb, owner).name, key, user=owner)
        if obj is None:
            return None
        info = await aget_source(self.ctx.store, kb, str(obj.properties.get("source") or ""), owner)
        if info is None or info.revision != obj.properties.get("revision"):
            return None  # a chunk of a replaced or unfinished ingestion: not visible
        located = self._located(namespace, kb)
        return _plain(self._chunk(located, obj.id, obj.properties, info.ingested_at, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Refused: knowledge bases are written by ingestion only."""
        self.check_item_namespace(namespace)
        raise InvalidInputError(
            "knowledge bases are read-only through the store: ingest files with "
            "`amem ingest ... --collection <kb>` or the `ingest` graph"
        )

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Chunks by source and position, or by ``search_knowledge`` (hybrid, cited)."""
        partition, query = request.partition, request.query
        kb, owner = self.base_of(partition)
        store = self.ctx.store
        dates = {info.source: info.ingested_at for info in await alist_sources(store, kb, owner)}
        if query:

            async def recall(k: int) -> list[SearchItem]:
                hits = await asearch_knowledge(
                    store, self.ctx.embeddings, kb, query, k=k, alpha=request.alpha, owner=owner
                )
                return [
                    self._chunk(
                        partition,
                        h.chunk_id,
                        {
                            "text": h.text,
                            "title": h.title,
                            "section": h.section,
                            "source": h.source,
                            "page_start": h.page_start,
                            "page_end": h.page_end,
                            "chunk_index": h.chunk_index,
                        },
                        dates.get(h.source, ""),
                        h.score,
                    )
                    for h in hits
                ]

            return await request.ranked(recall, _RECALL_CAP)
        out: list[Found] = []
        for source, ingested in sorted(dates.items()):
            for obj in await alist_chunks(store, kb, source, owner):
                found = Found(self._chunk(partition, obj.id, obj.properties, ingested, None))
                if request.keeps(found):
                    out.append(found)
                    if len(out) >= request.need:
                        return out
        return out

    def _located(self, namespace: tuple[str, ...], kb: str) -> tuple[str, ...]:
        """Return the namespace of an item, with the knowledge base's kept spelling."""
        return (*namespace[:-1], kb)

    def _chunk(
        self,
        namespace: tuple[str, ...],
        oid: str,
        props: Mapping[str, Any],
        ingested: str,
        score: float | None,
    ) -> SearchItem:
        start = int(props.get("page_start") or 1)
        hit = KnowledgeHit(
            chunk_id=oid,
            text=str(props.get("text") or ""),
            source=str(props.get("source") or ""),
            title=str(props.get("title") or ""),
            section=str(props.get("section") or ""),
            page_start=start,
            page_end=int(props.get("page_end") or start),
            score=0.0 if score is None else score,
            chunk_index=int(props.get("chunk_index") or 0),
        )
        stamp = parse_time(ingested)
        return SearchItem(
            namespace=namespace,
            key=oid,
            value={
                "text": hit.text,
                "title": hit.title,
                "section": hit.section,
                "source": hit.source,
                "page_start": hit.page_start,
                "page_end": hit.page_end,
                "chunk_index": hit.chunk_index,
                "citation": hit.citation,
            },
            created_at=stamp,
            updated_at=stamp,
            score=score,
        )


class UserKnowledgeSpace(KnowledgeSpace):
    """``("user_knowledge", user, kb)``: a user's own knowledge base (their uploads); read-only.

    Only that user's calls name it (``graph/auth.py`` checks the second label), and only
    their partition of the knowledge base's collections is read.
    """

    root = "user_knowledge"
    depth = 3

    @property
    def shape(self) -> str:
        """The namespace form."""
        return "('user_knowledge', user, knowledge_base)"

    def check_item_namespace(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """Check ``(root, user, kb)``."""
        if len(namespace) != self.depth:
            raise InvalidInputError(
                f"namespaces under {self.root!r} are a user's own knowledge bases, of the form "
                f"{self.shape}; got {namespace}"
            )
        KindSpace.check_owner(self, namespace[1])
        knowledge_collection(namespace[2], namespace[1])
        return namespace

    def check_owner(self, owner: str) -> str:
        """Check the second label: a person's user id."""
        return KindSpace.check_owner(self, owner)

    def base_of(self, namespace: tuple[str, ...]) -> tuple[str, str | None]:
        """Return the knowledge base name and its owner."""
        return namespace[2], namespace[1]

    async def owners(self) -> list[str]:
        """Return the users who have a knowledge base of their own."""
        store = self.ctx.store
        users: set[str] = set()
        for name in await store.acollections():
            if name.startswith(USER_MANIFEST_PREFIX):
                users.update(await store.ausers(name))
        return sorted(u for u in users if _addressable(u))

    async def partitions(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        """Return the own knowledge bases of every user, of one user, or the one named."""
        if len(prefix) >= 3:
            self.check_item_namespace(prefix[:3])
            kept = await afind_knowledge_base(self.ctx.store, prefix[2], prefix[1])
            return [] if kept is None or len(prefix) > 3 else [(self.root, prefix[1], kept)]
        users = [self.check_owner(prefix[1])] if len(prefix) == 2 else await self.owners()
        return [
            (self.root, user, kb)
            for user in users
            for kb in await alist_knowledge_bases(self.ctx.store, user)
            if _addressable(kb)
        ]

    async def namespaces(self, fixed: tuple[str, ...], deep: bool) -> set[tuple[str, ...]]:
        """Return every own knowledge base under the labels ``fixed``."""
        del deep
        try:
            named = await self.partitions(fixed[:3])
        except InvalidInputError:
            return set()
        return {ns for ns in named if ns[: len(fixed)] == fixed}


# -- a record kind: one object per item -----------------------------------------------------


class RecordSpace(KindSpace):
    """``(root, user)``: key = the item's key, value = one object of a per-user collection.

    The namespace family of a simple memory kind whose items are plain records: a subclass
    sets ``root``, ``spec`` (a per-user collection with the filterable text property
    ``key``, the date properties ``created_at`` and ``updated_at``, and one property per
    field of the value), ``fields`` (the value's fields and their types), ``required`` and
    :meth:`text_of` (what an item is embedded and keyword-searched from). Puts replace the
    item (its ``created_at`` kept); a delete deletes it; a search ranks by hybrid search
    (the vector side from the store's embeddings), a listing goes by key.
    """

    spec: ClassVar[CollectionSpec]
    fields: ClassVar[Mapping[str, type]]
    """The value's fields: name → the Python type a value must have (``None`` allowed
    unless required)."""
    required: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("spec")
        if spec is not None:
            cls.collection = spec.name

    @classmethod
    @abstractmethod
    def text_of(cls, value: Mapping[str, Any]) -> str:
        """Return the text an item is embedded from."""

    def _id(self, user: str, key: str) -> str:
        return make_id(self.root, user, key)

    async def _exists(self) -> bool:
        return self.spec.name in await self.ctx.store.acollections()

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Return the item stored under ``key``."""
        user = self.check_item_namespace(namespace)[1]
        if not await self._exists():
            return None
        obj = await self.ctx.store.aget(self.spec.name, self._id(user, key), user=user)
        return None if obj is None else _plain(self._item(user, obj, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Check the value against ``fields`` and return the write (``None``: the delete)."""
        user = self.check_item_namespace(namespace)[1]
        check_text(key, "a key")
        store, name, oid = self.ctx.store, self.spec.name, self._id(user, key)
        if value is None:

            async def forget() -> None:
                if await self._exists():
                    await store.adelete(name, [oid], user=user)

            return forget
        what = f"a {self.root} item"
        data = _check_fields(value, frozenset(self.fields), frozenset(), what, required=())
        missing = [f for f in self.required if data.get(f) is None]
        if missing:
            raise InvalidInputError(f"{what} needs {', '.join(map(repr, missing))}")
        for field, kind in self.fields.items():
            given = data.get(field)
            if given is None:
                continue
            if not isinstance(given, kind) or (isinstance(given, bool) and kind is not bool):
                raise InvalidInputError(
                    f"{what}'s {field} must be a {kind.__name__}, got {given!r:.60}"
                )
            if isinstance(given, str):
                check_text(given, f"{what}'s {field}")
        text = self.text_of(data) or " "

        async def write() -> None:
            await store.aensure_collection(self.spec)
            stamp = (self.ctx.now() or datetime.now(UTC)).isoformat()
            before = await store.aget(name, oid, user=user)
            created = before.properties.get("created_at") if before is not None else None
            vector = (await self.ctx.embeddings.aembed_documents([text]))[0]
            props = {
                **{k: v for k, v in data.items() if v is not None},
                "key": key,
                "created_at": created or stamp,
                "updated_at": stamp,
            }
            done = await store.aupsert(name, [MemoryObject(oid, props, vector)], user=user)
            done.raise_for_failures()

        return write

    async def search(self, request: SpaceSearch) -> list[Found]:
        """Rank items by hybrid search, or list them by key."""
        user, query = request.owner, request.query
        store, name = self.ctx.store, self.spec.name
        if not await self._exists() or user not in await store.ausers(name):
            return []
        if query:
            vector = await self.ctx.embeddings.aembed_query(query)

            async def recall(k: int) -> list[SearchItem]:
                hits = await store.ahybrid(
                    name, query=query, vector=vector, alpha=request.alpha, limit=k, user=user
                )
                return [self._item(user, StoredObject(h.id, h.properties), h.score) for h in hits]

            return await request.ranked(recall, PAGE_LIMIT)

        async def page(offset: int) -> list[SearchItem]:
            listed = await store.alist_objects(
                name, user=user, limit=_PAGE, offset=offset, sort_by="key"
            )
            return [self._item(user, obj, None) for obj in listed]

        return await request.paged(page, _PAGE)

    def _item(self, user: str, obj: StoredObject, score: float | None) -> SearchItem:
        props = obj.properties
        return SearchItem(
            namespace=(self.root, user),
            key=str(props.get("key", "")),
            value={f: props.get(f) for f in self.fields},
            created_at=parse_time(props.get("created_at")),
            updated_at=parse_time(props.get("updated_at")),
            score=score,
        )


# -- helpers ----------------------------------------------------------------------------------


def _optional(fields: Mapping[str, Any], name: str, kind: type, rule: str) -> Any:
    """Return an optional field's value (``None`` when absent); refuse another type."""
    value = fields.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidInputError(f"{rule}, got {value!r:.60}")
    return value


def _check_fields(
    value: Mapping[str, Any],
    fields: frozenset[str],
    echo: frozenset[str],
    what: str,
    *,
    required: tuple[str, ...],
) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a mapping, got {type(value).__name__}")
    data = dict(value)
    unknown = sorted(set(data) - fields - echo)
    if unknown:
        raise InvalidInputError(
            f"{what} has no field {', '.join(map(repr, unknown))} (fields: "
            f"{', '.join(sorted(fields))}; set by the store: {', '.join(sorted(echo))})"
        )
    missing = [name for name in required if data.get(name) is None]
    if missing:
        raise InvalidInputError(f"{what} needs {', '.join(map(repr, missing))}")
    return data


def _plain(item: SearchItem) -> Item:
    return Item(
        value=item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _is_uuid(key: str) -> bool:
    try:
        uuid.UUID(key)
    except ValueError:
        return False
    return True


def _addressable(label: str) -> bool:
    """Whether a stored name can be a LangGraph namespace label."""
    return bool(label) and SEPARATOR not in label and "\x00" not in label

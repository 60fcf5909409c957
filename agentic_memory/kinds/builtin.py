"""The built-in memory kinds as :class:`~agentic_memory.kinds.contract.MemoryKind` contracts.

Each class ties one kind's module (its schema, its storage and recall) to what the library
serves generically: the LangGraph namespaces (``agentic_memory.langgraph_store.kinds``),
forgetting a user, the checks and embedding text of an import, and ``amem memories``. They
are listed, in order, in :mod:`agentic_memory.kinds.registry`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds import episodes, facts, messages, rules
from agentic_memory.kinds._bound import embedded_part
from agentic_memory.kinds._restage import STAGING_PREFIX
from agentic_memory.kinds.contract import (
    GateOutcome,
    ImportGate,
    ImportLine,
    ImportTarget,
    KindInfo,
    MemoryKind,
    StagedLines,
    ThreadForgotten,
    UniqueKey,
    whose,
)
from agentic_memory.kinds.knowledge import (
    CHUNKS_PREFIX,
    KNOWLEDGE_PROPERTIES,
    KNOWLEDGE_PROPERTIES_V1,
    MANIFEST_PREFIX,
    MANIFEST_PROPERTIES,
    USER_CHUNKS_PREFIX,
    USER_MANIFEST_PREFIX,
    alist_knowledge_bases,
    alist_sources,
    upgrade_chunk_collection,
    upgraded_chunk,
)
from agentic_memory.kinds.rule_guard import screen_rules
from agentic_memory.kinds.shared_rules import PROPOSALS, SharedRules
from agentic_memory.store.base import GLOBAL_SCOPE, MemoryStore, property_shape
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    Property,
    Where,
    make_id,
)

if TYPE_CHECKING:
    from agentic_memory.langgraph_store.kinds import KindContext, KindSpace

__all__ = [
    "MAX_EPISODE_CHARS",
    "EpisodesKind",
    "FactsKind",
    "KnowledgeKind",
    "MessagesKind",
    "RulesKind",
]

MAX_EPISODE_CHARS = 1_000_000
"""The longest text of one episode property accepted (``AgenticStore``'s value limit)."""


def _text(props: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    value = props.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidInputError(f"{name} must be a non-empty string")
    return value


def _utc(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def _same_shape(spec: CollectionSpec, properties: Sequence[Property], per_user: bool) -> bool:
    """Whether ``spec`` has exactly ``properties`` (names, types, indexing) and ``per_user``."""
    return spec.per_user == per_user and [property_shape(p) for p in spec.properties] == [
        property_shape(p) for p in properties
    ]


# -- facts ------------------------------------------------------------------------------------


class FactsKind(MemoryKind):
    """Structured facts about a user: one current value per subject, history kept."""

    info = KindInfo(
        name="facts",
        title="Facts about a user, with their history.",
        roots=("facts",),
        line_kinds=("fact",),
        users_column="facts",
    )
    specs = (facts.FACTS,)
    cli_columns = (
        ("subject", "subject"),
        ("value", "value"),
        ("category", "category"),
        ("since", "valid_from"),
        ("thread", "source_thread"),
    )

    def spaces(self, ctx: KindContext) -> Sequence[KindSpace]:
        """``("facts", user)``."""
        from agentic_memory.langgraph_store.kinds import FactsSpace  # noqa: PLC0415

        return (FactsSpace(ctx),)

    async def aforget_user(
        self, store: MemoryStore, embeddings: Embeddings, user: str
    ) -> dict[str, int]:
        """Delete the user's facts, current and past."""
        return {facts.FACTS.name: await facts.FactStore(store, embeddings).aforget_user(user)}

    async def athreads(self, store: MemoryStore, embeddings: Embeddings, user: str) -> set[str]:
        """Return the conversations the user's facts were learned in."""
        return await facts.FactStore(store, embeddings).athreads(user)

    async def aforget_thread(
        self, store: MemoryStore, embeddings: Embeddings, user: str, thread: str
    ) -> ThreadForgotten:
        """Delete the values learned in the thread; an older value becomes current again."""
        done = await facts.FactStore(store, embeddings).aforget_thread(user, thread)
        name = facts.FACTS.name
        return ThreadForgotten({name: done.deleted}, {name: done.rewritten})

    def embedding_text(self, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the subject and value."""
        return facts.embedding_text(properties)

    def check_line(self, line: ImportLine) -> None:
        """Check a normalised subject, a bounded value, a known category, a current flag."""
        props = line.properties
        subject = _text(props, "subject")
        if facts.normalise_subject(subject) != subject:
            raise InvalidInputError(
                f"subject {subject!r:.60} is not in its stored (normalised) form"
            )
        value = _text(props, "value")
        if len(value) > facts.MAX_VALUE:
            raise InvalidInputError(f"value is longer than {facts.MAX_VALUE} characters")
        if props.get("category", "other") not in facts.CATEGORIES:
            raise InvalidInputError(f"category must be one of {', '.join(facts.CATEGORIES)}")
        if not isinstance(props.get("current"), bool):
            raise InvalidInputError("current must be true or false")
        _text(props, "valid_from")
        line.keys = {"subject": subject, "current": props["current"]}

    def unique_keys(self, line: ImportLine) -> list[UniqueKey]:
        """One current value per subject."""
        if not line.keys["current"]:
            return []
        subject = line.keys["subject"]
        return [
            UniqueKey(
                "one current value of",
                subject,
                "",
                f"a second current value of {subject!r} for {line.user!r}",
            )
        ]

    def import_group(
        self, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Merge by subject: new history, a newer current value, or nothing.

        A value newer than the subject's current one supersedes it; an older one is kept
        as history, so a newer value is never overwritten.
        """
        pending: dict[str, list[ImportLine]] = {}
        for batch in target.staged.batches(
            line_kind, spec.name, user, target.batch_size, order_by="subject"
        ):
            for line in batch:
                subject = str(line.properties["subject"])
                if pending and subject not in pending:
                    for done, lines in pending.items():
                        self._merge_subject(target, spec, user, done, lines)
                    pending = {}
                pending.setdefault(subject, []).append(line)
        for done, lines in pending.items():
            self._merge_subject(target, spec, user, done, lines)

    def _merge_subject(
        self,
        target: ImportTarget,
        spec: CollectionSpec,
        user: str,
        subject: str,
        lines: list[ImportLine],
    ) -> None:
        stored = list(
            target.store.iterate(
                spec.name, user=user, where=[Where("subject", "eq", subject)], include_vector=True
            )
        )
        if not stored:
            fresh = [MemoryObject(ln.id, ln.properties, ln.vector or []) for ln in lines]
            target.create(spec.name, user, fresh)
            return
        by_id = {o.id: o for o in stored}
        known = {
            (str(o.properties.get("value", "")).casefold(), _utc(str(o.properties["valid_from"])))
            for o in stored
        }
        foreign: list[ImportLine] = []
        for line in lines:
            found = by_id.get(line.id)
            key = (
                str(line.properties["value"]).casefold(),
                _utc(str(line.properties["valid_from"])),
            )
            if (found is not None and target.same(spec, found.properties, line.properties)) or (
                key in known
            ):
                target.skip()
                continue
            foreign.append(line)
        if not foreign:
            return
        current = facts.derive_current(user, subject, stored)
        assert current is not None
        since = _utc(str(current.properties["valid_from"]))
        newest = max(foreign, key=lambda ln: _utc(str(ln.properties["valid_from"])))
        supersedes = bool(newest.properties["current"]) and (
            _utc(str(newest.properties["valid_from"])) > since
        )
        new: list[MemoryObject] = []
        for line in foreign:
            props = dict(line.properties)
            vector = line.vector or []
            if line is newest and supersedes:
                successor = facts.successor_id(user, subject, current.id)
                props.update(current=True)
                props.pop("valid_to", None)
                props.pop("superseded_by", None)
                new.append(MemoryObject(successor, props, vector))
                retired = {
                    **current.properties,
                    "current": False,
                    "valid_to": props["valid_from"],
                    "superseded_by": successor,
                }
                assert current.vector is not None
                target.replace(
                    spec.name, user, current, MemoryObject(current.id, retired, current.vector)
                )
                target.note(
                    f"fact {subject!r} {whose(user)}: the imported {props['value']!r} is newer "
                    f"than {current.properties.get('value')!r} and supersedes it"
                )
                continue
            # Older than the current value (or not current in the file): kept as history,
            # under an id no chain of the store's derives, so it never supersedes anything.
            props["current"] = False
            props.pop("superseded_by", None)
            props.setdefault("valid_to", str(current.properties["valid_from"]))
            new.append(
                MemoryObject(make_id("fact", user, subject, "imported", line.id), props, vector)
            )
            target.note(
                f"fact {subject!r} {whose(user)}: the imported {props['value']!r} is not newer "
                f"than {current.properties.get('value')!r}: kept as history"
            )
        target.create(spec.name, user, new)

    async def alist_rows(
        self, store: MemoryStore, embeddings: Embeddings, user: str, limit: int
    ) -> list[dict[str, Any]]:
        """Return the user's current facts by subject."""
        current = await facts.FactStore(store, embeddings).acurrent(user)
        return [f.to_dict() for f in current[:limit]]


# -- episodes ---------------------------------------------------------------------------------


class EpisodesKind(MemoryKind):
    """One reflection per finished conversation."""

    info = KindInfo(
        name="episodes",
        title="Episodic memories: one reflection per finished conversation.",
        roots=("episodes",),
        line_kinds=("episode",),
        users_column="episodes",
    )
    specs = (episodes.EPISODES,)
    cli_columns = (
        ("id", "id"),
        ("created", "created_at"),
        ("thread", "thread_id"),
        ("tags", "context_tags"),
        ("summary", "conversation_summary"),
        ("importance", "importance"),
    )

    def spaces(self, ctx: KindContext) -> Sequence[KindSpace]:
        """``("episodes", user)``."""
        from agentic_memory.langgraph_store.kinds import EpisodesSpace  # noqa: PLC0415

        return (EpisodesSpace(ctx),)

    async def aforget_user(
        self, store: MemoryStore, embeddings: Embeddings, user: str
    ) -> dict[str, int]:
        """Delete the user's episodes."""
        memory = episodes.EpisodicMemory(store, embeddings)
        return {episodes.EPISODES.name: await memory.aforget_user(user)}

    async def athreads(self, store: MemoryStore, embeddings: Embeddings, user: str) -> set[str]:
        """Return the conversations the user's episodes came from."""
        return await episodes.EpisodicMemory(store, embeddings).athreads(user)

    async def aforget_thread(
        self, store: MemoryStore, embeddings: Embeddings, user: str, thread: str
    ) -> ThreadForgotten:
        """Delete the thread's episodes (forget then scrubs them from the rules)."""
        memory = episodes.EpisodicMemory(store, embeddings)
        done, ids = await memory.aforget_thread(user, thread)
        return ThreadForgotten({episodes.EPISODES.name: done.deleted}, episodes=ids)

    def accepts_earlier_schema(self, spec: CollectionSpec) -> bool:
        """Accept an earlier version's episodes: ``EpisodicMemory`` upgrades them on first use."""
        return spec.name == episodes.EPISODES.name and any(
            _same_shape(spec, old.properties, old.per_user)
            for old in (episodes.EPISODES_V1, episodes.EPISODES_V2)
        )

    def upgraded_properties(
        self, collection: str, properties: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Return an earlier version's episode with its keyword text."""
        del collection
        return episodes.upgraded_properties(dict(properties))

    def upgrade_collection(self, store: MemoryStore, collection: str) -> None:
        """Upgrade the episodes an earlier version stored (see ``EpisodicMemory``)."""
        del collection
        episodes.upgrade_episodes(store)

    def embedding_text(self, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the reflection."""
        return episodes.embedding_text(properties)

    def check_line(self, line: ImportLine) -> None:
        """Check an importance in [0, 1], a thread, bounded texts and tags."""
        props = line.properties
        importance = props.get("importance")
        if (
            isinstance(importance, bool)
            or not isinstance(importance, int | float)
            or not 0 <= importance <= 1
        ):
            raise InvalidInputError(
                f"importance must be a number in [0, 1], got {importance!r:.40}"
            )
        _text(props, "thread_id")
        for name in ("conversation", "conversation_summary", "what_worked", "what_to_avoid"):
            if len(_text(props, name, required=False)) > MAX_EPISODE_CHARS:
                raise InvalidInputError(f"{name} is longer than {MAX_EPISODE_CHARS:,} characters")
        if len(props.get("context_tags") or []) > 100:
            raise InvalidInputError("an episode has at most 100 context tags")

    async def alist_rows(
        self, store: MemoryStore, embeddings: Embeddings, user: str, limit: int
    ) -> list[dict[str, Any]]:
        """Return the user's episodes, newest first."""
        listed = await episodes.EpisodicMemory(store, embeddings).alist(user, limit=limit)
        return [e.to_dict() for e in listed]

    async def ashow(
        self, store: MemoryStore, embeddings: Embeddings, user: str, oid: str
    ) -> dict[str, Any] | None:
        """Return one episode with its whole conversation."""
        episode = await episodes.EpisodicMemory(store, embeddings).aget(user, oid)
        return None if episode is None else episode.to_dict(with_conversation=True)


# -- rules ------------------------------------------------------------------------------------


class RulesKind(MemoryKind):
    """Versioned procedural rules of a user, and the shared ones (scope ``_global``).

    The shared rules change only through their proposal gate
    (:class:`agentic_memory.kinds.shared_rules.SharedRules`): a store's ``("rules",
    "_global")`` namespace and an import of shared rules make proposals an operator decides.
    """

    info = KindInfo(
        name="rules",
        title="Procedural rule versions of a user or of everyone (_global).",
        roots=("rules",),
        line_kinds=("rule",),
        users_column="rule_versions",
    )
    specs = (rules.RULES,)
    allows_global_scope = True
    cli_columns = (
        ("version", "version"),
        ("created", "created_at"),
        ("parent", "parent_version"),
        ("rules", "rules"),
        ("note", "note"),
    )

    def spaces(self, ctx: KindContext) -> Sequence[KindSpace]:
        """``("rules", user)`` and ``("rules", "_global")``."""
        from agentic_memory.langgraph_store.kinds import RulesSpace  # noqa: PLC0415

        return (RulesSpace(ctx),)

    async def aforget_user(
        self, store: MemoryStore, embeddings: Embeddings, user: str
    ) -> dict[str, int]:
        """Delete the user's rule versions (the shared ones are scrubbed by ``forget``)."""
        return {rules.RULES.name: await rules.RuleBook(store, embeddings).aforget_user(user)}

    def embedding_text(self, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the rules' text."""
        return rules.embedding_text(properties)

    def check_line(self, line: ImportLine) -> None:
        """Check a version's id, rules a conversation could have stored, one source."""
        props = line.properties
        version = props.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidInputError(f"version must be a positive integer, got {version!r:.40}")
        if line.id != str(uuid.UUID(make_id("rules", line.user, str(version)))):
            raise InvalidInputError(f"the id of version {version} of {line.user!r} is not its own")
        try:
            raw = json.loads(_text(props, "rules_json"))
        except (ValueError, RecursionError):
            raise InvalidInputError("rules_json is not JSON") from None
        if not isinstance(raw, list):
            raise InvalidInputError("rules_json must be a list of rules")
        items = rules.parse_rule_list(raw)
        rendered = "\n".join(f"{i}. {r.render()}" for i, r in enumerate(items, 1))
        if props.get("rules_text") != rendered:
            raise InvalidInputError("rules_text does not match rules_json")
        parent = props.get("parent_version")
        if parent is not None and (not isinstance(parent, int) or not 1 <= parent < version):
            raise InvalidInputError(f"parent_version must be below version {version}")
        others = sorted({str(u) for u in props.get("source_users") or []} - {line.user})
        if line.user != GLOBAL_SCOPE and others:
            # RuleBook.propose: a user's rules are learned from that user only.
            raise InvalidInputError(
                f"version {version} of {line.user!r} names other users as its source "
                f"({', '.join(map(repr, others))[:100]}): a user's rules are learned from "
                "that user only"
            )
        _kept, rejected = screen_rules(items, shared=line.user == GLOBAL_SCOPE)
        if rejected:
            raise InvalidInputError(
                f"version {version} of {line.user!r} holds a rule no conversation may store "
                f"({rejected[0].reason}): {rejected[0].instruction!r:.100}"
            )
        line.keys = {"version": version}

    def shared_what(self, line: ImportLine, spec: CollectionSpec) -> str | None:
        """Say a line of scope ``_global`` is the shared rules."""
        if line.user == GLOBAL_SCOPE:
            return "the shared rules (imported as a proposal an operator approves)"
        return None

    def export_note(self, collection: str) -> str | None:
        """Keep the proposals of the shared rules in their store: an operator decides them."""
        if collection != PROPOSALS.name:
            return None
        return (
            f"the proposals of the shared rules ({collection}) are not exported: an operator "
            "decides them in this store (`amem memories rules review`)"
        )

    def import_group(
        self, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Write a user's versions when they continue the store's; the shared ones: the gate.

        Versions that do not continue the store's history would mix two histories.
        """
        if user == GLOBAL_SCOPE:
            return  # through the shared rules' gate: import_gate
        latest = target.store.list_objects(
            spec.name, user=user, limit=1, sort_by="version", descending=True
        )
        if latest and not target.staged.has(spec.name, user, latest[0].id):
            version = latest[0].properties.get("version")
            raise target.fail(
                None,
                f"the rules of {user!r} already have versions up to {version} in the store, "
                "and the file's versions do not continue them: importing them would mix two "
                "histories; forget those rules first, or import into an empty store",
            )
        target.merge_plain(line_kind, spec, user)

    def import_gate(self, staged: StagedLines) -> ImportGate | None:
        """Make the file's latest version of the shared rules a proposal, never a version.

        The rules every user's prompt carries change only through ``SharedRules``: what a
        file holds is proposed from the store's latest version, and applies once an operator
        approves it. The same file imported again gives the same proposal.
        """
        line = None
        for collection, user in staged.groups("rule"):
            if user == GLOBAL_SCOPE:
                newest = staged.batches(
                    "rule", collection, user, 1, order_by="version", descending=True
                )
                line = next(newest)[0]
                break
        if line is None:
            return None
        shared = line

        async def propose(store: MemoryStore, embeddings: Embeddings, source: str) -> GateOutcome:
            version = shared.properties["version"]
            gate = SharedRules(store, embeddings)
            latest = await gate.rules.alatest(GLOBAL_SCOPE)
            proposed = await gate.apropose(
                rules.parse_rule_list(json.loads(str(shared.properties["rules_json"]))),
                proposer=GLOBAL_SCOPE,
                origin="import",
                base_version=latest.version,
                note=f"imported from {source[:200]} (its shared rules' version {version})",
            )
            proposal = proposed.proposal
            if proposal is None:
                return GateOutcome(
                    f"the file's shared rules (version {version}) equal the store's latest "
                    f"version ({latest.version}): nothing to propose"
                )
            if proposal.status != "pending":
                return GateOutcome(
                    f"the file's shared rules (version {version}) are proposal {proposal.id}, "
                    f"which was {proposal.status} already by {proposal.decided_by}",
                    proposal.id,
                )
            return GateOutcome(
                f"the file's shared rules (version {version}) were not written: they are "
                f"proposal {proposal.id}, from version {latest.version} of the store's, and "
                "apply once an operator approves it (`amem memories rules review`, "
                f"`amem memories rules approve {proposal.id}`)",
                proposal.id,
            )

        return ImportGate("the shared rules", propose)

    async def alist_rows(
        self, store: MemoryStore, embeddings: Embeddings, user: str, limit: int
    ) -> list[dict[str, Any]]:
        """Return the user's rule versions, oldest first."""
        versions = await rules.RuleBook(store, embeddings).aversions(user)
        return [
            {
                "version": v.version,
                "created_at": v.created_at,
                "parent_version": v.parent_version,
                "rules": len(v.rules),
                "note": v.note,
            }
            for v in versions[:limit]
        ]


# -- messages ---------------------------------------------------------------------------------


class MessagesKind(MemoryKind):
    """Every logged turn, recalled across conversations."""

    info = KindInfo(
        name="messages",
        title="The message log of every conversation.",
        roots=("messages",),
        line_kinds=("message",),
        users_column="messages",
    )
    specs = (messages.MESSAGES,)
    bookkeeping = (messages.TURN_MARKS.name,)
    cli_columns = (
        ("thread", "thread_id"),
        ("turn", "turn"),
        ("role", "role"),
        ("content", "content"),
        ("created", "created_at"),
    )

    def spaces(self, ctx: KindContext) -> Sequence[KindSpace]:
        """``("messages", user)`` and ``("messages", user, thread)``."""
        from agentic_memory.langgraph_store.kinds import MessagesSpace  # noqa: PLC0415

        return (MessagesSpace(ctx),)

    def accepts_earlier_schema(self, spec: CollectionSpec) -> bool:
        """Accept an earlier version's log: ``MessageLog`` upgrades it on first use."""
        old = messages.MESSAGES_V1
        return spec.name == old.name and _same_shape(spec, old.properties, old.per_user)

    async def aforget_user(
        self, store: MemoryStore, embeddings: Embeddings, user: str
    ) -> dict[str, int]:
        """Delete the user's log."""
        log = messages.MessageLog(store, embeddings)
        return {messages.MESSAGES.name: await log.aforget_user(user)}

    async def athreads(self, store: MemoryStore, embeddings: Embeddings, user: str) -> set[str]:
        """Return the threads with logged turns."""
        return set(await messages.MessageLog(store, embeddings).athreads(user))

    async def aforget_thread(
        self, store: MemoryStore, embeddings: Embeddings, user: str, thread: str
    ) -> ThreadForgotten:
        """Delete the thread's logged turns."""
        log = messages.MessageLog(store, embeddings)
        return ThreadForgotten({messages.MESSAGES.name: await log.aforget(user, thread_id=thread)})

    def embedding_text(self, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the turn's text with its speaker."""
        return messages.embedding_text_of(properties)

    def check_line(self, line: ImportLine) -> None:
        """Check a role, bounded content, a thread and a turn number."""
        props = line.properties
        if props.get("role") not in ("human", "ai"):
            raise InvalidInputError(f"role must be 'human' or 'ai', got {props.get('role')!r:.40}")
        messages.check_message_text(_text(props, "content", required=False), "content")
        thread = _text(props, "thread_id")
        turn = props.get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool) or turn < 0:
            raise InvalidInputError(f"turn must be a non-negative integer, got {turn!r:.40}")
        _text(props, "created_at")
        line.keys = {"thread": thread, "turn": turn}

    def unique_keys(self, line: ImportLine) -> list[UniqueKey]:
        """One message per turn of a thread."""
        thread, turn = line.keys["thread"], str(line.keys["turn"])
        return [
            UniqueKey(
                "turn",
                thread,
                turn,
                f"a second message for turn {turn} of thread {thread!r} of {line.user!r}",
            )
        ]

    def import_group(
        self, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Merge by the generic rule; messages keep their turn numbers: a taken turn refuses."""

        def turn_free(line: ImportLine) -> bool:
            thread, turn = line.properties["thread_id"], line.properties["turn"]
            where = [Where("thread_id", "eq", thread), Where("turn", "eq", turn)]
            if target.store.count(spec.name, user=user, where=where):
                raise target.fail(
                    line.lineno,
                    f"thread {thread!r} {whose(user)} already has a turn {turn} (another "
                    "message): turns keep their numbers, so this message cannot come in; "
                    "forget the thread first, or import into an empty store",
                )
            return True

        target.merge_plain(line_kind, spec, user, turn_free)

    async def alist_rows(
        self, store: MemoryStore, embeddings: Embeddings, user: str, limit: int
    ) -> list[dict[str, Any]]:
        """Return the user's log by thread and turn."""
        log = messages.MessageLog(store, embeddings)
        return [m.to_dict() for m in await log.alist(user, limit=min(limit, 1000))]


# -- knowledge --------------------------------------------------------------------------------


class KnowledgeKind(MemoryKind):
    """Knowledge bases of document chunks: shared ones, and each user's own (their uploads).

    A knowledge base is two collections per name: its chunks (line kind ``chunk``) and the
    manifest of its sources (``source``), which says which revision of each source is
    visible. They are written by ingestion only (``ingest``, ``amem ingest``).
    """

    info = KindInfo(
        name="knowledge",
        title="Knowledge bases (ingested documents), shared and each user's own.",
        roots=("knowledge", "user_knowledge"),
        line_kinds=("chunk", "source"),
    )
    cli_columns = (("knowledge base", "knowledge_base"), ("sources", "sources"))

    def line_kind(self, collection: str) -> str | None:
        """``source`` for a manifest, ``chunk`` for a knowledge base's chunks."""
        if collection.startswith((MANIFEST_PREFIX, USER_MANIFEST_PREFIX)):
            return "source"
        if collection.startswith((CHUNKS_PREFIX, USER_CHUNKS_PREFIX)):
            return "chunk"
        return None

    def expected_schema(self, collection: str) -> tuple[tuple[Property, ...], bool] | None:
        """Return a knowledge base's schema: a user's own is partitioned by user."""
        kind = self.line_kind(collection)
        if kind is None:
            return None
        own = collection.startswith((USER_CHUNKS_PREFIX, USER_MANIFEST_PREFIX))
        return (KNOWLEDGE_PROPERTIES if kind == "chunk" else MANIFEST_PROPERTIES), own

    def accepts_earlier_schema(self, spec: CollectionSpec) -> bool:
        """Accept chunks of an earlier version: the knowledge base upgrades them on first use."""
        expected = self.expected_schema(spec.name)
        return (
            self.line_kind(spec.name) == "chunk"
            and expected is not None
            and _same_shape(spec, KNOWLEDGE_PROPERTIES_V1, expected[1])
        )

    def upgraded_properties(
        self, collection: str, properties: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Return an earlier version's chunk with its keyword text (its section unknown)."""
        if self.line_kind(collection) != "chunk":
            return None
        return upgraded_chunk(dict(properties))

    def upgrade_collection(self, store: MemoryStore, collection: str) -> None:
        """Upgrade a knowledge base's chunks an earlier version wrote."""
        if self.line_kind(collection) == "chunk":
            upgrade_chunk_collection(store, collection)

    async def aforget_user(
        self, store: MemoryStore, embeddings: Embeddings, user: str
    ) -> dict[str, int]:
        """Delete the user's own knowledge bases, after finishing any half-done upgrade.

        A staging copy a killed upgrade left behind belongs to no kind: forgetting around
        it would leave the user's chunks there, and the next use would copy them back.
        """

        def finish_upgrades() -> None:
            for name in store.collections():
                target = name.removeprefix(STAGING_PREFIX)
                if target != name and self.line_kind(target) == "chunk":
                    upgrade_chunk_collection(store, target)

        await asyncio.to_thread(finish_upgrades)
        return await super().aforget_user(store, embeddings, user)

    def spaces(self, ctx: KindContext) -> Sequence[KindSpace]:
        """``("knowledge", kb)`` and ``("user_knowledge", user, kb)``."""
        from agentic_memory.langgraph_store.kinds import (  # noqa: PLC0415
            KnowledgeSpace,
            UserKnowledgeSpace,
        )

        return (KnowledgeSpace(ctx), UserKnowledgeSpace(ctx))

    def embedding_text(self, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return a chunk's text; a manifest entry's title (it keeps a marker vector)."""
        if line_kind == "source":
            return str(properties.get("title") or properties.get("source") or "")
        return embedded_part(str(properties.get("text") or ""))

    def embeds(self, line_kind: str) -> bool:
        """Manifest entries are never searched by vector: they keep a unit marker vector."""
        return line_kind != "source"

    def check_line(self, line: ImportLine) -> None:
        """Check a bounded text."""
        if len(str(line.properties.get("text") or "")) > MAX_EPISODE_CHARS:
            raise InvalidInputError(f"text is longer than {MAX_EPISODE_CHARS:,} characters")

    def shared_what(self, line: ImportLine, spec: CollectionSpec) -> str | None:
        """Say a shared knowledge base is shared (a user's own one is their data)."""
        return None if spec.per_user else "a shared knowledge base"

    def import_group(
        self, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
    ) -> None:
        """Merge by the generic rule, into a knowledge base the store does not hold yet.

        A knowledge base changes by ingestion (its replace protocol), never by merging.
        """
        populated = target.store.count(spec.name, user=user or None) > 0

        def empty(line: ImportLine) -> bool:
            if populated:
                raise target.fail(
                    line.lineno,
                    f"knowledge base collection {spec.name!r} {whose(user)} already holds "
                    "other content: ingest into it, or forget it first, to change it",
                )
            return True

        target.merge_plain(line_kind, spec, user, empty)

    async def alist_rows(
        self, store: MemoryStore, embeddings: Embeddings, user: str, limit: int
    ) -> list[dict[str, Any]]:
        """Return the user's own knowledge bases, with their number of sources."""
        del embeddings
        rows: list[dict[str, Any]] = []
        for kb in (await alist_knowledge_bases(store, user))[:limit]:
            sources = await alist_sources(store, kb, user)
            rows.append({"knowledge_base": kb, "sources": len(sources)})
        return rows

"""Structured facts about a user, one current value per subject.

A fact is ``(subject, value, category)``, for example ``("diet", "vegetarian",
"preference")``. Subjects are normalised (trimmed, lower-case, single spaces) so that the
same key always lands on the same slot; mapping synonyms such as "dietary preference" to
"diet" is the extraction prompt's job. A new value for a subject *supersedes* the current
fact: the old one is kept with ``current=False``, ``valid_to`` (when it stopped being
true) and ``superseded_by`` (the id of its replacement), so the history of a subject can
always be read back. Restating the current value changes nothing.

Everything about facts lives here: the collection schema (:data:`FACTS`), what the memory
model extracts (:class:`ExtractedFacts`), the text a fact is embedded from
(:func:`embedding_text`), how facts are shown in the prompt (:func:`render_facts`,
:func:`render_constraints`), and how they are remembered and forgotten (:class:`FactStore`).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from agentic_memory.kinds._bound import (
    CollectionBound,
    Forgotten,
    check_search,
    check_user_id,
    checked_now,
    rfc3339,
)
from agentic_memory.kinds.contract import threads_of
from agentic_memory.store import (
    CollectionSpec,
    ConflictError,
    InvalidInputError,
    MemoryObject,
    Property,
    StoredObject,
    Where,
    check_text,
    make_id,
)

FactCategory = Literal["identity", "preference", "constraint", "other"]
CATEGORIES: tuple[str, ...] = get_args(FactCategory)
"""The categories of a fact; ``constraint`` facts are restated next to every answer."""
MAX_SUBJECT = 60
MAX_VALUE = 200
_SPACES = re.compile(r"\s+")
_MAX_ATTEMPTS = 200

FACTS = CollectionSpec(
    name="UserFact",
    per_user=True,
    description="Durable facts about a user, one current value per subject; old values superseded.",
    properties=(
        Property("subject", "text", searchable=True, description="normalised key, e.g. 'diet'"),
        Property("value", "text", searchable=True, filterable=False),
        Property("category", "text", description="identity | preference | constraint | other"),
        Property("current", "bool"),
        Property("valid_from", "date"),
        Property("valid_to", "date", description="when it stopped being true; absent if current"),
        Property("source_thread", "text"),
        Property("superseded_by", "text", description="id of the fact that replaced this one"),
    ),
)
"""The per-user collection of facts, every value ever held (current and superseded)."""


class ExtractedFact(BaseModel):
    """One durable fact about the user (what the memory model extracts)."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=MAX_SUBJECT, description="Short lower-case key.")
    value: str = Field(min_length=1, max_length=MAX_VALUE, description="The value in a few words.")
    category: FactCategory = Field(description="identity, preference, constraint or other.")


class ExtractedFacts(BaseModel):
    """Durable facts found in the user's newest message (possibly none).

    ``important`` flags the message itself for keeping: the log stores it marked, so the
    retention policy never purges it and recall ranks it first (no extra model call: the
    fact extraction runs on every user message anyway).

    Bounded (at most five, short strings) so that even a small local model, whose output is
    constrained by this JSON schema, returns something that validates.
    """

    model_config = ConfigDict(extra="forbid")

    facts: list[ExtractedFact] = Field(default_factory=list, max_length=5)
    important: bool = Field(
        default=False,
        description=(
            "True only if the user's newest message itself is worth keeping word for word "
            "for good: they ask you to remember it, or it records something they will need "
            "again exactly (a decision, a date, a number, an address). False for chat, "
            "questions and anything the facts above already hold."
        ),
    )


def embedding_text(properties: Mapping[str, Any]) -> str:
    """Return the text a fact is embedded from: ``"subject: value"``."""
    return f"{properties.get('subject', '')}: {properties.get('value', '')}"


def render_facts(facts: Sequence[Mapping[str, Any]]) -> str:
    """Render current facts for the prompt, one ``- subject: value (category)`` per line."""
    return "\n".join(
        f"- {f['subject']}: {f['value']} ({f.get('category') or 'other'})" for f in facts
    )


def render_constraints(facts: Sequence[Mapping[str, Any]]) -> str:
    """Render the constraint facts on one line (``subject: value; ...``); "" when none."""
    return "; ".join(
        f"{f['subject']}: {f['value']}" for f in facts if f.get("category") == "constraint"
    )


_SECRET_WORDS = re.compile(
    r"\b(?:pin(?: code| number)?|passwords?|passcodes?|passphrases?|pass ?words?|cvv|cvc|"
    r"security (?:code|answer|question)|card (?:number|no)|credit card|debit card|"
    r"bank account(?: number)?|account number|iban|routing number|sort code|"
    r"social security(?: number)?|ssn|api[ _-]?keys?|access (?:key|token)|secret(?: key)?|"
    r"private key|seed phrase|recovery (?:phrase|code)|one[- ]time code|otp|2fa code|"
    r"login|log-in|credentials?)\b",
    re.IGNORECASE,
)
_DIGIT_RUN = re.compile(r"(?:\d[ -]?){12,18}\d")
_KEY_LIKE = re.compile(
    r"\b(?:sk|pk|ghp|gho|xox[abp]|AKIA)[-_A-Za-z0-9]{12,}|\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}\b"
)


def _card_number(text: str) -> bool:
    """Tell whether text holds a payment card number (13-19 digits passing the Luhn check)."""
    for match in _DIGIT_RUN.finditer(text):
        digits = [int(c) for c in match.group() if c.isdigit()]
        if not 13 <= len(digits) <= 19:
            continue
        total = 0
        for i, digit in enumerate(reversed(digits)):
            if i % 2:
                digit = digit * 2 - 9 if digit > 4 else digit * 2
            total += digit
        if total % 10 == 0:
            return True
    return False


def mentions_secret(text: str) -> bool:
    """Tell whether a text names a secret (a PIN, a password, a card number, a key...).

    Such a message is never marked important (kept for good) and none of its facts is
    stored; the words themselves stay in the conversation the user wrote them in.
    """
    return bool(_SECRET_WORDS.search(text) or _card_number(text) or _KEY_LIKE.search(text))


def is_secret(fact: Any) -> bool:
    """Tell whether a fact is a secret the user stated; secrets are never stored as facts.

    Args:
        fact: An object with ``subject`` and ``value`` attributes or keys.
    """
    subject = fact.get("subject", "") if isinstance(fact, Mapping) else getattr(fact, "subject", "")
    value = fact.get("value", "") if isinstance(fact, Mapping) else getattr(fact, "value", "")
    return mentions_secret(f"{subject}: {value}")


def normalise_subject(subject: str) -> str:
    """Return the storage key of a subject: trimmed, lower-case, single spaces, no end dot."""
    if not isinstance(subject, str):
        raise InvalidInputError(f"fact subject must be a string, got {type(subject).__name__}")
    check_text(subject, "fact subject")
    key = _SPACES.sub(" ", subject).strip().strip(".:;,").strip().lower()
    if not key:
        raise InvalidInputError("fact subject is empty")
    if len(key) > MAX_SUBJECT:
        raise InvalidInputError(f"fact subject is longer than {MAX_SUBJECT} characters")
    return key


def _normalise_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"fact value must be a string, got {type(value).__name__}")
    check_text(value, "fact value")
    text = _SPACES.sub(" ", value).strip()
    if not text:
        raise InvalidInputError("fact value is empty")
    if len(text) > MAX_VALUE:
        raise InvalidInputError(f"fact value is longer than {MAX_VALUE} characters")
    return text


@dataclass(frozen=True)
class Fact:
    """One stored fact (current or superseded)."""

    id: str
    subject: str
    value: str
    category: str
    current: bool
    valid_from: str
    valid_to: str | None = None
    source_thread: str | None = None
    superseded_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict."""
        return asdict(self)

    @classmethod
    def _from_stored(cls, obj: StoredObject) -> Fact:
        p = obj.properties
        return cls(
            id=obj.id,
            subject=str(p["subject"]),
            value=str(p["value"]),
            category=str(p.get("category") or "other"),
            current=bool(p.get("current")),
            valid_from=str(p["valid_from"]),
            valid_to=p.get("valid_to"),
            source_thread=p.get("source_thread"),
            superseded_by=p.get("superseded_by"),
        )


@dataclass(frozen=True)
class FactChange:
    """What one remembered fact changed: ``added`` (new subject) or ``superseded``."""

    action: Literal["added", "superseded"]
    fact: Fact
    previous: Fact | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict: subject, value, category, action, previous_value."""
        return {
            "subject": self.fact.subject,
            "value": self.fact.value,
            "category": self.fact.category,
            "action": self.action,
            "previous_value": self.previous.value if self.previous else None,
            "id": self.fact.id,
        }


@dataclass(frozen=True)
class _Incoming:
    subject: str
    value: str
    category: str


class FactStore(CollectionBound):
    """Per-user facts on a :class:`~agentic_memory.store.MemoryStore` (collection ``UserFact``).

    Concurrent writers (threads, tasks, processes) never lose an update: the id of a new value
    is derived from the value it supersedes (:func:`successor_id`) and created with the
    store's create-only ``insert``, so of two writers superseding the same value one wins and
    the other reads again and supersedes the winner. A subject's history is one chain, and
    the current value is derived from it (a value whose successor is stored is not current,
    whatever its flag says), so a crash between writing a new value and retiring the old one
    cannot leave two current values; the next write of the subject repairs the flag.
    """

    spec = FACTS

    # -- writes ---------------------------------------------------------------------------

    async def aremember(
        self,
        user: str,
        facts: Sequence[Any],
        *,
        source_thread: str | None = None,
        now: datetime | None = None,
    ) -> list[FactChange]:
        """Store facts, superseding contradicted ones; return what changed.

        Args:
            user: The user the facts are about.
            facts: Objects with ``subject``, ``value`` and ``category`` attributes or keys
                (``category`` defaults to "other"). When one subject appears twice, the
                last value wins.
            source_thread: The conversation the facts came from.
            now: The time the new values became true (default: now, UTC).

        Returns:
            One change per fact that was added or superseded; restated facts are omitted.

        Raises:
            InvalidInputError: a fact is malformed; nothing is written.
            ConflictError: other writers kept superseding the same subjects through every
                attempt; nothing of this call was written.
        """
        check_user_id(user)
        if isinstance(source_thread, str):
            check_text(source_thread, "source_thread")
        if isinstance(facts, str | bytes | Mapping):
            raise InvalidInputError("facts must be a sequence of facts")
        incoming: dict[str, _Incoming] = {}
        for raw in facts:
            item = _coerce(raw)
            incoming[item.subject] = item
        if not incoming:
            return []
        checked_now(now)  # a bad ``now`` is refused before anything is read
        await self._aensure()
        vectors: dict[str, list[float]] = {}
        for attempt in range(_MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(_backoff(attempt))
            states = {key: await self._asubject_state(user, key) for key in incoming}
            # Stamped after the reads: a value superseding one that this attempt saw
            # written by another writer never starts before it.
            plan = _plan(user, incoming, states, rfc3339(now), source_thread)
            texts = dict.fromkeys(embedding_text(p) for _, p in plan.new)
            missing = [t for t in texts if t not in vectors]
            if missing:
                embedded = await self.embeddings.aembed_documents(missing)
                vectors.update(zip(missing, embedded, strict=True))
            objects = [MemoryObject(fid, p, vectors[embedding_text(p)]) for fid, p in plan.new]
            try:
                # Create-only: when another writer superseded one of these values first, its
                # successor id exists, nothing is written, and the subjects are read again.
                result = await self.store.ainsert(FACTS.name, objects, user=user)
                result.raise_for_failures()
            except ConflictError:
                continue
            await self._aretire(user, plan.retire)
            return plan.changes
        raise ConflictError(
            f"facts of {user!r} kept changing during {_MAX_ATTEMPTS} attempts to write them"
        )

    async def _aretire(self, user: str, retire: list[tuple[str, dict[str, Any]]]) -> None:
        """Mark superseded values as such (the chain already says so; this sets the flags)."""
        updates: list[MemoryObject] = []
        for fid, changes in retire:
            old = await self.store.aget(FACTS.name, fid, user=user, include_vector=True)
            if old is None or old.vector is None:
                continue  # forgotten meanwhile: nothing left to retire
            updates.append(MemoryObject(old.id, {**old.properties, **changes}, old.vector))
        if updates:
            result = await self.store.aupsert(FACTS.name, updates, user=user)
            result.raise_for_failures()

    # -- forgetting -----------------------------------------------------------------------

    async def aforget(self, user: str, subject: str) -> int:
        """Delete every value (current and past) of a subject; return how many were deleted."""
        check_user_id(user)
        key = normalise_subject(subject)
        if not await self._aexists():
            return 0
        return await self.store.adelete_where(FACTS.name, [Where("subject", "eq", key)], user=user)

    async def aforget_fact(self, user: str, fact_id: str) -> Forgotten:
        """Delete one value of a subject and re-link the rest of its history.

        Raises:
            InvalidInputError: the user has no such fact.
        """
        check_user_id(user)
        found = (
            await self.store.aget(FACTS.name, fact_id, user=user)
            if (await self._aexists())
            else None
        )
        if found is None:
            raise InvalidInputError(f"user {user!r} has no fact {fact_id!r}")
        deleted = await self.store.adelete(FACTS.name, [fact_id], user=user)
        relinked = await self._arelink(user, [str(found.properties.get("subject", ""))])
        return Forgotten(deleted, relinked)

    async def aforget_thread(self, user: str, thread_id: str) -> Forgotten:
        """Delete the values learned in one conversation; an older value becomes current again."""
        check_user_id(user)
        learned = await self._aall(user, [Where("source_thread", "eq", thread_id)])
        if not learned:
            return Forgotten()
        deleted = await self.store.adelete(FACTS.name, [f.id for f in learned], user=user)
        relinked = await self._arelink(
            user, [str(f.properties.get("subject", "")) for f in learned]
        )
        return Forgotten(deleted, relinked)

    async def _arelink(self, user: str, subjects: Sequence[str]) -> int:
        """Re-link the remaining values of ``subjects`` after some of them were deleted.

        A value whose successor was deleted points to the next remaining value instead; when
        no later value remains and no value is current, the latest remaining one becomes
        current. Returns how many values were rewritten.
        """
        changed = 0
        for subject in sorted(set(subjects)):
            facts = sorted(await self._aall(user, [Where("subject", "eq", subject)]), key=_time_key)
            if not facts:
                continue
            ids = {f.id for f in facts}
            relinked = 0
            for i, fact in enumerate(facts):
                succ = fact.properties.get("superseded_by")
                if not succ or succ in ids:
                    continue
                props = dict(fact.properties)
                if i + 1 < len(facts):
                    props["superseded_by"] = facts[i + 1].id
                else:
                    props.update(superseded_by=None, valid_to=None, current=True)
                relinked += await self._arewrite(user, fact.id, props)
            if not any(f.properties.get("current") for f in facts) and relinked == 0:
                latest = facts[-1]
                props = {**latest.properties, "current": True, "valid_to": None}
                props["superseded_by"] = None
                relinked += await self._arewrite(user, latest.id, props)
            changed += relinked
        return changed

    # -- reads ----------------------------------------------------------------------------

    async def acurrent(self, user: str) -> list[Fact]:
        """Return the user's current facts, ordered by subject."""
        check_user_id(user)
        flagged: dict[str, list[StoredObject]] = {}
        for obj in await self._aall(user, [Where("current", "eq", True)]):
            flagged.setdefault(str(obj.properties["subject"]), []).append(obj)
        out: list[Fact] = []
        for subject, objs in flagged.items():
            if len(objs) > 1:
                # An interrupted (or, before this version, racing) write left two flags:
                # the subject's history decides.
                state = await self._asubject_state(user, subject)
                objs = [state.current] if state.current is not None else []
            out += [Fact._from_stored(o) for o in objs]
        return sorted(out, key=lambda f: f.subject)

    async def asearch(
        self, user: str, query: str, *, alpha: float = 0.5, limit: int = 10
    ) -> list[tuple[Fact, float]]:
        """Rank the user's current facts by hybrid search over subject and value.

        Returns:
            Up to ``limit`` (fact, fused score) pairs, best first.
        """
        check_search(query, limit, alpha, k_name="limit")
        current = {f.id: f for f in await self.acurrent(user)}
        if not current:
            return []
        hits = await self._ahybrid(
            user, query, alpha=alpha, limit=limit, where=[Where("current", "eq", True)]
        )
        # A value whose flag a crash left set is not current: acurrent's answer decides.
        return [(current[h.id], h.score) for h in hits if h.id in current]

    async def ahistory(self, user: str, subject: str) -> list[Fact]:
        """Every value a subject has had, oldest first; the last one is current."""
        check_user_id(user)
        key = normalise_subject(subject)
        state = await self._asubject_state(user, key)
        return [
            Fact._from_stored(o)
            if o is state.current or not o.properties.get("current")
            # A flag an interrupted write left behind: the chain says it was superseded.
            else replace(Fact._from_stored(o), current=False)
            for o in state.ordered
        ]

    async def aall_values(self, user: str) -> list[Fact]:
        """Every value of every subject of the user (current and superseded), by subject."""
        check_user_id(user)
        facts = [Fact._from_stored(o) for o in await self._aall(user)]
        return sorted(facts, key=lambda f: (f.subject, f.valid_from, f.id))

    async def athreads(self, user: str) -> set[str]:
        """Return the conversations the user's facts were learned in."""
        check_user_id(user)
        return threads_of(await self._aall(user), "source_thread")

    async def _asubject_state(self, user: str, subject: str) -> _SubjectState:
        # One snapshot for any realistic history. A history read in several pages while
        # others write may miss a row; writes stay correct (see _plan).
        return _derive(user, subject, await self._aall(user, [Where("subject", "eq", subject)]))


# -- the chain of a subject's values --------------------------------------------------------


@dataclass(frozen=True)
class _SubjectState:
    ordered: list[StoredObject]
    """The subject's values, oldest first."""
    current: StoredObject | None
    successors: dict[str, StoredObject]
    """Value id -> the stored value that superseded it (by its id, see ``successor_id``)."""


@dataclass
class _Plan:
    new: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    retire: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(id, property changes) of values to mark superseded once the new ones exist."""
    changes: list[FactChange] = field(default_factory=list)


def root_id(user: str, subject: str) -> str:
    """Return the id of a subject's first value (the id earlier versions gave value 1)."""
    return make_id("fact", user, subject, "1")


def successor_id(user: str, subject: str, fact_id: str) -> str:
    """Return the id of the value that supersedes ``fact_id``.

    Each value has exactly one possible successor id, so two writers superseding the same
    value collide on it, and the store's create-only ``insert`` lets only one of them win.
    """
    return make_id("fact", user, subject, "after", fact_id)


def derive_current(user: str, subject: str, objs: Sequence[StoredObject]) -> StoredObject | None:
    """Return the current value among a subject's stored values (see ``FactStore``)."""
    return _derive(user, subject, list(objs)).current


def _derive(user: str, subject: str, objs: list[StoredObject]) -> _SubjectState:
    """Order a subject's values and find the current one, from the ids as much as the flags.

    Values written by this version form a chain (each id is the successor of the one
    before). Stores written by earlier versions, and deleted values, leave several chains,
    which are ordered by their first value's ``valid_from``. The current value is the last
    one flagged current that has no stored successor, else the last one.
    """
    by_id = {o.id: o for o in objs}
    successors: dict[str, str] = {}
    for o in objs:
        nxt = successor_id(user, subject, o.id)
        if nxt in by_id:
            successors[o.id] = nxt
    followers = set(successors.values())
    ordered: list[StoredObject] = []
    for head in sorted((o for o in objs if o.id not in followers), key=_time_key):
        # Ids are hashes of their predecessor's id, so a chain cannot loop back on itself.
        fid: str | None = head.id
        while fid is not None:
            ordered.append(by_id[fid])
            fid = successors.get(fid)
    flagged = [o for o in ordered if o.properties.get("current") and o.id not in successors]
    current = flagged[-1] if flagged else (ordered[-1] if ordered else None)
    return _SubjectState(ordered, current, {k: by_id[v] for k, v in successors.items()})


def _plan(
    user: str,
    incoming: dict[str, _Incoming],
    states: dict[str, _SubjectState],
    stamp: str,
    source_thread: str | None,
) -> _Plan:
    plan = _Plan()
    for subject, item in incoming.items():
        state = states[subject]
        current = state.current
        # Values still flagged current whose successor is stored (a write was interrupted
        # between its two steps, or is between them now) are retired by this write too.
        # Only those: a read that raced other writers may lack a row, and a link taken
        # from the order rather than from the ids could then be wrong.
        for o in state.ordered:
            later = state.successors.get(o.id)
            if later is not None and o.properties.get("current"):
                retired = {
                    "current": False,
                    "valid_to": later.properties.get("valid_from"),
                    "superseded_by": later.id,
                }
                plan.retire.append((o.id, retired))
        if current is not None and _same(current.properties["value"], item.value):
            continue
        new_id = successor_id(user, subject, current.id) if current else root_id(user, subject)
        new_props: dict[str, Any] = {
            "subject": subject,
            "value": item.value,
            "category": item.category,
            "current": True,
            "valid_from": stamp,
            "valid_to": None,
            "source_thread": source_thread,
            "superseded_by": None,
        }
        plan.new.append((new_id, new_props))
        previous: Fact | None = None
        if current is not None:
            retired = {"current": False, "valid_to": stamp, "superseded_by": new_id}
            plan.retire.append((current.id, retired))
            previous = Fact._from_stored(current)
        new_fact = Fact._from_stored(StoredObject(new_id, new_props))
        plan.changes.append(FactChange("superseded" if previous else "added", new_fact, previous))
    return plan


def _time_key(obj: StoredObject) -> tuple[str, str]:
    return (str(obj.properties.get("valid_from") or ""), obj.id)


def _backoff(attempt: int) -> float:
    # Writers that collided retry at slightly different moments instead of in lockstep.
    return random.uniform(0, 0.002 * min(attempt, 10))


def _coerce(raw: Any) -> _Incoming:
    def pick(name: str, default: Any = None) -> Any:
        if isinstance(raw, Mapping):
            return raw.get(name, default)
        return getattr(raw, name, default)

    category = pick("category", "other") or "other"
    if category not in CATEGORIES:
        raise InvalidInputError(
            f"fact category must be one of {', '.join(CATEGORIES)}, got {category!r}"
        )
    return _Incoming(
        subject=normalise_subject(pick("subject")),
        value=_normalise_value(pick("value")),
        category=str(category),
    )


def _same(a: object, b: str) -> bool:
    return _SPACES.sub(" ", str(a)).strip().casefold() == b.casefold()

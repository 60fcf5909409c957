"""Structured facts about a user, one current value per subject.

A fact is ``(subject, value, category)``, for example ``("diet", "vegetarian",
"preference")``. Subjects are normalised (trimmed, lower-case, single spaces) so that the
same key always lands on the same slot; mapping synonyms such as "dietary preference" to
"diet" is the extraction prompt's job. A new value for a subject *supersedes* the current
fact: the old one is kept with ``current=False``, ``valid_to`` (when it stopped being
true) and ``superseded_by`` (the id of its replacement), so the history of a subject can
always be read back. Restating the current value changes nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from memory._bound import CollectionBound, check_user_id
from memory.collections import FACTS
from memstore import InvalidInputError, MemoryObject, StoredObject, Where, check_text, make_id

__all__ = ["Fact", "FactCategory", "FactChange", "FactStore", "normalise_subject"]

FactCategory = Literal["identity", "preference", "constraint", "other"]
_CATEGORIES: tuple[str, ...] = get_args(FactCategory)
_SPACES = re.compile(r"\s+")
_MAX_SUBJECT = 60
_MAX_VALUE = 200
_PAGE = 100


def normalise_subject(subject: str) -> str:
    """Return the storage key of a subject: trimmed, lower-case, single spaces, no end dot."""
    if not isinstance(subject, str):
        raise InvalidInputError(f"fact subject must be a string, got {type(subject).__name__}")
    check_text(subject, "fact subject")
    key = _SPACES.sub(" ", subject).strip().strip(".:;,").strip().lower()
    if not key:
        raise InvalidInputError("fact subject is empty")
    if len(key) > _MAX_SUBJECT:
        raise InvalidInputError(f"fact subject is longer than {_MAX_SUBJECT} characters")
    return key


def _normalise_value(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"fact value must be a string, got {type(value).__name__}")
    check_text(value, "fact value")
    text = _SPACES.sub(" ", value).strip()
    if not text:
        raise InvalidInputError("fact value is empty")
    if len(text) > _MAX_VALUE:
        raise InvalidInputError(f"fact value is longer than {_MAX_VALUE} characters")
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
    """Per-user facts on a :class:`~memstore.MemoryStore` (collection ``UserFact``)."""

    spec = FACTS

    # -- writes ---------------------------------------------------------------------------

    def remember(
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
        self._ensure()
        stamp = _rfc3339(now)
        writes: list[tuple[str, dict[str, Any]]] = []
        keep_vectors: list[MemoryObject] = []
        changes: list[FactChange] = []
        for item in incoming.values():
            history = self._history_objects(user, item.subject)
            current = next((o for o in history if o.properties.get("current")), None)
            if current is not None and _same(current.properties["value"], item.value):
                continue
            new_id = make_id("fact", user, item.subject, str(len(history) + 1))
            new_props: dict[str, Any] = {
                "subject": item.subject,
                "value": item.value,
                "category": item.category,
                "current": True,
                "valid_from": stamp,
                "valid_to": None,
                "source_thread": source_thread,
                "superseded_by": None,
            }
            writes.append((new_id, new_props))
            previous: Fact | None = None
            if current is not None:
                old = self.store.get(FACTS.name, current.id, user=user, include_vector=True)
                if old is None or old.vector is None:
                    raise InvalidInputError(f"fact {current.id} vanished while superseding it")
                old_props = dict(old.properties)
                old_props.update(current=False, valid_to=stamp, superseded_by=new_id)
                keep_vectors.append(MemoryObject(old.id, old_props, old.vector))
                previous = Fact._from_stored(old)
            new_fact = Fact._from_stored(StoredObject(new_id, new_props))
            changes.append(FactChange("superseded" if previous else "added", new_fact, previous))
        if not writes:
            return []
        vectors = self.embeddings.embed_documents(
            [f"{props['subject']}: {props['value']}" for _, props in writes]
        )
        objects = [
            MemoryObject(fid, props, vector)
            for (fid, props), vector in zip(writes, vectors, strict=True)
        ]
        # One batch: the new value and the superseded old one land together or not at all.
        self.store.upsert(FACTS.name, objects + keep_vectors, user=user).raise_for_failures()
        return changes

    def forget(self, user: str, subject: str) -> int:
        """Delete every value (current and past) of a subject; return how many were deleted."""
        check_user_id(user)
        key = normalise_subject(subject)
        self._ensure()
        return self.store.delete_where(FACTS.name, [Where("subject", "eq", key)], user=user)

    def forget_user(self, user: str) -> int:
        """Delete every fact of a user; return how many were deleted."""
        check_user_id(user)
        self._ensure()
        return self.store.delete_user(FACTS.name, user)

    # -- reads ----------------------------------------------------------------------------

    def current(self, user: str) -> list[Fact]:
        """Return the user's current facts, ordered by subject."""
        check_user_id(user)
        self._ensure()
        objs = self._all(user, [Where("current", "eq", True)])
        return sorted((Fact._from_stored(o) for o in objs), key=lambda f: f.subject)

    def history(self, user: str, subject: str) -> list[Fact]:
        """Every value a subject has had, oldest first; the last one is current."""
        check_user_id(user)
        key = normalise_subject(subject)
        self._ensure()
        return [Fact._from_stored(o) for o in self._history_objects(user, key)]

    def _history_objects(self, user: str, subject: str) -> list[StoredObject]:
        objs = self._all(user, [Where("subject", "eq", subject)])
        return sorted(objs, key=lambda o: (str(o.properties["valid_from"]), o.id))

    def _all(self, user: str, where: list[Where]) -> list[StoredObject]:
        out: list[StoredObject] = []
        while True:
            page = self.store.list_objects(
                FACTS.name, user=user, where=where, limit=_PAGE, offset=len(out)
            )
            out.extend(page)
            if len(page) < _PAGE:
                return out

    # -- async twins ----------------------------------------------------------------------

    async def aremember(
        self,
        user: str,
        facts: Sequence[Any],
        *,
        source_thread: str | None = None,
        now: datetime | None = None,
    ) -> list[FactChange]:
        """Async :meth:`remember` (runs in a worker thread)."""
        return await asyncio.to_thread(
            self.remember, user, facts, source_thread=source_thread, now=now
        )

    async def acurrent(self, user: str) -> list[Fact]:
        """Async :meth:`current`."""
        return await asyncio.to_thread(self.current, user)

    async def ahistory(self, user: str, subject: str) -> list[Fact]:
        """Async :meth:`history`."""
        return await asyncio.to_thread(self.history, user, subject)

    async def aforget(self, user: str, subject: str) -> int:
        """Async :meth:`forget`."""
        return await asyncio.to_thread(self.forget, user, subject)


def _coerce(raw: Any) -> _Incoming:
    def pick(name: str, default: Any = None) -> Any:
        if isinstance(raw, Mapping):
            return raw.get(name, default)
        return getattr(raw, name, default)

    category = pick("category", "other") or "other"
    if category not in _CATEGORIES:
        raise InvalidInputError(
            f"fact category must be one of {', '.join(_CATEGORIES)}, got {category!r}"
        )
    return _Incoming(
        subject=normalise_subject(pick("subject")),
        value=_normalise_value(pick("value")),
        category=str(category),
    )


def _same(a: object, b: str) -> bool:
    return _SPACES.sub(" ", str(a)).strip().casefold() == b.casefold()


def _rfc3339(now: datetime | None) -> str:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise InvalidInputError("now must carry a timezone")
    return moment.astimezone(UTC).isoformat()

"""The facts kind's contract: its namespaces, forgetting, import rules and listing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentic_memory.kinds.contract import (
    ImportLine,
    ImportTarget,
    KindInfo,
    MemoryKind,
    ThreadForgotten,
    UniqueKey,
    whose,
)
from agentic_memory.kinds.facts import store as facts
from agentic_memory.kinds.facts.space import FactsSpace
from agentic_memory.kinds.importing import text_property, utc_time
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    MemoryObject,
    Where,
    make_id,
)


class FactsKind(MemoryKind):
    """Structured facts about a user: one current value per subject, history kept."""

    info = KindInfo.one("facts", "fact", "Facts about a user, with their history.")
    specs = (facts.FACTS,)
    space_types = (FactsSpace,)
    cli_columns = (
        ("subject", "subject"),
        ("value", "value"),
        ("category", "category"),
        ("since", "valid_from"),
        ("thread", "source_thread"),
    )

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete the user's facts, current and past."""
        return {
            facts.FACTS.name: await facts.FactStore(self.store, self.embeddings).aforget_user(user)
        }

    async def athreads(self, user: str) -> set[str]:
        """Return the conversations the user's facts were learned in."""
        return await facts.FactStore(self.store, self.embeddings).athreads(user)

    async def aforget_thread_parts(self, user: str, thread: str) -> ThreadForgotten:
        """Delete the values learned in the thread; an older value becomes current again."""
        done = await facts.FactStore(self.store, self.embeddings).aforget_thread(user, thread)
        name = facts.FACTS.name
        return ThreadForgotten({name: done.deleted}, {name: done.rewritten})

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the subject and value."""
        return facts.embedding_text(properties)

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check a normalised subject, a bounded value, a known category, a current flag."""
        props = line.properties
        subject = text_property(props, "subject")
        if facts.normalise_subject(subject) != subject:
            raise InvalidInputError(
                f"subject {subject!r:.60} is not in its stored (normalised) form"
            )
        value = text_property(props, "value")
        if len(value) > facts.MAX_VALUE:
            raise InvalidInputError(f"value is longer than {facts.MAX_VALUE} characters")
        if props.get("category", "other") not in facts.CATEGORIES:
            raise InvalidInputError(f"category must be one of {', '.join(facts.CATEGORIES)}")
        if not isinstance(props.get("current"), bool):
            raise InvalidInputError("current must be true or false")
        text_property(props, "valid_from")
        line.keys = {"subject": subject, "current": props["current"]}

    @classmethod
    def unique_keys(cls, line: ImportLine) -> list[UniqueKey]:
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

    @classmethod
    def import_group(
        cls, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
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
                        cls._merge_subject(target, spec, user, done, lines)
                    pending = {}
                pending.setdefault(subject, []).append(line)
        for done, lines in pending.items():
            cls._merge_subject(target, spec, user, done, lines)

    @classmethod
    def _merge_subject(
        cls,
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
            (
                str(o.properties.get("value", "")).casefold(),
                utc_time(str(o.properties["valid_from"])),
            )
            for o in stored
        }
        foreign: list[ImportLine] = []
        for line in lines:
            found = by_id.get(line.id)
            key = (
                str(line.properties["value"]).casefold(),
                utc_time(str(line.properties["valid_from"])),
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
        since = utc_time(str(current.properties["valid_from"]))
        newest = max(foreign, key=lambda ln: utc_time(str(ln.properties["valid_from"])))
        supersedes = bool(newest.properties["current"]) and (
            utc_time(str(newest.properties["valid_from"])) > since
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

    async def alist_rows(cls, user: str, limit: int) -> list[dict[str, Any]]:
        """Return the user's current facts by subject."""
        current = await facts.FactStore(cls.store, cls.embeddings).acurrent(user)
        return [f.to_dict() for f in current[:limit]]

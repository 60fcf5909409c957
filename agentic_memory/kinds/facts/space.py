"""The LangGraph namespaces of the facts kind: items read and written through its classes.

The mapping is in ``docs/langgraph-store.md``; the base is :mod:`agentic_memory.namespaces.family`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.store.base import Item, SearchItem

from agentic_memory.kinds.facts.store import Fact, FactStore, normalise_subject
from agentic_memory.namespaces.family import (
    KindSpace,
    SpaceContext,
    Write,
    check_fields,
    optional_field,
    plain_item,
)
from agentic_memory.namespaces.search import Found, SpaceSearch, parse_time
from agentic_memory.store import InvalidInputError
from agentic_memory.store.base import PAGE_LIMIT

_FACT_FIELDS = frozenset({"subject", "value", "category", "source_thread"})
_FACT_ECHO = frozenset({"valid_from"})


class FactsSpace(KindSpace):
    """``("facts", user)``: key = the normalised subject, value = the current fact."""

    root = "facts"

    collection = FactStore.spec.name

    def __init__(self, ctx: SpaceContext) -> None:
        super().__init__(ctx)
        self.facts = ctx.kind(FactStore)

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """Return the current value of a subject, dated from its first value."""
        user = self.check_item_namespace(namespace)[1]
        subject = normalise_subject(key)
        history = await self.facts.ahistory(user, subject)
        if not history:
            return None
        return plain_item(self._item(user, _current(history), history, None))

    def prepare(
        self, namespace: tuple[str, ...], key: str, value: Mapping[str, Any] | None
    ) -> Write:
        """Supersede the subject's value through ``FactStore`` (a delete forgets the subject)."""
        user = self.check_item_namespace(namespace)[1]
        subject = normalise_subject(key)
        facts, now = self.facts, self.ctx.now
        if value is None:

            async def forget() -> None:
                await facts.aforget(user, subject)

            return forget
        fields = check_fields(value, _FACT_FIELDS, _FACT_ECHO, "a fact", required=("value",))
        if not isinstance(fields["value"], str):
            raise InvalidInputError(
                f"a fact's value must be a string, got {type(fields['value']).__name__}"
            )
        if "subject" in fields and normalise_subject(fields["subject"]) != subject:
            raise InvalidInputError(
                f"the value names the subject {fields['subject']!r} but the key is {key!r}: "
                "a fact's key is its subject"
            )
        category = optional_field(fields, "category", str, "a fact's category must be a string")
        source = optional_field(
            fields, "source_thread", str, "source_thread must be a string or None"
        )

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
        current = await self.facts.acurrent(user)
        if request.query:
            ranked = await self._rank(user, request.query, current, request.alpha)
        else:
            ranked = [(fact, None) for fact in current]
        chosen = [(f, s) for f, s in ranked if request.flt.matches(_fact_value(f))][: request.need]
        return [
            Found(self._item(user, f, await self.facts.ahistory(user, f.subject), s))
            for f, s in chosen
        ]

    async def _rank(
        self, user: str, query: str, current: list[Fact], alpha: float
    ) -> list[tuple[Fact, float | None]]:
        if not current:
            return []
        found = await self.facts.asearch(
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

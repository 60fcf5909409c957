"""The messages kind's contract: its namespaces, forgetting, import rules and listing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentic_memory.kinds import messages
from agentic_memory.kinds.contract import (
    ImportLine,
    ImportTarget,
    KindInfo,
    MemoryKind,
    ThreadForgotten,
    UniqueKey,
    whose,
)
from agentic_memory.kinds.importing import same_shape, text_property
from agentic_memory.kinds.messages.space import MessagesSpace
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    Where,
)


class MessagesKind(MemoryKind):
    """Every logged turn, recalled across conversations."""

    info = KindInfo.one("messages", "message", "The message log of every conversation.")
    specs = (messages.MESSAGES,)
    space_types = (MessagesSpace,)
    bookkeeping = (messages.TURN_MARKS.name,)
    cli_columns = (
        ("thread", "thread_id"),
        ("turn", "turn"),
        ("role", "role"),
        ("content", "content"),
        ("created", "created_at"),
    )

    @classmethod
    def accepts_earlier_schema(cls, spec: CollectionSpec) -> bool:
        """Accept an earlier version's log: ``MessageLog`` upgrades it on first use."""
        old = messages.MESSAGES_V1
        return spec.name == old.name and same_shape(spec, old.properties, old.per_user)

    async def aforget_user_parts(self, user: str) -> dict[str, int]:
        """Delete the user's log."""
        log = messages.MessageLog(self.store, self.embeddings)
        return {messages.MESSAGES.name: await log.aforget_user(user)}

    async def athreads(self, user: str) -> set[str]:
        """Return the threads with logged turns."""
        return set(await messages.MessageLog(self.store, self.embeddings).athreads(user))

    async def aforget_thread_parts(self, user: str, thread: str) -> ThreadForgotten:
        """Delete the thread's logged turns."""
        log = messages.MessageLog(self.store, self.embeddings)
        return ThreadForgotten({messages.MESSAGES.name: await log.aforget(user, thread_id=thread)})

    @classmethod
    def embedding_text(cls, line_kind: str, properties: Mapping[str, Any]) -> str:
        """Return the turn's text with its speaker."""
        return messages.embedding_text_of(properties)

    @classmethod
    def check_line(cls, line: ImportLine) -> None:
        """Check a role, bounded content, a thread and a turn number."""
        props = line.properties
        if props.get("role") not in ("human", "ai"):
            raise InvalidInputError(f"role must be 'human' or 'ai', got {props.get('role')!r:.40}")
        messages.check_message_text(text_property(props, "content", required=False), "content")
        thread = text_property(props, "thread_id")
        turn = props.get("turn")
        if not isinstance(turn, int) or isinstance(turn, bool) or turn < 0:
            raise InvalidInputError(f"turn must be a non-negative integer, got {turn!r:.40}")
        text_property(props, "created_at")
        line.keys = {"thread": thread, "turn": turn}

    @classmethod
    def unique_keys(cls, line: ImportLine) -> list[UniqueKey]:
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

    @classmethod
    def import_group(
        cls, target: ImportTarget, line_kind: str, spec: CollectionSpec, user: str
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

    async def alist_rows(self, user: str, limit: int) -> list[dict[str, Any]]:
        """Return the user's log by thread and turn."""
        log = messages.MessageLog(self.store, self.embeddings)
        return [m.to_dict() for m in await log.alist(user, limit=min(limit, 1000))]

"""The LangGraph namespaces of the messages kind: items read and written through its classes.

The mapping is in ``docs/langgraph-store.md``; the base is :mod:`agentic_memory.namespaces.family`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langgraph.store.base import Item, SearchItem

from agentic_memory.kinds.messages.log import MessageLog
from agentic_memory.namespaces.family import (
    PAGE,
    RECALL_CAP,
    KindSpace,
    SpaceContext,
    Write,
    check_fields,
    is_uuid,
    optional_field,
    plain_item,
)
from agentic_memory.namespaces.labels import thread_label, thread_of_label
from agentic_memory.namespaces.search import Found, SpaceSearch, parse_time
from agentic_memory.store import (
    InvalidInputError,
    StoredObject,
)

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

    def __init__(self, ctx: SpaceContext) -> None:
        super().__init__(ctx)
        self.messages = ctx.kind(MessageLog)

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
            for thread in await self.messages.athreads(user):
                found.add((self.root, user, thread_label(thread)))
        return {ns for ns in found if ns[: len(fixed)] == fixed}

    async def get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        """One logged message, by its stored id or by the message's own id."""
        user, label = self.check_item_namespace(namespace)[1:]
        thread = thread_of_label(label)
        obj = await self._resolve(user, thread, key)
        if obj is None:
            return None
        return plain_item(self._item(user, obj, None, key=key))

    async def _resolve(self, user: str, thread: str, key: str) -> StoredObject | None:
        direct = await self._read(user, key) if is_uuid(key) else None
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
        log, now = self.messages, self.ctx.now
        if value is None:

            async def delete() -> None:
                found = await self._resolve(user, thread, key)
                if found is not None:
                    await log.aforget(user, ids=[found.id])

            return delete
        fields = check_fields(
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
        speaker = optional_field(fields, "speaker", str, "speaker must be a string or None")
        metadata = optional_field(fields, "metadata", dict, "metadata must be an object or None")
        message = {"role": fields["role"], "content": fields["content"], "id": key}
        if speaker:
            message["name"] = speaker

        async def write() -> None:
            alias = await self._read(user, MessageLog.message_id(user, thread, key))
            if alias is None and is_uuid(key):
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
        log = self.messages
        if query:

            async def recall(k: int) -> list[SearchItem]:
                recalled = await log.arecall(
                    user, query, k=k, alpha=request.alpha, thread_id=thread
                )
                return [self._logged(user, r, r.score) for r in recalled]

            return await request.ranked(recall, RECALL_CAP)

        async def page(offset: int) -> list[SearchItem]:
            listed = await log.alist(user, thread_id=thread, limit=PAGE, offset=offset)
            return [self._logged(user, message, None) for message in listed]

        return await request.paged(page, PAGE)

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
        value = _message_value(obj, self.messages)
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

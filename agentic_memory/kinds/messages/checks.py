"""Input checks of the message log, and turning given messages into turns (pure).

Every check raises ``InvalidInputError`` before anything is read or written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage

from agentic_memory.kinds._bound import (
    MAX_MESSAGE_CHARS,
    check_search,
    check_user_id,
    checked_now,
)
from agentic_memory.kinds.messages.schema import Role
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.store import (
    InvalidInputError,
    Where,
    check_text,
)

_ROLES: dict[str, Role | None] = {
    "human": "human",
    "user": "human",
    "ai": "ai",
    "assistant": "ai",
    "system": None,
    "developer": None,
    "tool": None,
    "function": None,
}


@dataclass(frozen=True)
class _Turn:
    role: Role
    text: str
    message_id: str | None
    name: str = ""
    important: bool | None = None


def _check_flag(value: object, name: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")


def _check_policy(retention: object) -> None:
    if retention is not None and not isinstance(retention, RetentionPolicy):
        raise InvalidInputError(
            f"retention must be a RetentionPolicy, got {type(retention).__name__}"
        )


def _check_ids(ids: object) -> list[str]:
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise InvalidInputError("ids must be a list of message ids, not one string")
    out: list[str] = []
    for oid in ids:
        if not isinstance(oid, str):
            raise InvalidInputError(f"a message id must be a string, got {type(oid).__name__}")
        try:
            canonical = str(uuid.UUID(oid))
        except ValueError:
            raise InvalidInputError(
                f"{oid!r:.80} is not a message id (ids are UUIDs, as `amem memories messages "
                "list --json` shows them)"
            ) from None
        if canonical not in out:
            out.append(canonical)
    return out


def _check_thread(thread_id: object, name: str = "thread_id") -> str:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidInputError(f"{name} must be a non-empty string, got {thread_id!r}")
    return check_text(thread_id, name)


def _text_of(content: object, where: str) -> str:
    """Return the text of a message content: a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    parts.append(block["text"])
            else:
                raise InvalidInputError(
                    f"{where}: content blocks must be strings or dicts, got {type(block).__name__}"
                )
        return "\n".join(parts)
    raise InvalidInputError(
        f"{where}: content must be a string or a list of content blocks, "
        f"got {type(content).__name__}"
    )


def check_message_text(text: str, where: str = "message") -> str:
    """Refuse a message longer than ``MAX_MESSAGE_CHARS`` or holding invalid Unicode.

    Cheap (a length and an encoding check), so it runs before anything is embedded.
    """
    if len(text) > MAX_MESSAGE_CHARS:
        raise InvalidInputError(
            f"{where}: {len(text):,} characters is more than the {MAX_MESSAGE_CHARS:,} a "
            "message may have; split it or attach it as a document (amem ingest)"
        )
    return check_text(text, where)


def _turn_of(message: object, index: int) -> _Turn | None:
    where = f"message {index}"
    if isinstance(message, BaseMessage):
        # isinstance, not .type: streamed chunks (AIMessageChunk) are AI messages too.
        if isinstance(message, HumanMessage):
            kind = "human"
        elif isinstance(message, AIMessage):
            kind = "ai"
        elif isinstance(message, ChatMessage):
            kind = message.role
        else:
            kind = "system"  # system, tool, function and remove messages are not logged
        content: object = message.content
        message_id = message.id
        name: object = message.name
        flag: object = None
    elif isinstance(message, Mapping):
        if "role" not in message or "content" not in message:
            raise InvalidInputError(f"{where}: a dict message needs 'role' and 'content'")
        kind = message["role"]
        content = message["content"]
        message_id = message.get("id")
        name = message.get("name")
        flag = message.get("important")
        _check_flag(flag, f"{where}: important")
        if not isinstance(kind, str):
            raise InvalidInputError(f"{where}: role must be a string, got {kind!r}")
    else:
        raise InvalidInputError(
            f"{where}: expected a LangChain message or a dict, got {type(message).__name__}"
        )
    if kind not in _ROLES:
        raise InvalidInputError(
            f"{where}: unknown role {kind!r} (expected one of {', '.join(sorted(_ROLES))})"
        )
    text = _text_of(content, where)
    if _ROLES[kind] is not None:
        check_message_text(text, where)
    if message_id is not None and (not isinstance(message_id, str) or not message_id):
        raise InvalidInputError(f"{where}: id must be a non-empty string, got {message_id!r}")
    if name is not None and not isinstance(name, str):
        raise InvalidInputError(f"{where}: name must be a string, got {type(name).__name__}")
    if message_id is not None:
        check_text(message_id, f"{where}: id")
    role = _ROLES[kind]
    if role is None or not text.strip():
        return None
    return _Turn(
        role, text, message_id, " ".join((name or "").split()), flag if flag is None else bool(flag)
    )


def _prepare(
    user: object,
    thread_id: object,
    messages: object,
    metadata: object,
    now: datetime | None,
) -> tuple[list[_Turn], str | None]:
    check_user_id(user)
    _check_thread(thread_id)
    if isinstance(messages, str | bytes | BaseMessage | Mapping) or not isinstance(
        messages, Sequence
    ):
        raise InvalidInputError(
            f"messages must be a list of messages, got {type(messages).__name__}"
        )
    turns = [t for i, m in enumerate(messages) if (t := _turn_of(m, i)) is not None]
    seen: set[str] = set()
    for t in turns:
        if t.message_id is not None:
            if t.message_id in seen:
                raise InvalidInputError(f"message id {t.message_id!r} appears twice")
            seen.add(t.message_id)
    meta_json: str | None = None
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise InvalidInputError(f"metadata must be a dict, got {type(metadata).__name__}")
        try:
            meta_json = json.dumps(dict(metadata), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"metadata must be JSON-serialisable: {exc}") from None
        check_text(meta_json, "metadata")
    checked_now(now)  # a bad ``now`` is refused before anything is read
    return turns, meta_json


def _recall_filters(
    user: object, query: object, k: object, thread_id: object, exclude_thread: object
) -> list[Where]:
    check_user_id(user)
    check_search(query, k)
    where: list[Where] = []
    if thread_id is not None:
        where.append(Where("thread_id", "eq", _check_thread(thread_id)))
    if exclude_thread is not None:
        where.append(Where("thread_id", "ne", _check_thread(exclude_thread, "exclude_thread")))
    return where


def _check_page(user: object, thread_id: object, limit: object, offset: object) -> None:
    check_user_id(user)
    if thread_id is not None:
        _check_thread(thread_id)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a non-negative integer, got {offset!r}")


def _check_forget(user: object, ids: object, thread_id: object) -> None:
    check_user_id(user)
    if (ids is None) == (thread_id is None):
        raise InvalidInputError(
            "forget needs exactly one of ids= or thread_id= (forget_user deletes everything)"
        )
    if ids is not None:
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise InvalidInputError("ids must be a list of message ids, not one string")
    else:
        _check_thread(thread_id)

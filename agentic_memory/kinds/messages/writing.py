"""Logging turns: numbering them per thread and writing them create-only, with retries.

New turns are numbered after the thread's last stored turn (and after the turns a purge
deleted from it, which its mark records: a number is never given twice) and created with the
store's create-only ``insert``, guarded by "no message of this thread after that turn"; a
writer that finds one reads the thread's last turn again and renumbers. A write reads only the given
messages' ids and the thread's last two turns, and then rewrites the keyword text of the
former last turn (it now holds the turn after it), so its cost does not grow with the
user's log. The plan of a write is computed by pure functions; ``alog`` runs the
read-plan-write loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.embeddings import Embeddings

from agentic_memory.kinds._bound import rfc3339
from agentic_memory.kinds.messages.checks import _Turn
from agentic_memory.kinds.messages.purge import athread_mark
from agentic_memory.kinds.messages.schema import (
    MESSAGES,
    embedding_text_of,
    message_id,
    message_properties,
)
from agentic_memory.kinds.recall_text import search_text
from agentic_memory.store import (
    ConflictError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    StoreError,
    Where,
)

logger = logging.getLogger("agentic_memory.kinds.messages")

_COMPARED = (
    "content",
    "role",
    "speaker",
    "metadata_json",
    "search_text",
    "important",
    "important_by",
)
"""The properties whose change makes a logged message worth writing again."""

MAX_ATTEMPTS = 200
"""Rounds a write (or a mark) starts again because other writers changed the thread."""


@dataclass(frozen=True)
class _Planned:
    id: str
    props: dict[str, Any]
    write: bool
    new: bool
    """Not stored yet: created with a fresh turn number (create-only)."""


def _keyed_ids(user: str, thread_id: str, turns: list[_Turn]) -> list[str]:
    """Ids of the turns that carry their own message id (those may be stored already)."""
    return [message_id(user, thread_id, t.message_id) for t in turns if t.message_id]


def _later(thread_id: str, last: int | None) -> list[Where]:
    """Return the guard of an insert: a message of the thread after the last turn read."""
    where = [Where("thread_id", "eq", thread_id)]
    return where if last is None else [*where, Where("turn", "gt", last)]


def _unembedded(plan: list[_Planned], vectors: dict[str, list[float]]) -> list[str]:
    texts = dict.fromkeys(embedding_text_of(item.props) for item in plan if item.write)
    return [text for text in texts if text not in vectors]


def _objects(
    plan: list[_Planned], vectors: dict[str, list[float]]
) -> tuple[list[MemoryObject], list[MemoryObject]]:
    """Split the writes: changes to stored messages, and new messages."""
    changed: list[MemoryObject] = []
    new: list[MemoryObject] = []
    for item in plan:
        if item.write:
            obj = MemoryObject(item.id, item.props, vectors[embedding_text_of(item.props)])
            (new if item.new else changed).append(obj)
    return changed, new


def _backoff_delay(attempt: int) -> float:
    # Writers that collided retry at slightly different moments instead of in lockstep.
    return random.uniform(0, 0.002 * min(attempt, 10))


def _gave_up(user: str, thread_id: str) -> ConflictError:
    return ConflictError(
        f"thread {thread_id!r} of {user!r} kept growing during {MAX_ATTEMPTS} attempts to "
        "log these messages; nothing new was logged"
    )


def _plan(
    user: str,
    thread_id: str,
    turns: list[_Turn],
    existing: dict[str, StoredObject],
    last: StoredObject | None,
    around: dict[int, str],
    meta_json: str | None,
    created_at: str,
    marked_by: str = "user",
    purged: int | None = None,
) -> list[_Planned]:
    """Give each turn its id, turn number and properties; skip writes that change nothing.

    ``existing`` holds the stored messages among the turns' own ids; new turns are numbered
    after ``last``, the thread's stored message with the largest turn (``None``: the thread
    is empty), and after ``purged``, the largest turn a purge deleted from the thread.
    ``around`` holds the text of stored turns just before and after rewritten
    ones (see :func:`_neighbour_turns_needed`), for the "turn before" and "turn after" parts
    of the keyword text.
    """
    last_turn = _number(last)
    taken = max((n for n in (last_turn, purged) if n is not None), default=None)
    next_turn = 0 if taken is None else taken + 1
    texts = dict(around)
    if last is not None and last_turn is not None:
        texts[last_turn] = str(last.properties.get("content", ""))
    numbered: list[tuple[_Turn, StoredObject | None, int, str, str | None]] = []
    for t in turns:
        key = t.message_id
        old = existing.get(message_id(user, thread_id, key)) if key else None
        meta = meta_json
        if old is not None:
            turn = int(old.properties.get("turn", 0))
            stamp = str(old.properties.get("created_at", created_at))
            if meta is None:
                # No metadata given: keep what the message already has.
                meta = old.properties.get("metadata_json")
        else:
            turn, stamp = next_turn, created_at
            next_turn += 1
        texts[turn] = t.text
        numbered.append((t, old, turn, stamp, meta))
    # A second pass: a turn's keyword text holds the turn after it, which may come later
    # in this same call (a user message and its answer).
    plan: list[_Planned] = []
    for t, old, turn, stamp, meta in numbered:
        oid = message_id(user, thread_id, t.message_id or f"#{turn}")
        props = message_properties(
            t.text,
            t.role,
            thread_id,
            turn,
            stamp,
            t.name,
            meta,
            texts.get(turn - 1, ""),
            texts.get(turn + 1, ""),
        )
        props.update(_importance(t.important, old, marked_by))
        unchanged = old is not None and all(
            old.properties.get(name) == props.get(name) for name in _COMPARED
        )
        plan.append(_Planned(oid, props, not unchanged, old is None))
    return plan


def _followed(current: StoredObject, previous: str, following: str) -> MemoryObject | None:
    """Return the thread's former last turn with the turn now after it in its keyword text.

    Computed from what is stored at the moment of the write (its text may have been
    logged again meanwhile); ``None`` when the keyword text already holds it.
    """
    p = current.properties
    text = search_text(
        str(p.get("content", "")),
        speaker=str(p.get("speaker") or ""),
        created_at=str(p.get("created_at", "")),
        previous=previous,
        following=following,
    )
    if p.get("search_text") == text or current.vector is None:
        return None
    return MemoryObject(current.id, {**p, "search_text": text}, current.vector)


def _relogged(
    planned: MemoryObject,
    current: StoredObject,
    flag: bool | None,
    keep_metadata: bool,
    marked_by: str,
) -> MemoryObject | None:
    """Return a logged message rewritten, from what is stored now; ``None``: unchanged."""
    props = {k: v for k, v in planned.properties.items() if k not in ("important", "important_by")}
    props.update(_importance(flag, current, marked_by))
    if current.properties.get("content") == props.get("content") and "search_text" in (
        current.properties
    ):
        # Same text: the stored keyword text is the fresher one. Another writer may have
        # added the turn after it since this write read the thread (``_afollow``).
        props["search_text"] = current.properties["search_text"]
    if keep_metadata:
        props.pop("metadata_json", None)
        if current.properties.get("metadata_json") is not None:
            props["metadata_json"] = current.properties["metadata_json"]
    if all(current.properties.get(n) == props.get(n) for n in _COMPARED):
        return None
    return MemoryObject(current.id, props, planned.vector)


def _importance(flag: bool | None, old: StoredObject | None, marked_by: str) -> dict[str, Any]:
    """Return the importance properties of a message written again (``old``) or anew.

    No flag keeps what a logged message has (a turn logged again is not unmarked); a new
    one is not important.
    """
    if flag is None:
        if old is None:
            return {"important": False}
        kept: dict[str, Any] = {
            k: old.properties[k] for k in ("important", "important_by") if k in old.properties
        }
        return kept
    if not flag:
        return {"important": False}
    was = (
        old.properties.get("important_by")
        if old is not None and old.properties.get("important")
        else None
    )
    return {"important": True, "important_by": "user" if "user" in (marked_by, was) else "model"}


def _number(last: StoredObject | None) -> int | None:
    return None if last is None else int(last.properties.get("turn", 0))


def _neighbour_turns_needed(
    user: str,
    thread_id: str,
    turns: list[_Turn],
    existing: dict[str, StoredObject],
    last: StoredObject | None,
) -> list[int]:
    """Turn numbers whose stored text a rewrite of an already logged message needs.

    A new turn follows ``last`` (or the turn before it in this call) and is the thread's
    last; a message logged again keeps its turn number, and its keyword text holds the
    turns before and after it.
    """
    given = {
        int(existing[oid].properties.get("turn", 0))
        for t in turns
        if t.message_id and (oid := message_id(user, thread_id, t.message_id)) in existing
    }
    last_turn = _number(last)
    known = {last_turn} | given
    wanted = {turn - 1 for turn in given if turn > 0}
    if last_turn is not None:
        wanted |= {turn + 1 for turn in given if turn < last_turn}
    return sorted(wanted - known)


async def alog(
    store: MemoryStore,
    embeddings: Embeddings,
    user: str,
    thread_id: str,
    turns: list[_Turn],
    meta_json: str | None,
    now: datetime | None,
    marked_by: str,
) -> list[str]:
    """Log checked turns of one thread; return their ids in order.

    Each round reads the turns' stored messages and the thread's last turn, plans the
    writes, embeds what is not embedded yet (once across rounds) and writes: edits in place,
    new turns create-only behind the "nothing after the last turn read" guard. A round that
    loses the race to another writer starts again.

    Raises:
        ConflictError: other writers kept adding turns to the thread through every attempt;
            no new turn of this call was logged.
    """
    vectors: dict[str, list[float]] = {}
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            await asyncio.sleep(_backoff_delay(attempt))
        known: dict[str, StoredObject] = {}
        for oid in _keyed_ids(user, thread_id, turns):
            if (obj := await store.aget(MESSAGES.name, oid, user=user)) is not None:
                known[oid] = obj
        last, before_last = await _alast(store, user, thread_id)
        # After the last turn: a purge marks a thread before deleting its turns.
        purged = await athread_mark(store, user, thread_id)
        around = {
            turn: await _aturn_text(store, user, thread_id, turn)
            for turn in _neighbour_turns_needed(user, thread_id, turns, known, last)
        }
        plan = _plan(
            user, thread_id, turns, known, last, around, meta_json, rfc3339(now), marked_by, purged
        )
        missing = _unembedded(plan, vectors)
        if missing:
            embedded = await embeddings.aembed_documents(missing)
            vectors.update(zip(missing, embedded, strict=True))
        changed, new = _objects(plan, vectors)
        if changed:
            new += await _arelog(store, user, turns, plan, changed, meta_json, marked_by)
        try:
            if new:
                result = await store.ainsert(
                    MESSAGES.name, new, user=user, unless=_later(thread_id, _number(last))
                )
                result.raise_for_failures()
        except ConflictError:
            continue
        if new and last is not None:
            await _afollow(store, user, thread_id, last, before_last, plan)
        return [item.id for item in plan]
    raise _gave_up(user, thread_id)


async def amark(
    store: MemoryStore,
    user: str,
    wanted: list[str],
    found: dict[str, StoredObject],
    important: bool,
    by: str,
) -> dict[str, StoredObject]:
    """Mark (or unmark) the turns ``wanted``, read before as ``found``; return them as stored.

    A turn a purge deleted since it was read is stored again, marked.

    Raises:
        ConflictError: the turns kept changing through every attempt.
    """
    marked: dict[str, StoredObject] = {}

    def mark(current: StoredObject) -> MemoryObject | None:
        # Decided from the turn as stored when the mark is written: an edit of its text
        # made meanwhile stays. The user's word wins over the model's flag.
        props = dict(current.properties)
        props.pop("important_by", None)
        props.update(_importance(important, current, by))
        marked[current.id] = StoredObject(current.id, props)
        if props == current.properties or current.vector is None:
            return None
        return MemoryObject(current.id, props, current.vector)

    for _ in range(MAX_ATTEMPTS):
        marked.clear()
        await store.aupdate(MESSAGES.name, wanted, mark, user=user)
        gone = [found[oid] for oid in wanted if oid not in marked]
        again = [o for o in (mark(obj) for obj in gone) if o is not None]
        try:
            if again:
                result = await store.ainsert(MESSAGES.name, again, user=user)
                result.raise_for_failures()
        except ConflictError:
            continue  # stored again by another writer meanwhile: mark that one
        return marked
    raise ConflictError(f"the turns of {user!r} kept changing while they were marked")


async def _arelog(
    store: MemoryStore,
    user: str,
    turns: list[_Turn],
    plan: list[_Planned],
    changed: list[MemoryObject],
    meta_json: str | None,
    marked_by: str,
) -> list[MemoryObject]:
    """Rewrite logged messages whose text (or metadata, or mark) changed.

    Their importance is decided from what is stored at the moment of the write, not
    from the earlier read: a mark another writer set meanwhile survives a re-log with
    edited text (and the edit survives the mark). Returns the messages a purge deleted
    since they were read, to be created again with the new turns.
    """
    flags = {item.id: t.important for t, item in zip(turns, plan, strict=True)}
    wanted = {o.id: o for o in changed}
    seen: set[str] = set()

    def relog(current: StoredObject) -> MemoryObject | None:
        seen.add(current.id)
        return _relogged(
            wanted[current.id], current, flags[current.id], meta_json is None, marked_by
        )

    await store.aupdate(MESSAGES.name, list(wanted), relog, user=user)
    return [obj for oid, obj in wanted.items() if oid not in seen]


async def _afollow(
    store: MemoryStore,
    user: str,
    thread_id: str,
    last: StoredObject,
    previous: str,
    plan: list[_Planned],
) -> None:
    """Put the first new turn's text into the keyword text of the turn it follows.

    ``previous`` is the text of the turn before that one, read with it.

    Runs once the new turns are stored: the guard of their insert made sure nothing came
    between. The new turns are logged by then, so a store failure here is reported as a
    warning, not raised (a caller retrying would log them twice); like a process killed
    before this step, it leaves that turn searchable by its own text, speaker, date and the
    turn before it, as before this call.
    """
    last_turn = int(last.properties.get("turn", 0))
    following = next(
        (str(i.props["content"]) for i in plan if i.new and i.props["turn"] == last_turn + 1),
        None,
    )
    if following is None:
        return
    try:
        await store.aupdate(
            MESSAGES.name,
            [last.id],
            lambda current: _followed(current, previous, following),
            user=user,
        )
    except StoreError as exc:
        logger.warning(
            "turn %d of thread %r of %r keeps its keyword text without the turn after it: %s",
            last_turn,
            thread_id,
            user,
            exc,
        )


async def _alast(store: MemoryStore, user: str, thread_id: str) -> tuple[StoredObject | None, str]:
    """Return the thread's last turn and the text of the turn before it ("" when none)."""
    # Two rows through the (thread_id, turn) index: the cost does not grow with the
    # user's other threads, nor with this one. The second is the "turn before" of the
    # last one's keyword text, rewritten once new turns follow it.
    top = await store.alist_objects(
        MESSAGES.name,
        user=user,
        where=[Where("thread_id", "eq", thread_id)],
        limit=2,
        sort_by="turn",
        descending=True,
    )
    if not top:
        return None, ""
    last_turn = int(top[0].properties.get("turn", 0))
    before = [o for o in top[1:] if int(o.properties.get("turn", 0)) == last_turn - 1]
    return top[0], str(before[0].properties.get("content", "")) if before else ""


async def _aturn_text(store: MemoryStore, user: str, thread_id: str, turn: int) -> str:
    """Return the text of one turn of a thread ("" when there is none)."""
    found = await store.alist_objects(
        MESSAGES.name,
        user=user,
        where=[Where("thread_id", "eq", thread_id), Where("turn", "eq", turn)],
        limit=1,
    )
    return str(found[0].properties.get("content", "")) if found else ""

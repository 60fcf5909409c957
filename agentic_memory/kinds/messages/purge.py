"""Retention of the message log: expiring old turns, pruning over the cap, reporting.

An important turn is never deleted: every delete carries the condition "not important",
checked by the store when it deletes. A purge deletes only turns it read, and before it
deletes a thread's turns it raises the thread's mark (:data:`TURN_MARKS`) to the highest
of them, so their numbers are never given to new turns.
"""

from __future__ import annotations

import threading
import time
import weakref
from datetime import datetime

from agentic_memory.kinds.messages.schema import MESSAGES, PAGE, TURN_MARKS, turn_mark_id
from agentic_memory.kinds.retention import MessagePurge, RetentionPolicy
from agentic_memory.store import (
    ConflictError,
    MemoryObject,
    MemoryStore,
    StoredObject,
    Where,
)

_PRUNE_RETRIES = 8
"""Rounds a purge starts again because another purge pruned the same log meanwhile."""

_MARK_ATTEMPTS = 50
"""Rounds a mark is written again because another purge (or a forget) changed it meanwhile."""

_UNIMPORTANT = Where("important", "ne", True)
"""Not marked important: a turn without the property (logged before it existed) too."""

_LAST_PURGE: weakref.WeakKeyDictionary[MemoryStore, dict[str, float]] = weakref.WeakKeyDictionary()
"""When each user's log was last purged after a write, per store (monotonic seconds)."""
_LAST_PURGE_LOCK = threading.Lock()


def due(store: MemoryStore, user: str, every_minutes: float) -> bool:
    """Claim the user's next automatic purge on this store if the interval has passed.

    Claimed before the purge runs, so concurrent writes of the user do not all purge.
    """
    moment = time.monotonic()
    with _LAST_PURGE_LOCK:
        seen = _LAST_PURGE.setdefault(store, {})
        last = seen.get(user)
        if last is not None and moment - last < every_minutes * 60:
            return False
        seen[user] = moment
    return True


async def apurge_log(
    store: MemoryStore, user: str, policy: RetentionPolicy, moment: datetime, dry_run: bool
) -> MessagePurge:
    """Apply ``policy`` to one user's existing log at ``moment``; see ``MessageLog.apurge``."""
    cutoff = policy.message_cutoff(moment)
    expired = 0
    if cutoff is not None:
        old = [Where("created_at", "lt", cutoff), _UNIMPORTANT]
        if dry_run:
            expired = await store.acount(MESSAGES.name, user=user, where=old)
        else:
            # A turn logged from now on is not older than the cutoff: the condition takes
            # only turns that exist now, whose numbers are marked first.
            tops: dict[str, int] = {}
            async for obj in store.aiterate(MESSAGES.name, user=user, where=old, page_size=PAGE):
                _raise(tops, str(obj.properties["thread_id"]), int(obj.properties["turn"]))
            await amark_deleted(store, user, tops)
            expired = await store.adelete_where(MESSAGES.name, old, user=user)
    total = await store.acount(MESSAGES.name, user=user)
    if dry_run:
        total -= expired
    cap, over = policy.max_messages, 0
    if cap is not None and total > cap:
        if dry_run:
            prunable = await store.acount(MESSAGES.name, user=user, where=[_UNIMPORTANT]) - expired
            over = min(total - cap, prunable)
        else:
            over = await _aprune_oldest(store, user, cap)
    remaining = total - over if dry_run else await store.acount(MESSAGES.name, user=user)
    return MessagePurge(
        user,
        expired=expired,
        over_cap=over,
        cutoff=cutoff,
        remaining=remaining,
        important_over_cap=max(0, remaining - cap) if cap is not None else 0,
    )


async def _aprune_oldest(store: MemoryStore, user: str, cap: int) -> int:
    """Delete the oldest unimportant turns until the user has ``cap``; return how many.

    Each round reads the oldest unimportant turns it needs, then checks, from the turns
    no other purge can take (those logged at or after the newest chosen one, and the
    important ones), that ``cap`` turns stay once the chosen ones are gone; a purge
    running at the same time may have pruned since this one counted, and then the round
    starts again. The chosen turns are deleted by name (thread and turn, numbers never
    given twice, see :func:`amark_deleted`), each still on condition of being unimportant
    and no newer than the newest chosen: a range of dates would also take a turn another
    writer stamped earlier but stored after the read. A round that deleted none of its turns
    (another purge took them, or they were marked important meanwhile) reads again.
    """
    name = MESSAGES.name
    deleted = stale = 0
    while (excess := await store.acount(name, user=user) - cap) > 0:
        chosen = await aoldest(store, user, min(excess, PAGE))
        if not chosen:
            break  # the rest is important: kept
        stamp = str(chosen[-1].properties["created_at"])
        tied = sum(1 for o in chosen if str(o.properties["created_at"]) == stamp)
        stays = (
            await store.acount(name, user=user, where=[Where("created_at", "gte", stamp)])
            - tied
            + await store.acount(
                name,
                user=user,
                where=[Where("created_at", "lt", stamp), Where("important", "eq", True)],
            )
        )
        if stays < cap:
            stale += 1
            if stale > _PRUNE_RETRIES:
                break  # other purges keep pruning this log: they finish the job
            continue
        turns: dict[str, list[int]] = {}
        tops: dict[str, int] = {}
        for obj in chosen:
            thread, turn = str(obj.properties["thread_id"]), int(obj.properties["turn"])
            turns.setdefault(thread, []).append(turn)
            _raise(tops, thread, turn)
        await amark_deleted(store, user, tops)
        n = 0
        for thread, numbers in turns.items():
            n += await store.adelete_where(
                name,
                [
                    Where("thread_id", "eq", thread),
                    Where("turn", "in", numbers),
                    Where("created_at", "lte", stamp),
                    _UNIMPORTANT,
                ],
                user=user,
            )
        if n == 0:
            stale += 1
            if stale > _PRUNE_RETRIES:
                break
            continue
        deleted += n
    return deleted


def _raise(tops: dict[str, int], thread: str, turn: int) -> None:
    tops[thread] = max(turn, tops.get(thread, turn))


async def amark_deleted(store: MemoryStore, user: str, tops: dict[str, int]) -> None:
    """Raise each thread's mark to at least ``tops[thread]``, before those turns are deleted.

    A writer reads the thread's last turn, then its mark; a purge writes the mark, then
    deletes. So a writer that no longer sees a deleted turn sees its mark, and numbers its
    turns after it. Marks only rise: each is raised from what is stored at the moment of
    the write, or created; two purges creating one at once read again and raise it.
    """
    if not tops:
        return
    wanted = {turn_mark_id(user, thread): (thread, turn) for thread, turn in tops.items()}
    marker = [1.0] + [0.0] * (store.dims - 1)  # marks are not searched
    seen: set[str] = set()

    def higher(current: StoredObject) -> MemoryObject | None:
        seen.add(current.id)
        thread, turn = wanted[current.id]
        if int(current.properties.get("turn", -1)) >= turn:
            return None
        return MemoryObject(current.id, {"thread_id": thread, "turn": turn}, marker)

    for _ in range(_MARK_ATTEMPTS):
        seen.clear()
        await store.aupdate(TURN_MARKS.name, list(wanted), higher, user=user)
        new = [
            MemoryObject(oid, {"thread_id": thread, "turn": turn}, marker)
            for oid, (thread, turn) in wanted.items()
            if oid not in seen
        ]
        try:
            if new:
                (await store.ainsert(TURN_MARKS.name, new, user=user)).raise_for_failures()
        except ConflictError:
            continue  # created by another purge meanwhile: raise that one
        return
    raise ConflictError(f"the turn marks of {user!r} kept changing; nothing was purged")


async def athread_mark(store: MemoryStore, user: str, thread_id: str) -> int | None:
    """Return the highest turn number a purge deleted from the thread, or ``None``."""
    found = await store.aget(TURN_MARKS.name, turn_mark_id(user, thread_id), user=user)
    return None if found is None else int(found.properties["turn"])


async def aretention_of(
    store: MemoryStore, user: str, policy: RetentionPolicy, moment: datetime, upcoming: int
) -> tuple[int, int, int, int, list[StoredObject]]:
    """Return (total, important, expired, over the cap, the first ``upcoming`` to go)."""
    name = MESSAGES.name
    total = await store.acount(name, user=user)
    important = await store.acount(name, user=user, where=[Where("important", "eq", True)])
    cutoff = policy.message_cutoff(moment)
    expired = 0
    if cutoff is not None:
        old = [Where("created_at", "lt", cutoff), _UNIMPORTANT]
        expired = await store.acount(name, user=user, where=old)
    cap = policy.max_messages
    over = 0 if cap is None else max(0, min(total - expired - cap, total - important - expired))
    first = await aoldest(store, user, upcoming) if upcoming else []
    return total, important, expired, over, first


def _in_order(obj: StoredObject) -> tuple[str, str, int]:
    p = obj.properties
    return str(p.get("created_at", "")), str(p.get("thread_id", "")), int(p.get("turn", 0))


async def aoldest(store: MemoryStore, user: str, n: int) -> list[StoredObject]:
    """Return the user's ``n`` oldest unimportant turns: by date, then thread and turn.

    Turns logged in one call share their date (a message and its answer); the store breaks
    such ties by id, which put an answer before its question. The retention report lists
    the turns a purge takes in the order it takes them, this one.
    """
    oldest = await store.alist_objects(
        MESSAGES.name, user=user, where=[_UNIMPORTANT], limit=n, sort_by="created_at"
    )
    if not oldest:
        return []
    last = str(oldest[-1].properties["created_at"])
    tied = await store.alist_objects(
        MESSAGES.name,
        user=user,
        where=[_UNIMPORTANT, Where("created_at", "eq", last)],
        limit=PAGE,
        sort_by="turn",
    )
    merged = {o.id: o for o in [*oldest, *tied]}
    return sorted(merged.values(), key=_in_order)[:n]

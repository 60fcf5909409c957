"""``amem memories messages``: the message log of every conversation."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agentic_memory.api import Memory
from agentic_memory.cli.scaffold import (
    CliError,
    LimitOpt,
    Output,
    Table,
    UserOpt,
    memory_command,
    need_user,
)
from agentic_memory.kinds.messages import LoggedMessage

app = typer.Typer(help="The message log of every conversation.")

MESSAGE_COLUMNS = [
    ("thread", "thread_id"),
    ("turn", "turn"),
    ("role", "role"),
    ("content", "content"),
    ("created", "created_at"),
    ("important", "marked"),
    ("expires", "expires"),
]

ThreadOpt = Annotated[str | None, typer.Option("--thread", "-t", help="Only this thread.")]


def message_row(message: LoggedMessage) -> dict[str, Any]:
    """Return a logged turn as a table row: who marked it important, and when it expires."""
    row = message.to_dict()
    by = "the model" if message.important_by == "model" else "you"
    row["marked"] = f"yes ({by})" if message.important else ""
    row["expires"] = "never" if message.important else message.expires_at or "-"
    return row


@memory_command(app, "list", retained=True)
async def messages_list(
    mem: Memory, user: UserOpt = None, thread: ThreadOpt = None, limit: LimitOpt = 100
) -> Output:
    """List a user's logged messages, by thread and turn."""
    uid = need_user(user)
    found = await mem.messages.alist(uid, thread_id=thread, limit=limit)
    return Table(
        [m.to_dict() for m in found],
        MESSAGE_COLUMNS,
        title=f"Messages of {uid}" + (f" in {thread}" if thread else ""),
        rows=[message_row(m) for m in found],
        notes=["Retention: " + mem.retention.describe()[0]],
    )


@memory_command(app, "search", retained=True)
async def messages_search(
    mem: Memory,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: UserOpt = None,
    thread: ThreadOpt = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many messages.")] = 10,
    alpha: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="0 = keyword (BM25), 1 = vector; unset: chosen per query by how far the "
            "two sides agree.",
        ),
    ] = None,
) -> Output:
    """Search a user's message log (hybrid BM25 + vector)."""
    uid = need_user(user)
    found = await mem.messages.arecall(uid, query, k=k, alpha=alpha, thread_id=thread)
    return Table(
        [m.to_dict() for m in found],
        [*MESSAGE_COLUMNS[:4], ("important", "marked"), ("score", "score")],
        title=f"Messages for {query!r}",
        rows=[message_row(m) | {"score": m.score} for m in found],
    )


@memory_command(app, "important", retained=True)
async def messages_important(
    mem: Memory,
    message_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Message ids (messages list --json); or use --thread/--turn."),
    ] = None,
    user: UserOpt = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread", "-t", help="The turns of this thread (all of them without --turn)."
        ),
    ] = None,
    turn: Annotated[
        list[int] | None,
        typer.Option("--turn", min=0, help="A turn number of --thread (repeat for several)."),
    ] = None,
    unmark: Annotated[bool, typer.Option("--unmark", help="Take the mark off instead.")] = False,
) -> Output:
    """Mark logged messages important: kept for good, recalled first (--unmark: undo)."""
    uid = need_user(user)
    if turn and thread is None:
        raise CliError("--turn needs --thread THREAD (turn numbers count per thread)")
    if not message_ids and thread is None:
        raise CliError("give message ids, or --thread THREAD [--turn N ...]")
    log = mem.messages
    ids = list(message_ids or [])
    if thread is not None:
        if turn:
            for number in turn:
                found = await log.afind(uid, thread, number)
                if found is None:
                    raise CliError(f"{uid!r} has no turn {number} in thread {thread!r}")
                ids.append(found.id)
        else:
            before = len(ids)
            while batch := await log.alist(
                uid, thread_id=thread, limit=1000, offset=len(ids) - before
            ):
                ids += [m.id for m in batch]
            if not ids:
                raise CliError(f"{uid!r} has no logged turn in thread {thread!r}")
    marked = await log.amark_important(uid, ids, important=not unmark)
    return Table(
        [m.to_dict() for m in marked],
        MESSAGE_COLUMNS,
        rows=[message_row(m) for m in marked],
        said=[
            f"{'Unmarked' if unmark else 'Marked'} {len(marked)} message(s) of {uid}"
            + (
                ": the retention policy applies to them again."
                if unmark
                else " important: kept for good, recalled first."
            )
        ],
    )

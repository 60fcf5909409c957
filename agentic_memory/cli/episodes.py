"""``amem memories episodes``: one reflection per finished conversation."""

from __future__ import annotations

from typing import Annotated

import typer

from agentic_memory.api import Memory
from agentic_memory.cli import scaffold
from agentic_memory.cli.memories import list_kind, show_kind
from agentic_memory.cli.scaffold import Output, Table, UserOpt, memory_command, need_user
from agentic_memory.kinds.registry import BUILTIN_KINDS

app = typer.Typer(help="Episodic memories: one reflection per finished conversation.")

EPISODES = BUILTIN_KINDS.get("episodes")
"""The episodes' kind: its name and its table's columns."""


@memory_command(app, "list")
async def episodes_list(mem: Memory, user: UserOpt = None, limit: scaffold.LimitOpt = 50) -> Output:
    """List a user's episodes, newest first (``list episodes``)."""
    return await list_kind(mem, EPISODES.info.name, user, limit)


@memory_command(app, "search")
async def episodes_search(
    mem: Memory,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: UserOpt = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many episodes.")] = 5,
    alpha: scaffold.AlphaOpt = 0.5,
) -> Output:
    """Recall a user's episodes by hybrid search, ranked as the agent ranks them."""
    uid = need_user(user)
    found = await mem.episodes.arecall(uid, query, k=k, alpha=alpha)
    return Table(
        [r.to_dict() for r in found],
        [*EPISODES.cli_columns[:4], ("summary", "conversation_summary"), ("score", "score")],
        title=f"Episodes of {uid} for {query!r}",
    )


@memory_command(app, "show")
async def episodes_show(
    mem: Memory,
    episode_id: Annotated[str, typer.Argument(help="The episode id.")],
    user: UserOpt = None,
) -> Output:
    """Show one episode with its whole conversation (``show episodes ID``)."""
    return await show_kind(mem, EPISODES.info.name, episode_id, user)


@memory_command(app, "important")
async def episodes_important(
    mem: Memory,
    episode_ids: Annotated[list[str], typer.Argument(help="Episode ids (episodes list --json).")],
    user: UserOpt = None,
    unmark: Annotated[bool, typer.Option("--unmark", help="Take the mark off instead.")] = False,
) -> Output:
    """Mark episodes important: recalled first, never pruned by a purge (--unmark: undo)."""
    uid = need_user(user)
    marked = await mem.episodes.amark_important(uid, episode_ids, important=not unmark)
    items = [e.to_dict() for e in marked]
    return Table(
        items,
        [*EPISODES.cli_columns, ("important", "important")],
        said=[
            f"{'Unmarked' if unmark else 'Marked'} {len(items)} episode(s) of {uid} "
            + ("(back to their own importance)." if unmark else "important (never pruned).")
        ],
    )

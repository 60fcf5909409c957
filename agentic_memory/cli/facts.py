"""``amem memories facts``: facts about a user, with their history."""

from __future__ import annotations

from typing import Annotated

import typer

from agentic_memory.api import Memory
from agentic_memory.cli.scaffold import Output, Table, UserOpt, memory_command, need_user
from agentic_memory.kinds.facts import normalise_subject

app = typer.Typer(help="Facts about a user, with their history.")


@memory_command(app, "list")
async def facts_list(
    mem: Memory,
    user: UserOpt = None,
    history: Annotated[
        bool, typer.Option("--history", help="Also show superseded values, oldest first.")
    ] = False,
    subject: Annotated[str | None, typer.Option(help="Only this subject.")] = None,
) -> Output:
    """List a user's current facts, or every value they ever had with ``--history``."""
    uid = need_user(user)
    facts = await mem.facts.aall_values(uid)
    if subject is not None:
        key = normalise_subject(subject)
        facts = [f for f in facts if f.subject == key]
    if not history:
        facts = [f for f in facts if f.current]
    columns = [("subject", "subject"), ("value", "value"), ("category", "category")]
    if history:
        columns += [
            ("current", "current"),
            ("from", "valid_from"),
            ("to", "valid_to"),
            ("thread", "source_thread"),
        ]
    else:
        columns += [("since", "valid_from"), ("thread", "source_thread")]
    return Table(
        [f.to_dict() for f in facts],
        columns,
        title=f"Facts of {uid}" + (" (history)" if history else ""),
    )

"""``amem memories``: inspect, export, import and purge what the agent remembers.

Every command reads the configured store (``AMEM_STORE``, ``AMEM_HOME``, ``WEAVIATE_URL``)
with the configured embeddings (``AMEM_EMBEDDINGS``); the retention commands read the
retention policy (``AMEM_MESSAGE_RETENTION_DAYS`` and the others of
:mod:`agentic_memory.kinds.retention`). Output is a rich table for people; ``--json`` prints
one JSON document for scripts. Per-user data needs ``--user``. The commands of one kind of
memory live in that kind's module (``cli/facts.py``, …), forgetting in ``cli/forget.py``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from agentic_memory.api import Memory, RetentionStatus
from agentic_memory.cli import render
from agentic_memory.cli.messages import message_row
from agentic_memory.cli.scaffold import (
    CliError,
    JsonOpt,
    LimitOpt,
    Output,
    Record,
    Shown,
    Table,
    UserOpt,
    YesOpt,
    cli_errors,
    cli_kinds,
    embedding_model,
    memory_command,
    need_user,
    print_output,
)
from agentic_memory.kinds.registry import KindRegistry
from agentic_memory.kinds.retention import PurgeReport
from agentic_memory.transfer import TransferSummary, export_to_file, import_memories, read_header

app = typer.Typer(
    name="memories",
    help="Inspect, export, import and forget the agent's memories.",
    no_args_is_help=True,
)


@app.callback()
def _memories() -> None:
    """Inspect, export, import and forget the agent's memories."""
    render.quiet_library_logs()


# -- users, and any kind by name ---------------------------------------------------------------


@memory_command(app, "users")
async def users_cmd(mem: Memory) -> Output:
    """List the users the store holds memories for, with counts per kind of memory."""
    opened = mem.kinds.open(mem.store, mem.embeddings)
    counted = [k for k in opened if k.info.users_column is not None]
    users: set[str] = set()
    for kind in counted:
        users |= await kind.ausers()
    items = []
    for uid in sorted(users):
        row: dict[str, Any] = {"user": uid}
        for kind in counted:
            row[str(kind.info.users_column)] = await kind.acount(uid)
        items.append(row)
    columns = [
        (str(k.info.users_column).replace("_", " "), str(k.info.users_column)) for k in counted
    ]
    return Table(
        items, [("user", "user"), *columns], title="Users", empty="no user has memories yet"
    )


KindArg = Annotated[str, typer.Argument(help="The memory kind (amem memories kinds).")]


async def list_kind(mem: Memory, kind: str, user: str | None, limit: int) -> Output:
    """Return what ``list KIND`` prints: the user's memories of a kind, as the kind shows them."""
    chosen = mem.kinds.get(kind)(mem.store, mem.embeddings)
    uid = need_user(user)
    return Table(
        await chosen.alist_rows(uid, limit),
        chosen.cli_columns,
        title=f"{chosen.info.name.capitalize()} of {uid}",
        empty=f"{uid} has no {chosen.info.name}",
    )


async def show_kind(mem: Memory, kind: str, oid: str, user: str | None) -> Output:
    """Return what ``show KIND ID`` prints: one memory of a kind, as the kind shows it."""
    chosen = mem.kinds.get(kind)(mem.store, mem.embeddings)
    uid = need_user(user)
    what = chosen.info.line_kinds[0]
    data = await chosen.ashow(uid, oid)
    if data is None:
        raise CliError(f"user {uid!r} has no {what} {oid!r}")
    return Record(data, title=f"{what.capitalize()} {oid}")


@memory_command(app, "list")
async def list_cmd(
    mem: Memory, kind: KindArg, user: UserOpt = None, limit: LimitOpt = 50
) -> Output:
    """List what one memory kind holds for a user, as the kind shows it."""
    return await list_kind(mem, kind, user, limit)


@memory_command(app, "show")
async def show_cmd(
    mem: Memory,
    kind: KindArg,
    object_id: Annotated[str, typer.Argument(help="The id (from `list KIND --json`).")],
    user: UserOpt = None,
) -> Output:
    """Show one memory of a kind, by its id, as the kind shows it."""
    return await show_kind(mem, kind, object_id, user)


@app.command("kinds")
def kinds_cmd(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the memory kinds: their names, LangGraph namespaces and export line kinds."""
    with cli_errors():
        items = [
            {
                "kind": k.info.name,
                "namespaces": list(k.info.roots),
                "export_kinds": list(k.info.line_kinds),
                "about": k.info.title,
            }
            for k in cli_kinds(ctx)
        ]
        columns = [
            ("kind", "kind"),
            ("namespaces", "namespaces"),
            ("export kinds", "export_kinds"),
            ("about", "about"),
        ]
        print_output(Table(items, columns, title="Memory kinds"), json_out)


# -- retention ---------------------------------------------------------------------------------


_NEXT_COLUMNS = [
    ("thread", "thread_id"),
    ("turn", "turn"),
    ("role", "role"),
    ("content", "content"),
    ("logged", "created_at"),
    ("expires", "expires"),
]

_OVERVIEW_COLUMNS = [
    ("user", "user"),
    ("turns", "turns"),
    ("important", "important"),
    ("expired", "expired"),
    ("over cap", "over_cap"),
    ("next expiry", "next_expiry"),
    ("episodes", "episodes"),
    ("episodes over cap", "episodes_over_cap"),
    ("facts", "facts"),
]


def _overview_row(status: RetentionStatus) -> dict[str, Any]:
    m = status.messages
    first = m.next[0] if m.next else None
    return {
        "user": status.user,
        "turns": m.total,
        "important": m.important,
        "expired": m.expired,
        "over_cap": m.over_cap,
        "next_expiry": first.expires_at if first is not None else None,
        "episodes": status.episodes,
        "episodes_over_cap": status.episodes_over_cap,
        "facts": status.facts,
    }


def _print_status(status: RetentionStatus) -> None:
    for line in status.policy.describe():
        render.say(line)
    m = status.messages
    render.print_mapping(
        {
            "logged turns": m.total,
            "important (kept for good)": m.important,
            "expired, deleted by the next purge": m.expired,
            "over the cap, pruned by the next purge": m.over_cap,
            "episodes": status.episodes,
            "important episodes": status.important_episodes,
            "episodes over the cap (explicit purge only)": status.episodes_over_cap,
            "facts (never purged)": status.facts,
            "rule versions (never purged)": status.rule_versions,
        },
        title=f"Retention for {status.user}",
    )
    render.print_records(
        [message_row(x) for x in m.next],
        _NEXT_COLUMNS,
        title="First turns to go (oldest unimportant)",
        empty="no unimportant turn: nothing can be purged",
    )


@memory_command(app, "retention", retained=True)
async def retention_cmd(
    mem: Memory,
    user: UserOpt = None,
    upcoming: Annotated[
        int, typer.Option("--next", "-n", min=0, help="How many of the first turns to go to show.")
    ] = 10,
) -> Output:
    """Show what expires when: the policy in force, and per user what the next purge removes."""
    if user is not None:
        status = await mem.aretention(need_user(user), upcoming=upcoming)
        return Shown(status.to_dict(), lambda: _print_status(status))
    statuses = [await mem.aretention(u, upcoming=1) for u in await mem.ausers_with_history()]
    # The CLI applies one policy to every user: said once, at the top.
    users = [{k: v for k, v in s.to_dict().items() if k != "policy"} for s in statuses]
    overview = Table(
        [_overview_row(s) for s in statuses],
        _OVERVIEW_COLUMNS,
        title="Retention",
        empty="no user has logged turns or episodes yet",
        said=mem.retention.describe(),
    )
    return Shown({"policy": mem.retention.to_dict(), "users": users}, overview.show)


def _print_purge_reports(reports: list[PurgeReport]) -> None:
    """Print what a purge deleted (or would delete), per user."""
    dry = bool(reports) and reports[0].dry_run
    rows = []
    for r in reports:
        episodes = r.episodes
        rows.append(
            (
                r.user,
                r.messages.expired,
                r.messages.over_cap,
                len(episodes.pruned) if episodes else 0,
                r.messages.remaining,
                episodes.remaining if episodes else "",
            )
        )
    render.out().print(
        render.table(
            ["user", "expired turns", "over-cap turns", "episodes", "turns left", "episodes left"],
            rows,
            title="Would be purged (dry run)" if dry else "Purged",
        )
    )
    pruned = [
        {**e, "user": r.user} for r in reports if r.episodes is not None for e in r.episodes.pruned
    ]
    if pruned:
        render.print_records(
            pruned,
            [
                ("user", "user"),
                ("episode", "id"),
                ("created", "created_at"),
                ("importance", "importance"),
                ("summary", "summary"),
            ],
            title="Episodes that would be pruned" if dry else "Episodes pruned",
        )
    for r in reports:
        if r.messages.important_over_cap:
            render.note(
                f"{r.user}: {r.messages.important_over_cap} turn(s) over the cap are important "
                "and kept (unmark some with `amem memories messages important --unmark`)"
            )
        if r.episodes is not None and r.episodes.important_over_cap:
            render.note(
                f"{r.user}: {r.episodes.important_over_cap} important episode(s) over the cap are kept"
            )
    render.note("Facts and rules are never purged.")


def _confirm_purge(user: str | None, dry_run: bool, yes: bool, **_: object) -> None:
    uid = need_user(user) if user is not None else None
    if not dry_run and not yes:
        whose = f"{uid!r}" if uid else "every user"
        if not sys.stdin.isatty():
            raise CliError(
                f"purging {whose} needs --yes (or --dry-run to see what would be deleted)"
            )
        typer.confirm(f"Purge {whose} by the retention policy? This cannot be undone", abort=True)


@memory_command(app, "purge", check=_confirm_purge, retained=True)
async def purge_cmd(
    mem: Memory,
    user: UserOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    yes: YesOpt = False,
) -> Output:
    """Apply the retention policy now, to one user or to everyone.

    Deletes expired and over-cap logged turns and the episodes over the cap; important
    memories, facts and rules are never deleted.
    """
    del yes  # asked for by _confirm_purge
    reports = await mem.apurge(user, dry_run=dry_run)
    return Shown([r.to_dict() for r in reports], lambda: _print_purge_reports(reports))


@memory_command(app, "repair")
async def repair_cmd(mem: Memory) -> Output:
    """Rewrite what a Weaviate node holds but its indexes miss (run after a node was killed).

    Connect to the restarted node (``WEAVIATE_URL``) once it has caught up. A node killed
    mid-write can keep objects that no search served by it finds; the embedded store writes
    each batch in one transaction and has nothing to repair.
    """
    repair = getattr(mem.store, "reindex_unindexed", None)
    if repair is None:
        return Record({"backend": mem.store.backend, "rewritten": {}}, title="Nothing to repair")
    rewritten = await asyncio.to_thread(repair)
    return Record(
        {"backend": mem.store.backend, "rewritten": rewritten},
        title=f"Rewrote {sum(rewritten.values())} unindexed object(s)",
    )


# -- export / import ---------------------------------------------------------------------------


def _transfer_table(summary: TransferSummary, title: str) -> None:
    rows = [(c, u or "(shared)", n) for (c, u), n in sorted(summary.counts.items())]
    render.out().print(render.counts_table(rows, ["collection", "user", "count"], title=title))
    for note in summary.notes:
        render.note(note)


def _check_export(user: str | None, all_users: bool, **_: object) -> None:
    if all_users == bool(user):
        raise CliError("give --user USER (one user's memories) or --all (everything)")
    if not all_users:
        need_user(user)


@memory_command(app, "export", check=_check_export)
async def export_cmd(
    mem: Memory,
    output: Annotated[Path, typer.Option("--output", "-o", help="The JSON Lines file to write.")],
    user: UserOpt = None,
    all_users: Annotated[
        bool,
        typer.Option("--all", help="Every user, the global rules and the knowledge bases."),
    ] = False,
    no_vectors: Annotated[
        bool, typer.Option("--no-vectors", help="Leave vectors out (the import re-embeds).")
    ] = False,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", "-k", help="Only this memory kind (repeat for several)."),
    ] = None,
) -> Output:
    """Export memories as JSON Lines (one user with --user, everything with --all)."""
    summary = await asyncio.to_thread(
        export_to_file,
        mem.store,
        output,
        users=None if all_users else [need_user(user)],
        include_shared=all_users,
        include_vectors=not no_vectors,
        embedding_model=embedding_model(),
        kinds=kind or None,
        registry=mem.kinds,
    )
    return Shown(
        {"file": str(output), **summary.to_dict()},
        lambda: _transfer_table(summary, f"Exported to {output}"),
    )


def _check_import(file: Path, kinds: KindRegistry, **_: object) -> None:
    read_header(file, kinds)


@memory_command(app, "import", check=_check_import)
async def import_cmd(
    mem: Memory,
    file: Annotated[Path, typer.Argument(help="A file written by `amem memories export`.")],
    reembed: Annotated[
        bool, typer.Option("--reembed", help="Recompute every vector from the text.")
    ] = False,
    shared: Annotated[
        bool,
        typer.Option(
            "--shared",
            help="Also import the rules shared by every user and knowledge bases (operator).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> Output:
    """Import an export file into the configured store: all of it, or nothing.

    The whole file is checked first; into a store with memories it merges (importing twice
    changes nothing) or refuses what would overwrite a different memory.
    """
    header = read_header(file, mem.kinds)
    options: dict[str, Any] = {
        "registry": mem.kinds,
        "embeddings": mem.embeddings,
        "embedding_model": embedding_model(),
        "reembed": reembed,
        "allow_shared": shared,
    }
    if json_out:
        summary = await asyncio.to_thread(import_memories, mem.store, file, **options)
    else:
        with Progress(console=render.err(), transient=True) as progress:
            task = progress.add_task(f"importing into {mem.store.backend}", total=None)
            summary = await asyncio.to_thread(
                import_memories,
                mem.store,
                file,
                progress=lambda n: progress.update(task, completed=n),
                **options,
            )
    return Shown(
        {"file": str(file), "users": header.users, **summary.to_dict()},
        lambda: _transfer_table(summary, f"Imported from {file}"),
    )

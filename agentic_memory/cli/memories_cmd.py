"""``amem memories``: inspect, export, import and forget what the agent remembers.

Every command reads the configured store (``AMEM_STORE``, ``AMEM_HOME``, ``WEAVIATE_URL``)
with the configured embeddings (``AMEM_EMBEDDINGS``) and retention policy
(``AMEM_MESSAGE_RETENTION_DAYS`` and the others of
:mod:`agentic_memory.kinds.retention`). Output is a rich table for people; ``--json`` prints
one JSON document for scripts. Per-user data needs ``--user``.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from langchain_core.embeddings import Embeddings
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import LangGraphError
from rich.progress import Progress

from agentic_memory.api import Memory, RetentionStatus
from agentic_memory.cli import render
from agentic_memory.forget import (
    ForgetReport,
    describe_server_error,
    forget_episode,
    forget_fact,
    forget_subject,
    forget_thread,
    forget_user,
)
from agentic_memory.kinds.builtin import EpisodesKind
from agentic_memory.kinds.contract import current_kinds
from agentic_memory.kinds.episodes import EpisodicMemory
from agentic_memory.kinds.facts import FACTS, Fact, normalise_subject
from agentic_memory.kinds.knowledge import (
    delete_source,
    find_knowledge_base,
    list_knowledge_bases,
    list_sources,
    resolve_kb,
)
from agentic_memory.kinds.messages import LoggedMessage, MessageLog
from agentic_memory.kinds.retention import PurgeReport, RetentionPolicy
from agentic_memory.kinds.rules import RuleBook, RuleVersion, rules_scope
from agentic_memory.kinds.shared_rules import RuleProposal, SharedRules
from agentic_memory.models.embeddings import EmbeddingSettings, embedding_dims, get_embeddings
from agentic_memory.store import (
    GLOBAL_SCOPE,
    MemoryStore,
    StoreError,
    UnknownCollectionError,
    check_user_id,
    open_store,
)
from agentic_memory.transfer import TransferSummary, export_to_file, import_memories, read_header

app = typer.Typer(
    name="memories",
    help="Inspect, export, import and forget the agent's memories.",
    no_args_is_help=True,
)
episodes_app = typer.Typer(help="Episodic memories: one reflection per finished conversation.")
facts_app = typer.Typer(help="Facts about a user, with their history.")
messages_app = typer.Typer(help="The message log of every conversation.")
rules_app = typer.Typer(help="Procedural rule versions of a user or of everyone (--global).")
kb_app = typer.Typer(help="Knowledge bases (ingested documents).")


@app.callback()
def _memories() -> None:
    """Inspect, export, import and forget the agent's memories."""
    render.quiet_library_logs()


for _sub, _name in (
    (episodes_app, "episodes"),
    (facts_app, "facts"),
    (messages_app, "messages"),
    (rules_app, "rules"),
    (kb_app, "kb"),
):
    app.add_typer(_sub, name=_name, no_args_is_help=True)

UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="The user whose memories.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
AlphaOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="0 = keyword (BM25), 1 = vector.")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many rows.")]
GlobalOpt = Annotated[
    bool, typer.Option("--global", help="The rules shared by every user instead of one user's.")
]
OperatorOpt = Annotated[
    str | None,
    typer.Option("--operator", help="Who decides, recorded with the decision (default: login)."),
]


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit status 1."""


@dataclass
class Opened:
    """The store and embeddings a command works on."""

    store: MemoryStore
    embeddings: Embeddings

    @property
    def embedding_model(self) -> str:
        """The configured embedding model's name, recorded in exports."""
        return EmbeddingSettings.from_env().model


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn expected errors into a one-line message and exit status 1."""
    try:
        yield
    except (CliError, StoreError, ValueError, LookupError, OSError) as exc:
        message = str(exc) or type(exc).__name__
        if isinstance(exc, UnknownCollectionError):
            message = f"nothing stored yet ({message})"
        render.error(message)
        raise typer.Exit(1) from None


@contextmanager
def opened() -> Iterator[Opened]:
    """Open the configured store with the configured embeddings; close it afterwards."""
    embeddings = get_embeddings()
    store = open_store(embedding_dims(embeddings))
    try:
        yield Opened(store, embeddings)
    finally:
        store.close()


def need_user(user: str | None) -> str:
    """Return the user, or fail with a clear message when ``--user`` is missing."""
    if user is None or not user.strip():
        raise CliError("this command needs --user USER (whose memories to use)")
    check_user_id(user)
    if user == GLOBAL_SCOPE:
        raise CliError(f"{GLOBAL_SCOPE!r} is reserved; use --global for the shared rules")
    return user


def _has(store: MemoryStore, name: str) -> bool:
    return name in store.collections()


def policy() -> RetentionPolicy:
    """Return the retention policy in force (the environment's), or fail with a clear error."""
    return RetentionPolicy.from_env()


# -- users -------------------------------------------------------------------------------------


async def _user_counts(store: MemoryStore) -> list[dict[str, Any]]:
    """Return a row per user with memories: their count per memory kind (the registry's)."""
    counted = [k for k in current_kinds() if k.info.users_column is not None]
    users: set[str] = set()
    for kind in counted:
        users |= await kind.ausers(store)
    rows = []
    for uid in sorted(users):
        row: dict[str, Any] = {"user": uid}
        for kind in counted:
            row[str(kind.info.users_column)] = await kind.acount(store, uid)
        rows.append(row)
    return rows


@app.command("users")
def users_cmd(json_out: JsonOpt = False) -> None:
    """List the users the store holds memories for, with counts per kind of memory."""
    with cli_errors(), opened() as o:
        items = asyncio.run(_user_counts(o.store))
        if json_out:
            render.emit_json(items)
        else:
            columns = [
                (str(k.info.users_column).replace("_", " "), str(k.info.users_column))
                for k in current_kinds()
                if k.info.users_column is not None
            ]
            render.print_records(
                items,
                [("user", "user"), *columns],
                title="Users",
                empty="no user has memories yet",
            )


KindArg = Annotated[str, typer.Argument(help="The memory kind (amem memories kinds).")]


def _list_kind(kind: str, user: str | None, limit: int, json_out: bool) -> None:
    with cli_errors(), opened() as o:
        chosen = current_kinds().get(kind)
        uid = need_user(user)
        items = asyncio.run(chosen.alist_rows(o.store, o.embeddings, uid, limit))
        if json_out:
            render.emit_json(items)
        else:
            render.print_records(
                items,
                list(chosen.cli_columns),
                title=f"{chosen.info.name.capitalize()} of {uid}",
                empty=f"{uid} has no {chosen.info.name}",
            )


def _show_kind(kind: str, oid: str, user: str | None, json_out: bool) -> None:
    with cli_errors(), opened() as o:
        chosen = current_kinds().get(kind)
        uid = need_user(user)
        what = chosen.info.line_kinds[0]
        data = asyncio.run(chosen.ashow(o.store, o.embeddings, uid, oid))
        if data is None:
            raise CliError(f"user {uid!r} has no {what} {oid!r}")
        if json_out:
            render.emit_json(data)
        else:
            render.print_mapping(data, title=f"{what.capitalize()} {oid}")


@app.command("list")
def list_cmd(
    kind: KindArg, user: UserOpt = None, limit: LimitOpt = 50, json_out: JsonOpt = False
) -> None:
    """List what one memory kind holds for a user, as the kind shows it."""
    _list_kind(kind, user, limit, json_out)


@app.command("show")
def show_cmd(
    kind: KindArg,
    object_id: Annotated[str, typer.Argument(help="The id (from `list KIND --json`).")],
    user: UserOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one memory of a kind, by its id, as the kind shows it."""
    _show_kind(kind, object_id, user, json_out)


@app.command("kinds")
def kinds_cmd(json_out: JsonOpt = False) -> None:
    """List the memory kinds: their names, LangGraph namespaces and export line kinds."""
    with cli_errors():
        items = [
            {
                "kind": k.info.name,
                "namespaces": list(k.info.roots),
                "export_kinds": list(k.info.line_kinds),
                "about": k.info.title,
            }
            for k in current_kinds()
        ]
        if json_out:
            render.emit_json(items)
        else:
            render.print_records(
                items,
                [
                    ("kind", "kind"),
                    ("namespaces", "namespaces"),
                    ("export kinds", "export_kinds"),
                    ("about", "about"),
                ],
                title="Memory kinds",
            )


# -- episodes ----------------------------------------------------------------------------------

_EPISODE_COLUMNS = list(EpisodesKind.cli_columns)


@episodes_app.command("list")
def episodes_list(user: UserOpt = None, limit: LimitOpt = 50, json_out: JsonOpt = False) -> None:
    """List a user's episodes, newest first (``list episodes``)."""
    _list_kind(EpisodesKind.info.name, user, limit, json_out)


@episodes_app.command("search")
def episodes_search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: UserOpt = None,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many episodes.")] = 5,
    alpha: AlphaOpt = 0.5,
    json_out: JsonOpt = False,
) -> None:
    """Recall a user's episodes by hybrid search, ranked as the agent ranks them."""
    with cli_errors(), opened() as o:
        uid = need_user(user)
        found = asyncio.run(
            EpisodicMemory(o.store, o.embeddings).arecall(uid, query, k=k, alpha=alpha)
        )
        items = [r.to_dict() for r in found]
        if json_out:
            render.emit_json(items)
        else:
            render.print_records(
                items,
                [*_EPISODE_COLUMNS[:4], ("summary", "conversation_summary"), ("score", "score")],
                title=f"Episodes of {uid} for {query!r}",
            )


@episodes_app.command("show")
def episodes_show(
    episode_id: Annotated[str, typer.Argument(help="The episode id.")],
    user: UserOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one episode with its whole conversation (``show episodes ID``)."""
    _show_kind(EpisodesKind.info.name, episode_id, user, json_out)


@episodes_app.command("important")
def episodes_important(
    episode_ids: Annotated[list[str], typer.Argument(help="Episode ids (episodes list --json).")],
    user: UserOpt = None,
    unmark: Annotated[bool, typer.Option("--unmark", help="Take the mark off instead.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Mark episodes important: recalled first, never pruned by a purge (--unmark: undo)."""
    with cli_errors(), opened() as o:
        uid = need_user(user)
        marked = asyncio.run(
            EpisodicMemory(o.store, o.embeddings).amark_important(
                uid, episode_ids, important=not unmark
            )
        )
        items = [e.to_dict() for e in marked]
        if json_out:
            render.emit_json(items)
            return
        render.say(
            f"{'Unmarked' if unmark else 'Marked'} {len(items)} episode(s) of {uid} "
            + ("(back to their own importance)." if unmark else "important (never pruned).")
        )
        render.print_records(items, [*_EPISODE_COLUMNS, ("important", "important")])


# -- facts -------------------------------------------------------------------------------------


def _all_facts(store: MemoryStore, user: str) -> list[Fact]:
    if not _has(store, FACTS.name):
        return []
    out = list(store.iterate(FACTS.name, user=user, page_size=500))
    facts = [
        Fact(
            id=o.id,
            subject=str(o.properties.get("subject", "")),
            value=str(o.properties.get("value", "")),
            category=str(o.properties.get("category") or "other"),
            current=bool(o.properties.get("current")),
            valid_from=str(o.properties.get("valid_from") or ""),
            valid_to=o.properties.get("valid_to"),
            source_thread=o.properties.get("source_thread"),
            superseded_by=o.properties.get("superseded_by"),
        )
        for o in out
    ]
    return sorted(facts, key=lambda f: (f.subject, f.valid_from, f.id))


@facts_app.command("list")
def facts_list(
    user: UserOpt = None,
    history: Annotated[
        bool, typer.Option("--history", help="Also show superseded values, oldest first.")
    ] = False,
    subject: Annotated[str | None, typer.Option(help="Only this subject.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List a user's current facts, or every value they ever had with ``--history``."""
    with cli_errors(), opened() as o:
        uid = need_user(user)
        facts = _all_facts(o.store, uid)
        if subject is not None:
            key = normalise_subject(subject)
            facts = [f for f in facts if f.subject == key]
        if not history:
            facts = [f for f in facts if f.current]
        items = [f.to_dict() for f in facts]
        if json_out:
            render.emit_json(items)
            return
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
        render.print_records(
            items, columns, title=f"Facts of {uid}" + (" (history)" if history else "")
        )


# -- messages ----------------------------------------------------------------------------------

_MESSAGE_COLUMNS = [
    ("thread", "thread_id"),
    ("turn", "turn"),
    ("role", "role"),
    ("content", "content"),
    ("created", "created_at"),
    ("important", "marked"),
    ("expires", "expires"),
]


def message_row(message: LoggedMessage) -> dict[str, Any]:
    """Return a logged turn as a table row: who marked it important, and when it expires."""
    row = message.to_dict()
    by = "the model" if message.important_by == "model" else "you"
    row["marked"] = f"yes ({by})" if message.important else ""
    row["expires"] = "never" if message.important else message.expires_at or "-"
    return row


def _policy_note(retention: RetentionPolicy) -> None:
    render.note("Retention: " + retention.describe()[0])


@messages_app.command("list")
def messages_list(
    user: UserOpt = None,
    thread: Annotated[str | None, typer.Option("--thread", "-t", help="Only this thread.")] = None,
    limit: LimitOpt = 100,
    json_out: JsonOpt = False,
) -> None:
    """List a user's logged messages, by thread and turn."""
    with cli_errors(), opened() as o:
        uid = need_user(user)
        retention = policy()
        log = MessageLog(o.store, o.embeddings, retention=retention)
        found = asyncio.run(log.alist(uid, thread_id=thread, limit=limit))
        if json_out:
            render.emit_json([m.to_dict() for m in found])
        else:
            title = f"Messages of {uid}" + (f" in {thread}" if thread else "")
            render.print_records([message_row(m) for m in found], _MESSAGE_COLUMNS, title=title)
            _policy_note(retention)


@messages_app.command("search")
def messages_search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: UserOpt = None,
    thread: Annotated[str | None, typer.Option("--thread", "-t", help="Only this thread.")] = None,
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
    json_out: JsonOpt = False,
) -> None:
    """Search a user's message log (hybrid BM25 + vector)."""
    with cli_errors(), opened() as o:
        uid = need_user(user)
        found = asyncio.run(
            MessageLog(o.store, o.embeddings, retention=policy()).arecall(
                uid, query, k=k, alpha=alpha, thread_id=thread
            )
        )
        if json_out:
            render.emit_json([m.to_dict() for m in found])
        else:
            rows = [message_row(m) | {"score": m.score} for m in found]
            render.print_records(
                rows,
                [*_MESSAGE_COLUMNS[:4], ("important", "marked"), ("score", "score")],
                title=f"Messages for {query!r}",
            )


@messages_app.command("important")
def messages_important(
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
    json_out: JsonOpt = False,
) -> None:
    """Mark logged messages important: kept for good, recalled first (--unmark: undo)."""
    with cli_errors(), opened() as o:
        uid = need_user(user)
        if turn and thread is None:
            raise CliError("--turn needs --thread THREAD (turn numbers count per thread)")
        if not message_ids and thread is None:
            raise CliError("give message ids, or --thread THREAD [--turn N ...]")
        log = MessageLog(o.store, o.embeddings, retention=policy())
        ids = list(message_ids or [])
        if thread is not None:
            if turn:
                for number in turn:
                    found = asyncio.run(log.afind(uid, thread, number))
                    if found is None:
                        raise CliError(f"{uid!r} has no turn {number} in thread {thread!r}")
                    ids.append(found.id)
            else:
                ids += [m.id for m in asyncio.run(_thread_turns(log, uid, thread))]
                if not ids:
                    raise CliError(f"{uid!r} has no logged turn in thread {thread!r}")
        marked = asyncio.run(log.amark_important(uid, ids, important=not unmark))
        if json_out:
            render.emit_json([m.to_dict() for m in marked])
            return
        render.say(
            f"{'Unmarked' if unmark else 'Marked'} {len(marked)} message(s) of {uid}"
            + (
                ": the retention policy applies to them again."
                if unmark
                else " important: kept for good, recalled first."
            )
        )
        render.print_records([message_row(m) for m in marked], _MESSAGE_COLUMNS)


async def _thread_turns(log: MessageLog, user: str, thread: str) -> list[LoggedMessage]:
    out: list[LoggedMessage] = []
    while batch := await log.alist(user, thread_id=thread, limit=1000, offset=len(out)):
        out.extend(batch)
    return out


# -- rules -------------------------------------------------------------------------------------


def rule_scope(user: str | None, global_scope: bool) -> str:
    """Return the rule scope chosen by ``--user`` or ``--global`` (exactly one)."""
    if global_scope and user:
        raise CliError("give either --user USER or --global, not both")
    if not global_scope and not user:
        raise CliError("rules belong to a user or to everyone: give --user USER or --global")
    return rules_scope("" if global_scope else need_user(user), shared=global_scope)


def _scope_label(scope: str) -> str:
    return "everyone (global)" if scope == GLOBAL_SCOPE else scope


def _version_row(v: RuleVersion) -> dict[str, Any]:
    return {
        "version": v.version,
        "created_at": v.created_at,
        "parent_version": v.parent_version,
        "rules": len(v.rules),
        "note": v.note,
        "source_users": list(v.source_users),
        "source_episodes": len(v.source_episodes),
        "stored": v.stored,
    }


@rules_app.command("list")
def rules_list(
    user: UserOpt = None, global_scope: GlobalOpt = False, json_out: JsonOpt = False
) -> None:
    """List every version of a rule set (version 1 is the starting set)."""
    with cli_errors(), opened() as o:
        scope = rule_scope(user, global_scope)
        versions = asyncio.run(RuleBook(o.store, o.embeddings).aversions(scope))
        if json_out:
            render.emit_json([v.to_dict() | {"stored": v.stored} for v in versions])
            return
        render.print_records(
            [_version_row(v) for v in versions],
            [
                ("version", "version"),
                ("created", "created_at"),
                ("from", "parent_version"),
                ("rules", "rules"),
                ("learned from users", "source_users"),
                ("episodes", "source_episodes"),
                ("note", "note"),
            ],
            title=f"Rule versions of {_scope_label(scope)}",
        )


@rules_app.command("show")
def rules_show(
    version: Annotated[int | None, typer.Argument(help="Version (default: the latest).")] = None,
    user: UserOpt = None,
    global_scope: GlobalOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Show the rules of one version."""
    with cli_errors(), opened() as o:
        scope = rule_scope(user, global_scope)
        book = RuleBook(o.store, o.embeddings)
        v = asyncio.run(book.alatest(scope) if version is None else book.aget(scope, version))
        if json_out:
            render.emit_json(v.to_dict())
            return
        render.out().print(
            render.table(
                ["#", "instruction", "rationale"],
                [(i, r.instruction, r.rationale) for i, r in enumerate(v.rules, 1)],
                title=f"Rules of {_scope_label(scope)}, version {v.version}",
                caption=v.note or None,
            )
        )


@rules_app.command("diff")
def rules_diff(
    a: Annotated[int, typer.Argument(help="The older version.")],
    b: Annotated[int, typer.Argument(help="The newer version.")],
    user: UserOpt = None,
    global_scope: GlobalOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Compare two versions: rules added, removed and reworded."""
    with cli_errors(), opened() as o:
        scope = rule_scope(user, global_scope)
        d = asyncio.run(RuleBook(o.store, o.embeddings).adiff(scope, a, b))
        if json_out:
            render.emit_json(
                {
                    "scope": scope,
                    "a": a,
                    "b": b,
                    "added": [r.render() for r in d.added],
                    "removed": [r.render() for r in d.removed],
                    "changed": [{"from": x.render(), "to": y.render()} for x, y in d.changed],
                }
            )
            return
        render.out().print(render.diff_text(rules_diff_lines(str(d))))


def rules_diff_lines(text: str) -> list[str]:
    """Map a ``RuleDiff`` report onto diff-style lines (``~`` rewordings shown as -/+)."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("~ "):
            lines.append("-" + line[1:])
        elif line.startswith("  -> "):
            lines.append("+ " + line[5:])
        else:
            lines.append(line)
    return lines


@rules_app.command("rollback")
def rules_rollback(
    version: Annotated[int, typer.Argument(help="The version to restore.")],
    user: UserOpt = None,
    global_scope: GlobalOpt = False,
    operator: OperatorOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Restore an old version: it is written again as the newest version."""
    with cli_errors(), opened() as o:
        scope = rule_scope(user, global_scope)
        if scope == GLOBAL_SCOPE:
            gate = SharedRules(o.store, o.embeddings)
            created = asyncio.run(gate.arollback(version, operator=operator_name(operator)))
        else:
            created = asyncio.run(RuleBook(o.store, o.embeddings).arollback(scope, version))
        if json_out:
            render.emit_json(created.to_dict())
        else:
            render.say(
                f"Rules of {_scope_label(scope)}: version {created.version} now equals "
                f"version {version}."
            )


def _proposal_changes(proposal: RuleProposal, base: RuleVersion | None) -> list[str]:
    """Return diff-style lines: the proposal's rules against the version it was written from."""
    before = list(base.rules) if base is not None else []
    lines = [f"+ {r.render()}" for r in proposal.rules if r not in before]
    lines += [f"- {r.render()}" for r in before if r not in proposal.rules]
    return lines or ["  (same rules as its base version)"]


@rules_app.command("review")
def rules_review(
    all_proposals: Annotated[
        bool, typer.Option("--all", help="Also the approved and rejected proposals.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """List the proposed changes of the shared rules that wait for an operator.

    Conversations never change the rules shared by every user: with AMEM_GLOBAL_RULES=learn
    their rewrite becomes a proposal, screened, which takes effect only once approved.
    """
    with cli_errors(), opened() as o:
        gate = SharedRules(o.store, o.embeddings)
        proposals = asyncio.run(gate.alist() if all_proposals else gate.apending())
        if json_out:
            render.emit_json([p.to_dict() for p in proposals])
            return
        if not proposals:
            render.say("No proposal waits for review." if not all_proposals else "No proposal.")
            return
        book = RuleBook(o.store, o.embeddings)
        versions = {v.version: v for v in asyncio.run(book.aversions(GLOBAL_SCOPE))}
        latest = max(versions)
        for p in proposals:
            who = p.proposer if p.origin == "conversation" else p.origin
            stale = " (stale: the rules changed since)" if p.base_version != latest else ""
            render.say(
                f"Proposal {p.id} [{p.status}] by {who}, {p.created_at[:16]}, from version "
                f"{p.base_version}{stale}"
            )
            if p.note:
                render.say(f"  {p.note}")
            render.out().print(render.diff_text(_proposal_changes(p, versions.get(p.base_version))))
            for rejected in p.screened_out:
                render.say(f"  screened out: {rejected.instruction[:80]!r} ({rejected.reason})")
            if p.status != "pending":
                render.say(
                    f"  {p.status} by {p.decided_by} {p.decided_at[:16]} {p.reason}".rstrip()
                )
        render.note(
            "Approve with `amem memories rules approve ID`, reject with "
            "`amem memories rules reject ID --reason ...`."
        )


ProposalArg = Annotated[str, typer.Argument(help="The proposal's id (from `review`).")]


@rules_app.command("approve")
def rules_approve(
    proposal_id: ProposalArg,
    note: Annotated[str, typer.Option("--note", help="Why it was approved.")] = "",
    operator: OperatorOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Approve a proposal: it becomes the next version of the shared rules."""
    _decide(proposal_id, approve=True, why=note, operator=operator, json_out=json_out)


@rules_app.command("reject")
def rules_reject(
    proposal_id: ProposalArg,
    reason: Annotated[str, typer.Option("--reason", help="Why it was rejected.")] = "",
    operator: OperatorOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Reject a proposal: the shared rules stay as they are; it stays listed with the reason."""
    _decide(proposal_id, approve=False, why=reason, operator=operator, json_out=json_out)


def _decide(
    proposal_id: str, *, approve: bool, why: str, operator: str | None, json_out: bool
) -> None:
    """Record an operator's decision on a proposal of the shared rules; say what it did."""
    with cli_errors(), opened() as o:
        gate = SharedRules(o.store, o.embeddings)
        who = operator_name(operator)
        if approve:
            created = asyncio.run(gate.aapprove(proposal_id, operator=who, note=why))
            data, said = (
                created.to_dict(),
                (f"Shared rules: version {created.version} is proposal {proposal_id}."),
            )
        else:
            rejected = asyncio.run(gate.areject(proposal_id, operator=who, reason=why))
            data, said = rejected.to_dict(), f"Proposal {proposal_id} rejected."
        if json_out:
            render.emit_json(data)
        else:
            render.say(said)


def operator_name(given: str | None) -> str:
    """Return the operator recorded with a decision: ``--operator``, else the login name."""
    if given is not None:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


# -- knowledge bases ---------------------------------------------------------------------------


KbUserOpt = Annotated[
    str | None,
    typer.Option("--user", "-u", help="This user's own knowledge bases (their uploads)."),
]


def _kb_owner(user: str | None) -> str | None:
    return None if user is None else need_user(user)


@kb_app.command("list")
def kb_list(user: KbUserOpt = None, json_out: JsonOpt = False) -> None:
    """List the shared knowledge bases (or a user's own) with their sources and chunks."""
    with cli_errors(), opened() as o:
        owner = _kb_owner(user)
        items = []
        for name in list_knowledge_bases(o.store, owner):
            sources = list_sources(o.store, name, owner)
            items.append(
                {
                    "name": name,
                    "sources": len(sources),
                    "chunks": sum(s.chunks for s in sources),
                    "pages": sum(s.pages for s in sources),
                }
            )
        if json_out:
            render.emit_json(items)
        else:
            render.print_records(
                items,
                [
                    ("name", "name"),
                    ("sources", "sources"),
                    ("chunks", "chunks"),
                    ("pages", "pages"),
                ],
                title="Knowledge bases" if owner is None else f"Knowledge bases of {owner}",
                empty="no knowledge base yet: add documents with `amem ingest`",
            )


@kb_app.command("sources")
def kb_sources(
    name: Annotated[str, typer.Argument(help="The knowledge base.")],
    user: KbUserOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List the documents of a knowledge base."""
    with cli_errors(), opened() as o:
        owner = _kb_owner(user)
        found = find_knowledge_base(o.store, name, owner)
        if found is None:
            raise CliError(f"no knowledge base {name!r}")
        name = found
        items = [
            {
                "source": s.source,
                "title": s.title,
                "pages": s.pages,
                "chunks": s.chunks,
                "ingested_at": s.ingested_at,
                "sha256": s.sha256,
            }
            for s in list_sources(o.store, name, owner)
        ]
        if json_out:
            render.emit_json(items)
        else:
            render.print_records(
                items,
                [
                    ("source", "source"),
                    ("title", "title"),
                    ("pages", "pages"),
                    ("chunks", "chunks"),
                    ("ingested", "ingested_at"),
                ],
                title=f"Sources of {name}",
            )


@kb_app.command("delete-source")
def kb_delete_source(
    name: Annotated[str, typer.Argument(help="The knowledge base.")],
    source: Annotated[str, typer.Argument(help="The source path, as listed by `kb sources`.")],
    user: KbUserOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Remove one document and its chunks from a knowledge base."""
    with cli_errors(), opened() as o:
        owner = _kb_owner(user)
        name = resolve_kb(o.store, name, owner)
        removed = delete_source(o.store, name, source, owner)
        if json_out:
            render.emit_json({"kb": name, "source": source, "chunks_deleted": removed})
        else:
            render.say(f"Removed {source} from {name} ({removed} chunks).")


# -- retention ---------------------------------------------------------------------------------


_NEXT_COLUMNS = [
    ("thread", "thread_id"),
    ("turn", "turn"),
    ("role", "role"),
    ("content", "content"),
    ("logged", "created_at"),
    ("expires", "expires"),
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


@app.command("retention")
def retention_cmd(
    user: UserOpt = None,
    upcoming: Annotated[
        int, typer.Option("--next", "-n", min=0, help="How many of the first turns to go to show.")
    ] = 10,
    json_out: JsonOpt = False,
) -> None:
    """Show what expires when: the policy in force, and per user what the next purge removes."""
    with cli_errors(), opened() as o:
        retention = policy()
        mem = Memory(o.store, o.embeddings, retention=retention)
        if user is not None:
            status = mem.retention_status(need_user(user), upcoming=upcoming)
            if json_out:
                render.emit_json(status.to_dict())
                return
            for line in retention.describe():
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
            return
        statuses = [mem.retention_status(u, upcoming=1) for u in mem.users_with_history()]
        if json_out:
            # The CLI applies one policy to every user: said once, at the top.
            users = [{k: v for k, v in s.to_dict().items() if k != "policy"} for s in statuses]
            render.emit_json({"policy": retention.to_dict(), "users": users})
            return
        for line in retention.describe():
            render.say(line)
        render.print_records(
            [_overview_row(s) for s in statuses],
            [
                ("user", "user"),
                ("turns", "turns"),
                ("important", "important"),
                ("expired", "expired"),
                ("over cap", "over_cap"),
                ("next expiry", "next_expiry"),
                ("episodes", "episodes"),
                ("episodes over cap", "episodes_over_cap"),
                ("facts", "facts"),
            ],
            title="Retention",
            empty="no user has logged turns or episodes yet",
        )


def print_purge_reports(reports: list[PurgeReport], *, json_out: bool) -> None:
    """Print what a purge deleted (or would delete), per user."""
    if json_out:
        render.emit_json([r.to_dict() for r in reports])
        return
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


@app.command("purge")
def purge_cmd(
    user: UserOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Apply the retention policy now, to one user or to everyone.

    Deletes expired and over-cap logged turns and the episodes over the cap; important
    memories, facts and rules are never deleted.
    """
    with cli_errors():
        uid = need_user(user) if user is not None else None
        retention = policy()
        if not dry_run and not yes:
            whose = f"{uid!r}" if uid else "every user"
            if not sys.stdin.isatty():
                raise CliError(
                    f"purging {whose} needs --yes (or --dry-run to see what would be deleted)"
                )
            typer.confirm(
                f"Purge {whose} by the retention policy? This cannot be undone", abort=True
            )
        with opened() as o:
            reports = Memory(o.store, o.embeddings, retention=retention).purge(uid, dry_run=dry_run)
        print_purge_reports(reports, json_out=json_out)


# -- export / import ---------------------------------------------------------------------------


def _transfer_table(summary: TransferSummary, title: str) -> None:
    rows = [(c, u or "(shared)", n) for (c, u), n in sorted(summary.counts.items())]
    render.out().print(render.counts_table(rows, ["collection", "user", "count"], title=title))
    for note in summary.notes:
        render.note(note)


@app.command("export")
def export_cmd(
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
    json_out: JsonOpt = False,
) -> None:
    """Export memories as JSON Lines (one user with --user, everything with --all)."""
    with cli_errors():
        if all_users == bool(user):
            raise CliError("give --user USER (one user's memories) or --all (everything)")
        users = None if all_users else [need_user(user)]
        with opened() as o:
            summary = export_to_file(
                o.store,
                output,
                users=users,
                include_shared=all_users,
                include_vectors=not no_vectors,
                embedding_model=o.embedding_model,
                kinds=kind or None,
            )
        if json_out:
            render.emit_json({"file": str(output), **summary.to_dict()})
        else:
            _transfer_table(summary, f"Exported to {output}")


@app.command("import")
def import_cmd(
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
) -> None:
    """Import an export file into the configured store: all of it, or nothing.

    The whole file is checked first; into a store with memories it merges (importing twice
    changes nothing) or refuses what would overwrite a different memory.
    """
    with cli_errors():
        header = read_header(file)
        with opened() as o:
            if json_out:
                summary = import_memories(
                    o.store,
                    file,
                    embeddings=o.embeddings,
                    embedding_model=o.embedding_model,
                    reembed=reembed,
                    allow_shared=shared,
                )
            else:
                with Progress(console=render.err(), transient=True) as progress:
                    task = progress.add_task(f"importing into {o.store.backend}", total=None)
                    summary = import_memories(
                        o.store,
                        file,
                        embeddings=o.embeddings,
                        embedding_model=o.embedding_model,
                        reembed=reembed,
                        allow_shared=shared,
                        progress=lambda n: progress.update(task, completed=n),
                    )
        if json_out:
            render.emit_json({"file": str(file), "users": header.users, **summary.to_dict()})
        else:
            _transfer_table(summary, f"Imported from {file}")


# -- forget ------------------------------------------------------------------------------------


def print_forget_report(report: ForgetReport, *, json_out: bool) -> None:
    """Print what a forget call deleted, per store and collection."""
    if json_out:
        render.emit_json(report.to_dict())
        return
    rows = [(s, c, d, r) for s, c, d, r in report.rows()]
    render.out().print(
        render.counts_table(
            rows,
            ["store", "collection", "deleted", "scrubbed"],
            title=f"Forgotten for {report.user}",
        )
    )
    if report.threads:
        render.note("threads deleted from the checkpointer: " + ", ".join(sorted(report.threads)))
    if report.server_threads:
        render.note(
            "threads deleted on the LangGraph server: " + ", ".join(sorted(report.server_threads))
        )
    if report.kept_threads:
        render.note(
            "kept the checkpoints of threads another user owns: "
            + ", ".join(sorted(report.kept_threads))
        )
    for note in report.notes:
        render.note(note)


async def _reachable(server: LangGraphClient, url: str) -> None:
    """Fail before anything is deleted when the server cannot be used."""
    try:
        await server.threads.search(limit=1)
    except (LangGraphError, httpx.HTTPError) as exc:
        raise CliError(
            f"cannot use the LangGraph server at {url}: {str(exc) or type(exc).__name__} "
            "(nothing was deleted)"
        ) from None


async def _forget(
    store: MemoryStore,
    uid: str,
    *,
    embeddings: Embeddings | None = None,
    episode: str | None,
    fact: str | None,
    subject: str | None,
    thread: str | None,
    everything: bool,
    server_url: str | None = None,
) -> ForgetReport:
    if episode:
        return await forget_episode(store, uid, episode, embeddings=embeddings)
    if fact:
        return await forget_fact(store, uid, fact)
    if subject:
        return await forget_subject(store, uid, subject)
    # Loaded here: the graph package is heavy and only forgetting threads needs it.
    from agentic_memory.graph.persistence import CheckpointerError, open_checkpointer  # noqa: PLC0415

    server: LangGraphClient | None = None
    try:
        if server_url:
            server = get_client(url=server_url)
            await _reachable(server, server_url)
        async with open_checkpointer() as checkpointer:
            if thread:
                return await forget_thread(
                    store,
                    uid,
                    thread,
                    checkpointer=checkpointer,
                    server=server,
                    embeddings=embeddings,
                )
            assert everything
            return await forget_user(
                store, uid, checkpointer=checkpointer, server=server, embeddings=embeddings
            )
    except CheckpointerError as exc:
        raise CliError(f"{exc} (nothing was deleted)") from None
    except (LangGraphError, httpx.HTTPError) as exc:
        # Only forget_thread's look-up of a thread the store does not know gets here, before
        # anything is deleted; a failure while deleting is in the report (server_error).
        raise CliError(
            f"the LangGraph server at {server_url} failed: {describe_server_error(exc)} "
            "(nothing was deleted)"
        ) from None
    finally:
        if server is not None:
            await server.aclose()


@app.command("forget")
def forget_cmd(
    user: UserOpt = None,
    episode: Annotated[str | None, typer.Option(help="Forget one episode (by id).")] = None,
    fact: Annotated[str | None, typer.Option(help="Forget one fact value (by id).")] = None,
    subject: Annotated[
        str | None, typer.Option(help="Forget every value of a fact subject.")
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option(help="Forget a conversation: messages, episodes, facts, checkpoints."),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Forget everything derived from the user.")
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            envvar="AMEM_SERVER_URL",
            help="Also delete the threads on this LangGraph server (langgraph dev, Platform); "
            "with --thread or --all.",
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Forget one memory, one subject, one thread or a whole user; print what was deleted."""
    with cli_errors():
        uid = need_user(user)
        chosen = [x for x in (episode, fact, subject, thread) if x] + (
            ["all"] if everything else []
        )
        if len(chosen) != 1:
            raise CliError("give exactly one of --episode, --fact, --subject, --thread or --all")
        if server is not None and not (thread or everything):
            raise CliError("--server goes with --thread or --all: only threads live on a server")
        if server is not None and not server.startswith(("http://", "https://")):
            raise CliError(f"--server must be an http(s) URL, got {server!r}")
        if everything and not yes:
            if not sys.stdin.isatty():
                raise CliError(f"forgetting everything about {uid!r} needs --yes")
            typer.confirm(f"Forget everything about {uid!r}? This cannot be undone", abort=True)
        with opened() as o:
            report = asyncio.run(
                _forget(
                    o.store,
                    uid,
                    embeddings=o.embeddings,
                    episode=episode,
                    fact=fact,
                    subject=subject,
                    thread=thread,
                    everything=everything,
                    server_url=server,
                )
            )
        print_forget_report(report, json_out=json_out)
        if report.server_error is not None:
            raise CliError(_server_unfinished(report, server or "", thread=thread))


def _server_unfinished(report: ForgetReport, url: str, *, thread: str | None) -> str:
    """Say what the server left undone; the local part is always done by then."""
    n = len(report.server_failed)
    shown = ", ".join(sorted(report.server_failed)[:5]) + (", …" if n > 5 else "")
    left = (
        f"{n} thread{'s' if n != 1 else ''} of {report.user!r} {'are' if n != 1 else 'is'} "
        f"still on the server ({shown})"
        if n
        else f"threads of {report.user!r} may still be on the server"
    )
    done = "The local memories are forgotten."
    if not report.server_retry:
        return (
            f"the LangGraph server at {url} refused: {report.server_error}. {left}. {done} "
            "Deleting those threads needs a token the server allows to, or its operator."
        )
    again = f"--thread {thread}" if thread else "--all --yes"
    return (
        f"the LangGraph server at {url} failed: {report.server_error}. {left}. {done} "
        f"Once the server works, `amem memories forget --user {report.user} {again} "
        f"--server {url}` deletes them (it finds them on the server by their owner)."
    )


__all__ = [
    "app",
    "cli_errors",
    "message_row",
    "need_user",
    "opened",
    "policy",
    "print_forget_report",
    "print_purge_reports",
]

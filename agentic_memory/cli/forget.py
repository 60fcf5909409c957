"""``amem memories forget``: forget one memory, a subject, a thread or a whole user.

What is deleted is printed per store and collection; threads go from the checkpointer and,
with ``--server``, from a LangGraph server too (nothing is deleted when it cannot be used).
"""

from __future__ import annotations

import sys
from typing import Annotated

import httpx
import typer
from langchain_core.embeddings import Embeddings
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import LangGraphError

from agentic_memory.api import Memory
from agentic_memory.cli import render
from agentic_memory.cli.scaffold import (
    CliError,
    Output,
    Shown,
    UserOpt,
    YesOpt,
    memory_command,
    need_user,
)
from agentic_memory.forget import (
    ForgetReport,
    describe_server_error,
    forget_episode,
    forget_fact,
    forget_subject,
    forget_thread,
    forget_user,
)
from agentic_memory.graph.persistence import CheckpointerError, open_checkpointer
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry
from agentic_memory.store import MemoryStore

app = typer.Typer()
"""Its one command, ``forget``, joins ``amem memories`` (``cli/main.py``)."""


def print_forget_report(report: ForgetReport) -> None:
    """Print what a forget call deleted, per store and collection."""
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
    kinds: KindRegistry = BUILTIN_KINDS,
) -> ForgetReport:
    if episode:
        return await forget_episode(store, uid, episode, embeddings=embeddings)
    if fact:
        return await forget_fact(store, uid, fact)
    if subject:
        return await forget_subject(store, uid, subject)
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
                    kinds=kinds,
                )
            assert everything
            return await forget_user(
                store,
                uid,
                checkpointer=checkpointer,
                server=server,
                embeddings=embeddings,
                kinds=kinds,
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


def _check(
    user: str | None,
    episode: str | None,
    fact: str | None,
    subject: str | None,
    thread: str | None,
    everything: bool,
    server: str | None,
    yes: bool,
) -> None:
    uid = need_user(user)
    chosen = [x for x in (episode, fact, subject, thread) if x] + (["all"] if everything else [])
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


@memory_command(app, "forget", check=_check)
async def forget_cmd(
    mem: Memory,
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
    yes: YesOpt = False,
) -> Output:
    """Forget one memory, one subject, one thread or a whole user; print what was deleted."""
    del yes  # asked for by _check
    report = await _forget(
        mem.store,
        need_user(user),
        embeddings=mem.embeddings,
        episode=episode,
        fact=fact,
        subject=subject,
        thread=thread,
        everything=everything,
        server_url=server,
        kinds=mem.kinds,
    )
    return Shown(
        report.to_dict(),
        lambda: print_forget_report(report),
        failure=None
        if report.server_error is None
        else _server_unfinished(report, server or "", thread=thread),
    )


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

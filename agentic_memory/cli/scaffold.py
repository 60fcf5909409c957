"""The one shape of an ``amem memories`` command: open the memory, run, close, print.

A command is ``async def body(mem: Memory, **options) -> Output`` declared with
:func:`memory_command`: the scaffold opens the configured memory (``Memory.open``: the store
``AMEM_STORE``, ``AMEM_HOME``, ``WEAVIATE_URL`` with the embeddings ``AMEM_EMBEDDINGS``), runs
the body with one crossing of the sync edge, closes the memory, and prints what the body
returned: a rich table for people, or with ``--json`` (which the scaffold adds) one JSON
document for scripts. Expected errors become a one-line message and exit status 1.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from agentic_memory.api import Memory
from agentic_memory.cli import render
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.models.embeddings import EmbeddingSettings
from agentic_memory.store import GLOBAL_SCOPE, StoreError, UnknownCollectionError, check_user_id
from agentic_memory.sync_edge import run_sync

__all__ = [
    "AlphaOpt",
    "CliError",
    "GlobalOpt",
    "JsonOpt",
    "LimitOpt",
    "OperatorOpt",
    "Output",
    "Record",
    "Said",
    "Shown",
    "Table",
    "UserOpt",
    "YesOpt",
    "cli_errors",
    "cli_kinds",
    "embedding_model",
    "memory_command",
    "need_user",
    "print_output",
]

UserOpt = Annotated[str | None, typer.Option("--user", "-u", help="The user whose memories.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
AlphaOpt = Annotated[float, typer.Option(min=0.0, max=1.0, help="0 = keyword (BM25), 1 = vector.")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many rows.")]
GlobalOpt = Annotated[
    bool, typer.Option("--global", help="The rules shared by every user instead of one user's.")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
OperatorOpt = Annotated[
    str | None,
    typer.Option("--operator", help="Who decides, recorded with the decision (default: login)."),
]


class CliError(Exception):
    """A user-facing error: printed without a traceback, exit status 1."""


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


def need_user(user: str | None) -> str:
    """Return the user, or fail with a clear message when ``--user`` is missing."""
    if user is None or not user.strip():
        raise CliError("this command needs --user USER (whose memories to use)")
    check_user_id(user)
    if user == GLOBAL_SCOPE:
        raise CliError(f"{GLOBAL_SCOPE!r} is reserved; use --global for the shared rules")
    return user


def cli_kinds(ctx: typer.Context) -> KindRegistry:
    """Return the memory kinds the running ``amem`` serves: the registry ``make_app`` was given.

    ``make_app`` puts it in the root command's context (``obj``); a group used on its own (a
    test's ``memories.app``) serves the built-in kinds.
    """
    given = ctx.find_root().obj
    return given if isinstance(given, KindRegistry) else BUILTIN_KINDS


def embedding_model() -> str:
    """Return the configured embedding model's name, recorded in exports."""
    return EmbeddingSettings.from_env().model


# -- what a command prints ---------------------------------------------------------------------


class Output:
    """What a command prints: ``data`` with ``--json`` (one document), else its human form."""

    data: object
    failure: str | None = None
    """Said as an error (exit status 1) once the output is printed."""

    def show(self) -> None:
        """Print the human form."""
        raise NotImplementedError


@dataclass(frozen=True)
class Table(Output):
    """Records as a table; ``data`` is the JSON document, ``rows`` (default: it) the table's."""

    data: Sequence[Mapping[str, Any]]
    columns: Sequence[tuple[str, str]]
    title: str | None = None
    empty: str = "nothing found"
    rows: Sequence[Mapping[str, Any]] | None = None
    said: Sequence[str] = ()
    """Lines said before the table."""
    notes: Sequence[str] = ()
    """Side notes after it (on stderr)."""

    def show(self) -> None:
        """Say the lines, print the table, then the notes."""
        for line in self.said:
            render.say(line)
        render.print_records(
            self.data if self.rows is None else self.rows,
            self.columns,
            title=self.title,
            empty=self.empty,
        )
        for line in self.notes:
            render.note(line)


@dataclass(frozen=True)
class Record(Output):
    """One record, shown as a two-column panel."""

    data: Mapping[str, Any]
    title: str

    def show(self) -> None:
        """Print the panel."""
        render.print_mapping(self.data, title=self.title)


@dataclass(frozen=True)
class Said(Output):
    """A sentence for people; ``data`` for scripts."""

    data: object
    text: str

    def show(self) -> None:
        """Say the sentence."""
        render.say(self.text)


@dataclass(frozen=True)
class Shown(Output):
    """Any other human form: ``printer`` prints it for people."""

    data: object
    printer: Callable[[], None]
    failure: str | None = field(default=None)

    def show(self) -> None:
        """Run the printer."""
        self.printer()


def print_output(output: Output, json_out: bool) -> None:
    """Print ``output`` as JSON or for people; then fail with its ``failure``, if any."""
    if json_out:
        render.emit_json(output.data)
    else:
        output.show()
    if output.failure is not None:
        raise CliError(output.failure)


# -- the command scaffold ----------------------------------------------------------------------

Body = Callable[..., Coroutine[Any, Any, Output]]


def memory_command(
    group: typer.Typer,
    name: str,
    *,
    check: Callable[..., None] | None = None,
    retained: bool = False,
) -> Callable[[Body], Body]:
    """Register ``async def body(mem: Memory, **options) -> Output`` as command ``name``.

    Typer sees the body's options (without ``mem``) and ``--json``, added last; a body that
    names ``json_out`` gets it too. The command runs, inside :func:`cli_errors`:
    ``check(**options)`` (what must hold before the store is opened: arguments, a
    confirmation; a check that names ``kinds`` gets the registry served too), then the body on the opened memory (one sync crossing), then closes it and
    prints what the body returned.

    Args:
        group: The Typer app the command belongs to.
        name: The command's name.
        check: Sync checks run before anything is opened, with the body's options.
        retained: The body uses the retention policy: it is read from the environment
            (``RetentionPolicy.from_env``); other commands never read it, so a bad setting
            fails only the commands it concerns.
    """

    def declare(body: Body) -> Body:
        signature = inspect.signature(body, eval_str=True)
        _, *options = signature.parameters.values()
        wants_json = "json_out" in signature.parameters
        if not wants_json:
            options.append(
                inspect.Parameter(
                    "json_out", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=JsonOpt
                )
            )

        check_kinds = check is not None and "kinds" in inspect.signature(check).parameters

        @functools.wraps(body)
        def command(ctx: typer.Context, **given: Any) -> None:
            json_out = bool(given["json_out"] if wants_json else given.pop("json_out"))
            kinds = cli_kinds(ctx)
            with cli_errors():
                if check is not None:
                    check(**given, **({"kinds": kinds} if check_kinds else {}))
                retention = RetentionPolicy.from_env() if retained else RetentionPolicy()
                with Memory.open(retention=retention, kinds=kinds) as mem:
                    output = run_sync(
                        body(mem, **given), instead=f"await {body.__name__}(mem, ...)"
                    )
                print_output(output, json_out)

        context = inspect.Parameter(
            "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
        )
        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[context, *options], return_annotation=None
        )
        command.__annotations__ = {p.name: p.annotation for p in (context, *options)}
        del command.__wrapped__  # Typer reads __signature__
        group.command(name)(command)
        return body

    return declare

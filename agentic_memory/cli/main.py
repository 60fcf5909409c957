"""The ``amem`` command line.

Each command or command group lives in its own module and is registered here, so that
modules stay independent: ``ingest`` comes from ``agentic_memory.cli.knowledge``; a group is
added with ``app.add_typer(module.app, name="group")``. ``amem memories`` is
:mod:`agentic_memory.cli.memories` with ``forget`` and a group per kind of memory.
:func:`make_app` builds the app for a registry of memory kinds; ``app`` serves the built-in ones.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import typer

from agentic_memory.cli import (
    chat_cmd,
    episodes,
    facts,
    forget,
    knowledge,
    memories,
    messages,
    rules,
)
from agentic_memory.kinds.registry import BUILTIN_KINDS, KindRegistry, check_registry

DISTRIBUTION = "langgraph-agentic-memory"
"""The name the package is installed under (pip, pyproject.toml)."""


def installed_version() -> str:
    """Return the installed version of the package ("unknown" when it is not installed)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"amem {installed_version()} ({DISTRIBUTION})")
        raise typer.Exit()


def make_app(kinds: KindRegistry = BUILTIN_KINDS) -> typer.Typer:
    """Build the ``amem`` app serving the memory kinds of ``kinds``.

    Its commands (``amem memories users``, ``list KIND``, ``export``, ``import``, ``forget``,
    …) read them from the root command's click context (``cli_kinds``).
    """
    check_registry(kinds)
    root = typer.Typer(
        name="amem",
        help="Agentic Memory: a LangGraph agent with episodic, semantic and procedural memory.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @root.callback()
    def main(
        ctx: typer.Context,
        show_version: bool = typer.Option(
            False,
            "--version",
            "-V",
            help="Print the installed version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ) -> None:
        """Agentic Memory: a LangGraph agent with episodic, semantic and procedural memory."""
        del show_version
        ctx.obj = kinds

    root.command("ingest")(knowledge.ingest)
    root.command("chat")(chat_cmd.chat)
    root.add_typer(memories.app, name="memories")
    return root


for _group, _name in (
    (forget, None),  # `amem memories forget`, a command of the group itself
    (episodes, "episodes"),
    (facts, "facts"),
    (messages, "messages"),
    (rules, "rules"),
    (knowledge, "kb"),
):
    memories.app.add_typer(_group.app, name=_name, no_args_is_help=_name is not None)

app = make_app()
"""The ``amem`` entry point: the built-in memory kinds."""

"""The ``amem`` command line.

Each command or command group lives in its own module and is registered here, so that
modules stay independent: ``ingest`` comes from ``agentic_memory.cli.ingest_cmd``; a group is added with
``app.add_typer(module.app, name="group")``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import typer

from agentic_memory.cli import chat_cmd, ingest_cmd, memories_cmd

DISTRIBUTION = "langgraph-agentic-memory"
"""The name the package is installed under (pip, pyproject.toml)."""

app = typer.Typer(
    name="amem",
    help="Agentic Memory: a LangGraph agent with episodic, semantic and procedural memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


@app.callback()
def main(
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


app.command("ingest")(ingest_cmd.ingest)
app.command("chat")(chat_cmd.chat)
app.add_typer(memories_cmd.app, name="memories")

"""The ``amem`` command line.

Each command or command group lives in its own module and is registered here, so that
modules stay independent: ``ingest`` comes from ``agentic_memory.cli.ingest_cmd``; a group is added with
``app.add_typer(module.app, name="group")``.
"""

from __future__ import annotations

import typer

from agentic_memory.cli import chat_cmd, ingest_cmd, memories_cmd

app = typer.Typer(
    name="amem",
    help="Agentic Memory: a LangGraph agent with episodic, semantic and procedural memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Agentic Memory: a LangGraph agent with episodic, semantic and procedural memory."""


app.command("ingest")(ingest_cmd.ingest)
app.command("chat")(chat_cmd.chat)
app.add_typer(memories_cmd.app, name="memories")

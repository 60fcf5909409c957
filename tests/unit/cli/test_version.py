"""``amem --version`` says which release is installed (what a bug report needs first)."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from agentic_memory.cli.main import DISTRIBUTION, app


def test_the_version_is_printed_and_nothing_else_runs() -> None:
    for flag in ("--version", "-V"):
        result = CliRunner().invoke(app, [flag])
        assert result.exit_code == 0, result.output
        assert result.output == f"amem {version(DISTRIBUTION)} ({DISTRIBUTION})\n"
    assert "--version" in CliRunner().invoke(app, ["--help"]).output

"""Terminal output for the CLI: rich tables for people, plain JSON for scripts.

Every command renders through these helpers so that ``--json`` output is always one JSON
document on stdout (no colour codes, no extra lines) and human output is a rich table.
Errors go to stderr.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

_MAX_CELL = 120
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")

_stdout: Console | None = None
_stderr: Console | None = None


def out() -> Console:
    """Return the console for normal output (created on first use, never at import)."""
    global _stdout
    if _stdout is None or _stdout.file is not sys.stdout:
        _stdout = Console(file=sys.stdout, highlight=False, soft_wrap=False)
    return _stdout


def err() -> Console:
    """Return the console for errors and notes."""
    global _stderr
    if _stderr is None or _stderr.file is not sys.stderr:
        _stderr = Console(file=sys.stderr, highlight=False)
    return _stderr


def say(message: str) -> None:
    """Print a line of plain text (never read as rich markup: it may quote user text)."""
    out().print(message, markup=False)


def error(message: str) -> None:
    """Print an error message to stderr (no traceback), unwrapped: one line stays one line."""
    err().print(Text("Error: ", style="bold red") + Text(message), soft_wrap=True)


def note(message: str) -> None:
    """Print a side note to stderr, so that it never mixes with ``--json`` output."""
    err().print(Text(message, style="dim"))


def quiet_library_logs() -> None:
    """Keep library INFO logs (HTTP requests, model loading) out of the terminal.

    Some dependencies call ``logging.basicConfig(level=INFO)`` when first imported (WordLlama
    does); configuring the root logger first at WARNING turns that call into a no-op.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def _default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)


def to_json(data: object) -> str:
    """Serialise ``data`` as indented JSON (dates as ISO strings, objects via ``to_dict``)."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=_default)


def emit_json(data: object) -> None:
    """Write ``data`` to stdout as one JSON document, without any styling."""
    sys.stdout.write(to_json(data) + "\n")
    sys.stdout.flush()


def cell(value: object, *, width: int = _MAX_CELL) -> str:
    """Render one table cell: lists joined by commas, ``None`` as empty, long text cut.

    Timestamps (RFC 3339) are shown to the minute in UTC; ``--json`` keeps them whole.
    """
    if value is None:
        return ""
    if isinstance(value, str) and _TIMESTAMP.match(value):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if moment.tzinfo is not None:
                return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.3f}".rstrip("0").rstrip(".")
    elif isinstance(value, list | tuple):
        text = ", ".join(str(v) for v in value)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    caption: str | None = None,
) -> Table:
    """Build a rich table; cells go through :func:`cell` and are never read as rich markup."""
    t = Table(
        # Memories are user text: "[pump.md p.1]" or "[/]" must print as written.
        title=Text(title, style="table.title") if title is not None else None,
        caption=Text(caption, style="table.caption") if caption is not None else None,
        show_lines=False,
        header_style="bold",
    )
    materialised = [list(row) for row in rows]
    for i, col in enumerate(columns):
        values = [row[i] for row in materialised if i < len(row) and row[i] is not None]
        numeric = bool(values) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        )
        t.add_column(col, justify="right" if numeric else "left", overflow="fold")
    for row in materialised:
        t.add_row(*(Text(cell(v)) for v in row))
    return t


def print_records(
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    *,
    title: str | None = None,
    empty: str = "nothing found",
) -> None:
    """Print dict records as a table; ``columns`` are ``(header, key)`` pairs."""
    if not records:
        out().print(Text(empty, style="dim"))
        return
    out().print(
        table(
            [h for h, _ in columns],
            ([r.get(k) for _, k in columns] for r in records),
            title=title,
            caption=f"{len(records)} shown",
        )
    )


def print_mapping(data: Mapping[str, Any], *, title: str | None = None) -> None:
    """Print one record as a two-column panel (field, value), long text kept whole."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for key, value in data.items():
        if isinstance(value, str) and "\n" in value:
            t.add_row(Text(key), Text(value))
        else:
            t.add_row(Text(key), Text(cell(value, width=10_000)))
    out().print(Panel(t, title=Text(title) if title is not None else None, expand=False))


def diff_text(lines: Iterable[str]) -> Text:
    """Colour a unified diff: additions green, removals red, headers dim."""
    text = Text()
    for line in lines:
        line = line.rstrip("\n")
        if line.startswith(("+++", "---", "@@")):
            style = "dim"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        else:
            style = ""
        text.append(line + "\n", style=style)
    return text


def counts_table(rows: Iterable[Sequence[object]], columns: Sequence[str], *, title: str) -> Table:
    """Build a table of counts with a total row (for forget and transfer reports)."""
    materialised = [list(r) for r in rows]
    t = table(columns, materialised, title=title)
    numeric = [i for i, c in enumerate(columns) if c.lower() in {"count", "deleted", "scrubbed"}]
    if materialised and numeric:
        total: list[object] = ["total", *([""] * (len(columns) - 1))]
        for i in numeric:
            total[i] = sum(int(str(r[i]) or 0) for r in materialised)
        t.add_section()
        t.add_row(*(Text(cell(v)) for v in total), style="bold")
    return t

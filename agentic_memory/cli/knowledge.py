"""Knowledge bases: ``amem ingest`` loads documents into one, ``amem memories kb`` inspects them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich import table as rich
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from agentic_memory.api import Memory
from agentic_memory.cli import render
from agentic_memory.cli.scaffold import (
    CliError,
    Output,
    Said,
    Table,
    memory_command,
    need_user,
)
from agentic_memory.ingest.pipeline import IngestEvent, IngestReport, ingest_paths, printable_path
from agentic_memory.ingest.text import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from agentic_memory.kinds._bound import check_user_id
from agentic_memory.kinds.knowledge import (
    PruneReport,
    adelete_source,
    afind_knowledge_base,
    alist_knowledge_bases,
    alist_sources,
    knowledge_collection,
    list_knowledge_bases,
    list_sources,
    prune_knowledge_base,
    resolve_kb,
)
from agentic_memory.kinds.retention import RetentionPolicy
from agentic_memory.store import InvalidInputError, MemoryStore, StoreError

app = typer.Typer(help="Knowledge bases (ingested documents).")

# Above this many files the summary lists only the failed ones, then the totals.
_FULL_TABLE_MAX_FILES = 40


def ingest(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help="Files, directories (searched recursively) or glob patterns "
            "(quote them: 'docs/**/*.pdf').",
            show_default=False,
        ),
    ] = None,
    collection: Annotated[
        str | None,
        typer.Option(
            "--collection",
            "-c",
            "--kb",
            help="Knowledge base to write to (default: 'default').",
            show_default=False,
        ),
    ] = None,
    chunk_size: Annotated[
        int, typer.Option("--chunk-size", help="Characters per chunk.", min=50)
    ] = DEFAULT_CHUNK_SIZE,
    chunk_overlap: Annotated[
        int,
        typer.Option("--chunk-overlap", help="Characters shared by neighbouring chunks.", min=0),
    ] = DEFAULT_CHUNK_OVERLAP,
    password: Annotated[
        str | None,
        typer.Option("--password", help="Password for encrypted PDFs.", show_default=False),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON instead of tables.")
    ] = False,
    list_only: Annotated[
        bool,
        typer.Option(
            "--list",
            help="Ingest nothing: list the knowledge bases, or with --collection its sources.",
        ),
    ] = False,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="Afterwards, remove the sources whose files no longer exist (and what "
            "interrupted runs left for them); with no PATHS, only prune.",
        ),
    ] = False,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            "-u",
            help="Write (or list, or prune) this user's own knowledge base, which only they "
            "recall, instead of the shared one.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Ingest PDF, .txt and .md files into a knowledge base the agent cites from.

    Unchanged files are skipped; changed files replace their old chunks. Knowledge base
    names compare case-insensitively (docs = Docs); the first spelling is kept.

    The exit code is 1 when any file could not be ingested.
    """
    kb = collection or "default"
    try:
        owner = None if user is None else check_user_id(user)
        knowledge_collection(kb, owner)
    except InvalidInputError as exc:
        render.error(str(exc))
        raise typer.Exit(2) from None
    if list_only:
        _list(collection, as_json, owner)
        return
    if not paths and prune:
        _prune_only(kb, as_json, owner)
        return
    if not paths:
        render.error(
            "give at least one file, directory or pattern to ingest (or --list, or --prune)"
        )
        raise typer.Exit(2)
    if chunk_overlap >= chunk_size:
        render.error(
            f"--chunk-overlap ({chunk_overlap}) must be smaller than --chunk-size ({chunk_size})"
        )
        raise typer.Exit(2)

    with (
        _opened(kb, bad_input_exit=2) as mem,
        _ProgressBar(enabled=not as_json and render.err().is_terminal) as bar,
    ):
        report = ingest_paths(
            paths,
            kb=kb,
            store=mem.store,
            embeddings=mem.embeddings,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            password=password,
            progress=bar.update,
            prune=prune,
            owner=owner,
        )
    if as_json:
        render.emit_json(report.to_dict())
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


class _ProgressBar:
    """A rich progress bar over files, showing the current file and its chunks."""

    def __init__(self, *, enabled: bool) -> None:
        self.progress = Progress(
            TextColumn("[bold]ingest[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[current]}", style="dim"),
            TimeElapsedColumn(),
            console=render.err(),
            disable=not enabled,
            transient=True,
        )
        self.task: TaskID | None = None

    def __enter__(self) -> _ProgressBar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def update(self, event: IngestEvent) -> None:
        if event.kind == "planned":
            self.task = self.progress.add_task("ingest", total=event.files_total, current="")
            return
        if self.task is None:
            return
        name = Path(event.path).name
        if event.kind == "file_started":
            self.progress.update(self.task, current=name)
        elif event.kind == "chunks_progress":
            self.progress.update(
                self.task, current=f"{name}: {event.chunks_done}/{event.chunks_total} chunks"
            )
        elif event.kind == "file_finished":
            self.progress.advance(self.task)


_STATUS_STYLE = {"written": "green", "unchanged": "dim", "failed": "red"}


def _print_report(report: IngestReport) -> None:
    out = render.out()
    shown = report.files
    if len(shown) > _FULL_TABLE_MAX_FILES:
        shown = report.failed
    if shown:
        table = rich.Table(title=f"Ingested into {report.kb!r}", header_style="bold")
        table.add_column("file", overflow="fold", ratio=3)
        table.add_column("status")
        for header in ("pages", "written", "unchanged", "removed"):
            table.add_column(header, justify="right")
        for f in shown:
            table.add_row(
                _short(f.path),
                Text(f.status, style=_STATUS_STYLE[f.status]),
                str(f.pages) if f.pages else "",
                str(f.chunks_written) if f.status != "failed" else "",
                str(f.chunks_unchanged) if f.status != "failed" else "",
                str(f.chunks_removed) if f.chunks_removed else "",
            )
        out.print(table)
    for f in report.failed:
        line = Text.assemble(("✗ ", "bold red"), (_short(f.path), "bold"), f": {f.error}")
        # One line per file, never broken by rich, so it can be grepped and copied.
        out.print(line, soft_wrap=True)

    totals = rich.Table(title="Summary", header_style="bold")
    for header in (
        "files",
        "pages",
        "chunks written",
        "unchanged",
        "removed",
        "errors",
        "seconds",
    ):
        totals.add_column(header, justify="right")
    totals.add_row(
        str(len(report.files)),
        str(report.pages),
        str(report.chunks_written),
        str(report.chunks_unchanged),
        str(report.chunks_removed),
        Text(str(len(report.failed)), style="bold red" if report.failed else ""),
        f"{report.seconds:.2f}",
    )
    out.print(totals)
    warned = [f for f in report.files if f.warnings]
    if warned:
        first = next(f.warning_sample for f in warned if f.warning_sample)
        render.note(
            f"The PDF reader worked around {report.warnings} problem(s) in {len(warned)} "
            f"file(s), e.g. {first!r}; the text was still extracted."
        )
    if report.skipped:
        render.note(f"Skipped {len(report.skipped)} file(s) of other types (not .pdf/.txt/.md).")
    if report.pruned is not None:
        _print_pruned(report.pruned)


def _print_pruned(pruned: PruneReport) -> None:
    if not pruned.sources:
        render.note(f"Nothing to prune in {pruned.kb!r}: every source's file still exists.")
        return
    for source in pruned.sources:
        render.out().print(
            Text.assemble(("- ", "bold yellow"), _short(printable_path(source))), soft_wrap=True
        )
    render.note(
        f"Pruned {len(pruned.sources)} source(s) whose files no longer exist from "
        f"{pruned.kb!r} ({pruned.chunks} chunks)."
    )


def _prune_only(kb: str, as_json: bool, owner: str | None) -> None:
    with _opened(kb) as mem:
        pruned = prune_knowledge_base(mem.store, kb, owner=owner)
    if as_json:
        render.emit_json(pruned.to_dict())
    else:
        _print_pruned(pruned)


def _short(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


@contextmanager
def _opened(kb: str | None, *, bad_input_exit: int | None = None) -> Iterator[Memory]:
    """Open the configured memory (no retention setting is read); close it afterwards.

    A store error exits with status 1 and its message, after the knowledge base ``kb`` is
    named when given (for example one an older version created with another schema); with
    ``bad_input_exit``, bad input exits with that status and its message alone.
    """
    try:
        mem = Memory.open(retention=RetentionPolicy())
    except (StoreError, ValueError) as exc:
        render.error(f"cannot open the memory store: {exc}")
        raise typer.Exit(1) from None
    try:
        yield mem
    except StoreError as exc:
        if bad_input_exit is not None and isinstance(exc, InvalidInputError):
            render.error(str(exc))
            raise typer.Exit(bad_input_exit) from None
        render.error(str(exc) if kb is None else f"knowledge base {kb!r}: {exc}")
        raise typer.Exit(1) from None
    finally:
        mem.close()


def _list(collection: str | None, as_json: bool, owner: str | None) -> None:
    with _opened(None) as mem:
        if collection is None:
            _list_bases(mem.store, as_json, owner)
        else:
            _list_sources(mem.store, collection, as_json, owner)


def _list_bases(store: MemoryStore, as_json: bool, owner: str | None) -> None:
    bases = [(kb, list_sources(store, kb, owner)) for kb in list_knowledge_bases(store, owner)]
    records = [
        {"kb": kb, "sources": len(sources), "chunks": sum(s.chunks for s in sources)}
        for kb, sources in bases
    ]
    if as_json:
        render.emit_json(records)
        return
    render.print_records(
        records,
        [("knowledge base", "kb"), ("sources", "sources"), ("chunks", "chunks")],
        title="Knowledge bases",
        empty="no knowledge bases yet: amem ingest PATH --collection NAME",
    )


def _list_sources(store: MemoryStore, kb: str, as_json: bool, owner: str | None) -> None:
    kb = resolve_kb(store, kb, owner)
    sources = list_sources(store, kb, owner)
    records = [
        {
            "source": s.source,
            "title": s.title,
            "pages": s.pages,
            "chunks": s.chunks,
            "sha256": s.sha256,
            "chunk_size": s.chunk_size,
            "chunk_overlap": s.chunk_overlap,
            "ingested_at": s.ingested_at,
        }
        for s in sources
    ]
    if as_json:
        render.emit_json(records)
        return
    render.print_records(
        records,
        [
            ("source", "source"),
            ("title", "title"),
            ("pages", "pages"),
            ("chunks", "chunks"),
            ("ingested", "ingested_at"),
        ],
        title=f"Sources of {kb!r}",
        empty=f"knowledge base {kb!r} has no sources",
    )


# -- amem memories kb --------------------------------------------------------------------------


KbUserOpt = Annotated[
    str | None,
    typer.Option("--user", "-u", help="This user's own knowledge bases (their uploads)."),
]
KbArg = Annotated[str, typer.Argument(help="The knowledge base.")]


def _kb_owner(user: str | None) -> str | None:
    return None if user is None else need_user(user)


@memory_command(app, "list")
async def kb_list(mem: Memory, user: KbUserOpt = None) -> Output:
    """List the shared knowledge bases (or a user's own) with their sources and chunks."""
    owner = _kb_owner(user)
    items = []
    for name in await alist_knowledge_bases(mem.store, owner):
        sources = await alist_sources(mem.store, name, owner)
        items.append(
            {
                "name": name,
                "sources": len(sources),
                "chunks": sum(s.chunks for s in sources),
                "pages": sum(s.pages for s in sources),
            }
        )
    return Table(
        items,
        [("name", "name"), ("sources", "sources"), ("chunks", "chunks"), ("pages", "pages")],
        title="Knowledge bases" if owner is None else f"Knowledge bases of {owner}",
        empty="no knowledge base yet: add documents with `amem ingest`",
    )


@memory_command(app, "sources")
async def kb_sources(mem: Memory, name: KbArg, user: KbUserOpt = None) -> Output:
    """List the documents of a knowledge base."""
    owner = _kb_owner(user)
    found = await afind_knowledge_base(mem.store, name, owner)
    if found is None:
        raise CliError(f"no knowledge base {name!r}")
    items = [
        {
            "source": s.source,
            "title": s.title,
            "pages": s.pages,
            "chunks": s.chunks,
            "ingested_at": s.ingested_at,
            "sha256": s.sha256,
        }
        for s in await alist_sources(mem.store, found, owner)
    ]
    return Table(
        items,
        [
            ("source", "source"),
            ("title", "title"),
            ("pages", "pages"),
            ("chunks", "chunks"),
            ("ingested", "ingested_at"),
        ],
        title=f"Sources of {found}",
    )


@memory_command(app, "delete-source")
async def kb_delete_source(
    mem: Memory,
    name: KbArg,
    source: Annotated[str, typer.Argument(help="The source path, as listed by `kb sources`.")],
    user: KbUserOpt = None,
) -> Output:
    """Remove one document and its chunks from a knowledge base."""
    owner = _kb_owner(user)
    name = await asyncio.to_thread(resolve_kb, mem.store, name, owner)
    removed = await adelete_source(mem.store, name, source, owner)
    return Said(
        {"kb": name, "source": source, "chunks_deleted": removed},
        f"Removed {source} from {name} ({removed} chunks).",
    )

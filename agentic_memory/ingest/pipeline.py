"""Ingest files into a knowledge base: read, clean, split, embed in batches, write, commit.

Each file goes through the replace protocol of its knowledge base (described in
``kinds.knowledge.base``): a file whose revision (content hash, splitter settings) is already
active with all its chunks is left alone (``Knowledge.akeep_unchanged``); any other is
parsed, split and handed, embedded batch by batch, to ``Knowledge.areplace_source``.

The pipeline is asynchronous (``aingest_paths``, ``aingest_uploads``): a file is read,
parsed and split in a worker thread, embedded through ``aembed_documents`` and written
through the store's ``a…`` methods. ``ingest_paths`` and ``ingest_uploads`` are their
blocking names (in a running loop, a notebook cell, they run on a thread of their own).

A process killed anywhere leaves the store searchable and consistent; running the same
ingestion again completes or cleans up what was left. When the file was renamed or deleted
in the meantime, ``prune=True`` (``amem ingest --prune``) removes what is left of it, and
the sources of any other deleted files.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict, Unpack, overload

from langchain_core.embeddings import Embeddings

from agentic_memory.ingest.inputs import Expanded, InputError, Upload, expand_inputs
from agentic_memory.ingest.readers import (
    IngestFileError,
    derive_title,
    parse,
    read_bytes,
    require_kind,
)
from agentic_memory.ingest.text import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    TextChunk,
    assemble,
    check_split_settings,
    split_document,
)
from agentic_memory.kinds.knowledge import (
    Knowledge,
    PruneReport,
    ReplaceStep,
    SourceInfo,
    chunk_id,
    knowledge_collection,
    now_rfc3339,
    revision_of,
    source_key,
    upload_source,
)
from agentic_memory.kinds.recall_text import chunk_search_text
from agentic_memory.models.embeddings import embedding_dims, get_embeddings
from agentic_memory.store import (
    InvalidInputError,
    MemoryObject,
    MemoryStore,
    StoreError,
    check_text,
    open_store,
)
from agentic_memory.sync_edge import blocking_function

PIPELINE_VERSION = "3"
"""Part of every revision: bump it when cleaning or splitting changes, so files are redone.
Version 2 finds each chunk's section heading (``ingest.text.find_headings``); version 3 also
reads Markdown's ``#`` headings."""

DEFAULT_BATCH_SIZE = 128
"""Chunks embedded and written per call."""

FileStatus = Literal["written", "unchanged", "failed"]
EventKind = Literal[
    "planned",
    "file_started",
    "chunks_progress",
    "chunks_written",
    "committed",
    "old_removed",
    "file_finished",
]


@dataclass
class FileResult:
    """What happened to one file."""

    path: str
    status: FileStatus
    source: str | None = None
    title: str | None = None
    pages: int = 0
    chunks_written: int = 0
    chunks_unchanged: int = 0
    chunks_removed: int = 0
    warnings: int = 0
    """Problems pypdf worked around while reading (kept out of the terminal, counted here)."""
    warning_sample: str | None = None
    error: str | None = None
    seconds: float = 0.0


class _Total:
    """A total of an ``IngestReport``: the ``FileResult`` field of the same name, summed."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.field = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    @overload
    def __get__(self, report: None, owner: type) -> _Total: ...
    @overload
    def __get__(self, report: IngestReport, owner: type) -> int: ...
    def __get__(self, report: IngestReport | None, owner: type) -> int | _Total:
        if report is None:
            return self
        return sum(int(getattr(f, self.field)) for f in report.files)


@dataclass
class IngestReport:
    """Per-file results and totals of one ``ingest_paths`` call."""

    kb: str
    chunk_size: int
    chunk_overlap: int
    files: list[FileResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Files in the given directories or globs that are not of a supported type."""
    pruned: PruneReport | None = None
    """With ``prune=True``: the sources removed because their files no longer exist."""
    seconds: float = 0.0

    @property
    def failed(self) -> list[FileResult]:
        """The files (and inputs) that could not be ingested."""
        return [f for f in self.files if f.status == "failed"]

    @property
    def ok(self) -> bool:
        """Whether every input was ingested (or was already up to date)."""
        return not self.failed

    pages = _Total("Pages of the files ingested or found unchanged.")
    chunks_written = _Total("Chunks written.")
    chunks_unchanged = _Total("Chunks already present and left alone.")
    chunks_removed = _Total("Chunks of old revisions deleted.")
    warnings = _Total("PDF reader warnings, summed over the files.")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dictionary with the totals and every file."""
        summed = ("pages", "chunks_written", "chunks_unchanged", "chunks_removed", "warnings")
        return {
            "kb": self.kb,
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "ok": self.ok,
            "totals": {
                "files": len(self.files),
                "written": sum(f.status == "written" for f in self.files),
                "unchanged": sum(f.status == "unchanged" for f in self.files),
                "failed": len(self.failed),
                "skipped": len(self.skipped),
                **{name: getattr(self, name) for name in summed},
                "seconds": round(self.seconds, 3),
            },
            "files": [asdict(f) for f in self.files],
            "skipped": list(self.skipped),
            "pruned": self.pruned.to_dict() if self.pruned is not None else None,
        }


@dataclass(frozen=True)
class IngestEvent:
    """A progress report; ``progress`` callbacks receive one at every step of every file."""

    kind: EventKind
    path: str = ""
    file_index: int = 0
    files_total: int = 0
    chunks_done: int = 0
    chunks_total: int = 0
    result: FileResult | None = None


ProgressCallback = Callable[[IngestEvent], None]


class IngestOptions(TypedDict, total=False):
    """What both ingestion entry points take besides their inputs (see :func:`aingest_paths`)."""

    kb: str
    owner: str | None
    store: MemoryStore | None
    embeddings: Embeddings | None
    chunk_size: int
    chunk_overlap: int
    password: str | None
    progress: ProgressCallback | None
    batch_size: int


async def aingest_paths(
    paths: str | Path | Sequence[str | Path],
    *,
    prune: bool = False,
    roots: Sequence[Path] | None = None,
    **options: Unpack[IngestOptions],
) -> IngestReport:
    """Ingest files, directories (recursively) and glob patterns into knowledge base ``kb``.

    A file that cannot be ingested gets a one-line ``error`` in its ``FileResult`` and the
    others go on; check ``report.ok``. Invalid arguments raise before anything is read.
    Knowledge base names compare case-insensitively; the report names the kept spelling.

    Args:
        paths: One path or pattern, or several.
        prune: Afterwards, remove the sources of ``kb`` whose files no longer exist, with
            their chunks and what killed runs left for them (see
            ``agentic_memory.kinds.knowledge.prune_knowledge_base``).
        roots: The only folders files may come from (a server's ``AMEM_INGEST_DIRS``, see
            ``ingest.inputs.expand_inputs``); ``None``: any path (the library, the CLI).
        options: ``kb``, the knowledge base name (letters, digits, underscores; starts with
            a letter; default ``"default"``); ``owner``, ingest into this user's own
            knowledge base ``kb`` instead of the shared one; ``store``, an open store (by
            default the configured one is opened and closed again); ``embeddings`` (default
            ``agentic_memory.models.embeddings.get_embeddings()``); ``chunk_size``,
            characters per chunk; ``chunk_overlap``, characters shared by neighbouring
            chunks; ``password``, for encrypted PDFs; ``progress``, called with an
            ``IngestEvent`` at each step; ``batch_size``, chunks embedded and written per call.

    Returns:
        The per-file results and totals.

    Example:
        >>> report = ingest_paths(["papers/", "notes/*.md"], kb="research")  # doctest: +SKIP
        >>> report.chunks_written, report.ok  # doctest: +SKIP
    """
    _check_options(options, "aingest_paths")
    inputs = _check_paths(paths)
    if not isinstance(prune, bool):
        raise InvalidInputError(f"prune must be True or False, got {prune!r}")
    folders = None if roots is None else [Path(r) for r in roots]
    return await _aingest(
        lambda: expand_inputs(inputs, roots=folders), prune=prune, roots=folders, **options
    )


async def aingest_uploads(
    documents: Sequence[Upload], **options: Unpack[IngestOptions]
) -> IngestReport:
    """Ingest documents sent as content (no path is read) into knowledge base ``kb``.

    Each document's source is ``upload://<name>``: uploading a name again replaces that
    document. Everything else, ``options`` included, is as in :func:`aingest_paths`.
    """
    _check_options(options, "aingest_uploads")
    if isinstance(documents, Upload) or not isinstance(documents, Sequence) or not documents:
        raise InvalidInputError("documents must be a non-empty list of uploads")
    if not all(isinstance(d, Upload) for d in documents):
        raise InvalidInputError("every document must be an ingest.inputs.Upload")
    names = [d.name for d in documents]
    if len(set(names)) != len(names):
        raise InvalidInputError("two uploaded documents have the same name")
    return await _aingest(
        lambda: Expanded(entries=list(documents)), prune=False, roots=None, **options
    )


def _check_options(options: Mapping[str, object], caller: str) -> None:
    # The options arrive as **kwargs: an unknown one is refused as Python refuses a keyword,
    # naming the function called rather than the private one behind it.
    for name in options:
        if name not in IngestOptions.__optional_keys__:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")


ingest_paths = blocking_function(aingest_paths)
ingest_uploads = blocking_function(aingest_uploads)


async def _aingest(
    expand: Callable[[], Expanded],
    *,
    prune: bool,
    roots: Sequence[Path] | None,
    kb: str = "default",
    owner: str | None = None,
    store: MemoryStore | None = None,
    embeddings: Embeddings | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    password: str | None = None,
    progress: ProgressCallback | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> IngestReport:
    started = time.perf_counter()
    knowledge_collection(kb, owner)
    try:
        chunk_size, chunk_overlap = check_split_settings(chunk_size, chunk_overlap)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidInputError(f"batch size must be a positive integer, got {batch_size!r}")
    if password is not None and not isinstance(password, str):
        raise InvalidInputError("password must be a string")
    emit = progress or (lambda _event: None)

    report = IngestReport(kb=kb, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    # Globs and folders are walked on the disk: off the event loop.
    expanded = await asyncio.to_thread(expand)
    report.skipped = [printable_path(s) for s in expanded.skipped]
    total = len(expanded.files)
    emit(IngestEvent("planned", files_total=total))

    if not expanded.files and not prune:
        report.files = [_input_failure(e) for e in expanded.errors]
    else:
        # Loading a model and opening a store read files: in worker threads.
        embedder = embeddings if embeddings is not None else await asyncio.to_thread(get_embeddings)
        dims = await asyncio.to_thread(embedding_dims, embedder)
        own_store = store is None
        active_store = await asyncio.to_thread(open_store, dims) if store is None else store
        try:
            if active_store.dims != dims:
                raise InvalidInputError(
                    f"the store holds {active_store.dims}-d vectors but the embeddings make "
                    f"{dims}-d ones"
                )
            knowledge = Knowledge(active_store)
            kb = report.kb = await knowledge.aensure(kb, owner)
            job = _Job(
                knowledge,
                kb,
                owner,
                embedder,
                chunk_size,
                chunk_overlap,
                password,
                batch_size,
                roots,
            )
            index = 0
            for entry in expanded.entries:
                if isinstance(entry, InputError):
                    report.files.append(_input_failure(entry))
                    continue
                shown = (
                    upload_source(entry.name)
                    if isinstance(entry, Upload)
                    else printable_path(entry)
                )
                emit(IngestEvent("file_started", shown, index, total))
                result = await job.arun(entry, _Reporter(emit, shown, index, total))
                report.files.append(result)
                emit(IngestEvent("file_finished", shown, index, total, result=result))
                index += 1
            if prune:
                report.pruned = await knowledge.aprune(kb, owner=owner)
        finally:
            if own_store:
                await asyncio.to_thread(active_store.close)
    report.seconds = time.perf_counter() - started
    return report


def _input_failure(error: InputError) -> FileResult:
    return FileResult(path=printable_path(error.given), status="failed", error=error.reason)


def printable_path(path: str | Path) -> str:
    r"""Return a path as text that can be printed and stored as JSON.

    A file name that is not UTF-8 reaches Python with lone surrogates, which no terminal or
    JSON encoder takes; its undecodable bytes are shown as ``\xNN`` escapes instead.
    """
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return text


def _check_paths(paths: object) -> list[str | Path]:
    if isinstance(paths, str | Path):
        items: list[str | Path] = [paths]
    elif isinstance(paths, Sequence):
        items = list(paths)
    else:
        raise InvalidInputError(f"paths must be a path or a list of paths, got {paths!r:.80}")
    if not items:
        raise InvalidInputError("no paths given")
    for item in items:
        if not isinstance(item, str | Path) or str(item) == "":
            raise InvalidInputError(f"every path must be a non-empty string or Path, got {item!r}")
    return items


@dataclass(frozen=True)
class _Reporter:
    """Sends the steps of one file to the progress callback."""

    emit: ProgressCallback
    path: str
    index: int
    total: int

    def __call__(self, kind: EventKind, done: int = 0, of: int = 0) -> None:
        self.emit(IngestEvent(kind, self.path, self.index, self.total, done, of))


@dataclass(frozen=True)
class _Parsed:
    """A file read, parsed and split (in one worker thread)."""

    title: str
    pages: int
    chunks: list[TextChunk]
    search_texts: list[str]
    """Each chunk's prepared keyword text (stemming is CPU work too)."""
    warnings: list[str]


@dataclass(frozen=True)
class _Job:
    """The per-file work of one ``aingest_paths`` call."""

    knowledge: Knowledge
    kb: str
    owner: str | None
    embeddings: Embeddings
    chunk_size: int
    chunk_overlap: int
    password: str | None
    batch_size: int
    roots: Sequence[Path] | None

    async def arun(self, path: Path | Upload, step: _Reporter) -> FileResult:
        started = time.perf_counter()
        shown = upload_source(path.name) if isinstance(path, Upload) else printable_path(path)
        result = FileResult(path=shown, status="failed")
        try:
            await self._arun(path, result, step)
        except IngestFileError as exc:
            result.status, result.error = "failed", str(exc)
        except StoreError as exc:
            result.status, result.error = "failed", f"store error: {exc}"
        result.seconds = time.perf_counter() - started
        return result

    def _read(self, entry: Path | Upload) -> tuple[str, bytes]:
        """Return the source key of ``entry`` and its bytes (storage-free: a worker thread)."""
        # Checked before reading so that a large unrelated file is not loaded for nothing.
        require_kind(Path(entry.name) if isinstance(entry, Upload) else entry)
        source = upload_source(entry.name) if isinstance(entry, Upload) else source_key(entry)
        try:
            check_text(source, "the file name")
        except InvalidInputError:
            # A name in another encoding than UTF-8 (Linux allows any bytes): no store
            # takes it as text, and citing it would print garbage.
            raise IngestFileError(
                f"the path is not valid UTF-8 ({printable_path(source)}); rename the file to "
                "ingest it"
            ) from None
        data = entry.data if isinstance(entry, Upload) else read_bytes(entry, within=self.roots)
        return source, data

    def _parse(self, path: Path, data: bytes) -> _Parsed:
        """Parse, clean and split a file's bytes (CPU work: a worker thread)."""
        raw = parse(path, data, password=self.password)
        document = assemble(raw.pages)
        chunks = split_document(
            document,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            markdown=raw.kind == "markdown",
        )
        if not chunks:
            raise IngestFileError("no extractable text")
        title = derive_title(raw, document.text, path)
        search_texts = [chunk_search_text(c.text, title=title, section=c.section) for c in chunks]
        return _Parsed(title, document.page_count, chunks, search_texts, list(raw.warnings))

    async def _arun(self, entry: Path | Upload, result: FileResult, step: _Reporter) -> None:
        path = Path(entry.name) if isinstance(entry, Upload) else entry
        source, data = await asyncio.to_thread(self._read, entry)
        result.source = source
        sha256 = hashlib.sha256(data).hexdigest()
        revision = revision_of(
            source, sha256, self.chunk_size, self.chunk_overlap, PIPELINE_VERSION
        )
        kept = await self.knowledge.akeep_unchanged(self.kb, source, revision, owner=self.owner)
        if kept is not None:
            current, result.chunks_removed = kept
            result.status, result.title, result.pages = "unchanged", current.title, current.pages
            result.chunks_unchanged = current.chunks
            return

        # An unchanged file is not parsed: the store is asked first, then the thread parses.
        parsed = await asyncio.to_thread(self._parse, path, data)
        result.warnings = len(parsed.warnings)
        result.warning_sample = parsed.warnings[0][:200] if parsed.warnings else None
        result.title, result.pages = parsed.title, parsed.pages
        info = SourceInfo(
            source=source,
            title=parsed.title,
            revision=revision,
            sha256=sha256,
            pages=parsed.pages,
            chunks=len(parsed.chunks),
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            ingested_at=now_rfc3339(),
        )

        def progress(kind: ReplaceStep, done: int, of: int) -> None:
            result.chunks_written = done
            if kind in ("chunks_progress", "chunks_written"):
                step(kind, done, of)
            else:
                step(kind)

        result.chunks_removed = await self.knowledge.areplace_source(
            self.kb, info, self._abatches(parsed, info), owner=self.owner, step=progress
        )
        result.status = "written"

    async def _abatches(
        self, parsed: _Parsed, info: SourceInfo
    ) -> AsyncIterator[list[MemoryObject]]:
        """Yield the chunks as stored objects, embedded ``batch_size`` at a time."""
        for start in range(0, len(parsed.chunks), self.batch_size):
            batch = parsed.chunks[start : start + self.batch_size]
            keywords = parsed.search_texts[start : start + self.batch_size]
            vectors = await self.embeddings.aembed_documents([chunk.text for chunk in batch])
            yield [
                MemoryObject(
                    id=chunk_id(info.revision, chunk.index),
                    properties={
                        "text": chunk.text,
                        "title": info.title,
                        "source": info.source,
                        "sha256": info.sha256,
                        "page_start": chunk.page_start,
                        "page_end": chunk.page_end,
                        "chunk_index": chunk.index,
                        "char_start": chunk.char_start,
                        "char_end": chunk.char_end,
                        "revision": info.revision,
                        "section": chunk.section,
                        "search_text": search_text,
                    },
                    vector=vector,
                )
                for chunk, search_text, vector in zip(batch, keywords, vectors, strict=True)
            ]

"""Ingest files into a knowledge base: read, clean, split, embed in batches, write, commit.

Each file goes through the replace protocol of its knowledge base
(``agentic_memory.kinds.knowledge.KnowledgeBase``, described in that module):

1. Hash the file. If the manifest's active revision for this path is the same (same content,
   same splitter settings) and all its chunks are there, nothing is written.
2. Otherwise record a pending entry for the path, then write all new chunks, tagged with the
   new revision (invisible to searches).
3. Commit: upsert the path's manifest object naming the new revision (one object).
4. Renew the knowledge base's generation token, then delete the path's chunks of any
   other revision (the old ones, and leftovers of a killed run), then the pending entry.

A process killed anywhere leaves the store searchable and consistent; running the same
ingestion again completes or cleans up what was left. When the file was renamed or deleted
in the meantime, ``prune=True`` (``amem ingest --prune``) removes what is left of it, and
the sources of any other deleted files.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

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
    KnowledgeBase,
    PruneReport,
    SourceInfo,
    chunk_id,
    knowledge_collection,
    now_rfc3339,
    prune_knowledge_base,
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
                "pages": self.pages,
                "chunks_written": self.chunks_written,
                "chunks_unchanged": self.chunks_unchanged,
                "chunks_removed": self.chunks_removed,
                "warnings": self.warnings,
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


def ingest_paths(
    paths: str | Path | Sequence[str | Path],
    *,
    kb: str = "default",
    store: MemoryStore | None = None,
    embeddings: Embeddings | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    password: str | None = None,
    progress: ProgressCallback | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    prune: bool = False,
    owner: str | None = None,
    roots: Sequence[Path] | None = None,
) -> IngestReport:
    """Ingest files, directories (recursively) and glob patterns into knowledge base ``kb``.

    A file that cannot be ingested gets a one-line ``error`` in its ``FileResult`` and the
    others go on; check ``report.ok``. Invalid arguments raise before anything is read.
    Knowledge base names compare case-insensitively; the report names the kept spelling.

    Args:
        paths: One path or pattern, or several.
        kb: Knowledge base name (letters, digits, underscores; starts with a letter).
        store: An open store; by default the configured one is opened and closed again.
        embeddings: By default ``agentic_memory.models.embeddings.get_embeddings()``.
        chunk_size: Characters per chunk.
        chunk_overlap: Characters shared by neighbouring chunks.
        password: Password for encrypted PDFs.
        progress: Called with an ``IngestEvent`` at each step.
        batch_size: Chunks embedded and written per call.
        prune: Afterwards, remove the sources of ``kb`` whose files no longer exist, with
            their chunks and what killed runs left for them (see
            ``agentic_memory.kinds.knowledge.prune_knowledge_base``).
        owner: Ingest into this user's own knowledge base ``kb`` instead of the shared one.
        roots: The only folders files may come from (a server's ``AMEM_INGEST_DIRS``, see
            ``ingest.inputs.expand_inputs``); ``None``: any path (the library, the CLI).

    Returns:
        The per-file results and totals.

    Example:
        >>> report = ingest_paths(["papers/", "notes/*.md"], kb="research")  # doctest: +SKIP
        >>> report.chunks_written, report.ok  # doctest: +SKIP
    """
    inputs = _check_paths(paths)
    if not isinstance(prune, bool):
        raise InvalidInputError(f"prune must be True or False, got {prune!r}")
    folders = None if roots is None else [Path(r) for r in roots]
    return _ingest(
        lambda: expand_inputs(inputs, roots=folders),
        kb=kb,
        store=store,
        embeddings=embeddings,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        password=password,
        progress=progress,
        batch_size=batch_size,
        prune=prune,
        owner=owner,
        roots=folders,
    )


def ingest_uploads(
    documents: Sequence[Upload],
    *,
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
    """Ingest documents sent as content (no path is read) into knowledge base ``kb``.

    Each document's source is ``upload://<name>``: uploading a name again replaces that
    document. Everything else is as in :func:`ingest_paths`.

    Args:
        documents: The uploads (file name and bytes), at least one.
        kb: Knowledge base name.
        owner: The user whose own knowledge base ``kb`` it goes to; ``None``: the shared one.
        store: See :func:`ingest_paths`.
        embeddings: See :func:`ingest_paths`.
        chunk_size: See :func:`ingest_paths`.
        chunk_overlap: See :func:`ingest_paths`.
        password: See :func:`ingest_paths`.
        progress: See :func:`ingest_paths`.
        batch_size: See :func:`ingest_paths`.
    """
    if isinstance(documents, Upload) or not isinstance(documents, Sequence) or not documents:
        raise InvalidInputError("documents must be a non-empty list of uploads")
    if not all(isinstance(d, Upload) for d in documents):
        raise InvalidInputError("every document must be an ingest.inputs.Upload")
    names = [d.name for d in documents]
    if len(set(names)) != len(names):
        raise InvalidInputError("two uploaded documents have the same name")

    def entries() -> Expanded:
        return Expanded(entries=list(documents))

    return _ingest(
        entries,
        kb=kb,
        store=store,
        embeddings=embeddings,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        password=password,
        progress=progress,
        batch_size=batch_size,
        prune=False,
        owner=owner,
        roots=None,
    )


def _ingest(
    expand: Callable[[], Expanded],
    *,
    kb: str,
    store: MemoryStore | None,
    embeddings: Embeddings | None,
    chunk_size: int,
    chunk_overlap: int,
    password: str | None,
    progress: ProgressCallback | None,
    batch_size: int,
    prune: bool,
    owner: str | None,
    roots: Sequence[Path] | None,
) -> IngestReport:
    started = time.perf_counter()
    knowledge_collection(kb, owner)
    chunk_size, chunk_overlap = _check_settings(chunk_size, chunk_overlap)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidInputError(f"batch size must be a positive integer, got {batch_size!r}")
    if password is not None and not isinstance(password, str):
        raise InvalidInputError("password must be a string")
    emit = progress or (lambda _event: None)

    report = IngestReport(kb=kb, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    expanded = expand()
    report.skipped = [printable_path(s) for s in expanded.skipped]
    total = len(expanded.files)
    emit(IngestEvent("planned", files_total=total))

    if not expanded.files and not prune:
        report.files = [_input_failure(e) for e in expanded.errors]
    else:
        embedder = embeddings if embeddings is not None else get_embeddings()
        dims = embedding_dims(embedder)
        own_store = store is None
        active_store = open_store(dims) if store is None else store
        try:
            if active_store.dims != dims:
                raise InvalidInputError(
                    f"the store holds {active_store.dims}-d vectors but the embeddings make "
                    f"{dims}-d ones"
                )
            base = KnowledgeBase(active_store, kb, owner)
            kb = report.kb = base.name
            job = _Job(
                base,
                embedder,
                chunk_size,
                chunk_overlap,
                password,
                batch_size,
                roots=roots,
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
                result = job.run(entry, _Reporter(emit, shown, index, total))
                report.files.append(result)
                emit(IngestEvent("file_finished", shown, index, total, result=result))
                index += 1
            if prune:
                report.pruned = prune_knowledge_base(active_store, kb, owner=owner)
        finally:
            if own_store:
                active_store.close()
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


def _check_settings(chunk_size: object, chunk_overlap: object) -> tuple[int, int]:
    try:
        return check_split_settings(chunk_size, chunk_overlap)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from None


@dataclass(frozen=True)
class _Reporter:
    """Sends the steps of one file to the progress callback."""

    emit: ProgressCallback
    path: str
    index: int
    total: int

    def __call__(self, kind: EventKind, done: int = 0, of: int = 0) -> None:
        self.emit(IngestEvent(kind, self.path, self.index, self.total, done, of))


class _Job:
    """The per-file work of one ``ingest_paths`` call."""

    def __init__(
        self,
        base: KnowledgeBase,
        embeddings: Embeddings,
        chunk_size: int,
        chunk_overlap: int,
        password: str | None,
        batch_size: int,
        *,
        roots: Sequence[Path] | None = None,
    ) -> None:
        self.base = base
        self.roots = roots
        self.embeddings = embeddings
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.password = password
        self.batch_size = batch_size

    def run(self, path: Path | Upload, step: _Reporter) -> FileResult:
        started = time.perf_counter()
        shown = upload_source(path.name) if isinstance(path, Upload) else printable_path(path)
        result = FileResult(path=shown, status="failed")
        try:
            self._run(path, result, step)
        except IngestFileError as exc:
            result.status, result.error = "failed", str(exc)
        except StoreError as exc:
            result.status, result.error = "failed", f"store error: {exc}"
        result.seconds = time.perf_counter() - started
        return result

    def _run(self, entry: Path | Upload, result: FileResult, step: _Reporter) -> None:
        path = Path(entry.name) if isinstance(entry, Upload) else entry
        # Checked before reading so that a large unrelated file is not loaded for nothing.
        require_kind(path)
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
        result.source = source
        data = entry.data if isinstance(entry, Upload) else read_bytes(entry, within=self.roots)
        sha256 = hashlib.sha256(data).hexdigest()
        revision = revision_of(
            source, sha256, self.chunk_size, self.chunk_overlap, PIPELINE_VERSION
        )
        current = self.base.unchanged(source, revision)
        if current is not None:
            result.status, result.title, result.pages = "unchanged", current.title, current.pages
            result.chunks_unchanged = current.chunks
            result.chunks_removed = self.base.keep(source, revision)
            return

        raw = parse(path, data, password=self.password)
        result.warnings = len(raw.warnings)
        result.warning_sample = raw.warnings[0][:200] if raw.warnings else None
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
        result.title, result.pages = title, document.page_count

        # Before the first chunk: a run killed from here on stays known (see prune).
        self.base.begin(source, revision)
        for start in range(0, len(chunks), self.batch_size):
            batch = chunks[start : start + self.batch_size]
            self._write(batch, source=source, sha256=sha256, title=title, revision=revision)
            result.chunks_written += len(batch)
            step("chunks_progress", result.chunks_written, len(chunks))
        step("chunks_written", len(chunks), len(chunks))

        info = SourceInfo(
            source=source,
            title=title,
            revision=revision,
            sha256=sha256,
            pages=document.page_count,
            chunks=len(chunks),
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            ingested_at=now_rfc3339(),
        )
        self.base.commit(info)
        step("committed")
        result.chunks_removed = self.base.finish(info)
        step("old_removed")
        result.status = "written"

    def _write(
        self, batch: list[TextChunk], *, source: str, sha256: str, title: str, revision: str
    ) -> None:
        vectors = self.embeddings.embed_documents([chunk.text for chunk in batch])
        objects = [
            MemoryObject(
                id=chunk_id(revision, chunk.index),
                properties={
                    "text": chunk.text,
                    "title": title,
                    "source": source,
                    "sha256": sha256,
                    "page_start": chunk.page_start,
                    "page_end": chunk.page_end,
                    "chunk_index": chunk.index,
                    "char_start": chunk.char_start,
                    "char_end": chunk.char_end,
                    "revision": revision,
                    "section": chunk.section,
                    "search_text": chunk_search_text(
                        chunk.text, title=title, section=chunk.section
                    ),
                },
                vector=vector,
            )
            for chunk, vector in zip(batch, vectors, strict=True)
        ]
        self.base.write_chunks(objects)

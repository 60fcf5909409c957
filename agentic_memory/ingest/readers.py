"""Read PDF, plain-text and Markdown files into pages of raw text, with one clear error per bad file.

pypdf reports the problems it works around (odd fonts, broken cross-reference tables) through
``logging`` and ``warnings``. Those are captured and counted here instead of reaching the
user's terminal; the count and the first message travel with the result.
"""

from __future__ import annotations

import io
import logging
import os
import re
import stat
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pypdf import PdfReader
from pypdf.errors import (
    DependencyError,
    FileNotDecryptedError,
    LimitReachedError,
    PdfReadError,
    PdfStreamError,
    PyPdfError,
)

OUTSIDE_FOLDERS = "not inside the documents folders this server may read (AMEM_INGEST_DIRS)"
"""Why a path given to a server is refused (the same words whatever lies outside)."""

_KINDS = {".pdf": "pdf", ".txt": "text", ".md": "markdown", ".markdown": "markdown"}
SUPPORTED_SUFFIXES = tuple(_KINDS)
"""File name endings ingestion accepts (case-insensitive)."""

TITLE_MAX_CHARS = 120

# Content-stream operators that paint something: a page using them without any text is a
# scan or a drawing, which only OCR could read.
_PAINT_OPERATORS = frozenset(
    {b"f", b"F", b"f*", b"S", b"s", b"B", b"B*", b"b", b"b*", b"Do", b"sh", b"BI"}
)


class IngestFileError(Exception):
    """A file cannot be ingested; the message is one line meant for the user."""


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(level=logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


# The logger and the warnings filters are process-wide: two threads capturing at once would
# restore each other's state half-way, so PDF reading is serialised (pypdf holds the GIL
# nearly all the time anyway).
_CAPTURE_LOCK = threading.Lock()


@contextmanager
def captured_pypdf_output() -> Iterator[list[str]]:
    """Capture pypdf's log records and Python warnings for the duration of the block."""
    sink: list[str] = []
    logger = logging.getLogger("pypdf")
    handler = _ListHandler(sink)
    with _CAPTURE_LOCK:
        saved_propagate = logger.propagate
        logger.addHandler(handler)
        logger.propagate = False
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield sink
            sink.extend(str(w.message) for w in caught)
        finally:
            logger.removeHandler(handler)
            logger.propagate = saved_propagate


@dataclass(frozen=True)
class RawDocument:
    """What a reader extracted: the raw text of every page and the document's own title."""

    kind: str
    """``pdf``, ``text`` or ``markdown``."""
    pages: list[str]
    metadata_title: str | None
    warnings: list[str]
    encoding: str | None = None
    """The text encoding used for a text file (``None`` for PDFs)."""


def file_kind(path: Path) -> str | None:
    """Return ``pdf``, ``text`` or ``markdown`` from the file name, or ``None`` if unsupported."""
    return _KINDS.get(path.suffix.lower())


def is_within(path: str, folders: Sequence[Path]) -> bool:
    """Whether a resolved path is one of ``folders`` (resolved) or lies inside one."""
    return any(
        path == str(folder) or path.startswith(str(folder).rstrip(os.sep) + os.sep)
        for folder in folders
    )


def _opened_path(fd: int, path: Path) -> str:
    """Return the real path of the file behind an open descriptor.

    On Linux the kernel names it (``/proc/self/fd``), so a path whose folders were swapped
    for symlinks after a check still shows where it really led; elsewhere the path is
    resolved again.
    """
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def read_bytes(path: Path, *, within: Sequence[Path] | None = None) -> bytes:
    """Read a whole regular file; raise ``IngestFileError`` with the reason when impossible.

    FIFOs, sockets and devices are refused before anything is read from them: opening a FIFO
    for reading waits for a writer, and a device such as ``/dev/zero`` never ends. The file
    is opened without blocking and checked on the open descriptor, so a file swapped for a
    FIFO between a check and the read is refused too.

    With ``within`` (a server's documents folders), the file actually opened must lie inside
    one of them; it is checked on the open descriptor, after every symlink.
    """
    try:
        if within is not None and not is_within(os.path.realpath(path), within):
            raise IngestFileError(OUTSIDE_FOLDERS)
        kind = _special_kind(os.stat(path).st_mode)
        if kind is not None:
            raise IngestFileError(f"not a regular file ({kind}); only regular files are read")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            if within is not None and not is_within(_opened_path(fd, path), within):
                raise IngestFileError(OUTSIDE_FOLDERS)
            kind = _special_kind(os.fstat(fd).st_mode)
            if kind is not None:
                raise IngestFileError(f"not a regular file ({kind}); only regular files are read")
            # Back to blocking reads: O_NONBLOCK means nothing for regular files on Linux,
            # but other systems may honour it.
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as handle:
                return handle.read()
        finally:
            os.close(fd)
    except PermissionError:
        raise IngestFileError("unreadable: permission denied") from None
    except IsADirectoryError:
        raise IngestFileError("unreadable: is a directory") from None
    except FileNotFoundError:
        raise IngestFileError("no such file") from None
    except OSError as exc:
        raise IngestFileError(f"unreadable: {exc.strerror or exc}") from None


def _special_kind(mode: int) -> str | None:
    """Name the kind of a file that is not a regular one (``None`` for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        # Reported as before: reading a directory fails with its own message.
        raise IsADirectoryError(21, "Is a directory")
    for test, name in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a special file"


def require_kind(path: Path) -> str:
    """Return the file's kind, or raise ``IngestFileError`` for an unsupported type."""
    kind = file_kind(path)
    if kind is None:
        raise IngestFileError(
            f"unsupported file type {path.suffix or '(no extension)'!r}; "
            f"supported: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    return kind


def parse(path: Path, data: bytes, *, password: str | None = None) -> RawDocument:
    """Extract the pages of a file already read into ``data``."""
    kind = require_kind(path)
    if not data:
        raise IngestFileError("empty file (0 bytes)")
    if kind == "pdf":
        return _parse_pdf(data, password)
    return _parse_text(data, kind)


def _parse_pdf(data: bytes, password: str | None) -> RawDocument:
    # The header may follow up to 1 KB of junk (a tolerance PDF readers share).
    if b"%PDF-" not in data[:1024]:
        raise IngestFileError(f"not a PDF: {_describe_content(data)}")
    # pypdf reconstructs a cut-off file from whatever objects survive, which would silently
    # ingest part of a document; a missing end-of-file marker is reported instead.
    if b"%%EOF" not in data[-2048:]:
        raise IngestFileError("corrupt or truncated PDF: the end-of-file marker is missing")
    with captured_pypdf_output() as captured:
        try:
            reader = PdfReader(io.BytesIO(data), strict=False)
            if reader.is_encrypted:
                _decrypt(reader, password)
            page_count = len(reader.pages)
            if page_count == 0:
                raise IngestFileError("empty PDF: it has no pages")
            pages = [page.extract_text() or "" for page in reader.pages]
            title = _metadata_title(reader)
            if not any(text.strip() for text in pages):
                if any(_paints(page) for page in reader.pages):
                    raise IngestFileError(
                        f"no extractable text; OCR is not supported ({page_count} page(s) "
                        "of images or drawings)"
                    )
                raise IngestFileError(f"empty PDF: {page_count} blank page(s), no text")
        except IngestFileError:
            raise
        except (FileNotDecryptedError, DependencyError) as exc:
            raise IngestFileError(f"encrypted PDF cannot be read: {_one_line(exc)}") from None
        except LimitReachedError:
            # pypdf stops inflating a stream at its output limit (75 MB): a decompression
            # bomb, or a document far larger than anything worth citing from.
            raise IngestFileError(
                "refused: a compressed stream inflates past the PDF reader's safety limit "
                "(a decompression bomb?)"
            ) from None
        except (PdfReadError, PdfStreamError, ValueError, KeyError, TypeError) as exc:
            raise IngestFileError(f"corrupt or truncated PDF: {_one_line(exc)}") from None
        except RecursionError:
            raise IngestFileError("corrupt PDF: its object structure is circular") from None
        except PyPdfError as exc:
            # Any other refusal of pypdf's concerns this file only, never the whole run.
            raise IngestFileError(f"unreadable PDF: {_one_line(exc)}") from None
    return RawDocument(kind="pdf", pages=pages, metadata_title=title, warnings=captured)


def _decrypt(reader: PdfReader, password: str | None) -> None:
    # PdfReader already tried the empty user password, which many "protected" PDFs use
    # only to restrict printing; whether that worked shows in decrypt("") as well.
    for candidate in ("", password) if password else ("",):
        try:
            if reader.decrypt(candidate):
                return
        except DependencyError as exc:
            raise IngestFileError(f"encrypted PDF cannot be read: {_one_line(exc)}") from None
    if password:
        raise IngestFileError("encrypted; the password is wrong")
    raise IngestFileError("encrypted; pass --password")


def _metadata_title(reader: PdfReader) -> str | None:
    try:
        metadata = reader.metadata
    except (PdfReadError, ValueError, KeyError, TypeError):
        return None
    title = metadata.title if metadata is not None else None
    if isinstance(title, str) and title.strip():
        return " ".join(title.split())[:TITLE_MAX_CHARS]
    return None


def _paints(page: object) -> bool:
    try:
        if getattr(page, "images", None):
            return True
        contents = page.get_contents()  # type: ignore[attr-defined]
        if contents is None:
            return False
        return any(operator in _PAINT_OPERATORS for _, operator in contents.operations)
    except (PdfReadError, PdfStreamError, ValueError, KeyError, TypeError, AttributeError):
        # An unparsable content stream still painted nothing we could read.
        return False


def _parse_text(data: bytes, kind: str) -> RawDocument:
    if b"\x00" in data[:8192]:
        raise IngestFileError("not a text file: it contains binary data")
    if data.startswith(b"%PDF-"):
        raise IngestFileError("not a text file: it is a PDF; rename it to .pdf")
    try:
        text, encoding = data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        # Legacy Windows text is the common non-UTF-8 case; cp1252 leaves 5 bytes undefined.
        try:
            text, encoding = data.decode("cp1252"), "cp1252"
        except UnicodeDecodeError:
            text, encoding = data.decode("latin-1"), "latin-1"
    if not text.strip():
        raise IngestFileError("empty file: only whitespace")
    # A form feed is the plain-text page break (pdftotext writes one per page).
    pages = text.split("\f")
    return RawDocument(kind=kind, pages=pages, metadata_title=None, warnings=[], encoding=encoding)


def derive_title(raw: RawDocument, cleaned_text: str, path: Path) -> str:
    """Pick a title: the PDF's metadata title, else the first heading or line, else the file name.

    A PDF's first line is often its running header ("Published in Transactions on Machine
    Learning Research (02/2024)"), so for PDFs the first line of the first page that is not
    repeated on other pages (nor a page number or an arXiv stamp) is taken. A metadata title
    that only repeats the file name or a word processor's placeholder counts as none.
    """
    if raw.metadata_title and not _placeholder_title(raw.metadata_title, path):
        return raw.metadata_title
    if raw.kind == "pdf":
        heading = _first_page_heading(raw.pages)
        if heading:
            return heading[:TITLE_MAX_CHARS]
    lines = [line.strip() for line in cleaned_text.split("\n") if line.strip()]
    if raw.kind == "markdown":
        for line in lines:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
                if heading:
                    return heading[:TITLE_MAX_CHARS]
    if lines:
        return lines[0].lstrip("#").strip()[:TITLE_MAX_CHARS] or path.name
    return path.name


_RUNNING_LINES = 4
"""Lines at the top and at the bottom of a page where running headers and footers sit."""
_DIGITS = re.compile(r"\d+")
_STAMP = re.compile(r"^(arxiv:\S+.*|page \d+( of \d+)?|\d+( / \d+)?|doi:\S+|https?://\S+)$", re.I)


def _placeholder_title(title: str, path: Path) -> bool:
    folded = title.strip().lower()
    return folded in {
        "untitled",
        "title",
        "document",
        path.name.lower(),
        path.stem.lower(),
    } or folded.startswith("microsoft word - ")


def _margins(page: str) -> list[str]:
    lines = [" ".join(line.split()) for line in page.splitlines() if line.strip()]
    return lines[:_RUNNING_LINES] + lines[-_RUNNING_LINES:]


def _first_page_heading(pages: Sequence[str]) -> str | None:
    """Return the first line of the first page that is not a running header or a stamp.

    A line is running when the same line, digits ignored (page numbers, dates), sits near the
    top or bottom of another page too.
    """
    texts = [page for page in pages if page.strip()]
    if not texts:
        return None
    elsewhere: set[str] = set()
    for page in texts[1:]:
        elsewhere.update(_DIGITS.sub("#", line).lower() for line in _margins(page))
    candidates = [" ".join(line.split()) for line in texts[0].splitlines()]
    candidates = [
        line
        for line in candidates
        if len(re.findall(r"[^\W\d_]", line)) >= 3 and not _STAMP.match(line)
    ]
    for line in candidates:
        if _DIGITS.sub("#", line).lower() not in elsewhere:
            return line
    # Every line repeats (a one-line document printed on every page): the first is it.
    return candidates[0] if candidates else None


def _describe_content(data: bytes) -> str:
    head = data[:256].decode("utf-8", errors="replace")
    if "\x00" not in head and all(c.isprintable() or c in "\n\r\t\f" for c in head[:-1]):
        return "the file contains text, not PDF data"
    return f"unrecognised content starting with {data[:8]!r}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__

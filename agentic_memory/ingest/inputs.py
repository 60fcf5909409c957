"""Turn what a user gives into what to ingest: paths (files, directories, globs) or uploads.

On a server, paths are confined to the documents folders the operator allows
(``AMEM_INGEST_DIRS``, see :func:`ingest_roots`): every path is resolved (symlinks, ``..``)
before it is checked, files found in a directory or by a pattern are checked one by one, and
the file actually opened is checked again (:func:`ingest.readers.read_bytes`). Without such
folders a server reads no path at all, only uploaded content (:class:`Upload`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentic_memory.ingest.readers import OUTSIDE_FOLDERS, SUPPORTED_SUFFIXES, file_kind, is_within

__all__ = [
    "INGEST_DIRS_ENV",
    "MAX_UPLOAD_BYTES",
    "Expanded",
    "InputError",
    "Upload",
    "expand_inputs",
    "ingest_roots",
]

_GLOB_CHARS = frozenset("*?[")

INGEST_DIRS_ENV = "AMEM_INGEST_DIRS"
"""The documents folders a server may read (``os.pathsep``-separated); none by default."""

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
"""The largest uploaded document, in bytes."""


def ingest_roots(spec: str | None = None) -> list[Path]:
    """Return the documents folders a server may ingest from (``AMEM_INGEST_DIRS``), resolved.

    Each must be an absolute path to an existing directory.
    """
    raw = os.environ.get(INGEST_DIRS_ENV, "") if spec is None else spec
    roots: list[Path] = []
    for part in raw.split(os.pathsep):
        part = part.strip()
        if not part:
            continue
        given = Path(part)
        if not given.is_absolute() or not given.is_dir():
            raise ValueError(f"{INGEST_DIRS_ENV}: {part!r} is not an absolute path to a folder")
        roots.append(Path(os.path.realpath(given)))
    return roots


@dataclass(frozen=True)
class Upload:
    """A document sent with the request instead of a path: its file name and its bytes."""

    name: str
    """A file name (no folder) whose ending says its type: ``notes.md``, ``paper.pdf``."""
    data: bytes

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise ValueError("an uploaded document needs a file name without surrounding spaces")
        if "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
            raise ValueError(
                f"an uploaded document's name is a file name, not a path: {name!r:.80}"
            )
        if len(name) > 255 or any(ord(c) < 32 for c in name):
            raise ValueError("an uploaded document's name is at most 255 printable characters")
        if file_kind(Path(name)) is None:
            raise ValueError(
                f"unsupported file type of {name!r:.80}; supported: {', '.join(SUPPORTED_SUFFIXES)}"
            )
        if not isinstance(self.data, bytes):
            raise ValueError("an uploaded document's data are bytes")
        if len(self.data) > MAX_UPLOAD_BYTES:
            raise ValueError(
                f"{name!r:.80} has {len(self.data):,} bytes; an upload has at most "
                f"{MAX_UPLOAD_BYTES:,}"
            )


@dataclass(frozen=True)
class InputError:
    """An input that gave no file to ingest, and why."""

    given: str
    reason: str


@dataclass
class Expanded:
    """The files found and the inputs that gave none, in input order, and the files passed over."""

    entries: list[Path | Upload | InputError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Files inside a directory or glob whose type is not supported."""

    @property
    def files(self) -> list[Path | Upload]:
        """The files (or uploaded documents) to ingest."""
        return [e for e in self.entries if not isinstance(e, InputError)]

    @property
    def errors(self) -> list[InputError]:
        """The inputs that gave no file."""
        return [e for e in self.entries if isinstance(e, InputError)]

    def fail(self, given: str, reason: str) -> None:
        """Record an input that gave no file."""
        self.entries.append(InputError(given, reason))


def expand_inputs(paths: Sequence[str | Path], *, roots: Sequence[Path] | None = None) -> Expanded:
    """Expand files, directories (recursively) and glob patterns, in order, without duplicates.

    A file named explicitly is always kept, even with an unsupported type, so that the user
    gets a message about it; inside directories and globs such files are only counted as
    skipped. Hidden files and directories (names starting with ``.``) are not entered.

    With ``roots`` (the documents folders of a server), a relative path or pattern is taken
    inside the first folder where it exists, ``~`` is not expanded, and every path, and every
    file found under one, must lie inside a folder once symlinks and ``..`` are resolved;
    the others fail with one message that says nothing about what is outside.
    """
    result = Expanded()
    seen: set[str] = set()
    confined = roots is not None
    folders = list(roots or ())

    def add(path: Path) -> None:
        key = os.path.realpath(path)
        if confined and not is_within(key, folders):
            result.fail(str(path), OUTSIDE_FOLDERS)
            return
        if key not in seen:
            seen.add(key)
            result.entries.append(path)

    for given in paths:
        text = str(given)
        if confined:
            located = _locate(text, folders)
            if located is None:
                result.fail(text, OUTSIDE_FOLDERS)
                continue
            text = located
        path = Path(text) if confined else Path(text).expanduser()
        is_pattern = bool(_GLOB_CHARS & set(text))
        # Nothing outside the folders is even looked at: a pattern there matches nothing.
        literal = not confined or is_within(os.path.realpath(path), folders)
        if not literal and not is_pattern:
            result.fail(str(given), OUTSIDE_FOLDERS)
            continue
        if literal and path.is_dir():
            _walk(path, text, result, add)
        elif literal and (path.exists() or path.is_symlink()):
            add(path)
        elif is_pattern:
            pattern = text if confined else os.path.expanduser(text)
            matches = sorted(glob.glob(pattern, recursive=True))
            if confined:
                # What matches outside the folders is passed over without a word about it.
                matches = [m for m in matches if is_within(os.path.realpath(m), folders)]
            found_before = len(result.files)
            for match in matches:
                candidate = Path(match)
                if candidate.is_dir():
                    _walk(candidate, match, result, add)
                elif file_kind(candidate) is not None:
                    add(candidate)
                else:
                    result.skipped.append(match)
            if not matches:
                result.fail(text, "no files match this pattern")
            elif len(result.files) == found_before and not any(Path(m).is_dir() for m in matches):
                result.fail(text, f"no {', '.join(SUPPORTED_SUFFIXES)} files match this pattern")
        else:
            result.fail(text, "no such file or directory")
    return result


def _locate(text: str, folders: Sequence[Path]) -> str | None:
    """Return where a path or pattern given to a server points (inside a folder, or not).

    An absolute one is kept as it is (checked once resolved); a relative one is joined to
    the first folder where it (or, for a pattern, a match) exists, else to the first folder.
    ``None`` when there is no folder at all.
    """
    if not folders:
        return None
    if Path(text).is_absolute():
        return text
    for folder in folders:
        candidate = str(folder / text)
        if os.path.lexists(candidate) or (_GLOB_CHARS & set(text) and glob.glob(candidate)):
            return candidate
    return str(folders[0] / text)


def _walk(root: Path, given: str, result: Expanded, add: Callable[[Path], None]) -> None:
    found = 0

    def on_error(exc: OSError) -> None:
        where = exc.filename or given
        reason = "permission denied" if isinstance(exc, PermissionError) else exc.strerror
        result.fail(str(where), f"unreadable directory: {reason}")

    for directory, subdirs, names in os.walk(root, onerror=on_error, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            candidate = Path(directory) / name
            if file_kind(candidate) is None:
                result.skipped.append(str(candidate))
                continue
            add(candidate)
            found += 1
    if found == 0 and not any(e.given.startswith(str(root)) for e in result.errors):
        result.fail(given, f"directory has no {', '.join(SUPPORTED_SUFFIXES)} files to ingest")

"""Turn the paths a user gives (files, directories, glob patterns) into the files to ingest."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ingest.readers import SUPPORTED_SUFFIXES, file_kind

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class InputError:
    """An input that gave no file to ingest, and why."""

    given: str
    reason: str


@dataclass
class Expanded:
    """The files found and the inputs that gave none, in input order, and the files passed over."""

    entries: list[Path | InputError] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Files inside a directory or glob whose type is not supported."""

    @property
    def files(self) -> list[Path]:
        """The files to ingest."""
        return [e for e in self.entries if isinstance(e, Path)]

    @property
    def errors(self) -> list[InputError]:
        """The inputs that gave no file."""
        return [e for e in self.entries if isinstance(e, InputError)]

    def fail(self, given: str, reason: str) -> None:
        """Record an input that gave no file."""
        self.entries.append(InputError(given, reason))


def expand_inputs(paths: Sequence[str | Path]) -> Expanded:
    """Expand files, directories (recursively) and glob patterns, in order, without duplicates.

    A file named explicitly is always kept, even with an unsupported type, so that the user
    gets a message about it; inside directories and globs such files are only counted as
    skipped. Hidden files and directories (names starting with ``.``) are not entered.
    """
    result = Expanded()
    seen: set[str] = set()

    def add(path: Path) -> None:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            result.entries.append(path)

    for given in paths:
        text = str(given)
        path = Path(text).expanduser()
        if path.is_dir():
            _walk(path, text, result, add)
        elif path.exists() or path.is_symlink():
            add(path)
        elif _GLOB_CHARS & set(text):
            matches = sorted(glob.glob(os.path.expanduser(text), recursive=True))
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

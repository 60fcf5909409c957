"""Where the package keeps local data (``AMEM_HOME``), and files only their owner can read.

The one module that knows the data folder and its permissions: the store, the models'
caches and the local server, the checkpointer and ``make run`` all ask it.


Memories, checkpoints and logs hold what users said. Folders this package creates get mode
0700 and files 0600 whatever the umask; existing ones that belong to the running user lose
their group and other permissions when they are opened again. A folder that already existed
and that the package does not own by name (``AMEM_HOME`` itself, a parent of a custom path)
is left as it is: it may be shared on purpose (``/tmp``, a home directory).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_HOME",
    "FILE_LOCKS",
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "amem_home",
    "locked_file",
    "private_dir",
    "private_file",
    "tighten",
]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_GROUP_OTHER = 0o077
DEFAULT_HOME = "~/.agentic-memory"


def amem_home() -> Path:
    """Return the local data directory: ``$AMEM_HOME``, else ``~/.agentic-memory``."""
    raw = os.environ.get("AMEM_HOME", "").strip()
    return Path(raw or DEFAULT_HOME).expanduser()


def tighten(paths: Iterable[Path]) -> None:
    """Remove group and other permissions from those of ``paths`` that exist and are ours.

    Best effort: a path owned by someone else, or gone meanwhile, is left alone.
    """
    for path in paths:
        try:
            info = path.stat()
            if info.st_uid == os.getuid() and info.st_mode & _GROUP_OTHER:
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~_GROUP_OTHER)
        except OSError:
            continue


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents with mode 0700; tighten ``path`` if it exists.

    Returns:
        ``path``.

    Raises:
        OSError: A folder cannot be created.
    """
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # created meanwhile by another process
        # mkdir's mode passes through the umask; set it exactly.
        os.chmod(folder, PRIVATE_DIR_MODE)
    tighten([path])
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` empty with mode 0600 if it is missing, else tighten it.

    SQLite gives a database's ``-wal`` and ``-shm`` files the database file's permissions,
    so creating the database file this way before SQLite opens it covers all three.

    Returns:
        ``path``.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        tighten([path])
    else:
        os.close(fd)
        os.chmod(path, PRIVATE_FILE_MODE)
    return path


FILE_LOCKS = fcntl is not None
"""Whether :func:`locked_file` excludes other processes (``flock``; not on Windows)."""


@contextlib.contextmanager
def locked_file(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created 0600) for the ``with`` block.

    The kernel releases it when its holder dies, so a killed holder blocks no one. Without
    ``flock`` (Windows) it excludes nothing: callers that need more check :data:`FILE_LOCKS`.
    """
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

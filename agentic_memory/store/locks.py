"""Per-key mutual exclusion for the threads of one process and the processes of one machine.

Used where the backend itself cannot make a check-then-write atomic (Weaviate has no
transactions and no conditional writes). A key maps to one of a fixed number of *stripes*;
each stripe is a ``threading.Lock`` (threads of this process) plus an exclusive ``flock`` on
a lock file of its own (other processes). Striping keeps the number of lock files fixed
whatever the number of users; two keys that share a stripe merely wait for each other.

``flock`` locks belong to an open file description, so two handles in one process exclude
each other like two processes do, and the kernel releases the lock of a process that dies.
They do not work across machines, nor reliably on network file systems: across machines,
``agentic_memory.store.coordination`` adds a PostgreSQL advisory lock per key.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentic_memory.paths import FILE_LOCKS, locked_file

__all__ = ["KeyLocks"]

DEFAULT_STRIPES = 64


class KeyLocks:
    """Exclusive locks by key, shared by every ``KeyLocks`` on the same directory."""

    def __init__(self, directory: Path | None, *, stripes: int = DEFAULT_STRIPES) -> None:
        """Lock files live in ``directory`` (created 0700 on first use); ``None``: threads only."""
        if stripes <= 0:
            raise ValueError("stripes must be positive")
        self.directory = directory
        self.stripes = stripes
        self._threads = [threading.Lock() for _ in range(stripes)]

    @property
    def cross_process(self) -> bool:
        """Whether other processes on this machine are excluded too."""
        return self.directory is not None and FILE_LOCKS

    def stripe(self, *key: str) -> int:
        """Return the stripe a key maps to (stable across processes and runs)."""
        digest = hashlib.blake2b("\x1f".join(key).encode("utf-8", "surrogatepass"), digest_size=8)
        return int.from_bytes(digest.digest(), "little") % self.stripes

    @contextmanager
    def hold(self, *key: str) -> Iterator[None]:
        """Hold the lock of ``key`` for the duration of the ``with`` block."""
        stripe = self.stripe(*key)
        with self._threads[stripe]:
            if not self.cross_process:
                yield
                return
            assert self.directory is not None
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with locked_file(self.directory / f"{stripe:03d}.lock"):
                yield

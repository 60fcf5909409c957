"""``agentic_memory.store.locks.KeyLocks``: mutual exclusion across threads, handles and processes."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentic_memory.store.locks import KeyLocks


def _bump(counter: Path, locks: KeyLocks, times: int) -> None:
    """Read-modify-write a counter file under the lock, slowly enough to race without it."""
    for _ in range(times):
        with locks.hold("collection", "tenant"):
            value = int(counter.read_text() or "0")
            time.sleep(0.001)
            counter.write_text(str(value + 1))


def _process(lock_dir: str, counter: str, times: int) -> None:
    _bump(Path(counter), KeyLocks(Path(lock_dir)), times)


def test_processes_exclude_each_other(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_process, args=(str(tmp_path / "locks"), str(counter), 40))
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert counter.read_text() == "120"
    # Lock files are private and their number is fixed.
    assert (tmp_path / "locks").stat().st_mode & 0o777 == 0o700
    files = list((tmp_path / "locks").iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600


def test_threads_and_two_handles_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    handles = [KeyLocks(tmp_path / "locks"), KeyLocks(tmp_path / "locks")]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: _bump(counter, handles[i % 2], 25), range(4)))
    assert counter.read_text() == "100"


def test_keys_on_other_stripes_do_not_wait(tmp_path: Path) -> None:
    locks = KeyLocks(tmp_path / "locks", stripes=64)
    a, b = (
        "k0",
        next(f"k{i}" for i in range(1, 1000) if locks.stripe(f"k{i}") != locks.stripe("k0")),
    )
    inside = threading.Event()
    release = threading.Event()

    def hold_a() -> None:
        with locks.hold(a):
            inside.set()
            release.wait(10)

    t = threading.Thread(target=hold_a)
    t.start()
    assert inside.wait(10)
    with locks.hold(b):  # would block forever if it shared a's lock
        pass
    release.set()
    t.join()


def test_stripes_are_stable_and_bad_settings_refused(tmp_path: Path) -> None:
    assert KeyLocks(None).stripe("a", "b") == KeyLocks(tmp_path).stripe("a", "b")
    assert not KeyLocks(None).cross_process
    with KeyLocks(None).hold("x"):
        pass
    with pytest.raises(ValueError, match="stripes"):
        KeyLocks(None, stripes=0)
    assert os.name != "posix" or KeyLocks(tmp_path).cross_process

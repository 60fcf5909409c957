"""A real PostgreSQL server for the persistence tests, started and stopped by the tests.

The server runs as the ``postgres`` user when the tests run as root (``initdb`` refuses
root), with trust authentication on 127.0.0.1 and a free port, from a throw-away data
directory under /tmp (pytest's own tmp dirs are private to root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip(
            "PostgreSQL IS NOT INSTALLED: no initdb under /usr/lib/postgresql/*/bin or on PATH; "
            "the PostgreSQL checkpointer tests did not run"
        )
    as_root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    if as_root:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("RUNNING AS ROOT WITHOUT A 'postgres' USER: initdb refuses root")
        if shutil.which("runuser") is None:
            pytest.skip("RUNNING AS ROOT WITHOUT runuser: cannot start PostgreSQL as 'postgres'")
    base = Path(tempfile.mkdtemp(prefix="amem-pg-"))
    if as_root:
        os.chown(base, owner.pw_uid, owner.pw_gid)
    data = base / "data"
    port = _free_port()

    def run(*args: str) -> None:
        result = subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            log = (base / "server.log").read_text() if (base / "server.log").exists() else ""
            raise RuntimeError(
                f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n"
                f"{result.stderr}\n{log}"
            )

    started = False
    try:
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
            "--no-locale",
        )
        options = f"-h 127.0.0.1 -p {port} -k {base} -c fsync=off -c full_page_writes=off"
        run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(base / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        started = True
        run(
            str(bindir / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "postgres",
            "amem_test",
        )
        yield f"postgresql://postgres@127.0.0.1:{port}/amem_test"
    finally:
        if started:
            subprocess.run(
                [
                    *prefix,
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-m",
                    "fast",
                    "-w",
                    "-t",
                    "30",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(base, ignore_errors=True)

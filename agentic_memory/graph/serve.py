"""Serve the agent with ``langgraph dev`` from a private folder under ``AMEM_HOME``: ``make run``.

``python -m agentic_memory.graph.serve [--config langgraph.auth.json] [--port 2024] [langgraph dev options]``.

``langgraph dev`` keeps its threads, runs and assistants in ``.langgraph_api/`` of its
*working directory* (``langgraph_runtime_inmem`` hard-codes that relative path; no setting
moves it), so it is started from ``$AMEM_HOME/langgraph-dev/``: each home has its own server
data, next to its store. The process runs with umask 077, so every file the server writes
there (it rewrites them every 10 s) is 0600; the checkpoints go to the checkpointer
``langgraph.json`` names (``docs/persistence.md``). A second server on the same home would
overwrite the first one's threads at its next flush, so the home is locked for the server's
life. Before it starts, one line says who can read what (without ``auth`` anyone who reaches
the port reads every user's memories) and one names the chat model of ``model: "auto"``.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from agentic_memory.models.chat import describe_default_model
from agentic_memory.paths import amem_home, private_dir, tighten

__all__ = ["SERVER_DIR", "free_port", "claim", "exposure_line", "main", "prepare"]

SERVER_DIR = "langgraph-dev"
"""The folder under ``AMEM_HOME`` that ``langgraph dev`` runs in (its ``.langgraph_api/``)."""

REPO = Path(__file__).resolve().parents[2]
_LINKED = ("graph", "ingest")
"""The packages ``langgraph.json`` names by path (``agentic_memory.graph.graph:graph``, …)."""


def exposure_line(config: dict[str, object], url: str) -> str:
    """Return the one line ``make run`` prints first: who can read what on this server."""
    if config.get("auth"):
        return (
            f"Authentication on ({url}): each bearer token of AMEM_AUTH_TOKENS sees only its "
            "own user's threads and memories."
        )
    return (
        f"WARNING: no authentication: anyone who can reach {url} reads and changes every "
        'user\'s memories and threads (client.store.search_items(("facts",)), '
        "threads.search()); serve with auth: make run CONFIG=langgraph.auth.json and "
        "AMEM_AUTH_TOKENS=token=user,..."
    )


def prepare(home: Path) -> Path:
    """Create the server's private working folder under ``home``; return it.

    The folder is 0700 and links the packages ``langgraph.json`` names; a ``.langgraph_api/``
    left there by an earlier run (written with a looser umask) loses group and other access.
    """
    folder = private_dir(home / SERVER_DIR)
    for name in _LINKED:
        link = folder / name
        target = REPO / name
        if link.is_symlink() and link.resolve() == target.resolve():
            continue
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.exists():
            shutil.rmtree(link)
        link.symlink_to(target, target_is_directory=True)
    data = folder / ".langgraph_api"
    if data.is_dir():
        tighten([data, *data.rglob("*")])
    return folder


def claim(folder: Path, port: int) -> int:
    """Lock the server folder for this server's life (exit if another holds it); return the fd.

    The descriptor is inherited by ``langgraph dev`` (``execv``), so the lock lasts as long as
    the server does and goes when it dies.
    """
    path = folder / "server.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = path.read_text(encoding="utf-8").strip() or "another process"
        os.close(fd)
        sys.exit(
            f"another server already serves AMEM_HOME={folder.parent} ({holder}): two servers "
            "would overwrite each other's threads. Stop it, or give this one its own home: "
            "AMEM_HOME=/some/other/folder make run"
        )
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, port {port}".encode())
    os.set_inheritable(fd, True)
    return fd


def free_port(host: str, port: int) -> int:
    """Return ``port`` when nothing listens on it, else the next free one (said on stderr).

    ``langgraph dev`` would move to another port by itself, and the lines printed before it
    starts would name the wrong one.
    """
    for candidate in range(port, port + 50):
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            try:
                probe.bind((host, candidate))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                continue
        if candidate != port:
            sys.stderr.write(f"port {port} is in use on {host}: serving on port {candidate}\n")
        return candidate
    sys.exit(f"ports {port}-{port + 49} are in use on {host}: choose one, make run PORT=...")


def main(argv: Sequence[str] | None = None) -> None:
    """Prepare the folder, say who can read what and which model answers, then run ``langgraph dev``.

    Options other than ``--config``, ``--port``, ``--host`` and ``--reload`` go to
    ``langgraph dev`` unchanged (``--n-jobs-per-worker N``, …).
    """
    parser = argparse.ArgumentParser(
        prog="python -m agentic_memory.graph.serve",
        description="Run `langgraph dev` from a private folder under AMEM_HOME.",
    )
    parser.add_argument(
        "--config",
        default="langgraph.json",
        help="Configuration file (a relative name not found here is the repository's).",
    )
    parser.add_argument("--port", type=int, default=2024, help="Port (default 2024).")
    parser.add_argument("--host", default="127.0.0.1", help="Interface (default 127.0.0.1).")
    parser.add_argument(
        "--reload",
        action="store_true",
        help="Restart on edits to graph/ and ingest/ (linked into the data folder).",
    )
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    config_path = Path(args.config)
    if not config_path.is_absolute() and not config_path.exists():
        config_path = REPO / config_path  # the repository's, from any working directory
    config_path = config_path.resolve()
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"cannot read {args.config}: {exc}")
    home = amem_home().expanduser().resolve()
    os.umask(0o077)
    folder = prepare(home)
    port = free_port(args.host, args.port)
    lock = claim(folder, port)
    sys.stdout.write(exposure_line(config, f"http://{args.host}:{port}") + "\n")
    sys.stdout.write(describe_default_model() + "\n")
    sys.stdout.flush()
    os.environ["AMEM_HOME"] = str(home)
    os.environ.setdefault("LANGGRAPH_NO_VERSION_CHECK", "true")
    langgraph = Path(sys.executable).with_name("langgraph")
    command = [
        str(langgraph),
        "dev",
        "--config",
        str(config_path),
        "--host",
        args.host,
        "--port",
        str(port),
        "--no-browser",
        # The reloader watches the working directory, the data folder below: it logs each
        # flush of the server's state there, every few seconds, for as long as it runs.
        *([] if args.reload or "--no-reload" in rest else ["--no-reload"]),
        *rest,
    ]
    os.chdir(folder)
    try:
        os.execv(command[0], command)
    finally:  # only reached when the server could not be started
        os.close(lock)


if __name__ == "__main__":
    main()

"""Serve the agent with ``langgraph dev`` from a private folder under ``AMEM_HOME``: ``make run``.

``python -m agentic_memory.graph.serve [--config langgraph.auth.json] [--port 2024] [langgraph dev options]``
starts ``langgraph dev`` with:

* **its own data under** ``$AMEM_HOME/langgraph-dev/``. ``langgraph dev`` keeps its threads,
  runs and assistants in ``.langgraph_api/`` of its *working directory* (``langgraph_runtime_inmem``
  hard-codes that relative path; no setting moves it), so it is started from that folder,
  which holds links to ``graph/`` and ``ingest/``. Each ``AMEM_HOME`` thus has its own server
  data, next to its store, instead of one ``./.langgraph_api/`` shared by every home;
* **private files**: the process runs with umask 077, so that folder is 0700 and every file
  the server writes there (it rewrites them every 10 s) is 0600; an older world-readable
  ``.langgraph_api/`` there is tightened first. The checkpoints themselves go to the
  checkpointer ``langgraph.json`` names (``graph/persistence.py:open_checkpointer``:
  ``$AMEM_HOME/checkpoints.sqlite``, 0600, or PostgreSQL), see ``docs/persistence.md``;
* **one line saying who can read what**: without an ``auth`` entry in the configuration,
  anyone who can reach the port reads and changes every user's memories and threads;
* **one line naming the chat model** that runs with ``model: "auto"`` (the default): OpenAI,
  the endpoint at ``AMEM_BASE_URL``, or the bundled offline model
  (:func:`agentic_memory.models.chat.describe_default_model`).

``AMEM_HOME`` is made absolute before the working directory changes. Nothing runs at import.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from agentic_memory.models.chat import describe_default_model
from agentic_memory.paths import amem_home, private_dir, tighten

__all__ = ["SERVER_DIR", "exposure_line", "main", "prepare"]

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


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
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
    return parser.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Prepare the folder, say who can read what and which model answers, then run ``langgraph dev``.

    Options other than ``--config``, ``--port`` and ``--host`` go to ``langgraph dev``
    unchanged (``--no-reload``, ``--n-jobs-per-worker N``, …).
    """
    args, rest = _parse(sys.argv[1:] if argv is None else argv)
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
    sys.stdout.write(exposure_line(config, f"http://{args.host}:{args.port}") + "\n")
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
        str(args.port),
        "--no-browser",
        *rest,
    ]
    os.chdir(folder)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()

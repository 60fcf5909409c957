"""A replica of the agent's server for the smoke tests: ``langgraph dev`` in its own directory.

``launch`` starts one in a new session (so it outlives whoever started it) and records how
in a state file; ``python -m tests.integration.deploy.replica restart STATE`` stops the recorded process
and starts it again the same way (the smoke script's ``--restart`` command); ``stop`` ends it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LANGGRAPH = Path(sys.executable).with_name("langgraph")


def launch(workdir: Path, port: int, env: dict[str, str], log: Path, state: Path) -> int:
    """Start ``langgraph dev`` on ``port`` from ``workdir``; record it in ``state``; return its pid."""
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [
                str(LANGGRAPH),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=workdir,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    state.write_text(
        json.dumps(
            {
                "workdir": str(workdir),
                "port": port,
                "env": env,
                "log": str(log),
                "pid": process.pid,
            }
        )
    )
    return process.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child of this process that exited stays a zombie until reaped.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == 0


def stop(state: Path) -> None:
    """End the recorded replica and every process of its session."""
    pid = int(json.loads(state.read_text())["pid"])
    for sig, wait_s in ((signal.SIGINT, 15.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.2)


def restart(state: Path) -> int:
    """Stop the recorded replica and start it again; return the new pid."""
    recorded = json.loads(state.read_text())
    stop(state)
    return launch(
        Path(recorded["workdir"]),
        int(recorded["port"]),
        dict(recorded["env"]),
        Path(recorded["log"]),
        state,
    )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "restart":
        sys.exit("usage: python -m tests.integration.deploy.replica restart STATE")
    restart(Path(sys.argv[2]))

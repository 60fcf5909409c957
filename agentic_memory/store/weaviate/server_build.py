"""Weaviate's server binary: built once per machine and version from its Go module.

``build()`` runs ``go install …/cmd/weaviate-server@v<WEAVIATE_VERSION>`` (cgo on, as the
server's own Dockerfile builds it) through the Go module proxy, into a cache outside any clone
(``server_path()``: ``${XDG_CACHE_HOME:-~/.cache}/agentic-memory/weaviate-server/
v<version>/<os>-<arch>/``), so a machine builds each version once. Without Go, or without the
proxy, it builds nothing, says why in one line and records the line (``unavailable_reason``)
for the live tests to skip with. ``launcher`` runs the binary (and re-exports these names).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from agentic_memory.paths import locked_file
from agentic_memory.store.ranking import WEAVIATE_VERSION

__all__ = [
    "BINARY",
    "MODULE",
    "BuildUnavailable",
    "build",
    "cache_dir",
    "say",
    "server_path",
    "unavailable_reason",
]

MODULE = "github.com/weaviate/weaviate"
PACKAGE = f"{MODULE}/cmd/weaviate-server"
BINARY = "weaviate-server"


class BuildUnavailable(Exception):
    """Go or its module proxy is missing: the server cannot be built here (one-line reason)."""


def cache_dir(version: str = WEAVIATE_VERSION) -> Path:
    """Return the folder of one version's build: outside any clone, shared by checkouts."""
    root = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    system = f"{platform.system().lower()}-{_go_arch()}"
    return Path(root).expanduser() / "agentic-memory" / BINARY / f"v{version}" / system


def server_path(version: str = WEAVIATE_VERSION) -> Path:
    """Return where ``build`` puts the binary (``AMEM_WEAVIATE_SERVER`` names another one)."""
    override = os.environ.get("AMEM_WEAVIATE_SERVER", "").strip()
    return Path(override).expanduser() if override else cache_dir(version) / BINARY


def unavailable_reason(version: str = WEAVIATE_VERSION) -> str | None:
    """Return why no server binary is here (``None`` when there is one), in one line."""
    if server_path(version).is_file():
        return None
    recorded = cache_dir(version) / "unavailable.txt"
    with contextlib.suppress(OSError):
        line = recorded.read_text(encoding="utf-8").strip()
        if line:
            return line
    return (
        f"weaviate-server {version} is not built ({server_path(version)}): "
        "`make weaviate-server` builds it with Go and the Go module proxy"
    )


def build(version: str = WEAVIATE_VERSION, *, log: IO[str] | None = None) -> Path:
    """Build the server once per machine and version; return the binary's path.

    Raises:
        BuildUnavailable: Go is not installed or the module proxy does not answer (the
            reason is also written where ``unavailable_reason`` reads it).
        RuntimeError: Go and the proxy answered but the build failed (its output says why).
    """
    target = server_path(version)
    if target.is_file():
        return target
    folder = cache_dir(version)
    folder.mkdir(parents=True, exist_ok=True)
    # One build per machine at a time: a second `make test` waits for the first one's binary.
    with locked_file(folder / "build.lock"):
        if target.is_file():
            return target
        try:
            go = _check_go(version)
        except BuildUnavailable as exc:
            (folder / "unavailable.txt").write_text(f"{exc}\n", encoding="utf-8")
            raise
        (folder / "unavailable.txt").unlink(missing_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="gobin-", dir=folder))
        try:
            env = {**os.environ, "GOBIN": str(staging), "CGO_ENABLED": "1"}
            command = [go, "install", f"{PACKAGE}@v{version}"]
            say(f"building {' '.join(command)} (the first build takes about 5 minutes)", log)
            started = time.monotonic()
            done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True)
            output = (done.stdout + done.stderr).strip()
            (folder / "build.log").write_text(output + "\n", encoding="utf-8")
            if done.returncode != 0:
                tail = "\n".join(output.splitlines()[-15:])
                raise RuntimeError(
                    f"`{' '.join(command)}` failed ({folder / 'build.log'}):\n{tail}"
                )
            os.replace(staging / BINARY, target)
            say(f"built {target} in {time.monotonic() - started:.0f} s", log)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _check_go(version: str) -> str:
    """Return the ``go`` command, or raise ``BuildUnavailable`` saying what is missing."""
    go = shutil.which("go")
    if go is None:
        raise BuildUnavailable(
            f"Go is not installed (`go` is not on PATH): weaviate-server {version} cannot be "
            "built, so the live Weaviate tests skip"
        )
    proxy = subprocess.run([go, "env", "GOPROXY"], capture_output=True, text=True).stdout.strip()
    if proxy in ("", "off"):
        raise BuildUnavailable(
            f"the Go module proxy is off (GOPROXY={proxy!r}): weaviate-server {version} cannot "
            "be built, so the live Weaviate tests skip"
        )
    # One cheap request (the version's .info) tells whether the proxy answers at all.
    probe = subprocess.run(
        [go, "list", "-m", "-json", f"{MODULE}@v{version}"],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        timeout=300,
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["no answer"])[-1]
        raise BuildUnavailable(
            f"the Go module proxy ({proxy}) did not serve {MODULE}@v{version} ({why}): the "
            "server cannot be built, so the live Weaviate tests skip"
        )
    return go


def _go_arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def say(message: str, log: IO[str] | None = None) -> None:
    """Write one ``weaviate-server:`` line to ``log`` (default stderr)."""
    out = log or sys.stderr
    out.write(f"weaviate-server: {message}\n")
    out.flush()

"""``make test-weaviate``: start the pinned Weaviate, run the live suites against it, stop it.

1. ``docker compose`` runs ``docker-compose.yml`` (the pinned image) with
   ``tests/integration/live/weaviate-test.compose.yml`` on top as the project ``amem-weaviate-test``: its
   own container and volume, published on free loopback ports (``WEAVIATE_HTTP_PORT``,
   ``WEAVIATE_GRPC_PORT``), so a Weaviate of your own on 8080 is never touched.
2. It waits until ``/v1/.well-known/ready`` answers 200 (``--timeout`` seconds, default 240;
   the first run also pulls the image, before the wait starts).
3. ``pytest tests/unit/store -m weaviate`` runs the storage conformance suite, its generated
   cases against the reference model, and the churn suite (``test_live_churn.py``) against
   it, with ``AMEM_REQUIRE_WEAVIATE=1``: a server that does not answer fails the run instead
   of skipping it. Arguments after ``--`` replace the pytest arguments.
4. The project is removed with its volume (``down -v``), also when a step fails or the run is
   interrupted; ``--keep`` leaves it running to look at.

The exit status is pytest's, or 1 when the server never became ready, or 2 when Docker or its
compose plugin is missing. Without Docker nothing else runs: plain ``pytest`` skips the live
cases and says why.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROJECT = "amem-weaviate-test"
COMPOSE_FILES = (ROOT / "docker-compose.yml", Path(__file__).with_name("weaviate-test.compose.yml"))
PYTEST_ARGS = ("tests/unit/store", "-m", "weaviate", "-ra", "-p", "no:cacheprovider")


def free_port() -> int:
    """Return a TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def compose(*args: str) -> list[str]:
    """The ``docker compose`` command line for the test project."""
    files = [part for path in COMPOSE_FILES for part in ("-f", str(path))]
    return ["docker", "compose", "-p", PROJECT, *files, *args]


def ready(url: str) -> bool:
    """Whether Weaviate at ``url`` answers its readiness probe with 200."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/.well-known/ready", timeout=3) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(url: str, timeout: float, poll: float = 1.0) -> bool:
    """Poll the readiness probe until it answers or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        if ready(url):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def _say(message: str) -> None:
    sys.stderr.write(f"test-weaviate: {message}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the live suites against a throw-away pinned Weaviate; return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    pytest_args = list(PYTEST_ARGS)
    if "--" in args:
        cut = args.index("--")
        args, pytest_args = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(prog="make test-weaviate", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for ready")
    parser.add_argument("--keep", action="store_true", help="leave the server running")
    options = parser.parse_args(args)

    if shutil.which("docker") is None:
        _say("needs Docker with the compose plugin (`docker` is not on PATH); nothing was run")
        return 2
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        _say("needs the Docker compose plugin (`docker compose version` failed); nothing was run")
        return 2

    http_port = int(os.environ.get("WEAVIATE_TEST_HTTP_PORT") or free_port())
    grpc_port = int(os.environ.get("WEAVIATE_TEST_GRPC_PORT") or free_port())
    url = f"http://127.0.0.1:{http_port}"
    env = {
        **os.environ,
        "WEAVIATE_HTTP_PORT": str(http_port),
        "WEAVIATE_GRPC_PORT": str(grpc_port),
    }
    try:
        _say(f"starting {PROJECT} (REST {http_port}, gRPC {grpc_port})")
        if subprocess.run(compose("up", "-d"), env=env, cwd=ROOT).returncode != 0:
            _say("`docker compose up` failed")
            return 1
        if not wait_ready(url, options.timeout):
            _say(f"Weaviate at {url} was not ready after {options.timeout:.0f} s; its log:")
            subprocess.run(compose("logs", "--tail", "60"), env=env, cwd=ROOT)
            return 1
        _say(f"ready at {url}; running pytest {' '.join(pytest_args)}")
        suite_env = {
            **env,
            "WEAVIATE_URL": url,
            "WEAVIATE_GRPC_HOST": "127.0.0.1",
            "AMEM_REQUIRE_WEAVIATE": "1",
        }
        return subprocess.run(
            [sys.executable, "-m", "pytest", *pytest_args], env=suite_env, cwd=ROOT
        ).returncode
    finally:
        if options.keep:
            _say(f"left running at {url}; stop it with: {' '.join(compose('down', '-v'))}")
        else:
            subprocess.run(compose("down", "-v"), env=env, cwd=ROOT)


if __name__ == "__main__":
    raise SystemExit(main())

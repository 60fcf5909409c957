"""Weaviate's server on this machine: built once from its Go module, run as a child process.

No Docker is needed: the server is one Go binary (``github.com/weaviate/weaviate``, main
package ``cmd/weaviate-server``).

- ``build()`` builds it once per machine and version (``server_build``, whose names this
  module re-exports); ``unavailable_reason`` says in one line why there is none.
- ``Node`` runs one server: its own free ports (REST, gRPC, gossip, data, Raft and the Raft
  RPC beside it, Go profiling), its own data folder, configured like ``docker-compose.yml``
  (``COMPOSE_ENV``); it waits for ``/v1/.well-known/ready`` and checks the version it serves.
  ``stop`` ends it by its PID (SIGTERM, then SIGKILL); ``kill`` is a crash (SIGKILL);
  ``start`` again restarts it on the same data folder and ports. ``Cluster`` joins several
  nodes of this machine by gossip and Raft (``CLUSTER_IN_LOCALHOST``: each node its own Raft
  port, the Raft RPC port being the Raft port + 1).
- Never left running: each server gets SIGKILL from the kernel when the process that
  started it dies (``PR_SET_PDEATHSIG``), every node still running at interpreter exit is
  stopped, and the data folder is locked for as long as its server lives, so two servers
  never share one.

Command line (``make weaviate-server``, ``make run STORE=weaviate``, ``make test-weaviate``)::

    python -m agentic_memory.store.weaviate.launcher build [OTHER_VERSION...]
    python -m agentic_memory.store.weaviate.launcher serve [--data DIR] [--port P]
    python -m agentic_memory.store.weaviate.launcher run [--data DIR] -- COMMAND...

``run`` starts a node, runs ``COMMAND`` with ``WEAVIATE_URL``, ``WEAVIATE_GRPC_HOST`` and
``WEAVIATE_GRPC_PORT`` set to it, and stops the node when the command ends. A SIGINT or
SIGTERM of the launcher is passed to the command's process group, which gets
``STOP_TIMEOUT_S`` to stop (SIGKILL after that), and then the node is stopped.

``build`` exits 0 when Go or the proxy is missing (the live tests skip with its line), 1 when
``AMEM_REQUIRE_WEAVIATE`` is set (CI: ``.ci/run`` sets it).

The server binds its REST port to 127.0.0.1 and gossip to loopback, but it opens its gRPC,
cluster-data and Go-profiling ports on every interface (``net.Listen(":port")`` in 1.32, no
setting changes that) and anonymous access is on, as in ``docker-compose.yml``: run it on a
machine whose firewall keeps those ports private (``docs/weaviate.md``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import functools
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock
    fcntl = None  # type: ignore[assignment]

from agentic_memory.paths import amem_home
from agentic_memory.store.ranking import WEAVIATE_VERSION
from agentic_memory.store.weaviate.server_build import (
    MODULE,
    BuildUnavailable,
    build,
    cache_dir,
    say,
    server_path,
    unavailable_reason,
)

__all__ = [
    "COMPOSE_ENV",
    "MODULE",
    "BuildUnavailable",
    "Cluster",
    "Node",
    "NodePorts",
    "build",
    "cache_dir",
    "server_path",
    "unavailable_reason",
]


COMPOSE_ENV: Mapping[str, str] = {
    "QUERY_DEFAULTS_LIMIT": "25",
    "QUERY_HYBRID_MAXIMUM_RESULTS": "100",
    "QUERY_MAXIMUM_RESULTS": "10000",
    "DISABLE_TELEMETRY": "true",
    "DEFAULT_VECTORIZER_MODULE": "none",
    "ENABLE_MODULES": "",
    "AUTOSCHEMA_ENABLED": "false",
    "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "true",
}
"""The server settings of ``docker-compose.yml`` (a test checks that both agree); each name was
read in ``usecases/config/environment.go`` at the pinned tag."""

READY_TIMEOUT_S = 180.0
"""Seconds a node may take to answer ready: about 10 s on an idle machine, more when the
cores are shared or a restarted node replays its logs."""
STOP_TIMEOUT_S = 60.0
"""Seconds a stopped node, or ``run``'s stopped command, may take to exit before SIGKILL."""

_PR_SET_PDEATHSIG = 1


# -- running ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePorts:
    """The ports one node listens on.

    ``raft_rpc`` is always ``raft + 1``: that is where the nodes of a local cluster look for
    each other's Raft RPC (``cluster/resolver/rpc.go``).
    """

    http: int
    grpc: int
    gossip: int
    data: int
    raft: int
    profiling: int

    @property
    def raft_rpc(self) -> int:
        """The Raft RPC port (``RAFT_INTERNAL_RPC_PORT``)."""
        return self.raft + 1

    @classmethod
    def free(cls) -> NodePorts:
        """Ports nothing listens on now (the kernel's choice; ``raft`` with ``raft + 1``)."""
        return cls.free_many(1)[0]

    @classmethod
    def free_many(cls, count: int) -> list[NodePorts]:
        """Ports for ``count`` nodes, all distinct: reserved together, not node by node.

        A port released after one node's choice could be the kernel's next choice for
        another node of the same cluster.
        """
        with _reserved(5 * count) as ports:
            taken = set(ports)
            plans = []
            for i in range(count):
                http, grpc, gossip, data, profiling = ports[5 * i : 5 * i + 5]
                raft = _free_pair(taken)
                taken |= {raft, raft + 1}
                plans.append(cls(http, grpc, gossip, data, raft, profiling))
        return plans


LOWEST_PORT = 10_000
"""Ports are chosen from here up to the kernel's ephemeral range (``ephemeral_ports``)."""


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> range:
    """Return the ports the kernel gives outgoing connections (its default when unreadable)."""
    try:
        low, high = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


@contextlib.contextmanager
def _reserved(count: int) -> Iterator[list[int]]:
    """Hold ``count`` distinct free ports until the block ends (so none is picked twice).

    Below the kernel's ephemeral range: a node restarted on its ports must find them free,
    and a port of that range, once its node is killed, can be taken by any outgoing
    connection meanwhile (a cluster test's node failed to restart, "bind: address already
    in use" on its Raft RPC port). Without room below the range, the kernel chooses.
    """
    top = min(ephemeral_ports().start, 65535)
    socks: list[socket.socket] = []
    try:
        for _ in range(50 * count if top > LOWEST_PORT else 0):
            if len(socks) == count:
                break
            port = random.randrange(LOWEST_PORT, top)  # one held already fails to bind
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        while len(socks) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        yield [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def _free_pair(taken: set[int]) -> int:
    """Return a free port ``p`` whose ``p + 1`` is free too."""
    for _ in range(200):
        with _reserved(1) as (port,):
            below = port < ephemeral_ports().start  # a pair from below stays below
            if port in taken or port + 1 in taken or port + 1 > 65535:
                continue
            if below and port + 1 in ephemeral_ports():
                continue
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("found no two consecutive free TCP ports")


_running: set[Node] = set()
_running_lock = threading.Lock()


@dataclass(eq=False)
class Node:
    """One ``weaviate-server`` process on this machine; see the module docstring.

    ``extra_env`` adds or overrides server settings (the cluster's join settings, a test's
    ``PERSISTENCE_MEMTABLES_FLUSH_DIRTY_AFTER_SECONDS``).
    """

    data_dir: Path
    name: str = "node1"
    ports: NodePorts = field(default_factory=NodePorts.free)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    binary: Path | None = None
    version: str = WEAVIATE_VERSION
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        """The REST address, as ``WEAVIATE_URL`` takes it."""
        return f"http://127.0.0.1:{self.ports.http}"

    @property
    def log_path(self) -> Path:
        """The server's output, appended across restarts (beside the data folder)."""
        return self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def pid(self) -> int | None:
        """The server's process id while it has one."""
        return self.process.pid if self.process is not None else None

    def client_env(self) -> dict[str, str]:
        """Return the variables that point the store at this node."""
        return {
            "WEAVIATE_URL": self.url,
            "WEAVIATE_GRPC_HOST": "127.0.0.1",
            "WEAVIATE_GRPC_PORT": str(self.ports.grpc),
        }

    def server_env(self) -> dict[str, str]:
        """Return the server's settings: ``docker-compose.yml``'s, then its ports and data."""
        p = self.ports
        env = {
            **COMPOSE_ENV,
            "PERSISTENCE_DATA_PATH": str(self.data_dir),
            "CLUSTER_HOSTNAME": self.name,
            # Without an address the server may pick an IPv6 one and fail to start
            # ("too many colons in address"); every node of this launcher is local.
            "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
            "CLUSTER_BIND_ADDR": "127.0.0.1",
            "CLUSTER_IN_LOCALHOST": "true",
            "GRPC_PORT": str(p.grpc),
            "CLUSTER_GOSSIP_BIND_PORT": str(p.gossip),
            "CLUSTER_DATA_BIND_PORT": str(p.data),
            "RAFT_PORT": str(p.raft),
            "RAFT_INTERNAL_RPC_PORT": str(p.raft_rpc),
            "RAFT_JOIN": f"{self.name}:{p.raft}",
            "RAFT_BOOTSTRAP_EXPECT": "1",
            # Always on, on every interface; its default 6060 would collide between nodes.
            "GO_PROFILING_PORT": str(p.profiling),
        }
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = READY_TIMEOUT_S) -> Node:
        """Start the server (again, on the same data and ports) and wait until it is ready."""
        self.launch()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def launch(self) -> None:
        """Start the server process without waiting for it (``wait_ready`` waits)."""
        if self.running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        binary = self.binary or server_path(self.version)
        if not binary.is_file():
            raise FileNotFoundError(unavailable_reason(self.version) or str(binary))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock_data_dir(self.data_dir)
        command = [str(binary), "--host", "127.0.0.1", "--port", str(self.ports.http)]
        command += ["--scheme", "http"]
        env = {**_base_env(), **self.server_env()}
        try:
            with open(self.log_path, "ab") as log:
                log.write(f"\n== {time.strftime('%F %T')} start {self.name}\n".encode())
                log.flush()
                self.process = _spawn(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Its own session: a Ctrl-C in the terminal reaches the launcher, which
                    # stops the server in order, not the server directly.
                    start_new_session=True,
                    # The server inherits the data folder's lock: it lasts as long as it runs.
                    pass_fds=(lock_fd,),
                )
        finally:
            os.close(lock_fd)
        with _running_lock:
            _running.add(self)

    def running(self) -> bool:
        """Whether the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait for ``/v1/.well-known/ready``, then check the version the node serves."""
        deadline = time.monotonic() + timeout
        while not _get_ok(self.url + "/v1/.well-known/ready"):
            if not self.running():
                raise RuntimeError(
                    f"weaviate-server {self.name} exited with {self.process_returncode()} "
                    f"before it was ready; its log ({self.log_path}) ends:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"weaviate-server {self.name} was not ready after {timeout:.0f} s; its log "
                    f"({self.log_path}) ends:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        served = self.meta().get("version")
        if served != self.version:
            raise RuntimeError(f"{self.name} serves Weaviate {served}, expected {self.version}")

    def meta(self) -> dict[str, Any]:
        """Return the node's ``/v1/meta`` (version, modules)."""
        with urllib.request.urlopen(self.url + "/v1/meta", timeout=10) as reply:
            meta: dict[str, Any] = json.load(reply)
        return meta

    def process_returncode(self) -> int | None:
        """Return the exit status once the process has ended, else ``None``."""
        return self.process.poll() if self.process is not None else None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """End the server by its PID and return its exit status (``None``: it never ran).

        SIGTERM first (the server flushes and exits), SIGKILL after ``timeout`` seconds.
        """
        if self.process is None:
            return None
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL the server, as a crash would end it; ``start`` brings it back."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        return self._reap()

    def _reap(self) -> int | None:
        assert self.process is not None
        code = self.process.wait()
        with _running_lock:
            _running.discard(self)
        return code

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines of the server's log."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return "(no log)"

    def __enter__(self) -> Node:
        if not self.running():
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(eq=False)
class Cluster:
    """Nodes of this machine joined into one cluster by gossip and one Raft group.

    Each node has its own ports and data folder (``root/nodeN``).

    ``extra_env`` goes to every node (e.g. ``REPLICATION_MINIMUM_FACTOR``).
    """

    root: Path
    size: int = 3
    extra_env: Mapping[str, str] = field(default_factory=dict)
    binary: Path | None = None
    nodes: list[Node] = field(init=False)

    def __post_init__(self) -> None:
        names = [f"node{i + 1}" for i in range(self.size)]
        ports = NodePorts.free_many(self.size)
        join = ",".join(f"{n}:{p.raft}" for n, p in zip(names, ports, strict=True))
        env = {"RAFT_JOIN": join, "RAFT_BOOTSTRAP_EXPECT": str(self.size)}
        self.nodes = [
            Node(
                self.root / name,
                name=name,
                ports=node_ports,
                extra_env={**env, **self.extra_env},
                binary=self.binary,
            )
            for name, node_ports in zip(names, ports, strict=True)
        ]

    def start(self, timeout: float = READY_TIMEOUT_S) -> Cluster:
        """Start every node, then wait for all: Raft needs them all before any is ready."""
        self._bring_up(self.nodes, timeout, undo=self.stop)
        return self

    def restart(self, node: Node, timeout: float = READY_TIMEOUT_S) -> Node:
        """Start a stopped or killed node again on its data folder and ports."""
        self._bring_up([node], timeout, undo=node.kill)
        return node

    def _bring_up(self, nodes: Sequence[Node], timeout: float, undo: Callable[[], object]) -> None:
        try:
            for node in nodes:
                self.launch(node, timeout)
            for node in nodes:
                node.wait_ready(timeout)
        except BaseException:
            undo()
            raise

    def launch(self, node: Node, timeout: float = READY_TIMEOUT_S) -> None:
        """Start ``node``'s process, joining the gossip of the nodes that run.

        Returns once its own gossip port listens, so that the next node can join it.

        A node fails to start when every address it is told to join refuses (memberlist
        ``Join``), so the first node joins nobody and a restarted one joins every running one.
        A node whose gossip port does not listen within ``timeout`` is killed.
        """
        peers = [f"127.0.0.1:{n.ports.gossip}" for n in self.nodes if n is not node and n.running()]
        env = {k: v for k, v in node.extra_env.items() if k != "CLUSTER_JOIN"}
        if peers:
            env["CLUSTER_JOIN"] = ",".join(peers)
        node.extra_env = env
        node.launch()
        deadline = time.monotonic() + timeout
        try:
            while not _listens(node.ports.gossip):
                if not node.running():
                    node.wait_ready(0)  # raises with its exit status and log
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"weaviate-server {node.name} did not listen on its gossip port "
                        f"{node.ports.gossip} after {timeout:.0f} s; its log ({node.log_path}) "
                        f"ends:\n{node.log_tail()}"
                    )
                time.sleep(0.1)
        except BaseException:
            node.kill()  # else it would keep its ports and data folder until exit
            raise

    def stop(self) -> None:
        """Stop every node (each by its PID)."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_all() -> None:
    """Stop every node this process started and that still runs (also run at exit)."""
    with _running_lock:
        nodes = list(_running)
    for node in nodes:
        node.stop()


atexit.register(stop_all)


def _base_env() -> dict[str, str]:
    """Return the caller's environment minus server settings it may carry by accident."""
    prefixes = ("CLUSTER_", "RAFT_", "PERSISTENCE_", "QUERY_", "AUTHENTICATION_", "AUTHORIZATION_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _lock_data_dir(data_dir: Path) -> int:
    """Lock the data folder for one server; return the descriptor the server will inherit."""
    fd = os.open(data_dir / ".launcher.lock", os.O_RDWR | os.O_CREAT, 0o600)
    if fcntl is None:  # pragma: no cover - Windows: no flock, nothing excludes a second one
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"another weaviate-server is running on {data_dir}") from None
    return fd


class _Spawner:
    """Starts every server from one thread that lives as long as the interpreter.

    The kernel sends ``PR_SET_PDEATHSIG`` when the *thread* that forked the child ends, so a
    node started from a short-lived thread would die with that thread: every start goes
    through this daemon thread (a daemon, so it still runs while ``stop_all`` stops the
    nodes at exit).
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Looked up here: the child may run nothing that takes a lock before it execs.
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl if _LINUX else None

    def popen(self, command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="weaviate-spawner")
                self._thread.daemon = True
                self._thread.start()
        done: Future[subprocess.Popen[bytes]] = Future()
        prctl = self._prctl

        def die_with_parent() -> None:
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

        setpriv = _setpriv()
        if setpriv is not None:
            # No Python in the child: with ``preexec_fn`` Python forks and runs it there, and
            # so do gRPC's fork handlers; a test process with live gRPC channels had a node's
            # child abort (SIGABRT, "epoll_wait error: Bad file descriptor") before its exec.
            # Without it CPython spawns by vfork, and setpriv sets the signal, then execs.
            wrapped = [setpriv, "--pdeathsig", "KILL", "--", *command]
            self._jobs.put((lambda: subprocess.Popen(wrapped, **kwargs), done))
        else:
            self._jobs.put(
                (lambda: subprocess.Popen(command, preexec_fn=die_with_parent, **kwargs), done)
            )
        return done.result()

    def _run(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.set_result(job())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)


_LINUX = sys.platform.startswith("linux")
_spawner = _Spawner()


@functools.cache
def _setpriv() -> str | None:
    """``setpriv`` if it has ``--pdeathsig`` (util-linux 2.33 and later), else ``None``."""
    path = shutil.which("setpriv") if _LINUX else None
    if path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in usage.stdout else None


def _spawn(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return _spawner.popen(command, **kwargs)


def _listens(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


# -- command line -------------------------------------------------------------------------------


class _Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the launcher (``signum`` says which)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: object) -> None:
    raise _Interrupted(signum)


def _run_command(command: list[str], env: Mapping[str, str]) -> int:
    """Run ``command`` to its end; on SIGINT or SIGTERM pass it on and let the command stop.

    The command gets its own process group, so the signal reaches its workers too (``langgraph
    dev`` flushes its threads on shutdown); after ``STOP_TIMEOUT_S``, or a second signal, the
    group gets SIGKILL. Returns the command's exit status, or 128 + the signal's number.
    """
    child = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return child.wait()
    except _Interrupted as exc:
        signum = exc.signum
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signum)
    try:
        child.wait(STOP_TIMEOUT_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    return 128 + signum


def default_data_dir() -> Path:
    """``make run STORE=weaviate`` keeps its server's data here, beside the embedded store."""
    return amem_home() / "weaviate" / "node1"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, command = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m agentic_memory.store.weaviate.launcher",
        description="Build and run the pinned Weaviate server without Docker.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    builder = sub.add_parser("build", help="build the server once (needs Go and the module proxy)")
    builder.add_argument(
        "also",
        nargs="*",
        metavar="VERSION",
        help=f"other versions to build after {WEAVIATE_VERSION}",
    )
    sub.add_parser("path", help="print where the binary is (exit 1 if it is not built)")
    for name in ("serve", "run"):
        one = sub.add_parser(
            name,
            help="run one node until Ctrl-C"
            if name == "serve"
            else "run one node while COMMAND (after --) runs, with WEAVIATE_URL set",
        )
        one.add_argument(
            "--data", type=Path, help="data folder (default $AMEM_HOME/weaviate/node1)"
        )
        one.add_argument("--port", type=int, help="REST port (default: a free one)")
        one.add_argument("--grpc-port", type=int, help="gRPC port (default: a free one)")
    options = parser.parse_args(args)

    if options.action == "build":
        for version in dict.fromkeys([WEAVIATE_VERSION, *options.also]):
            try:
                sys.stdout.write(f"{build(version)}\n")
            except BuildUnavailable as exc:
                say(str(exc))  # one line; the live tests skip with it
                if os.environ.get("AMEM_REQUIRE_WEAVIATE"):
                    # CI asks for the live run: there a missing install step fails at once.
                    say("AMEM_REQUIRE_WEAVIATE is set: the live tests need this server, failing")
                    return 1
                return 0
            except RuntimeError as exc:
                say(str(exc))
                return 1
        return 0
    if options.action == "path":
        if server_path().is_file():
            sys.stdout.write(f"{server_path()}\n")
            return 0
        say(unavailable_reason() or "not built")
        return 1
    if options.action == "run" and not command:
        parser.error("run needs a command after --")
    if not server_path().is_file():
        try:
            build()
        except (BuildUnavailable, RuntimeError) as exc:
            say(str(exc))
            return 2
    ports = NodePorts.free()
    if options.port or options.grpc_port:
        ports = NodePorts(
            options.port or ports.http,
            options.grpc_port or ports.grpc,
            ports.gossip,
            ports.data,
            ports.raft,
            ports.profiling,
        )
    node = Node((options.data or default_data_dir()).resolve(), ports=ports)
    say(f"starting {node.name} on {node.url} (gRPC {ports.grpc}), data {node.data_dir}")
    # SIGTERM (a supervisor, `kill`) ends it as Ctrl-C does: the command, then the node, is
    # stopped in order.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        node.start()
        exports = " ".join(f"{k}={v}" for k, v in node.client_env().items())
        say(f"ready: export AMEM_STORE=weaviate {exports}")
        if options.action == "serve":
            while node.running():
                time.sleep(1)
            say(f"the server exited with {node.process_returncode()}; log: {node.log_path}")
            return 1
        child_env = {**os.environ, "AMEM_STORE": "weaviate", **node.client_env()}
        return _run_command(command, child_env)
    except _Interrupted as exc:
        return 128 + exc.signum
    finally:
        node.stop()
        say(f"stopped {node.name} (data kept in {node.data_dir})")


if __name__ == "__main__":
    raise SystemExit(main())

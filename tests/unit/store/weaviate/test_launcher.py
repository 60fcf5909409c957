"""The launcher without Go or a real server: a stand-in binary that answers like one.

The live suites run the real server through the same code (``tests/live_weaviate.py``); here
the launcher's own promises are checked where they are cheap to break: the settings it gives
(``docker-compose.yml``'s, own ports and data folder), readiness and the version check,
stopping by PID, crash and restart on the same folder, one server per folder, no server left
behind when the process that started it dies, and the one-line reason when Go is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from agentic_memory.store.weaviate import launcher
from agentic_memory.store.weaviate.launcher import COMPOSE_ENV, Cluster, Node

ROOT = Path(__file__).resolve().parents[4]

FAKE_SERVER = textwrap.dedent(
    """\
    #!{python}
    import json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    data = os.environ["PERSISTENCE_DATA_PATH"]
    with open(os.path.join(data, "env.json"), "w") as out:
        json.dump({{"env": dict(os.environ), "argv": sys.argv[1:], "pid": os.getpid()}}, out)
    if os.environ.get("FAKE_DIE"):
        print("fatal: the fake was told to die", flush=True)
        sys.exit(3)
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = {{"version": os.environ.get("FAKE_VERSION", "{version}")}}
            self.send_response(200)
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())
        def log_message(self, *args):
            pass
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if os.environ.get("FAKE_HANG"):  # up, but never listens: a server stuck in its start
        signal.pause()
    import socket
    gossip = socket.socket()  # a cluster's next node waits for this port
    gossip.bind(("127.0.0.1", int(os.environ["CLUSTER_GOSSIP_BIND_PORT"])))
    gossip.listen()
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


@pytest.fixture
def binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bin" / "weaviate-server"
    path.parent.mkdir()
    path.write_text(FAKE_SERVER.format(python=sys.executable, version=launcher.WEAVIATE_VERSION))
    path.chmod(0o755)
    monkeypatch.setenv("AMEM_WEAVIATE_SERVER", str(path))
    for name in ("FAKE_DIE", "FAKE_VERSION", "FAKE_HANG"):
        monkeypatch.delenv(name, raising=False)
    return path


def _seen(node: Node) -> dict[str, object]:
    seen: dict[str, object] = json.loads((node.data_dir / "env.json").read_text())
    return seen


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_the_compose_file_and_the_launcher_configure_the_server_alike() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = {k: str(v) for k, v in compose["services"]["weaviate"]["environment"].items()}
    # The rest of the compose settings are where and who: data path, node name.
    assert {k: env[k] for k in COMPOSE_ENV} == dict(COMPOSE_ENV)
    assert set(env) - set(COMPOSE_ENV) == {"PERSISTENCE_DATA_PATH", "CLUSTER_HOSTNAME"}
    image = compose["services"]["weaviate"]["image"]
    assert image.endswith(f":{launcher.WEAVIATE_VERSION}")


def test_a_node_runs_with_its_own_ports_and_folder_and_stops_by_pid(
    binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Server settings in the caller's environment do not leak into the node's.
    monkeypatch.setenv("QUERY_MAXIMUM_RESULTS", "5")
    node = Node(tmp_path / "data" / "node1")
    with node:
        seen = _seen(node)
        env = seen["env"]
        assert isinstance(env, dict)
        for key, value in COMPOSE_ENV.items():
            assert env[key] == value
        p = node.ports
        assert env["PERSISTENCE_DATA_PATH"] == str(node.data_dir)
        assert (env["GRPC_PORT"], env["RAFT_PORT"], env["RAFT_INTERNAL_RPC_PORT"]) == (
            str(p.grpc),
            str(p.raft),
            str(p.raft + 1),
        )
        assert env["CLUSTER_ADVERTISE_ADDR"] == "127.0.0.1"
        ports = [p.http, p.grpc, p.gossip, p.data, p.raft, p.raft_rpc, p.profiling]
        assert len(set(ports)) == len(ports)
        assert seen["argv"] == ["--host", "127.0.0.1", "--port", str(p.http), "--scheme", "http"]
        assert node.client_env()["WEAVIATE_URL"] == f"http://127.0.0.1:{p.http}"
        pid = node.pid
        assert pid is not None and _alive(pid)
        # One server per folder.
        with pytest.raises(RuntimeError, match="another weaviate-server"):
            Node(node.data_dir).start()
    assert node.process_returncode() == 0 and not _alive(pid)
    # A crash, then a restart on the same folder and ports.
    node.start()
    assert node.kill() == -signal.SIGKILL
    node.start()
    assert _seen(node)["env"]["GRPC_PORT"] == str(p.grpc)  # type: ignore[index]
    node.stop()
    assert "start node1" in node.log_path.read_text()


def test_a_server_that_dies_or_serves_another_version_is_an_error(
    binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DIE", "1")
    with pytest.raises(RuntimeError, match="(?s)exited with 3.*the fake was told to die"):
        Node(tmp_path / "a").start(timeout=30)
    monkeypatch.delenv("FAKE_DIE")
    monkeypatch.setenv("FAKE_VERSION", "1.32.9")
    node = Node(tmp_path / "b")
    with pytest.raises(RuntimeError, match="serves Weaviate 1.32.9"):
        node.start(timeout=30)
    assert not node.running()


def test_a_cluster_joins_each_node_to_the_running_ones(binary: Path, tmp_path: Path) -> None:
    with Cluster(tmp_path, size=3, extra_env={"REPLICATION_MINIMUM_FACTOR": "3"}) as cluster:
        envs = [_seen(n)["env"] for n in cluster.nodes]
        join = ",".join(f"{n.name}:{n.ports.raft}" for n in cluster.nodes)
        assert all(e["RAFT_JOIN"] == join and e["RAFT_BOOTSTRAP_EXPECT"] == "3" for e in envs)  # type: ignore[index]
        assert all(e["REPLICATION_MINIMUM_FACTOR"] == "3" for e in envs)  # type: ignore[index]
        first = f"127.0.0.1:{cluster.nodes[0].ports.gossip}"
        assert "CLUSTER_JOIN" not in envs[0]
        assert envs[1]["CLUSTER_JOIN"] == first  # type: ignore[index]
        # Killed and restarted, the first node joins the others.
        cluster.nodes[0].kill()
        cluster.restart(cluster.nodes[0])
        rejoined = _seen(cluster.nodes[0])["env"]["CLUSTER_JOIN"]  # type: ignore[index]
        assert set(rejoined.split(",")) == {
            f"127.0.0.1:{n.ports.gossip}" for n in cluster.nodes[1:]
        }
    assert not any(n.running() for n in cluster.nodes)


def test_no_server_outlives_the_process_that_started_it(binary: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from agentic_memory.store.weaviate.launcher import Node
        node = Node(Path({str(tmp_path / "orphan")!r})).start()
        print(node.pid, flush=True)
        os.kill(os.getpid(), 9)  # no cleanup of any kind runs
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert child.returncode == -signal.SIGKILL
    pid = int(child.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_without_go_the_build_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("AMEM_WEAVIATE_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no go here
    monkeypatch.delenv("AMEM_REQUIRE_WEAVIATE", raising=False)  # a developer's machine
    assert launcher.unavailable_reason().startswith("weaviate-server ")  # type: ignore[union-attr]
    with pytest.raises(launcher.BuildUnavailable, match="Go is not installed"):
        launcher.build()
    reason = launcher.unavailable_reason()
    assert reason is not None and "Go is not installed" in reason and "\n" not in reason
    # The make step prints it and succeeds: the live tests then skip with that line.
    assert launcher.main(["build"]) == 0
    # CI asks for the live run: there the missing install step fails.
    monkeypatch.setenv("AMEM_REQUIRE_WEAVIATE", "1")
    assert launcher.main(["build"]) == 1


def test_make_test_builds_the_server_and_test_weaviate_requires_it() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}}

    def dry(target: str) -> list[str]:
        out = subprocess.run(
            ["make", "-n", "--no-print-directory", "-W", ".venv/bin/.installed", target],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip().splitlines()

    steps = dry("test")
    build = next(i for i, s in enumerate(steps) if "launcher build" in s)
    assert build < next(i for i, s in enumerate(steps) if s.endswith("/pytest"))
    assert dry("test-weaviate")[-1].startswith("AMEM_REQUIRE_WEAVIATE=1 ")


def test_ci_requires_the_live_weaviate_that_make_test_may_skip() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [line.strip() for line in ci.splitlines()]
    required = next(i for i, s in enumerate(lines) if s == "export AMEM_REQUIRE_WEAVIATE=1")
    assert required < lines.index("exec make test")
    # Every live suite skips through the helper that fails instead under CI.
    for suite in ("live", "cluster", "replicas"):
        for path in (ROOT / "tests" / "integration" / suite).rglob("*.py"):
            assert "pytest.skip(" not in path.read_text(), path


def test_the_nodes_of_a_cluster_never_share_a_port(tmp_path: Path) -> None:
    # Each node's ports used to be reserved apart: 0.6 % of 3-node clusters had a duplicate.
    for _ in range(2000):
        cluster = Cluster(tmp_path, size=3)
        ports = [
            port
            for n in cluster.nodes
            for port in (*(getattr(n.ports, f) for f in FIELDS), n.ports.raft_rpc)
        ]
        assert len(set(ports)) == len(ports) == 7 * 3


FIELDS = ("http", "grpc", "gossip", "data", "raft", "profiling")


def test_ports_lie_below_the_kernels_ephemeral_range(tmp_path: Path) -> None:
    # A killed node's port in that range can be taken by an outgoing connection before the
    # node restarts: a cluster test's node then failed, "bind: address already in use".
    ephemeral = launcher.ephemeral_ports()
    if ephemeral.start <= launcher.LOWEST_PORT + 1000:
        pytest.skip(f"this kernel's ephemeral range starts at {ephemeral.start}: no room below")
    for _ in range(200):
        ports = [
            port
            for n in Cluster(tmp_path, size=3).nodes
            for port in (*(getattr(n.ports, f) for f in FIELDS), n.ports.raft_rpc)
        ]
        assert all(launcher.LOWEST_PORT <= p < ephemeral.start for p in ports), ports


def test_a_kernel_with_no_room_below_its_range_still_gives_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Then the kernel chooses, as before; a pair must not be refused for lying in the range.
    monkeypatch.setattr(launcher, "ephemeral_ports", lambda: range(1024, 65536))
    ports = [
        port
        for n in Cluster(tmp_path, size=3).nodes
        for port in (*(getattr(n.ports, f) for f in FIELDS), n.ports.raft_rpc)
    ]
    assert len(set(ports)) == len(ports) == 7 * 3


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaults(tmp_path: Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t50000\n")
    assert launcher.ephemeral_ports(setting) == range(40000, 50001)
    assert launcher.ephemeral_ports(tmp_path / "absent") == range(32768, 61000)
    setting.write_text("garbage")
    assert launcher.ephemeral_ports(setting) == range(32768, 61000)


def test_a_node_that_fails_to_rejoin_is_not_left_running(
    binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Cluster(tmp_path, size=2) as cluster:
        node = cluster.nodes[1]
        node.kill()
        monkeypatch.setenv("FAKE_HANG", "1")
        with pytest.raises(TimeoutError):
            cluster.restart(node, timeout=2)
        pid = node.pid
        assert pid is not None and not node.running() and not _alive(pid)
        # Its folder is free again: the next start takes it.
        monkeypatch.delenv("FAKE_HANG")
        cluster.restart(node, timeout=30)
        assert node.running()


CHILD = textwrap.dedent(
    """\
    import os, signal, sys, time
    out = sys.argv[1]
    def stop(signum, frame):
        time.sleep(1)  # a flush: longer than the 0.25 s subprocess.call gave
        with open(out, "a") as f:
            f.write(f"{signal.Signals(signum).name} {os.environ['WEAVIATE_URL']}\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if os.fork() == 0:  # a worker of its own, as `langgraph dev` has
        out += ".worker"
    with open(out + ".up", "w") as up:
        up.write(str(os.getpid()))
    while True:
        time.sleep(0.1)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_stops_its_command_in_order(
    binary: Path, tmp_path: Path, signum: signal.Signals
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(CHILD)
    out = tmp_path / "stopped.txt"
    run = [sys.executable, "-m", "agentic_memory.store.weaviate.launcher", "run"]
    run += ["--data", str(tmp_path / "node1"), "--", sys.executable, str(script), str(out)]
    ups = [Path(f"{out}.up"), Path(f"{out}.worker.up")]
    launched = subprocess.Popen(run, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    stopped = False
    try:
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in ups) and time.monotonic() < deadline:
            assert launched.poll() is None, launched.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.1)
        launched.send_signal(signum)
        assert launched.wait(60) == 128 + signum
        # The command and its worker each ran their handler to the end, on the node's address.
        for path in (out, Path(f"{out}.worker")):
            name, url = path.read_text().split()
            assert name == signum.name and url.startswith("http://127.0.0.1:")
        stopped = True
    finally:
        if launched.poll() is None:
            launched.kill()
            launched.wait()
        for up in [] if stopped else ups:  # a failed stop leaves no agent behind
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(up.read_text()), signal.SIGKILL)
    assert "stopped node1" in launched.stderr.read()  # type: ignore[union-attr]

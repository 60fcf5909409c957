"""The deployment's files, checked without Docker: they parse, and say what the guide says.

``deploy/compose.yml`` is read as compose reads it (YAML with anchors and merges, ``${VAR}``
substitution from ``deploy/.env``); where Docker exists, ``docker compose config`` checks the
same file against compose's own schema (skipped here with the reason).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentic_memory.store.coordination import coordination_setting
from agentic_memory.store.ranking import WEAVIATE_VERSION

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yml"
_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?[-?]([^}]*))?\}")


def env_example() -> dict[str, str]:
    values = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name] = value
    return values


def substitute(text: str, env: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and env[name]:
            return env[name]
        assert "?" not in match.group(0) or name in env, f"{name} must be set in .env"
        return default or ""

    return _VAR.sub(one, text)


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(substitute(COMPOSE.read_text(), env_example()))
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, Any]:
    return dict(compose()["services"])


def agents() -> dict[str, Any]:
    return {name: s for name, s in services().items() if name.startswith("agent-")}


def test_every_variable_the_compose_file_needs_is_in_the_env_example() -> None:
    names = {m.group(1) for m in _VAR.finditer(COMPOSE.read_text())}
    required = {m.group(1) for m in _VAR.finditer(COMPOSE.read_text()) if ":?" in m.group(0)}
    example = env_example()
    assert required <= set(example), required - set(example)
    documented = (ROOT / "docs" / "deployment.md").read_text()
    for name in names | set(example):
        assert name in documented, f"docs/deployment.md does not say where {name} goes"


def test_the_weaviate_nodes_are_the_cluster_compose_with_api_keys() -> None:
    cluster = yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text())["services"]
    nodes = {name: s for name, s in services().items() if name.startswith("weaviate-node-")}
    assert sorted(nodes) == sorted(cluster)
    for name, node in nodes.items():
        theirs = cluster[name]
        assert (
            node["image"]
            == theirs["image"]
            == (f"cr.weaviate.io/semitechnologies/weaviate:{WEAVIATE_VERSION}")
        )
        assert node["command"] == theirs["command"]
        assert node["healthcheck"] == theirs["healthcheck"]
        env, same = dict(node["environment"]), dict(theirs["environment"])
        assert env.pop("AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED") == "false"
        assert same.pop("AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED") == "true"
        assert env.pop("AUTHENTICATION_APIKEY_ENABLED") == "true"
        assert env.pop("AUTHENTICATION_APIKEY_ALLOWED_KEYS") == env_example()["WEAVIATE_API_KEY"]
        assert env.pop("AUTHORIZATION_ADMINLIST_ENABLED") == "true"
        assert env.pop("AUTHENTICATION_APIKEY_USERS") == env.pop("AUTHORIZATION_ADMINLIST_USERS")
        assert env == same, f"{name} differs from docker-compose.cluster.yml"
        assert len(node["volumes"]) == 1
        # Published (loopback only) or not at all: the cluster is reached inside the network.
        for port in node.get("ports", []):
            assert str(port).startswith("127.0.0.1:")


def test_the_replicas_share_postgres_and_the_weaviate_cluster() -> None:
    replicas = agents()
    assert len(replicas) >= 2
    images = {a["image"] for a in replicas.values()}
    assert images == {"agentic-memory-agent"}
    node_urls = set()
    for agent in replicas.values():
        env = agent["environment"]
        assert env["AMEM_STORE"] == "weaviate"
        assert env["WEAVIATE_CONSISTENCY_LEVEL"] == "QUORUM"
        assert env["WEAVIATE_API_KEY"] == env_example()["WEAVIATE_API_KEY"]
        assert env["DATABASE_URI"].startswith("postgres://amem:")
        assert "@postgres:5432/amem" in env["DATABASE_URI"]
        assert env["REDIS_URI"] == "redis://redis:6379"
        assert "AMEM_COORDINATOR_URI" not in env, "the default (DATABASE_URI) is meant"
        node_urls.add(env["WEAVIATE_URL"])
        assert agent["env_file"] == ".env"
        assert agent["healthcheck"]["test"] == ["CMD", "python", "/api/healthcheck.py"]
        waits = agent["depends_on"]
        assert {k for k, v in waits.items() if v["condition"] == "service_healthy"} >= {
            "postgres",
            "redis",
            "weaviate-node-1",
        }
        (published,) = agent["ports"]
        assert str(published).startswith("127.0.0.1:") and str(published).endswith(":8000")
        assert agent["volumes"][0].endswith(":" + env["AMEM_HOME"])
    assert len(node_urls) == len(replicas), "each replica talks to its own Weaviate node"


def test_the_store_coordinates_through_the_replicas_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for agent in agents().values():
        for name, value in agent["environment"].items():
            monkeypatch.setenv(name, str(value))
        chosen = coordination_setting()
        assert chosen.source == "DATABASE_URI"
        assert chosen.uri == agent["environment"]["DATABASE_URI"]


def test_the_load_balancer_sends_to_every_replica_and_streams() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    upstream = re.search(r"upstream agents \{(.*?)\}", conf, re.S)
    assert upstream is not None
    servers = re.findall(r"server ([\w-]+):(\d+);", upstream.group(1))
    assert sorted(servers) == sorted((name, "8000") for name in agents())
    assert "proxy_buffering off;" in conf
    lb = services()["lb"]
    assert lb["volumes"] == ["./nginx.conf:/etc/nginx/conf.d/default.conf:ro"]
    assert lb["ports"] == ["8123:8080"]
    assert set(lb["depends_on"]) == set(agents())


def test_postgres_and_redis_are_healthchecked_and_persistent() -> None:
    svc = services()
    assert svc["postgres"]["environment"]["POSTGRES_PASSWORD"] == env_example()["POSTGRES_PASSWORD"]
    assert "postgres_data:/var/lib/postgresql/data" in svc["postgres"]["volumes"]
    assert "pg_isready" in " ".join(svc["postgres"]["healthcheck"]["test"])
    assert svc["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "ports" not in svc["postgres"] and "ports" not in svc["redis"]
    declared = set(compose()["volumes"])
    used = {
        v.split(":")[0] for s in svc.values() for v in s.get("volumes", []) if not v.startswith(".")
    }
    assert used == declared


def test_the_secrets_file_is_not_committed() -> None:
    assert "deploy/.env" in (ROOT / ".gitignore").read_text().splitlines()


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("Docker is not installed here: the file is checked by the parser above")
    plugin = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False
    )
    if plugin.returncode != 0:
        pytest.skip(
            "docker has no compose plugin here: the file is checked by the parser above "
            f"({' '.join((plugin.stderr or plugin.stdout).split())[:80]})"
        )
    env = tmp_path / ".env"
    env.write_text((DEPLOY / ".env.example").read_text())
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "--env-file", str(env), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr

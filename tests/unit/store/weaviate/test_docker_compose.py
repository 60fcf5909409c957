"""The compose files: parse, pin the Weaviate version the ranking rules follow, publish REST
and gRPC on loopback, persist, health-check, and pin the settings the store's ranking and
paging assume."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from agentic_memory.store.ranking import (
    HYBRID_CANDIDATES,
    QUERY_MAXIMUM_RESULTS,
    WEAVIATE_VERSION,
)

ROOT = Path(__file__).resolve().parents[4]
COMPOSE = ROOT / "docker-compose.yml"
CLUSTER = ROOT / "docker-compose.cluster.yml"


def _weaviate() -> tuple[dict[str, Any], dict[str, Any]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    return doc, doc["services"]["weaviate"]


IMAGE = f"cr.weaviate.io/semitechnologies/weaviate:{WEAVIATE_VERSION}"


def test_image_is_the_version_the_ranking_rules_follow() -> None:
    _, svc = _weaviate()
    assert svc["image"] == IMAGE
    _, nodes = _nodes()
    assert {node["image"] for node in nodes} == {IMAGE}
    # 1.32.26 is the first release without the NaN average (D1, docs/storage.md).
    assert tuple(map(int, WEAVIATE_VERSION.split("."))) >= (1, 32, 26)


def test_docs_name_the_pinned_version_and_no_other() -> None:
    for doc in ("README.md", "docs/weaviate.md", "docs/storage.md"):
        text = (ROOT / doc).read_text()
        assert WEAVIATE_VERSION in text, doc
        pinned = set(re.findall(r"weaviate:(1\.\d+\.\d+)", text))
        assert pinned <= {WEAVIATE_VERSION}, (doc, pinned)


def _published(port: str) -> str:
    # "127.0.0.1:${VAR:-8080}:8080" as compose reads it with VAR unset.
    return re.sub(r"\$\{[A-Z_]+:-(\d+)\}", r"\1", port)


def test_rest_and_grpc_ports_are_published_on_loopback_only() -> None:
    _, svc = _weaviate()
    # Anonymous access is on: publishing on every interface would open the server to the LAN.
    assert {_published(str(p)) for p in svc["ports"]} == {
        "127.0.0.1:8080:8080",
        "127.0.0.1:50051:50051",
    }
    # The host ports can be moved (make test-weaviate does), the interface cannot.
    assert {str(p) for p in svc["ports"]} == {
        "127.0.0.1:${WEAVIATE_HTTP_PORT:-8080}:8080",
        "127.0.0.1:${WEAVIATE_GRPC_PORT:-50051}:50051",
    }


def test_ranking_and_paging_settings_are_pinned() -> None:
    _, svc = _weaviate()
    env = svc["environment"]
    assert int(env["QUERY_HYBRID_MAXIMUM_RESULTS"]) == HYBRID_CANDIDATES
    assert int(env["QUERY_MAXIMUM_RESULTS"]) == QUERY_MAXIMUM_RESULTS
    assert env["DISABLE_TELEMETRY"] == "true"


def test_data_lives_in_a_named_volume() -> None:
    doc, svc = _weaviate()
    env = svc["environment"]
    mounts = dict(v.split(":", 1) for v in svc["volumes"])
    assert mounts["weaviate_data"] == env["PERSISTENCE_DATA_PATH"] == "/var/lib/weaviate"
    assert "weaviate_data" in doc["volumes"]


def test_no_vectorizer_and_no_auto_schema() -> None:
    _, svc = _weaviate()
    env = svc["environment"]
    assert env["DEFAULT_VECTORIZER_MODULE"] == "none"
    assert env["ENABLE_MODULES"] == ""
    assert env["AUTOSCHEMA_ENABLED"] == "false"
    assert int(env["QUERY_DEFAULTS_LIMIT"]) > 0
    assert env["AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED"] == "true"
    assert svc["restart"] in ("unless-stopped", "always", "on-failure")


def test_healthcheck_waits_for_readiness() -> None:
    _, svc = _weaviate()
    check = svc["healthcheck"]
    assert check["test"][0] == "CMD-SHELL"
    assert "/v1/.well-known/ready" in check["test"][1]
    assert check["test"][1].startswith("wget ")  # the Alpine image has busybox wget, no curl
    assert check["retries"] >= 1


# -- three nodes ------------------------------------------------------------------------------


def _nodes() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    doc = yaml.safe_load(CLUSTER.read_text())
    return doc, [doc["services"][f"weaviate-node-{i}"] for i in (1, 2, 3)]


def test_cluster_has_three_nodes_of_the_single_node_image_and_settings() -> None:
    doc, nodes = _nodes()
    _, single = _weaviate()
    assert set(doc["services"]) == {"weaviate-node-1", "weaviate-node-2", "weaviate-node-3"}
    for node in nodes:
        assert node["image"] == single["image"]
        env = node["environment"]
        for key in (
            "QUERY_HYBRID_MAXIMUM_RESULTS",
            "QUERY_MAXIMUM_RESULTS",
            "DISABLE_TELEMETRY",
            "DEFAULT_VECTORIZER_MODULE",
            "ENABLE_MODULES",
            "AUTOSCHEMA_ENABLED",
            "PERSISTENCE_DATA_PATH",
        ):
            assert str(env[key]) == str(single["environment"][key]), key
        assert "/v1/.well-known/ready" in node["healthcheck"]["test"][1]


def test_cluster_nodes_join_one_raft_group_with_three_replicas() -> None:
    _, nodes = _nodes()
    names = [n["environment"]["CLUSTER_HOSTNAME"] for n in nodes]
    assert names == ["node1", "node2", "node3"]
    for node in nodes:
        env = node["environment"]
        assert env["RAFT_JOIN"].split(",") == names
        assert int(env["RAFT_BOOTSTRAP_EXPECT"]) == 3
        assert int(env["REPLICATION_MINIMUM_FACTOR"]) == 3
    gossip = nodes[0]["environment"]["CLUSTER_GOSSIP_BIND_PORT"]
    assert "CLUSTER_JOIN" not in nodes[0]["environment"]
    for node in nodes[1:]:
        assert node["environment"]["CLUSTER_JOIN"] == f"weaviate-node-1:{gossip}"


def test_cluster_ports_volumes_are_distinct_and_on_loopback() -> None:
    doc, nodes = _nodes()
    published = [str(p) for n in nodes for p in n["ports"]]
    assert all(p.startswith("127.0.0.1:") for p in published)
    host_ports = [p.split(":")[1] for p in published]
    assert len(set(host_ports)) == len(host_ports) == 6
    assert {"127.0.0.1:8080:8080", "127.0.0.1:50051:50051"} <= set(published)
    mounts = [n["volumes"][0].split(":", 1) for n in nodes]
    assert len({m[0] for m in mounts}) == 3 and all(m[1] == "/var/lib/weaviate" for m in mounts)
    assert {m[0] for m in mounts} <= set(doc["volumes"])

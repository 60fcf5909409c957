"""docker-compose.yml: parses, pins Weaviate, publishes REST and gRPC, persists, health-checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def _weaviate() -> tuple[dict[str, Any], dict[str, Any]]:
    doc = yaml.safe_load(COMPOSE.read_text())
    return doc, doc["services"]["weaviate"]


def test_image_is_pinned_to_a_1_32_release() -> None:
    _, svc = _weaviate()
    assert re.fullmatch(r"cr\.weaviate\.io/semitechnologies/weaviate:1\.3\d\.\d+", svc["image"])


def test_rest_and_grpc_ports_are_published() -> None:
    _, svc = _weaviate()
    assert {"8080:8080", "50051:50051"} <= {str(p) for p in svc["ports"]}


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

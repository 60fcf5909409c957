"""Where the Weaviate server is and how collections spread over a cluster.

Both are resolved from arguments first and the environment second, so a per-run value is
never overridden by a variable; nothing here opens a connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from weaviate.classes.config import ConsistencyLevel

from agentic_memory.store.ranking import QUERY_MAXIMUM_RESULTS
from agentic_memory.store.types import InvalidInputError

DEFAULT_GRPC_PORT = 50051


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to reach Weaviate, resolved from arguments and the environment."""

    http_host: str
    http_port: int
    http_secure: bool
    grpc_host: str
    grpc_port: int
    grpc_secure: bool
    api_key: str | None = None


def connection_settings(
    url: str | None = None,
    api_key: str | None = None,
    grpc_port: int | None = None,
    grpc_host: str | None = None,
) -> ConnectionSettings:
    """Resolve the connection settings; an argument always wins over the environment.

    Reads ``WEAVIATE_URL`` (required), ``WEAVIATE_API_KEY``, ``WEAVIATE_GRPC_PORT``
    (default 50051) and ``WEAVIATE_GRPC_HOST`` (default: the URL's host). A URL without a
    port uses the scheme's default (80 or 443); gRPC is secure when the URL is https.
    """
    url = url or os.environ.get("WEAVIATE_URL") or None
    if not url:
        raise InvalidInputError(
            "Weaviate needs a URL: pass url= or set WEAVIATE_URL (for example "
            "http://localhost:8080 after `docker compose up -d`)"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"Weaviate URL {url!r} must look like http(s)://host[:port]")
    secure = parts.scheme == "https"
    try:
        http_port = parts.port or (443 if secure else 80)
    except ValueError:
        raise InvalidInputError(f"Weaviate URL {url!r} has an invalid port") from None
    if grpc_port is None:
        raw = os.environ.get("WEAVIATE_GRPC_PORT") or str(DEFAULT_GRPC_PORT)
        try:
            grpc_port = int(raw)
        except ValueError:
            raise InvalidInputError(f"WEAVIATE_GRPC_PORT={raw!r} is not a port number") from None
    if isinstance(grpc_port, bool) or not isinstance(grpc_port, int) or not 0 < grpc_port < 65536:
        raise InvalidInputError(f"gRPC port must be in 1..65535, got {grpc_port!r}")
    return ConnectionSettings(
        http_host=parts.hostname,
        http_port=http_port,
        http_secure=secure,
        grpc_host=grpc_host or os.environ.get("WEAVIATE_GRPC_HOST") or parts.hostname,
        grpc_port=grpc_port,
        grpc_secure=secure,
        api_key=api_key or os.environ.get("WEAVIATE_API_KEY") or None,
    )


CONSISTENCY_LEVELS = {
    "ONE": ConsistencyLevel.ONE,
    "QUORUM": ConsistencyLevel.QUORUM,
    "ALL": ConsistencyLevel.ALL,
}


@dataclass(frozen=True)
class ScaleSettings:
    """How collections are spread over a cluster, and how many replicas must answer.

    ``replication_factor`` ``None`` leaves it to the server (its ``REPLICATION_MINIMUM_FACTOR``,
    1 unless set). ``shards`` applies to shared (not per-user) collections; per-user ones have
    one shard per tenant. One shard keeps BM25 statistics global, so rankings do not depend on
    the cluster size (``docs/weaviate.md``). ``consistency`` ``None`` is the server's default
    (QUORUM). ``query_maximum_results`` must equal the server's ``QUERY_MAXIMUM_RESULTS``:
    listings that page beyond it are served from id-ordered reads instead.
    """

    replication_factor: int | None = None
    shards: int = 1
    consistency: str | None = None
    query_maximum_results: int = QUERY_MAXIMUM_RESULTS


def _positive_setting(name: str, value: int | str | None, default: int | None) -> int | None:
    raw: int | str | None = value if value is not None else (os.environ.get(name) or None)
    if raw is None:
        return default
    try:
        number = int(raw)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name}={raw!r} is not a positive integer") from None
    if isinstance(raw, bool) or number < 1:
        raise InvalidInputError(f"{name}={raw!r} is not a positive integer")
    return number


def scale_settings(
    replication_factor: int | None = None,
    shards: int | None = None,
    consistency: str | None = None,
    query_maximum_results: int | None = None,
) -> ScaleSettings:
    """Resolve the scale-out settings; an argument always wins over the environment.

    Reads ``WEAVIATE_REPLICATION_FACTOR`` (default: the server's), ``WEAVIATE_SHARDS``
    (default 1), ``WEAVIATE_CONSISTENCY_LEVEL`` (``ONE``, ``QUORUM`` or ``ALL``; default: the
    server's, QUORUM) and ``WEAVIATE_QUERY_MAXIMUM_RESULTS`` (default 10,000).
    """
    level = consistency if consistency is not None else os.environ.get("WEAVIATE_CONSISTENCY_LEVEL")
    level = (level or "").strip().upper() or None
    if level is not None and level not in CONSISTENCY_LEVELS:
        raise InvalidInputError(
            f"WEAVIATE_CONSISTENCY_LEVEL={level!r} must be one of {', '.join(CONSISTENCY_LEVELS)}"
        )
    shard_count = _positive_setting("WEAVIATE_SHARDS", shards, 1)
    window = _positive_setting("WEAVIATE_QUERY_MAXIMUM_RESULTS", query_maximum_results, None)
    return ScaleSettings(
        replication_factor=_positive_setting(
            "WEAVIATE_REPLICATION_FACTOR", replication_factor, None
        ),
        shards=shard_count if shard_count is not None else 1,
        consistency=level,
        query_maximum_results=window if window is not None else QUERY_MAXIMUM_RESULTS,
    )

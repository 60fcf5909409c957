"""``FakeWeaviate`` on real ports, for clients in other processes ("machines").

The in-memory server of ``server.py`` answers the real client through a mocked transport in
the same process. ``NetworkWeaviate`` serves the same object over HTTP (REST: schema,
tenants, the create ``POST /v1/objects`` with its check-then-write window, plus ``/v1/meta``
and the readiness probe) and gRPC (the ``weaviate.v1.Weaviate`` service the client calls for
searches, batches, deletes, tenants and counts, and the gRPC health check the client pings
on connect), so several processes can share one Weaviate through
``weaviate.connect_to_custom``, as replicas of a deployment share a cluster.
"""

from __future__ import annotations

import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import httpx
import weaviate
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from weaviate.proto.v1 import batch_pb2, weaviate_pb2_grpc

from agentic_memory.store.ranking import WEAVIATE_VERSION
from tests.unit.store.weaviate.server import FakeWeaviate


class _Servicer(weaviate_pb2_grpc.WeaviateServicer):  # type: ignore[misc]
    """The gRPC calls the store makes, answered by the shared ``FakeWeaviate``."""

    def __init__(self, server: FakeWeaviate) -> None:
        self.server = server

    def Search(self, request: Any, context: Any) -> Any:
        return self.server.search(request)

    def BatchObjects(self, request: Any, context: Any) -> Any:
        errors = self.server.batch_objects(request, timeout=0, max_retries=0)
        return batch_pb2.BatchObjectsReply(
            errors=[
                batch_pb2.BatchObjectsReply.BatchError(index=i, error=e) for i, e in errors.items()
            ]
        )

    def BatchDelete(self, request: Any, context: Any) -> Any:
        return self.server.batch_delete(request)

    def TenantsGet(self, request: Any, context: Any) -> Any:
        return self.server.tenants_get(request)

    def Aggregate(self, request: Any, context: Any) -> Any:
        return self.server.aggregate(request)


def _rest_handler(server: FakeWeaviate) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            if path == "/v1/meta":
                response = httpx.Response(
                    200, json={"version": WEAVIATE_VERSION, "hostname": "http://[::]:8080"}
                )
            elif path in ("/v1/.well-known/ready", "/v1/.well-known/live"):
                response = httpx.Response(200, json={})
            elif path == "/v1/.well-known/openid-configuration":
                response = httpx.Response(404)  # no OIDC: the client then needs no login
            else:
                request = httpx.Request(
                    self.command,
                    f"http://weaviate.test{self.path}",
                    headers={"content-type": "application/json"},
                    content=body,
                )
                response = server.handle(request)
            payload = response.content
            self.send_response(response.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the client's requests are recorded by the server itself

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A killed client's connection: the server goes on, as Weaviate does.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class NetworkWeaviate:
    """Serve one ``FakeWeaviate`` on free loopback ports until ``stop``."""

    def __init__(self, server: FakeWeaviate | None = None, *, workers: int = 32) -> None:
        self.server = server or FakeWeaviate()
        self._http = _Server(("127.0.0.1", 0), _rest_handler(self.server))
        self.http_port = int(self._http.server_address[1])
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        weaviate_pb2_grpc.add_WeaviateServicer_to_server(_Servicer(self.server), self._grpc)
        checks = health.HealthServicer()
        checks.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(checks, self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The REST address, as ``WEAVIATE_URL`` takes it."""
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> NetworkWeaviate:
        """Start serving; return self."""
        self._grpc.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop both listeners."""
        self._grpc.stop(grace=None)
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> NetworkWeaviate:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def connect(http_port: int, grpc_port: int) -> Any:
    """Return a real, connected ``WeaviateClient`` for a ``NetworkWeaviate`` (any process).

    The init checks are skipped only because they ask PyPI for the latest client version.
    """
    return weaviate.connect_to_custom(
        http_host="127.0.0.1",
        http_port=http_port,
        http_secure=False,
        grpc_host="127.0.0.1",
        grpc_port=grpc_port,
        grpc_secure=False,
        skip_init_checks=True,
    )


def request_text(body: dict[str, Any]) -> str:
    """Return a create's properties as one string (to recognise whose write it is)."""
    return json.dumps(body.get("properties") or {}, ensure_ascii=False)

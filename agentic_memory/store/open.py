"""Open the configured memory store: the one way code chooses a backend and its location."""

from __future__ import annotations

import os
from pathlib import Path

from agentic_memory.paths import amem_home
from agentic_memory.store.base import MemoryStore
from agentic_memory.store.embedded import EmbeddedStore
from agentic_memory.store.types import InvalidInputError

BACKENDS = ("embedded", "weaviate")
__all__ = ["BACKENDS", "amem_home", "open_store"]


def open_store(
    dims: int, *, backend: str | None = None, path: str | Path | None = None
) -> MemoryStore:
    """Open the memory store for ``dims``-sized vectors.

    Args:
        dims: Vector size of the embedding model in use.
        backend: ``"embedded"`` or ``"weaviate"``; when omitted, ``$AMEM_STORE`` (default
            ``embedded``). An explicit argument always wins over the environment.
        path: Directory of the embedded store; default ``$AMEM_HOME/store``. Not valid for
            Weaviate, which reads ``WEAVIATE_URL``, ``WEAVIATE_API_KEY`` and
            ``WEAVIATE_GRPC_PORT`` (and ``AMEM_COORDINATOR_URI``, see
            ``agentic_memory.store.coordination``).

    Raises:
        InvalidInputError: The backend name is unknown, or a path was given for Weaviate.
    """
    if backend is not None and not isinstance(backend, str):
        raise InvalidInputError(f"backend must be a string, got {type(backend).__name__}")
    chosen = backend if backend is not None else os.environ.get("AMEM_STORE", "")
    name = chosen.strip().lower() or "embedded"
    if name == "embedded":
        return EmbeddedStore(path if path is not None else amem_home() / "store", dims=dims)
    if name == "weaviate":
        if path is not None:
            raise InvalidInputError(
                "path applies to the embedded store only; Weaviate is located by WEAVIATE_URL"
            )
        # Lazy: weaviate-client (gRPC, protobuf) is only loaded when Weaviate is chosen.
        from agentic_memory.store.weaviate import WeaviateStore  # noqa: PLC0415

        return WeaviateStore.connect(dims)
    source = "backend argument" if backend is not None else "AMEM_STORE"
    raise InvalidInputError(
        f"unknown store backend {chosen!r} ({source}): expected one of {', '.join(BACKENDS)}"
    )

"""Backend fixtures for the storage conformance suite.

Every test that takes ``store`` or ``open_test_store`` runs once per backend: always against
the embedded store, and against Weaviate when ``WEAVIATE_URL`` points at a ready server.
Collections get unique names and are dropped afterwards, so a shared server stays clean.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.store import CollectionSpec, MemoryStore, Property, open_store
from agentic_memory.store.embedded.cache import PartitionCache

DIMS = 8

WEAVIATE_SKIP = "WEAVIATE_URL not set: Weaviate conformance skipped"


def vec(*values: float, dims: int = DIMS) -> list[float]:
    """Pad hand-picked coordinates with zeros to the store's vector size."""
    return [float(v) for v in values] + [0.0] * (dims - len(values))


def count_extensions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record each time an embedded store extends a cached partition instead of reloading it."""
    calls: list[int] = []
    real_extend = PartitionCache.extend

    def spy(self: PartitionCache, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_extend(self, *args, **kwargs)

    monkeypatch.setattr(PartitionCache, "extend", spy)
    return calls


def make_spec(name: str, *, per_user: bool = True) -> CollectionSpec:
    return CollectionSpec(
        name=name,
        per_user=per_user,
        properties=(
            Property("title", "text", searchable=True),
            Property("body", "text", searchable=True),
            Property("tags", "text[]", searchable=True),
            Property("kind", "text"),
            Property("rank", "int"),
            Property("weight", "number"),
            Property("flag", "bool"),
            Property("at", "date"),
        ),
    )


def _weaviate_unavailable() -> str | None:
    url = os.environ.get("WEAVIATE_URL", "").strip()
    if not url:
        return WEAVIATE_SKIP
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/.well-known/ready", timeout=5) as r:
            if r.status == 200:
                return None
            return f"Weaviate at {url} is not ready (HTTP {r.status}): Weaviate conformance skipped"
    except (urllib.error.URLError, OSError) as exc:
        return f"Weaviate at {url} is unreachable ({exc}): Weaviate conformance skipped"


def require_weaviate() -> None:
    """Skip the calling test, saying why, when no live Weaviate answers; fail it instead when
    ``AMEM_REQUIRE_WEAVIATE`` is set (``make test-weaviate`` sets it: a live run that skipped
    its live cases would prove nothing)."""
    reason = _weaviate_unavailable()
    if reason is None:
        return
    if os.environ.get("AMEM_REQUIRE_WEAVIATE"):
        pytest.fail(f"AMEM_REQUIRE_WEAVIATE is set but {reason}")
    pytest.skip(reason)


@pytest.fixture(params=["embedded", pytest.param("weaviate", marks=pytest.mark.weaviate)])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name == "weaviate":
        require_weaviate()
    return name


OpenStore = Callable[..., MemoryStore]


@pytest.fixture
def created_names() -> set[str]:
    """Names of the collections a test made (dropped from Weaviate afterwards)."""
    return set()


@pytest.fixture
def open_test_store(backend: str, tmp_path: Path, created_names: set[str]) -> Iterator[OpenStore]:
    """Open stores of the backend under test (the embedded ones share one directory)."""
    opened: list[MemoryStore] = []

    def _open(dims: int = DIMS) -> MemoryStore:
        if backend == "embedded":
            store = open_store(dims, backend="embedded", path=tmp_path / "store")
        else:
            store = open_store(dims, backend="weaviate")
        opened.append(store)
        return store

    yield _open

    for store in opened:
        try:
            store.close()
        except Exception:  # a test may have closed it already
            pass
    if backend == "weaviate" and created_names:
        cleaner = open_store(DIMS, backend="weaviate")
        try:
            existing = set(cleaner.collections())
            for name in created_names & existing:
                cleaner.drop_collection(name)
        finally:
            cleaner.close()


@pytest.fixture
def store(open_test_store: OpenStore) -> MemoryStore:
    return open_test_store()


@pytest.fixture
def new_name(created_names: set[str]) -> Callable[[], str]:
    """Return unique collection names, so parallel runs on one server never collide."""

    def _name() -> str:
        name = f"Conf{uuid.uuid4().hex[:12]}"
        created_names.add(name)
        return name

    return _name


@pytest.fixture
def coll(store: MemoryStore, new_name: Callable[[], str]) -> CollectionSpec:
    """A fresh per-user collection in ``store``."""
    spec = make_spec(new_name())
    store.ensure_collection(spec)
    return spec


@pytest.fixture
def shared(store: MemoryStore, new_name: Callable[[], str]) -> CollectionSpec:
    """A fresh shared (not per-user) collection in ``store``."""
    spec = make_spec(new_name(), per_user=False)
    store.ensure_collection(spec)
    return spec

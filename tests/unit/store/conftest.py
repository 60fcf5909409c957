"""Backend fixtures for the storage conformance suite.

Every test that takes ``store`` or ``open_test_store`` runs once per backend: against the
embedded store and against the session's live Weaviate (``tests/live_weaviate.py``: the
pinned server that ``make weaviate-server`` built, or the one ``WEAVIATE_URL`` names).
Collections get unique names and are dropped afterwards, so a shared server stays clean.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.store import CollectionSpec, MemoryStore, Property, open_store
from agentic_memory.store.embedded.cache import PartitionCache

DIMS = 8


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


@pytest.fixture(params=["embedded", pytest.param("weaviate", marks=pytest.mark.weaviate)])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test; ``weaviate`` is the session's live server (``tests/live_weaviate.py``)."""
    name: str = request.param
    if name == "weaviate":
        request.getfixturevalue("weaviate_env")
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

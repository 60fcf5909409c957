"""The async methods of a store reopened on existing data never run storage code on the loop.

What a restarted server meets: a fresh ``EmbeddedStore`` on a file that holds collections, so
its schema and index caches are empty and the first call of each method loads them from
SQLite. Every test body runs under blockbuster (``tests/conftest.py``), so a SQLite call
made on the event loop fails it. Each method is called on a store of its own, opened (in the
fixture, off the loop) just before, so no earlier call has warmed a cache for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentic_memory.store import MemoryObject, Property, Where, make_id
from agentic_memory.store.embedded import EmbeddedStore
from tests.unit.store.conftest import DIMS, make_spec, vec

ALICE = "alice"
SPEC = make_spec("Notes")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cold") / "store"
    with EmbeddedStore(path, dims=DIMS) as store:
        store.ensure_collection(SPEC)
        store.upsert(
            SPEC.name,
            [
                MemoryObject(make_id(f"n{i}"), {"body": f"note {i}", "rank": i}, vec(i, 1))
                for i in range(5)
            ],
            user=ALICE,
        ).raise_for_failures()
    return path


@pytest.fixture
def cold(written: Path, tmp_path: Path) -> Iterator[EmbeddedStore]:
    copy = tmp_path / "store"
    copy.mkdir()
    for f in written.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    store = EmbeddedStore(copy, dims=DIMS)
    assert store._specs == {}  # nothing cached: the first call reads the schema
    yield store
    store.close()


async def _iterate(s: EmbeddedStore) -> list[Any]:
    return [o async for o in s.aiterate(SPEC.name, user=ALICE, page_size=2)]


CALLS: dict[str, Callable[[EmbeddedStore], Awaitable[Any]]] = {
    "aiterate": _iterate,
    "aget": lambda s: s.aget(SPEC.name, make_id("n1"), user=ALICE),
    "alist_objects": lambda s: s.alist_objects(SPEC.name, user=ALICE, sort_by="rank"),
    "acount": lambda s: s.acount(SPEC.name, user=ALICE, where=[Where("rank", "gt", 1)]),
    "ahybrid": lambda s: s.ahybrid(SPEC.name, query="note", vector=vec(1, 1), user=ALICE),
    "ausers": lambda s: s.ausers(SPEC.name),
    "acollections": lambda s: s.acollections(),
    "aspec": lambda s: s.aspec(SPEC.name),
    "aupsert": lambda s: s.aupsert(
        SPEC.name, [MemoryObject(make_id("new"), {"body": "new"}, vec(1))], user=ALICE
    ),
    "ainsert": lambda s: s.ainsert(
        SPEC.name, [MemoryObject(make_id("ins"), {"body": "ins"}, vec(1))], user=ALICE
    ),
    "adelete": lambda s: s.adelete(SPEC.name, [make_id("n2")], user=ALICE),
    "adelete_where": lambda s: s.adelete_where(SPEC.name, [Where("rank", "eq", 3)], user=ALICE),
    "adelete_user": lambda s: s.adelete_user(SPEC.name, ALICE),
    "aadd_properties": lambda s: s.aadd_properties(SPEC.name, [Property("extra", "int")]),
    "aextend_collection": lambda s: s.aextend_collection(SPEC),
    "aensure_collection": lambda s: s.aensure_collection(SPEC),
    "adrop_collection": lambda s: s.adrop_collection(SPEC.name),
    "aerase_deleted": lambda s: s.aerase_deleted(),
}


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_the_first_call_of_a_reopened_store_runs_off_the_loop(
    cold: EmbeddedStore, name: str
) -> None:
    await CALLS[name](cold)


async def test_iteration_arguments_are_checked_in_the_worker_thread(cold: EmbeddedStore) -> None:
    from agentic_memory.store import InvalidInputError

    with pytest.raises(InvalidInputError, match="page_size"):
        [o async for o in cold.aiterate(SPEC.name, user=ALICE, page_size=0)]


def test_the_async_methods_show_the_signature_and_docstring_of_the_call() -> None:
    import inspect

    store_type = EmbeddedStore
    assert "include_vector" in str(inspect.signature(store_type.iterate))
    probe = EmbeddedStore.__new__(EmbeddedStore)  # attribute lookup only
    assert inspect.signature(probe.ahybrid) == inspect.signature(probe.hybrid)
    assert "relativeScoreFusion" in (probe.ahybrid.__doc__ or "")
    assert inspect.signature(probe.aiterate) == inspect.signature(probe.iterate)
    assert probe.aiterate.__name__ == "aiterate"

"""The embedded store's side of ``add_properties``: columns, indexes, one transaction."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import agentic_memory.store.embedded.store as embedded
from agentic_memory.store import MemoryObject, Property, Where, make_id
from agentic_memory.store.embedded import DB_FILENAME, EmbeddedStore
from tests.storage.conftest import DIMS, make_spec, vec

PINNED = Property("pinned", "bool")
NOTE = Property("note", "text", filterable=False)
LABELS = Property("labels", "text[]")


def _columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def _indexes(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        return [r[1] for r in conn.execute(f'PRAGMA index_list("{table}")')]


def test_filterable_scalars_get_an_indexed_column(tmp_path: Path) -> None:
    spec = make_spec("Notes")
    with EmbeddedStore(tmp_path, dims=DIMS) as store:
        store.ensure_collection(spec)
        store.upsert(
            spec.name, [MemoryObject(make_id("a"), {"title": "a"}, vec(1))], user="u"
        ).raise_for_failures()
        store.add_properties(spec.name, [PINNED, NOTE, LABELS])
    columns = _columns(tmp_path, "o_Notes")
    assert '"p_pinned"' not in columns and "p_pinned" in columns
    assert "p_note" not in columns and "p_labels" not in columns  # JSON only
    assert "ix_Notes_pinned" in _indexes(tmp_path, "o_Notes")
    with EmbeddedStore(tmp_path, dims=DIMS) as store:
        store.upsert(
            spec.name,
            [MemoryObject(make_id("b"), {"title": "b", "pinned": True, "labels": ["x"]}, vec(1))],
            user="u",
        ).raise_for_failures()
        # The filter reads the column: the old row's NULL is "not true".
        assert store.count(spec.name, user="u", where=[Where("pinned", "eq", True)]) == 1
        assert store.count(spec.name, user="u", where=[Where("pinned", "ne", True)]) == 1
        assert store.count(spec.name, user="u", where=[Where("labels", "contains", "x")]) == 1
        got = store.get(spec.name, make_id("b"), user="u")
        assert got is not None and got.properties["pinned"] is True


def test_a_crash_during_the_change_leaves_the_old_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec("Notes")
    real = embedded._add_columns

    def crash(conn: Any, grown: Any, added: Any) -> None:
        real(conn, grown, added)
        raise KeyboardInterrupt("killed between the columns and the catalogue")

    with EmbeddedStore(tmp_path, dims=DIMS) as store:
        store.ensure_collection(spec)
        monkeypatch.setattr(embedded, "_add_columns", crash)
        with pytest.raises(KeyboardInterrupt):
            store.add_properties(spec.name, [PINNED])
    assert "p_pinned" not in _columns(tmp_path, "o_Notes")
    monkeypatch.setattr(embedded, "_add_columns", real)
    with EmbeddedStore(tmp_path, dims=DIMS) as store:
        assert store.spec(spec.name).properties == spec.properties
        assert store.add_properties(spec.name, [PINNED]) == ["pinned"]
    assert "p_pinned" in _columns(tmp_path, "o_Notes")


def test_stores_that_upgrade_at_once_all_succeed(tmp_path: Path) -> None:
    spec = make_spec("Notes")
    grown = dataclasses.replace(spec, properties=(*spec.properties, PINNED, NOTE))
    with EmbeddedStore(tmp_path, dims=DIMS) as store:
        store.ensure_collection(spec)
    # Separate stores, separate SQLite connections: locked like separate processes.
    stores = [EmbeddedStore(tmp_path, dims=DIMS) for _ in range(6)]
    for s in stores:
        s.spec(spec.name)  # each caches the old schema first
    start = threading.Barrier(len(stores))
    added: list[list[str]] = []
    errors: list[BaseException] = []

    def upgrade(s: EmbeddedStore) -> None:
        start.wait()
        try:
            added.append(s.extend_collection(grown))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=upgrade, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    # Each property was added exactly once, by one of them.
    assert sorted(name for names in added for name in names) == ["note", "pinned"]
    assert _columns(tmp_path, "o_Notes").count("p_pinned") == 1
    with EmbeddedStore(tmp_path, dims=DIMS) as store:
        assert store.spec(spec.name).properties == grown.properties

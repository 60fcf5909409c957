"""The embedded store's side of ``add_properties``: columns, indexes, one transaction."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import agentic_memory.store.embedded.store as embedded
from agentic_memory.store import MemoryObject, Property, Where, make_id
from agentic_memory.store.embedded import DB_FILENAME, EmbeddedStore
from agentic_memory.store.embedded.sql import SCHEMA_VERSION
from tests.unit.store.conftest import DIMS, make_spec, vec

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


def test_a_store_file_from_before_importance_opens_and_gains_it(tmp_path: Path) -> None:
    """A layout-2 file whose message log has the schema before importance (what earlier
    versions wrote): migrated to the current layout on open, the log gains ``important``
    on first use, its messages untouched, and retention works on them."""
    from datetime import UTC, datetime

    from agentic_memory.kinds.messages import MESSAGES, MESSAGES_V2, MessageLog
    from agentic_memory.kinds.retention import RetentionPolicy
    from agentic_memory.models.embeddings import LocalEmbeddings
    from tests.unit.store.test_embedded_store import _downgrade_to_layout_2, _downgrade_to_layout_3

    emb = LocalEmbeddings()
    old = datetime(2025, 1, 1, tzinfo=UTC)
    # The turns as the earlier version logged them: today's, without the new properties.
    with EmbeddedStore(tmp_path / "today", dims=emb.dims) as today:
        asyncio.run(
            MessageLog(today, emb).aremember(
                "alice",
                "t",
                [{"role": "user", "content": "old turn"}, {"role": "ai", "content": "old answer"}],
                now=old,
            )
        )
        logged = [
            MemoryObject(
                o.id,
                {k: v for k, v in o.properties.items() if k not in ("important", "important_by")},
                o.vector,
            )
            for o in today.iterate(MESSAGES.name, user="alice", include_vector=True)
            if o.vector is not None
        ]
    assert len(logged) == 2
    with EmbeddedStore(tmp_path, dims=emb.dims) as store:
        store.ensure_collection(MESSAGES_V2)
        store.upsert(MESSAGES.name, logged, user="alice").raise_for_failures()
        before = {o.id: o.properties for o in store.iterate(MESSAGES.name, user="alice")}
    _downgrade_to_layout_3(tmp_path / DB_FILENAME)
    _downgrade_to_layout_2(tmp_path / DB_FILENAME)

    policy = RetentionPolicy(message_days=30, max_messages=None, purge_interval_minutes=None)
    with EmbeddedStore(tmp_path, dims=emb.dims) as store:
        log = MessageLog(store, emb, retention=policy)
        listed = asyncio.run(log.alist("alice", thread_id="t"))
        assert [(m.content, m.important) for m in listed] == [
            ("old turn", False),
            ("old answer", False),
        ]
        assert store.spec(MESSAGES.name).properties == MESSAGES.properties
        after = {o.id: o.properties for o in store.iterate(MESSAGES.name, user="alice")}
        assert after == before  # no message was rewritten
        asyncio.run(log.amark_important("alice", [listed[0].id]))
        report = asyncio.run(log.apurge("alice", now=datetime(2026, 1, 1, tzinfo=UTC)))
        assert (report.expired, report.remaining) == (1, 1)
    assert "p_important" in _columns(tmp_path, "o_MessageLog")
    with sqlite3.connect(tmp_path / DB_FILENAME) as conn:
        version = conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (str(SCHEMA_VERSION),)

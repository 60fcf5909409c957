"""SQL layout of the embedded store: catalogue, columns, filters and migrations.

Layout: ``store.sqlite3`` (WAL mode) holds a catalogue of collection schemas and, per
collection, an object table ``o_<Name>``: id, user, the properties (``body``: their JSON,
compressed), a column per filterable scalar property, ``props``: the JSON of the filterable
``text[]`` properties, which filters read, and ``vector``, empty since layout 7. Each
partition's keyword postings and vectors are kept in blocks (``amem_blocks``, see
``blocks.py``), written in the transaction that writes the rows; a large partition's PCA axes
in ``amem_axes`` (``vectors.py``).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import uuid
import zlib
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from agentic_memory.store.embedded.blocks import (
    BLOCK_ROWS,
    PartitionBlocks,
    create_tables,
    inline_vectors,
    move_vectors,
)
from agentic_memory.store.embedded.keyword import text_postings
from agentic_memory.store.embedded.vectors import maintain_axes
from agentic_memory.store.ranking import text_sort_key
from agentic_memory.store.types import (
    CollectionSpec,
    InvalidInputError,
    Property,
    SchemaConflictError,
    StoredObject,
    StoreError,
    UnknownCollectionError,
    Where,
)

DB_FILENAME = "store.sqlite3"
SCHEMA_VERSION = 7
PAGE_SIZE = 16_384
"""Bytes per database page. A row (a 256-d vector and its compressed text) takes ~1.5 KB: a
4 KB page holds two and leaves the rest empty, a 16 KB page wastes ~5 %."""
_ZEROED_KEY = "free_space_zeroed"
"""``amem_meta`` key of a store file written with ``secure_delete`` since its creation."""
_VACUUM_KEY = "vacuum_pending"
"""``amem_meta`` key set by a migration that freed pages: the next open alone with the file
vacuums it (``compact_pages``), so the file shrinks."""

_BODY_RAW = b"\x00"
_BODY_ZLIB = b"\x01"
_BODY_LEVEL = 6


def encode_body(props_json: str) -> bytes:
    """Return the stored form of a row's properties: their UTF-8 JSON, deflated if shorter.

    One tag byte tells which: raw (0) or zlib (1, with its checksum). Per row,
    so a read decodes only the rows it returns, and a delete leaves nothing of the row behind.
    """
    raw = props_json.encode("utf-8")
    packed = zlib.compress(raw, _BODY_LEVEL)
    return _BODY_ZLIB + packed if len(packed) < len(raw) else _BODY_RAW + raw


def decode_body_json(blob: bytes) -> str:
    """Return the JSON text of a stored body (``encode_body``)."""
    tag, data = blob[:1], blob[1:]
    try:
        if tag == _BODY_ZLIB:
            return zlib.decompress(data).decode("utf-8")
        if tag == _BODY_RAW:
            return data.decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as exc:
        raise StoreError(f"stored properties are damaged: {exc}") from exc
    raise StoreError(f"stored properties have an unknown encoding (tag {tag!r})")


def decode_body(blob: bytes) -> dict[str, Any]:
    """Return the properties of a stored body (``encode_body``)."""
    props: dict[str, Any] = json.loads(decode_body_json(blob))
    return props


def _sql_body_json(blob: bytes | None) -> str | None:
    """``amem_props(body)`` in SQL: the JSON of a body, for sorting by a property without a column."""
    return None if blob is None else decode_body_json(blob)


def _array_props(spec: CollectionSpec) -> list[Property]:
    """Return the properties kept in ``props`` JSON too: the filterable ``text[]`` ones."""
    return [p for p in spec.properties if p.filterable and p.type == "text[]"]


def filter_json(spec: CollectionSpec, props: dict[str, Any]) -> str | None:
    """Return the ``props`` column of a row: the JSON of its filterable ``text[]`` values."""
    kept = {p.name: props[p.name] for p in _array_props(spec) if p.name in props}
    return json.dumps(kept, ensure_ascii=False) if kept else None


def _object_table_sql(spec: CollectionSpec, table: str) -> str:
    columns = "".join(f", {_column(p.name)}" for p in _columns(spec))
    return (
        f"CREATE TABLE {table} (rid INTEGER PRIMARY KEY, id TEXT NOT NULL, user TEXT, "
        f"props TEXT, body BLOB NOT NULL, vector BLOB NOT NULL{columns})"
    )


def _object_indexes(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    obj = _table(spec.name)
    conn.execute(f'CREATE INDEX "ix_{spec.name}_user_id" ON {obj} (user, id)')
    _user_index(conn, spec)
    _index_columns(conn, spec)
    _compound_indexes(conn, spec)


def create_object_table(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    """Create a collection's object table and its indexes."""
    conn.execute(_object_table_sql(spec, _table(spec.name)))
    _object_indexes(conn, spec)


def _create_catalogue(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS amem_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = conn.execute("SELECT value FROM amem_meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        conn.execute(
            "INSERT INTO amem_meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )
        # Written with secure_delete from the start: no stale text in its free space.
        conn.execute(f"INSERT INTO amem_meta (key, value) VALUES ('{_ZEROED_KEY}', '1')")
    elif int(row[0]) in (1, 2, 3, 4, 5, 6):
        if int(row[0]) == 1:
            _migrate_from_v1(conn)
        if int(row[0]) <= 2:
            _migrate_from_v2(conn)
        if int(row[0]) <= 3:
            _migrate_from_v3(conn)
        if int(row[0]) <= 4:
            _migrate_from_v4(conn)
        if int(row[0]) <= 5:
            _migrate_from_v5(conn)
        _migrate_from_v6(conn)
    elif int(row[0]) != SCHEMA_VERSION:
        raise SchemaConflictError(
            f"store file has layout version {row[0]}, this code reads {SCHEMA_VERSION}"
        )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS amem_collections ("
        "name TEXT PRIMARY KEY, spec TEXT NOT NULL, dims INTEGER NOT NULL, "
        "created_at TEXT NOT NULL)"
    )
    _generations_table(conn)
    _partition_tables(conn)


def _generations_table(conn: sqlite3.Connection) -> None:
    # One random token per (collection, user) that every write replaces: a cache built under
    # another token compares its keyword blocks with the file's (cache.py), whichever
    # process wrote.
    conn.execute(
        "CREATE TABLE IF NOT EXISTS amem_generations ("
        "collection TEXT NOT NULL, scope TEXT NOT NULL, token TEXT NOT NULL, "
        "PRIMARY KEY (collection, scope))"
    )


def _partition_tables(conn: sqlite3.Connection) -> None:
    create_tables(conn)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS amem_axes (collection TEXT NOT NULL, scope TEXT NOT NULL, "
        "rows INTEGER NOT NULL, axes BLOB NOT NULL, centroids BLOB, centroid_rows INTEGER, "
        "PRIMARY KEY (collection, scope))"
    )
    # Columns of their own (layout 6): code of layout 5 names its columns, so a process of
    # it still running reads the axes as it wrote them, and axes it writes leave the
    # centroids stale, which their ``centroid_rows`` tells.
    columns = {r[1] for r in conn.execute("PRAGMA table_info(amem_axes)")}
    for name, kind in (("centroids", "BLOB"), ("centroid_rows", "INTEGER")):
        if name not in columns:
            conn.execute(f"ALTER TABLE amem_axes ADD COLUMN {name} {kind}")


def normalise_date(value: str) -> str:
    """Return an RFC 3339 date as UTC ``isoformat`` text, whose text order is time order."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise InvalidInputError(f"date must carry a timezone: {value!r}")
    # isoformat of a UTC time sorts as text: a missing fraction ("+") sorts before ".ffffff".
    return parsed.astimezone(UTC).isoformat()


def _table(name: str) -> str:
    # Collection names are validated against COLLECTION_NAME_RE, so quoting them is enough.
    return f'"o_{name}"'


def _bump(conn: sqlite3.Connection, collection: str, user: str | None) -> None:
    """Mark a partition changed: give it a new generation token."""
    conn.execute(
        "INSERT INTO amem_generations (collection, scope, token) VALUES (?, ?, ?) "
        "ON CONFLICT (collection, scope) DO UPDATE SET token = excluded.token",
        (collection, user or "", uuid.uuid4().hex),
    )


def _sql_text_key(value: str | None) -> str | None:
    return text_sort_key(value) if isinstance(value, str) else value


def _json_path(prop: str) -> str:
    return f"$.{prop}"


def _columns(spec: CollectionSpec) -> list[Property]:
    """Return the properties kept in an indexed column of their own as well as in the JSON.

    Filters and sorting read the column. Expression indexes on the JSON (layout 1) parsed
    every row's JSON once per index on every write, which doubled the cost of an insert.
    """
    return [p for p in spec.properties if p.filterable and p.type != "text[]"]


def _column(prop: str) -> str:
    # Property names match PROPERTY_NAME_RE, so quoting them is enough.
    return f'"p_{prop}"'


def _column_value(value: Any) -> Any:
    """Return what ``json_extract`` gives for an already normalised value (booleans: 0, 1)."""
    return int(value) if isinstance(value, bool) else value


def _index_columns(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    for prop in _columns(spec):
        conn.execute(
            f'CREATE INDEX "ix_{spec.name}_{prop.name}" '
            f"ON {_table(spec.name)} (user, {_column(prop.name)})"
        )


def _add_columns(conn: sqlite3.Connection, spec: CollectionSpec, added: list[Property]) -> None:
    """Give added filterable properties their column and index; existing rows hold NULL.

    NULL is what the JSON of those rows says too (no such key), so filters on the column and
    on the JSON agree without rewriting a row. ``ALTER TABLE ... ADD COLUMN`` only changes
    the table's schema text, so this is as cheap on a million rows as on none.
    """
    table = _table(spec.name)
    for prop in added:
        if prop.filterable and prop.type != "text[]":
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {_column(prop.name)}")
            conn.execute(
                f'CREATE INDEX IF NOT EXISTS "ix_{spec.name}_{prop.name}" '
                f"ON {table} (user, {_column(prop.name)})"
            )


def _compound_indexes(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    """Create the spec's compound indexes that are missing (also on stores made before them).

    Each ends with ``id``, the tie-breaker of every sorted listing, so a filtered, sorted page
    is read in index order without a sort.
    """
    for index in spec.indexes:
        # '-' cannot occur in a property name, so names of different indexes differ.
        name = f"cx_{spec.name}_{'-'.join(index)}"
        columns = ", ".join(_column(prop) for prop in index)
        conn.execute(
            f'CREATE INDEX IF NOT EXISTS "{name}" ON {_table(spec.name)} (user, {columns}, id)'
        )


def _prop_sql(spec: CollectionSpec, prop: str, alias: str = "") -> str:
    """Return a scalar property's SQL: its column, or its JSON path when it has none.

    Only sorting reads a property without a column (filters need a filterable one): its
    value comes from the decompressed body (``amem_props``, registered by the store).
    """
    if any(p.name == prop for p in _columns(spec)):
        return f"{alias}{_column(prop)}"
    return f"json_extract(amem_props({alias}body), '{_json_path(prop)}')"


TOKENIZER_VERSION = "2"
"""Version 2 splits text before lower-casing it, letter by letter (Go's order): version 1
lower-cased first, which split words at U+0130 ("İ" becomes "i" plus a combining dot) and
gave a word-final capital sigma the final form ("ς" instead of Go's "σ"). Layout 4 stored no
term counts, and the migration to layout 5 tokenises the stored text with today's
tokenizer, so a file written under an older one needs no other rewrite."""


def _migrate_from_v1(conn: sqlite3.Connection) -> None:
    """Move filterable properties from JSON expression indexes to indexed columns.

    Runs inside the opening transaction: a crash leaves the layout-1 file untouched, and a
    second process that opens the store meanwhile waits and then finds layout 2.
    """
    conn.execute("ALTER TABLE amem_generations ADD COLUMN lineage TEXT NOT NULL DEFAULT ''")
    conn.execute("UPDATE amem_generations SET lineage = lower(hex(randomblob(16)))")
    for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
        spec = _spec_from_json(spec_json)
        table = _table(spec.name)
        indexed = _columns(spec)
        for prop in indexed:
            conn.execute(f'DROP INDEX IF EXISTS "ix_{spec.name}_{prop.name}"')
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {_column(prop.name)}")
        if indexed:
            conn.execute(
                f"UPDATE {table} SET "
                + ", ".join(
                    f"{_column(p.name)} = json_extract(props, '{_json_path(p.name)}')"
                    for p in indexed
                )
            )
        _index_columns(conn, spec)
    conn.execute("UPDATE amem_meta SET value = '2' WHERE key = 'schema_version'")


def _migrate_from_v2(conn: sqlite3.Connection) -> None:
    """Count deleting writes per partition, and index every object table by user alone.

    A cache then reads only the rows added since it was built: the ``(user)`` index holds
    each user's rids in order, so ``user IS ? AND rid > ?`` is a range, where the other
    indexes made it a scan of all the user's rows; and an unchanged ``removed`` count
    spares reading every rid to find deleted ones. Runs inside the opening transaction,
    like ``_migrate_from_v1``. The page size changes later, outside it (``compact_pages``).
    """
    conn.execute("ALTER TABLE amem_generations ADD COLUMN removed INTEGER NOT NULL DEFAULT 0")
    for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
        _user_index(conn, _spec_from_json(spec_json))
    conn.execute("UPDATE amem_meta SET value = '3' WHERE key = 'schema_version'")


_MIGRATION_BATCH = 2000


def _migrate_from_v3(conn: sqlite3.Connection) -> None:
    """Store each row's properties compressed and drop its term counts (layout 4).

    Every object table is copied into a new one of layout 4, row by row in rid order (rids,
    and with them every partition's lineage, stay valid), then replaces it. Runs inside the
    opening transaction, like ``_migrate_from_v1``; the pages this frees are given back to
    the file system by the next open alone with the file (``compact_pages``).
    """
    for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
        spec = _spec_from_json(spec_json)
        table = _table(spec.name)
        new = f'"o4_{spec.name}"'
        conn.execute(_object_table_sql(spec, new))
        names = "".join(f", {_column(p.name)}" for p in _columns(spec))
        marks = ", ?" * len(_columns(spec))
        insert = (
            f"INSERT INTO {new} (rid, id, user, props, body, vector{names}) "
            f"VALUES (?, ?, ?, ?, ?, ?{marks})"
        )
        after = 0
        while True:
            rows = conn.execute(
                f"SELECT rid, id, user, props, vector{names} FROM {table} "
                "WHERE rid > ? ORDER BY rid LIMIT ?",
                (after, _MIGRATION_BATCH),
            ).fetchall()
            if not rows:
                break
            conn.executemany(
                insert,
                [
                    (
                        rid,
                        oid,
                        user,
                        filter_json(spec, json.loads(props)),
                        encode_body(props),
                        vector,
                        *columns,
                    )
                    for rid, oid, user, props, vector, *columns in rows
                ],
            )
            after = rows[-1][0]
        conn.execute(f"DROP TABLE {table}")
        conn.execute(f"ALTER TABLE {new} RENAME TO {table}")
        _object_indexes(conn, spec)
    conn.execute(f"INSERT OR REPLACE INTO amem_meta (key, value) VALUES ('{_VACUUM_KEY}', '1')")
    conn.execute("UPDATE amem_meta SET value = '4' WHERE key = 'schema_version'")


def _migrate_from_v4(conn: sqlite3.Connection) -> None:
    """Keep each partition's keyword postings in blocks, and large partitions' axes (layout 5).

    Leaves the version at 5: ``_migrate_from_v5`` follows.

    Tokenises every row once, partition by partition in rid order, into blocks of
    ``BLOCK_ROWS`` rows, and chooses the axes of partitions above ``EXACT_VECTOR_ROWS``. The
    generation rows lose the lineage and deletion count layouts 2 to 4 kept (caches now
    compare blocks). Runs inside the opening transaction, like ``_migrate_from_v1``: about
    as long as the first keyword search of each partition took under layout 4, once.
    """
    _partition_tables(conn)
    for (spec_json,) in conn.execute("SELECT spec FROM amem_collections").fetchall():
        spec = _spec_from_json(spec_json)
        table = _table(spec.name)
        users = [r[0] for r in conn.execute(f"SELECT DISTINCT user FROM {table}").fetchall()]
        for user in users:
            blocks = PartitionBlocks(conn, spec.name, user or "", len(spec.searchable))
            after = 0
            while True:
                rows = conn.execute(
                    f"SELECT rid, body FROM {table} WHERE user IS ? AND rid > ? "
                    "ORDER BY rid LIMIT ?",
                    (user, after, BLOCK_ROWS),
                ).fetchall()
                if not rows:
                    break
                rids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                blocks.add(rids, text_postings(spec, [decode_body(r[1]) for r in rows], 0), None, 0)
                after = rows[-1][0]
            dims = int(
                conn.execute(
                    "SELECT dims FROM amem_collections WHERE name = ?", (spec.name,)
                ).fetchone()[0]
            )
            if maintain_axes(
                conn,
                spec.name,
                user or "",
                table,
                user,
                blocks.rows(),
                functools.partial(inline_vectors, conn, table, user, dims=dims),
            ):
                blocks.reproject(table, user, dims)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(amem_generations)")]
    for gone in ("lineage", "removed"):
        if gone in columns:
            conn.execute(f"ALTER TABLE amem_generations DROP COLUMN {gone}")
    conn.execute("UPDATE amem_meta SET value = '5' WHERE key = 'schema_version'")


def _migrate_from_v5(conn: sqlite3.Connection) -> None:
    """Layout 6: keyword blocks may keep their rows' unit vectors, axes their lists' centroids.

    Only columns are added here (``unit`` by ``blocks.create_tables``, ``centroids`` and
    ``centroid_rows`` of ``amem_axes``); the axes get their centroids from the next write to
    a partition that has axes. Leaves the version at 6: ``_migrate_from_v6`` follows.
    """
    _partition_tables(conn)
    conn.execute("UPDATE amem_meta SET value = '6' WHERE key = 'schema_version'")


def _migrate_from_v6(conn: sqlite3.Connection) -> None:
    """Layout 7: each vector is kept once, in its row's keyword block.

    Layout 6 kept each row's vector in the row and its unit vector in the block as well:
    every block gets its rows' vectors, every row's own is emptied and the unit vectors are
    dropped (``blocks.move_vectors``), and blocks get their rows' inverted lists
    (``PartitionBlocks.relabel``), in the opening transaction like ``_migrate_from_v1``.
    The pages this frees go back to the file system at the next open alone with the file
    (``compact_pages``). A process of layout 6 that had the file open before goes on writing
    rows with their vectors and blocks without: every read looks in the row first.
    """
    _partition_tables(conn)
    for spec_json, dims in conn.execute("SELECT spec, dims FROM amem_collections").fetchall():
        spec = _spec_from_json(spec_json)
        move_vectors(conn, spec.name, _table(spec.name), int(dims))
        scopes = conn.execute("SELECT scope FROM amem_axes WHERE collection = ?", (spec.name,))
        for (scope,) in scopes.fetchall():
            # The rows' inverted lists, from the projections the blocks keep.
            PartitionBlocks(conn, spec.name, scope, 0).relabel(int(dims))
    conn.execute(f"INSERT OR REPLACE INTO amem_meta (key, value) VALUES ('{_VACUUM_KEY}', '1')")
    conn.execute(
        "UPDATE amem_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
    )


def _user_index(conn: sqlite3.Connection, spec: CollectionSpec) -> None:
    conn.execute(f'CREATE INDEX IF NOT EXISTS "ix_{spec.name}_user" ON {_table(spec.name)} (user)')


_RECLAIM_MIN_PAGES = 64
"""Free pages (1 MB at ``PAGE_SIZE``) below which ``reclaim_pages`` leaves the file as it is."""
_RECLAIM_SHARE = 0.1
"""Share of the file's pages that must be free before ``reclaim_pages`` gives them back."""


def reclaim_pages(conn: sqlite3.Connection) -> int:
    """Give the file's free pages back to the file system; return how many bytes they held.

    Nothing is done while they are fewer than a tenth of the file (and 1 MB): reusing them
    costs nothing, giving them back costs a write. A file with ``auto_vacuum = INCREMENTAL``
    (every file created since) moves its last pages into the free ones and is cut
    (``incremental_vacuum``: in time, about the pages freed); an older file is rewritten once
    by ``VACUUM`` (about the data kept), which also turns incremental vacuuming on. Readers
    of other connections go on meanwhile (WAL); the file shrinks at the next checkpoint.
    """
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    if free < max(_RECLAIM_MIN_PAGES, pages * _RECLAIM_SHARE):
        return 0
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    if mode == 2:
        # A script runs the pragma to its end; one execute() frees a single page.
        conn.executescript("PRAGMA incremental_vacuum;")
    else:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("VACUUM")
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    return int(free) * int(size)


def compact_pages(conn: sqlite3.Connection) -> bool:
    """Rewrite the file if it has smaller pages than ``PAGE_SIZE`` or a migration freed pages.

    Runs ``VACUUM``, which SQLite makes atomic (a crash leaves the old file), after leaving
    WAL mode, which only the sole connection to a file may do: when another process has the
    store open, nothing is done and a later open tries again. Returns whether it was done.
    """
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    pending = conn.execute("SELECT 1 FROM amem_meta WHERE key = ?", (_VACUUM_KEY,)).fetchone()
    if size >= PAGE_SIZE and pending is None:
        return False
    (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
    # Wait for no one: the store works as it is, and another open will try again.
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        (mode,) = conn.execute("PRAGMA journal_mode = DELETE").fetchone()
        if mode != "delete":
            return False
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("VACUUM")
            # After the VACUUM: a crash between the two only vacuums once more.
            conn.execute("DELETE FROM amem_meta WHERE key = ?", (_VACUUM_KEY,))
        finally:
            conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.Error:
        # Busy, or no room for the copy VACUUM makes: the file is as it was.
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")
    return True


def _sql_value(prop: Property, value: Any) -> Any:
    if prop.type == "date":
        return normalise_date(value)
    if isinstance(value, bool):
        return int(value)
    return value


def _filter_sql(spec: CollectionSpec, where: list[Where], alias: str = "") -> tuple[str, list[Any]]:
    """Translate validated conditions to `` AND ...`` SQL with parameters (never inlined)."""
    parts: list[str] = []
    params: list[Any] = []
    props = f"{alias}props"
    for cond in where:
        prop = spec.prop(cond.prop)
        path = _json_path(cond.prop)
        expr = _prop_sql(spec, cond.prop, alias)
        if cond.op == "contains":
            parts.append(f"EXISTS (SELECT 1 FROM json_each({props}, ?) WHERE value = ?)")
            params += [path, cond.value]
        elif cond.op == "in":
            values = json.dumps([_sql_value(prop, v) for v in cond.value], ensure_ascii=False)
            if prop.type == "text[]":
                parts.append(
                    f"EXISTS (SELECT 1 FROM json_each({props}, ?) "
                    "WHERE value IN (SELECT value FROM json_each(?)))"
                )
                params += [path, values]
            else:
                parts.append(f"{expr} IN (SELECT value FROM json_each(?))")
                params.append(values)
        else:
            # ne uses IS NOT so objects without the property match, as Weaviate's NotEqual does.
            op = {"eq": "=", "ne": "IS NOT", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}[
                cond.op
            ]
            parts.append(f"{expr} {op} ?")
            params.append(_sql_value(prop, cond.value))
    return "".join(f" AND {p}" for p in parts), params


def _stored(row: tuple[Any, ...], vector: npt.NDArray[np.float32] | None = None) -> StoredObject:
    """Return the object of a row (id, body, ...) with its vector, if given."""
    return StoredObject(
        id=row[0],
        properties=decode_body(row[1]),
        vector=None if vector is None else vector.astype(np.float64).tolist(),
    )


def _spec_to_json(spec: CollectionSpec) -> str:
    return json.dumps(spec.to_dict(), ensure_ascii=False)


def _spec_from_json(raw: str) -> CollectionSpec:
    return CollectionSpec.from_dict(json.loads(raw))


def _structure(spec: CollectionSpec) -> tuple[Any, ...]:
    """Return the parts of a schema that shape storage; descriptions may differ freely."""
    return (
        spec.name,
        spec.per_user,
        tuple((p.name, p.type, p.searchable, p.filterable) for p in spec.properties),
    )


def _describe(spec: CollectionSpec) -> str:
    props = ", ".join(
        f"{p.name}:{p.type}{'+search' if p.searchable else ''}{'' if p.filterable else '-filter'}"
        for p in spec.properties
    )
    return f"per_user={spec.per_user} [{props}]"


def _translate(exc: sqlite3.Error) -> StoreError:
    msg = str(exc)
    if "no such table" in msg:
        return UnknownCollectionError(f"collection was dropped by another process ({msg})")
    return StoreError(f"embedded store error: {msg}")

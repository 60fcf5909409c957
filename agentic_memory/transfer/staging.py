"""The staging copy: an import file, checked line by line, kept on disk until it is written."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentic_memory.kinds.contract import StagedLines
from agentic_memory.kinds.registry import KindRegistry
from agentic_memory.transfer.format import (
    Kind,
    TransferError,
    _fail,
    _Line,
    _memory_kind,
    embedding_text,
)

_EMBED_BATCH = 64


class _Staging(StagedLines):
    """The validated file in a temporary SQLite database, in a folder of its own.

    The import's memory so stays bounded whatever the file's size, and unique keys check
    the kinds' invariants across lines: an id once, one current value per fact subject,
    one message per turn of a thread. An async import uses it from one worker thread at a
    time, not always the same one; :meth:`close` deletes it.
    """

    def __init__(self, kinds: KindRegistry) -> None:
        self.kinds = kinds
        self.folder = Path(tempfile.mkdtemp(prefix="amem-import-"))
        try:
            self.db = sqlite3.connect(str(self.folder / "staging.sqlite"), check_same_thread=False)
            self.db.executescript(
                """
                PRAGMA journal_mode = OFF;
                PRAGMA synchronous = OFF;
                CREATE TABLE objects (
                    seq INTEGER PRIMARY KEY, lineno INT, kind TEXT, collection TEXT, user TEXT,
                    id TEXT, props TEXT, vector BLOB, UNIQUE (collection, user, id));
                CREATE INDEX objects_group ON objects (kind, collection, user, seq);
                CREATE TABLE keys (
                    name TEXT, collection TEXT, user TEXT, a TEXT, b TEXT, lineno INT,
                    PRIMARY KEY (name, collection, user, a, b));
                """
            )
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    def add(self, line: _Line) -> None:
        vector = (
            None if line.vector is None else np.asarray(line.vector, dtype=np.float32).tobytes()
        )
        unique = _memory_kind(line.kind, self.kinds).unique_keys(line)
        try:
            self.db.execute(
                "INSERT INTO objects (lineno, kind, collection, user, id, props, vector) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    line.lineno,
                    line.kind,
                    line.collection,
                    line.user,
                    line.id,
                    json.dumps(line.properties, ensure_ascii=False),
                    vector,
                ),
            )
        except sqlite3.IntegrityError:
            first = self._first(
                "SELECT lineno FROM objects WHERE collection = ? AND user = ? AND id = ?",
                (line.collection, line.user, line.id),
            )
            raise _fail(
                line.lineno, f"id {line.id} appears twice (first on line {first})"
            ) from None
        for key in unique:
            try:
                self.db.execute(
                    "INSERT INTO keys VALUES (?, ?, ?, ?, ?, ?)",
                    (key.name, line.collection, line.user, key.a, key.b, line.lineno),
                )
            except sqlite3.IntegrityError:
                first = self._first(
                    "SELECT lineno FROM keys WHERE name = ? AND collection = ? AND user = ? "
                    "AND a = ? AND b = ?",
                    (key.name, line.collection, line.user, key.a, key.b),
                )
                raise _fail(line.lineno, f"{key.clash} (the first is on line {first})") from None

    def _first(self, sql: str, args: tuple[Any, ...]) -> int:
        row = self.db.execute(sql, args).fetchone()
        return int(row[0]) if row else 0

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM objects").fetchone()[0])

    def missing_vectors(self) -> int:
        return int(
            self.db.execute("SELECT count(*) FROM objects WHERE vector IS NULL").fetchone()[0]
        )

    def groups(self, line_kind: Kind) -> list[tuple[str, str]]:
        rows = self.db.execute(
            "SELECT DISTINCT collection, user FROM objects WHERE kind = ? ORDER BY 1, 2",
            (line_kind,),
        )
        return [(str(c), str(u)) for c, u in rows]

    def batches(
        self,
        line_kind: Kind,
        collection: str,
        user: str,
        size: int,
        *,
        order_by: str | None = None,
        descending: bool = False,
    ) -> Iterator[list[_Line]]:
        """Yield the group's objects in batches of at most ``size``.

        In file order, or by the property ``order_by`` (then file order).
        """
        order = "seq"
        if order_by is not None:
            if not order_by.isidentifier():
                raise ValueError(f"not a property name: {order_by!r}")
            order = f"json_extract(props, '$.{order_by}') {'DESC' if descending else 'ASC'}, seq"
        cursor = self.db.execute(
            "SELECT lineno, id, props, vector FROM objects WHERE kind = ? AND collection = ? "
            f"AND user = ? ORDER BY {order}",
            (line_kind, collection, user),
        )
        while rows := cursor.fetchmany(size):
            yield [
                _Line(
                    int(lineno),
                    line_kind,
                    collection,
                    user,
                    str(oid),
                    json.loads(props),
                    None
                    if vector is None
                    else np.frombuffer(vector, dtype=np.float32).astype(np.float64).tolist(),
                )
                for lineno, oid, props, vector in rows
            ]

    def has(self, collection: str, user: str, oid: str) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM objects WHERE collection = ? AND user = ? AND id = ?",
            (collection, user, oid),
        ).fetchone()
        return row is not None

    def to_embed(self, after: int, dims: int) -> tuple[int, list[tuple[int, str]]] | None:
        """Take the next batch of objects after ``after`` (a ``seq``) to re-embed.

        Objects never searched by vector (a knowledge base's manifest entries) get the unit
        marker vector their kind gives them, whatever the model, here. Returns the batch's
        last ``seq`` and the ``(seq, text)`` of the others, or ``None`` after the last batch.
        """
        rows = self.db.execute(
            "SELECT seq, kind, props FROM objects WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, _EMBED_BATCH),
        ).fetchall()
        if not rows:
            return None
        marker = np.asarray([1.0] + [0.0] * (dims - 1), dtype=np.float32).tobytes()
        self.db.executemany(
            "UPDATE objects SET vector = ? WHERE seq = ?",
            [
                (marker, int(seq))
                for seq, kind, _ in rows
                if not _memory_kind(kind, self.kinds).embeds(kind)
            ],
        )
        texts = [
            (int(seq), embedding_text(kind, json.loads(props), self.kinds))
            for seq, kind, props in rows
            if _memory_kind(kind, self.kinds).embeds(kind)
        ]
        return int(rows[-1][0]), texts

    def set_vectors(
        self, texts: Sequence[tuple[int, str]], vectors: Sequence[Sequence[float]], dims: int
    ) -> None:
        """Store the vectors computed for :meth:`to_embed`'s texts."""
        if len(vectors) != len(texts) or any(len(v) != dims for v in vectors):
            raise TransferError(f"the embeddings did not give {dims}-d vectors")
        self.db.executemany(
            "UPDATE objects SET vector = ? WHERE seq = ?",
            [
                (np.asarray(v, dtype=np.float32).tobytes(), seq)
                for (seq, _), v in zip(texts, vectors, strict=True)
            ],
        )

    def close(self) -> None:
        """Close the database and delete its folder."""
        try:
            self.db.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
